// Eager reverse-mode autograd: grad mode and the nodes ops record.
//
//   Tensor w = zeros({3}).requires_grad_();
//   Tensor y = sum(mul(w, w));
//   y.backward();                 // w.grad() == 2w
//   { NoGradGuard g; ... }        // ops here record nothing
//
// An op records a Node when grad mode is on and one of its inputs requires grad. The node
// keeps the op (with its attributes), edges to the producers of its inputs, the metas of its
// inputs and outputs, and only the inputs/outputs the op declares as saved. backward()
// walks nodes in reverse topological order, calls each op's backward rule (written in ops),
// and accumulates (+=) gradients into leaves' .grad.
//
// This header is core's base (the op machinery records these nodes; nothing here runs an op).
// The backward pass runs ops (the backward rules, the += accumulation), so it sits above the
// ops, in core/engine/backward.h.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tessera {

class OpInstance;

/// Whether ops record autograd nodes on this thread (on by default).
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Turns grad mode off for its scope and restores the previous mode on exit.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Where the gradient of one node input goes: into output `output_nr` of a producer node,
/// or into the .grad of a leaf. Neither is set when the input does not require grad.
struct Edge {
  std::shared_ptr<Node> node;
  int output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;
  bool defined() const { return node != nullptr || leaf != nullptr; }
};

/// One recorded op application.
class Node {
 public:
  std::shared_ptr<const OpInstance> op;
  std::vector<Edge> next;                         ///< one per op input
  std::vector<TensorMeta> input_metas;
  std::vector<TensorMeta> output_metas;
  std::vector<Tensor> saved_inputs;               ///< detached; undefined where not declared saved
  std::vector<Tensor> saved_outputs;              ///< detached; undefined where not declared saved
  std::vector<std::weak_ptr<TensorImpl>> outputs; ///< to fill .grad of outputs that retain_grad()
  bool released = false;                          ///< saved tensors freed by a backward pass

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  /// Frees the chain of producer nodes iteratively: an LSTM unrolled over thousands of steps
  /// makes chains far deeper than the stack would allow to be destroyed recursively.
  ~Node();

  /// Frees the saved tensors (after backward without retain_graph).
  void release_saved();
};

}  // namespace tessera
