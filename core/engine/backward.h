// The eager backward pass: from a tensor back through the nodes that ops recorded
// (core/autograd.h), calling each op's backward rule and accumulating (+=) the gradients into
// the leaves' .grad. Tensor::backward() calls it:
//
//   Tensor loss = mean(matmul(x, w));
//   loss.backward();              // run_backward(loss, {}, false): w.grad() = d loss / d w
//
// Layering: the engine (above the ops): the rules and the accumulation (add, copy, cast, fill)
// are ops. Tensor::backward and BackwardContext::grad_output, declared in core's base, are
// defined here for that reason.
#pragma once

#include "core/tensor.h"

namespace tessera {

/// Runs backward from `root` with output gradient `grad` (implied 1 for a one-element root);
/// see Tensor::backward. Saved tensors are freed afterwards unless `retain_graph`.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

}  // namespace tessera
