#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/graph/trace.h"
#include "kernels/ops.h"

namespace tessera {
namespace optim {

Tensor global_grad_norm(const std::vector<Tensor>& grads) {
  // The defined gradients grouped by dtype, in order of first appearance: one sum_squares each.
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    auto same = [&](const std::vector<Tensor>& grp) { return grp[0].dtype() == g.dtype(); };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) groups.push_back({g});
    else it->push_back(g);
  }
  Tensor total;
  for (const std::vector<Tensor>& grp : groups) {
    const Tensor s = sum_squares(grp);  // 0-d f64: Σ of the squares rounded to the group's dtype
    total = total.defined() ? add(total, s) : s;
  }
  if (!total.defined()) return fill(TensorMeta{Shape{}, DType::f64, Device::cpu()}, 0.0);
  return sqrt(total);
}

Tensor clip_factor(const Tensor& norm, double max_norm) {
  // min(1, max_norm / (norm + 1e-6)); where(norm < inf, that, 1): NaN and inf compare false.
  Tensor ratio = clamp(div(max_norm, add(norm, 1e-6)), std::nullopt, 1.0);
  Tensor one = pow(norm, 0.0);  // 1 for every norm, inf and NaN included (and symbolic with it)
  return where(lt(norm, std::numeric_limits<double>::infinity()), ratio, one);
}

Tensor scale_grad(const Tensor& g, const Tensor& factor) {
  return mul(g, g.dtype() == factor.dtype() ? factor : cast(factor, g.dtype()));
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, bool error_if_nonfinite) {
  TS_CHECK(max_norm > 0 && !std::isnan(max_norm), ValueError,
           "clip_grad_norm: max_norm must be > 0, got " << max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  const Tensor norm_t = global_grad_norm(grads);
  const double norm = norm_t.item<double>();
  if (!std::isfinite(norm)) {
    TS_CHECK(!error_if_nonfinite, ValueError,
             "clip_grad_norm: the total norm of the gradients is " << norm << " (an inf or NaN gradient)");
    return norm;
  }
  const Tensor factor = clip_factor(norm_t, max_norm);
  if (factor.item<double>() < 1.0) {  // a factor of exactly 1 would change nothing
    for (const Tensor& g : grads) {
      if (!g.defined()) continue;
      const Tensor f = g.dtype() == DType::f64 ? factor : cast(factor, g.dtype());
      call_out<op::Mul>({}, {g, f}, {g});  // g <- g·f in g's own buffer (mul is in-place safe)
    }
  }
  return norm;
}

void report_grad_norm(const Tensor& norm, Tensor* last) {
  if (graph::tracing()) {
    graph::mark_output(kGradNormOutput, norm);
  } else if (last) {
    *last = norm;
  }
}

}  // namespace optim
}  // namespace tessera
