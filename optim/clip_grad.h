// Global-norm gradient clipping.
//
//   loss.backward();
//   double norm = optim::clip_grad_norm(model.parameters(), 1.0);  // eager, in place
//   if (std::isfinite(norm)) opt.step();
//
// or, inside the update (eager and compiled alike): opt.set_clip_norm(1.0).
//
// The norm is sqrt(Σ_params Σ g²), accumulated in f64: each square is rounded to its gradient's
// dtype (as mul(g, g) stores it), the gradients of one dtype are summed by one sum_squares op
// (one pass, a fixed order), and the sums of the dtypes are added in f64. The clip factor is
// min(1, max_norm / (norm + 1e-6)), as in PyTorch; a non-finite norm leaves the gradients as
// they are (factor 1) and is returned for the caller to act on (e.g. skip the step).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tessera {
namespace optim {

/// sqrt(Σ_i Σ grads[i]²) over the defined tensors of `grads`, as a 0-d f64 tensor (0 when none
/// is defined): one sum_squares per dtype, then f64 adds and a sqrt. Made of ops only, so it
/// can be traced.
Tensor global_grad_norm(const std::vector<Tensor>& grads);

/// The output under which a compiled step gives the global gradient norm its update clipped with
/// (CompiledStep::fetch; present when the step's updater clips).
inline constexpr const char* kGradNormOutput = "optim/grad_norm";

/// Reports the norm an update clips with: in a traced step it becomes the step's output
/// kGradNormOutput; eagerly it is stored in `*last` (when last is not null).
void report_grad_norm(const Tensor& norm, Tensor* last);

/// The clip factor for a 0-d f64 `norm`: min(1, max_norm / (norm + 1e-6)) when norm is finite,
/// 1 otherwise; a 0-d f64 tensor. Made of ops only.
Tensor clip_factor(const Tensor& norm, double max_norm);

/// g·factor with the 0-d f64 factor cast to g's dtype (not cast for f64 gradients).
Tensor scale_grad(const Tensor& g, const Tensor& factor);

/// Eager clipping of the gradients of `params` (those without a gradient are skipped): computes
/// the global norm and, when it is finite and max_norm / (norm + 1e-6) < 1, multiplies every
/// gradient in place by that factor (bitwise the scaling that Optimizer::set_clip_norm applies
/// inside the update). Returns the norm (before clipping). A non-finite norm (inf or
/// NaN: an overflow, e.g. with f16 loss scaling) leaves the gradients untouched and is
/// returned as is, or throws ValueError when error_if_nonfinite. ValueError unless max_norm > 0.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, bool error_if_nonfinite = false);

}  // namespace optim
}  // namespace tessera
