#include "optim/scaled_updater.h"

#include <limits>

#include "core/graph/trace.h"
#include "kernels/ops.h"
#include "optim/clip_grad.h"

namespace tessera {
namespace optim {

Tensor ScaledUpdater::scale_loss(const Tensor& loss, const Tensor& scale) {
  TS_CHECK(scale.defined() && scale.numel() == 1 && scale.dtype() == DType::f32, ValueError,
           "ScaledUpdater: the loss scale must be a one-element f32 tensor, got "
               << (scale.defined() ? scale.meta().str() : std::string("an undefined tensor")));
  scale_ = scale;
  return mul(loss, cast(reshape(scale, {}), loss.dtype()));
}

std::pair<const std::string, Tensor> ScaledUpdater::feed(const LossScaler& scaler) {
  return {kScaleInput, full({}, scaler.scale(), DType::f32)};
}

std::vector<ParamWrite> ScaledUpdater::update(size_t, const Tensor&, const Tensor&, const Tensor&) {
  TS_THROW(ValueError, "ScaledUpdater: updates come from update_all (a compiled step), not update()");
}

std::vector<ParamWrite> ScaledUpdater::update_all(const std::vector<Tensor>& grads, const Tensor& lr,
                                                  const Tensor& step) {
  TS_CHECK(scale_.defined(), ValueError,
           "ScaledUpdater: the loss function did not call scale_loss() with the fed '" << kScaleInput << "' input");
  const Tensor inv = div(1.0, reshape(scale_, {}));  // 0-d f32
  std::vector<Tensor> unscaled(grads.size()), defined;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    unscaled[i] = mul(grads[i], cast(inv, grads[i].dtype()));
    defined.push_back(unscaled[i]);
  }
  // Every element finite <=> the global norm is finite (inf or NaN anywhere makes it inf or NaN).
  const Tensor finite = lt(global_grad_norm(defined), std::numeric_limits<double>::infinity());  // 0-d u8
  graph::mark_output("grads_finite", cast(finite, DType::f32));
  std::vector<ParamWrite> writes = opt_.update_all(unscaled, lr, step);
  for (ParamWrite& w : writes) w.value = where(finite, w.value, w.target);
  return writes;
}

}  // namespace optim
}  // namespace tessera
