// Validating restores: check every name, shape and dtype first, read everything second, copy last.
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include "core/io/checkpoint.h"

namespace tessera {
namespace io {

namespace detail {

void check_targets(const std::string& path, const std::map<std::string, DatasetInfo>& index,
                   const std::vector<RestoreTarget>& targets, const std::vector<std::string>& strict_groups) {
  enum class Kind { io, shape, dtype };
  std::vector<std::pair<Kind, std::string>> problems;
  std::set<std::string> expected;
  for (const RestoreTarget& t : targets) {
    TS_CHECK(t.target.defined() && !t.target.is_symbolic(), ValueError,
             "restore: target of " << t.dataset << " must be a tensor with data");
    TS_CHECK(expected.insert(t.dataset).second, ValueError, "restore: dataset " << t.dataset << " is targeted twice");
    const std::string want = meta_str(t.target.dtype(), t.target.shape());
    auto it = index.find(t.dataset);
    if (it == index.end()) {
      problems.push_back({Kind::io, "missing dataset " + t.dataset + " (expected " + want + ")"});
    } else if (it->second.shape != t.target.shape() || it->second.dtype != t.target.dtype()) {
      const Kind k = it->second.shape != t.target.shape() ? Kind::shape : Kind::dtype;
      problems.push_back({k, "dataset " + t.dataset + " is " + meta_str(it->second.dtype, it->second.shape) +
                                 ", expected " + want});
    }
  }
  for (const std::string& g : strict_groups) {
    const std::string prefix = g + "/";
    for (const auto& [name, info] : index)
      if (name.compare(0, prefix.size(), prefix) == 0 && !expected.count(name))
        problems.push_back({Kind::io, "unexpected dataset " + name + " (" + meta_str(info.dtype, info.shape) +
                                          "), which nothing restores"});
  }
  if (problems.empty()) return;
  std::ostringstream msg;
  msg << "checkpoint '" << path << "': " << problems[0].second;
  if (problems.size() > 1)
    msg << " (and " << problems.size() - 1 << (problems.size() == 2 ? " more problem)" : " more problems)");
  switch (problems[0].first) {
    case Kind::shape: throw ShapeError(msg.str(), __FILE__, __LINE__);
    case Kind::dtype: throw DTypeError(msg.str(), __FILE__, __LINE__);
    default: throw IOError(msg.str(), __FILE__, __LINE__);
  }
}

}  // namespace detail

void restore_tensors(const std::string& path, const std::vector<RestoreTarget>& targets,
                     const std::vector<std::string>& strict_groups) {
  detail::check_targets(path, inspect_checkpoint(path), targets, strict_groups);
  // All reads succeed before any target changes: a corrupt tensor leaves every target as it was.
  std::vector<Tensor> staged;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    H5File f = H5File::open(path);
    for (const RestoreTarget& t : targets) staged.push_back(f.read_tensor(t.dataset));
  }
  for (size_t i = 0; i < targets.size(); ++i)
    TS_CHECK(staged[i].meta() == targets[i].target.meta(), IOError,
             "checkpoint '" << path << "': dataset " << targets[i].dataset << " changed while it was read");
  for (size_t i = 0; i < targets.size(); ++i)
    std::memcpy(targets[i].target.data_ptr(), staged[i].data_ptr(), staged[i].nbytes());
}

void restore_params(const std::string& path, const std::vector<graph::NamedParam>& params, bool strict) {
  std::vector<RestoreTarget> targets;
  for (const graph::NamedParam& p : params) targets.push_back({"/model/" + p.name, p.tensor});
  restore_tensors(path, targets, strict ? std::vector<std::string>{"/model"} : std::vector<std::string>{});
}

}  // namespace io
}  // namespace tessera
