// nn::Module: the base of every layer and model. A module owns named parameters and named
// submodules; parameter paths are dotted ("blocks.3.attn.qkv.weight"), and the same paths
// name datasets in checkpoints.
//
//   class Mlp : public nn::Module {
//    public:
//     Mlp(int64_t in, int64_t hidden, int64_t out, Generator& gen) {
//       fc1_ = register_module("fc1", std::make_shared<nn::Linear>(nn::LinearOptions(in, hidden), gen));
//       fc2_ = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, out), gen));
//     }
//     Tensor forward(const Tensor& x) { return fc2_->forward(gelu(fc1_->forward(x))); }
//    private:
//     std::shared_ptr<nn::Linear> fc1_, fc2_;
//   };
//
// Modules have no virtual forward: each defines the forward it needs (PyTorch C++ style).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/named_param.h"
#include "core/sparse/attention_layout.h"
#include "core/sparse/block_layout.h"
#include "core/tensor.h"

namespace tessera {
namespace nn {

using NamedParam = graph::NamedParam;

/// The layouts a module holds itself (not its submodules'); null where it has none. Checkpoints
/// save each under /layout/<module path> (models/model_checkpoint.h).
struct ModuleLayouts {
  LayoutPtr block;               ///< the layout of its block-sparse weight (BlockSparseLinear)
  AttentionLayoutPtr attention;  ///< its attention layout (MultiHeadAttention)
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Every parameter of this module and its submodules, depth first in registration order.
  std::vector<Tensor> parameters() const;
  /// The same, with dotted paths ("fc1.weight"); a tensor registered twice (tied weights) is
  /// listed once, under its first path.
  std::vector<NamedParam> named_parameters() const;
  /// Direct submodules with their names.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  /// Number of stored parameter elements (sparse layers count only their stored blocks).
  int64_t num_parameters() const;

  /// Training mode (dropout active) for this module and all submodules.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Drops every parameter's gradient.
  void zero_grad();
  /// Moves every parameter's data to `device` in place: the parameter tensors stay the same
  /// objects (so do it before making the optimizer, whose state is made where the parameters
  /// are). Gradients are dropped.
  void to(Device device);

  /// The layouts this module holds itself (none by default). A layer that holds one overrides
  /// this, so that code above the layers (checkpoints) finds every layout of a model without
  /// knowing the layer types.
  virtual ModuleLayouts layouts() const { return {}; }
  /// Switches this module's block layout (for a module whose layouts().block is set; such a
  /// module overrides this). ValueError by default: the module has no block layout.
  virtual void set_block_layout(LayoutPtr layout);

 protected:
  /// Registers `t` as parameter `name` (a floating leaf; marked requires_grad) and returns it.
  Tensor register_parameter(const std::string& name, Tensor t);
  /// Registers a submodule under `name` and returns it.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_name(const std::string& name) const;
  void collect(const std::string& prefix, std::vector<NamedParam>& out) const;

  std::vector<NamedParam> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace nn
}  // namespace tessera
