// Exponential moving average of parameters, for evaluation with the averaged weights.
//
//   EMA ema(model.parameters(), 0.999);
//   for (...) { opt.step(); ema.update(); }
//   ema.swap();    // parameters now hold the averages
//   evaluate(model);
//   ema.swap();    // back to the trained weights
//
// The shadows start as copies of the parameters and are updated with ops (no autograd):
//   shadow <- decay·shadow + (1 - decay)·p
// Parameters keep their buffers (swap and apply_to copy data), so compiled steps stay valid.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera {
namespace optim {

class EMA {
 public:
  /// ValueError unless decay is in [0, 1].
  explicit EMA(std::vector<Tensor> params, double decay = 0.999);

  /// shadow <- decay·shadow + (1 - decay)·p for every parameter, with decay() or `decay`.
  void update();
  void update(double decay);
  /// Exchanges the contents of each parameter and its shadow (call again to restore).
  void swap();
  /// Copies the shadows into the parameters (no way back; see swap()).
  void apply_to() const;
  /// Copies the shadows into `targets` (e.g. another model's parameters, in the same order and
  /// with the same metas).
  void apply_to(const std::vector<Tensor>& targets) const;

  double decay() const { return decay_; }
  const std::vector<Tensor>& params() const { return params_; }
  /// The averages, one per parameter.
  const std::vector<Tensor>& shadows() const { return shadows_; }
  int64_t num_updates() const { return updates_; }

 private:
  std::vector<Tensor> params_;
  std::vector<Tensor> shadows_;
  double decay_;
  int64_t updates_ = 0;
};

}  // namespace optim
}  // namespace tessera
