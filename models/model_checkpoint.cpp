#include "models/model_checkpoint.h"

#include <vector>

#include "core/cuda/runtime.h"

namespace tessera {
namespace io {

namespace {

// Calls f(path, module) for every module of the tree below `m` (itself included; Mod is
// nn::Module or const nn::Module), by module path: the root is kRootModulePath, children "a.b".
template <class Mod, class F>
void for_each_module(Mod& m, const std::string& path, F&& f) {
  f(path.empty() ? kRootModulePath : path, m);
  for (const auto& [name, child] : m.named_children())
    for_each_module(static_cast<Mod&>(*child), path.empty() ? name : path + "." + name, f);
}

// Path of each optimizer parameter in the model (by tensor identity).
std::vector<std::string> param_paths(const nn::Module& model, const optim::Optimizer& opt) {
  const std::vector<nn::NamedParam> named = model.named_parameters();
  std::vector<std::string> paths;
  for (size_t i = 0; i < opt.params().size(); ++i) {
    const nn::NamedParam* found = nullptr;
    for (const nn::NamedParam& p : named)
      if (!found && p.tensor.same(opt.params()[i])) found = &p;
    TS_CHECK(found != nullptr, ValueError,
             "checkpoint: optimizer parameter " << i << " " << opt.params()[i].meta()
                                                << " is not a parameter of the model");
    paths.push_back(found->name);
  }
  return paths;
}

// The optimizer's state tensors as (param path, state name, tensor).
struct StateEntry {
  std::string param, name;
  Tensor tensor;
};
std::vector<StateEntry> state_entries(const nn::Module& model, const optim::Optimizer& opt) {
  const std::vector<std::string> paths = param_paths(model, opt);
  const std::vector<std::string> names = opt.state_names();
  const std::vector<Tensor> state = opt.state();
  const size_t n = paths.size();
  TS_CHECK(state.size() == names.size() * n, NotImplementedError,
           "checkpoint: optimizer '" << opt.name() << "' has " << state.size() << " state tensors for " << n
                                     << " parameters but names " << names.size()
                                     << " states per parameter (state_names())");
  std::vector<StateEntry> out;
  for (size_t k = 0; k < names.size(); ++k)
    for (size_t i = 0; i < n; ++i) out.push_back({paths[i], names[k], state[k * n + i]});
  return out;
}

std::string more_problems(size_t n) {
  return " (and " + std::to_string(n) + (n == 1 ? " more problem)" : " more problems)");
}

[[noreturn]] void report(const std::string& path, const std::vector<std::string>& problems) {
  TS_THROW(IOError, "checkpoint '" << path << "': " << problems[0]
                                   << (problems.size() > 1 ? more_problems(problems.size() - 1) : std::string()));
}

// The file's layouts (block or attention: `what` is "layout" or "attention layout") against the
// model's, by module path; `module` names the kind of module that owns one. With `adopt`, a file
// layout that differs but `adoptable(file, model)` holds goes into *adopt instead of a problem.
template <class L, class Adoptable>
void check_layouts(const std::string& path, const std::map<std::string, L>& file,
                   const std::map<std::string, L>& model, const std::string& what, const std::string& module,
                   std::map<std::string, L>* adopt, Adoptable adoptable) {
  std::vector<std::string> problems;
  for (const auto& [name, l] : model) {
    auto it = file.find(name);
    if (it == file.end()) {
      problems.push_back("missing " + what + " /layout/" + name + " (model has " + l->str() + ")");
    } else if (!(*it->second == *l)) {
      if (adopt && adoptable(*it->second, *l)) {
        (*adopt)[name] = it->second;
      } else {
        problems.push_back(what + " /layout/" + name + " is " + it->second->str() + ", model has " + l->str() +
                           (adopt ? " (another block count or size: not adoptable)" : ""));
      }
    }
  }
  for (const auto& kv : file)
    if (!model.count(kv.first))
      problems.push_back("unexpected " + what + " /layout/" + kv.first + " (" + kv.second->str() +
                         "), the model has no " + module + " there");
  if (!problems.empty()) report(path, problems);
}

}  // namespace

std::map<std::string, LayoutPtr> collect_layouts(const nn::Module& model) {
  std::map<std::string, LayoutPtr> out;
  for_each_module(model, "", [&](const std::string& path, const nn::Module& m) {
    if (LayoutPtr l = m.layouts().block) out[path] = std::move(l);
  });
  return out;
}

std::map<std::string, AttentionLayoutPtr> collect_attention_layouts(const nn::Module& model) {
  std::map<std::string, AttentionLayoutPtr> out;
  for_each_module(model, "", [&](const std::string& path, const nn::Module& m) {
    if (AttentionLayoutPtr l = m.layouts().attention) out[path] = std::move(l);
  });
  return out;
}

CheckpointData capture(const nn::Module& model, const optim::Optimizer* opt) {
  CheckpointData d;
  for (const nn::NamedParam& p : model.named_parameters()) d.model[p.name] = p.tensor;
  d.layouts = collect_layouts(model);
  d.attention_layouts = collect_attention_layouts(model);
  if (opt) {
    d.optimizer.type = opt->name();
    d.optimizer.step = opt->step_count();
    for (const auto& [name, v] : opt->hyperparameters()) d.optimizer.hyperparameters[name] = v;
    for (const StateEntry& e : state_entries(model, *opt)) d.optimizer.state[e.param][e.name] = e.tensor;
  }
  return d;
}

CheckpointData restore(const std::string& path, nn::Module& model, optim::Optimizer* opt, bool adopt_layouts) {
  CheckpointParts parts;
  parts.optimizer = opt != nullptr;
  return restore(load_checkpoint(path, parts), path, model, opt, adopt_layouts);
}

CheckpointData restore(CheckpointData d, const std::string& path, nn::Module& model, optim::Optimizer* opt,
                       bool adopt_layouts) {

  if (opt) {
    TS_CHECK(!d.optimizer.type.empty(), IOError,
             "checkpoint '" << path << "': no /optimizer group, but an optimizer '" << opt->name()
                            << "' is to be restored");
    TS_CHECK(d.optimizer.type == opt->name(), IOError,
             "checkpoint '" << path << "': /optimizer type is '" << d.optimizer.type << "', the optimizer is '"
                            << opt->name() << "'");
  }
  // Layouts the model takes from the file (adopt_layouts), applied once everything is checked.
  std::map<std::string, LayoutPtr> adopted;
  check_layouts(path, d.layouts, collect_layouts(model), "layout", "block-sparse module",
                adopt_layouts ? &adopted : nullptr, [](const BlockLayout& f, const BlockLayout& m) {
                  return f.in_features() == m.in_features() && f.out_features() == m.out_features() &&
                         f.block_size() == m.block_size() && f.nnz() == m.nnz();
                });
  // A file without any attention layout was written before they were saved: not checked.
  if (!d.attention_layouts.empty())
    check_layouts(path, d.attention_layouts, collect_attention_layouts(model), "attention layout",
                  "attention module", static_cast<std::map<std::string, AttentionLayoutPtr>*>(nullptr),
                  [](const AttentionLayout&, const AttentionLayout&) { return false; });

  // Every tensor the restore fills, and what the file holds (index by dataset path).
  std::vector<RestoreTarget> targets;
  std::vector<Tensor> sources;
  std::map<std::string, DatasetInfo> index;
  for (const auto& [name, t] : d.model) index["/model/" + name] = DatasetInfo{t.shape(), t.dtype()};
  for (const auto& [param, states] : d.optimizer.state)
    for (const auto& [name, t] : states)
      index["/optimizer/" + param + "/" + name] = DatasetInfo{t.shape(), t.dtype()};
  for (const nn::NamedParam& p : model.named_parameters()) {
    targets.push_back({"/model/" + p.name, p.tensor});
    auto it = d.model.find(p.name);
    sources.push_back(it == d.model.end() ? Tensor() : it->second);
  }
  std::vector<std::string> strict = {"/model"};
  if (opt) {
    strict.push_back("/optimizer");
    for (const StateEntry& e : state_entries(model, *opt)) {
      targets.push_back({"/optimizer/" + e.param + "/" + e.name, e.tensor});
      const auto p = d.optimizer.state.find(e.param);
      const bool has = p != d.optimizer.state.end() && p->second.count(e.name);
      sources.push_back(has ? p->second.at(e.name) : Tensor());
    }
  }
  detail::check_targets(path, index, targets, strict);

  if (!adopted.empty())
    for_each_module(model, "", [&](const std::string& path, nn::Module& m) {
      auto it = adopted.find(path);
      if (it != adopted.end()) m.set_block_layout(it->second);
    });

  for (size_t i = 0; i < targets.size(); ++i)
    cuda::copy(targets[i].target.data_ptr(), targets[i].target.device(), sources[i].data_ptr(), Device::cpu(),
               sources[i].nbytes());  // into CPU or GPU tensors alike
  if (opt) {
    opt->set_step_count(d.optimizer.step);
    auto lr = d.optimizer.hyperparameters.find("lr");
    if (lr != d.optimizer.hyperparameters.end()) opt->set_lr(lr->second);
  }
  return d;
}

}  // namespace io
}  // namespace tessera
