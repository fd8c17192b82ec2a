// What a compiled training step needs from an optimizer (optim::Optimizer implements it):
// the parameters, the state tensors, and the updates of a step as ops.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera {

/// One write of an update: `value` (an op output) replaces the contents of `target` (a
/// parameter or a state tensor of the same meta).
struct ParamWrite {
  Tensor target;
  Tensor value;
};

class ParamUpdater {
 public:
  virtual ~ParamUpdater() = default;
  virtual const std::vector<Tensor>& params() const = 0;
  /// Every state tensor (e.g. momentum buffers), in a fixed order.
  virtual std::vector<Tensor> state() const = 0;
  /// The update of parameter `i` as ops, from its gradient and 0-d f64 tensors holding the
  /// learning rate and the 1-based step number. Runs eagerly or traced alike.
  virtual std::vector<ParamWrite> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) = 0;
  /// The updates of all parameters of one step: grads[i] is params()[i]'s gradient (undefined:
  /// no update). What a traced step calls. The default runs update(i, ...) for each defined
  /// gradient in order; updaters whose update needs every gradient (global-norm clipping)
  /// override it.
  virtual std::vector<ParamWrite> update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) {
    std::vector<ParamWrite> writes;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      std::vector<ParamWrite> w = update(i, grads[i], lr, step);
      writes.insert(writes.end(), w.begin(), w.end());
    }
    return writes;
  }
  virtual double lr() const = 0;
  /// Steps taken so far; the next update is step step_count() + 1.
  virtual int64_t step_count() const = 0;
  /// Counts a step taken by an executor.
  virtual void advance() = 0;
};

}  // namespace tessera
