#include "layers/module.h"

namespace tessera {
namespace nn {

void Module::check_name(const std::string& name) const {
  TS_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError,
           "module: name '" << name << "' must be non-empty and contain no '.'");
  for (const auto& p : params_) TS_CHECK(p.name != name, ValueError, "module: '" << name << "' is already registered");
  for (const auto& c : children_)
    TS_CHECK(c.first != name, ValueError, "module: '" << name << "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_name(name);
  TS_CHECK(t.defined() && is_floating(t.dtype()) && t.is_leaf(), ValueError,
           "module: parameter '" << name << "' must be a floating leaf tensor");
  if (!t.requires_grad()) t.requires_grad_();
  params_.push_back({name, t});
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name);
  TS_CHECK(m != nullptr, ValueError, "module: submodule '" << name << "' is null");
  m->train(training_);
  children_.push_back({name, std::move(m)});
}

void Module::collect(const std::string& prefix, std::vector<NamedParam>& out) const {
  for (const auto& p : params_) out.push_back({prefix + p.name, p.tensor});
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<NamedParam> Module::named_parameters() const {
  std::vector<NamedParam> all, out;
  collect("", all);
  // A tensor registered in several places (tied weights) is listed once, under its first path,
  // so optimizers update it once and counts include it once.
  for (const NamedParam& p : all) {
    bool seen = false;
    for (const NamedParam& q : out) seen |= q.tensor.same(p.tensor);
    if (!seen) out.push_back(p);
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (const auto& p : named_parameters()) out.push_back(p.tensor);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : named_parameters()) n += p.tensor.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.tensor.zero_grad();
}

void Module::set_block_layout(LayoutPtr layout) {
  TS_THROW(ValueError, "set_block_layout: this module has no block layout (to switch to "
                           << (layout ? layout->str() : std::string("none")) << ")");
}

void Module::to(Device device) {
  for (auto& p : named_parameters()) {
    if (p.tensor.device() == device) continue;
    const Tensor moved = p.tensor.detach().to(device);
    TensorImpl* impl = p.tensor.impl();
    impl->storage = moved.impl()->storage;
    impl->offset = moved.impl()->offset;
    impl->meta.device = device;
    p.tensor.zero_grad();
  }
}

}  // namespace nn
}  // namespace tessera
