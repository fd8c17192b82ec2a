// What the GPU kernels of adafactor_update and adafactor_factored_update share: the β2
// schedule and the step size read from the device's lr/step tensors, and the kernel that turns
// per-piece sums into the two scalars of the final update (math: adafactor_update.h).
//
// Both ops run as: kernels that compute the new second moment (in f32/f64) and per-piece f64
// sums (Σu², Σp²) into `partial` [pieces] (pieces fixed by the shape) → adafactor_scalars (one
// block: adds the pieces in a fixed order, computes step_size = α / max(1, RMS(u)/d) and
// decay = α·wd) → the elementwise update p' = p − decay·p − step_size·û. lr and t are read on
// the device: nothing goes to the host, so a captured CUDA graph replays with new values.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/adafactor_update/adafactor_common.h"
#include "kernels/common/cuda/block_reduce.cuh"

namespace tessera {
namespace cuda {

/// β2_t = 1 − t^decay_rate.
__device__ __forceinline__ double adafactor_beta2(double t, double decay_rate) { return 1.0 - ::pow(t, decay_rate); }

/// Σ of the pieces' (Σu², Σp²) in piece order (thread-strided, then the block tree), then
///   clip = max(1, sqrt(Σu² / n) / d),  α = (relative_step ? min(1e-2, 1/sqrt(t)) : lr) ·
///   (scale_parameter ? max(eps2, sqrt(Σp² / n)) : 1),  scalars = {α / clip, α·wd}.
/// One block (a multiple of 32 threads). Sums = TwoSums<double> (a template, so that the kernel
/// may live in a header).
template <class Sums>
__global__ void adafactor_scalars(const Sums* partial, int64_t pieces, int64_t numel, const double* lr_t,
                                  const double* step_t, AdafactorAttrs a, double* scalars) {
  Sums s{0.0, 0.0};
  for (int64_t k = threadIdx.x; k < pieces; k += blockDim.x) s = AddTwoSums{}(s, partial[k]);
  s = block_reduce(s, AddTwoSums{}, Sums{0.0, 0.0});
  if (threadIdx.x != 0) return;
  const double inv_n = numel > 0 ? 1.0 / static_cast<double>(numel) : 0.0;
  const double t = *step_t;
  const double clip = ::fmax(1.0, ::sqrt(s.a * inv_n) / a.clip_threshold);
  const double rho = a.relative_step ? ::fmin(1e-2, 1.0 / ::sqrt(t)) : *lr_t;
  const double alpha = a.scale_parameter ? rho * ::fmax(a.eps2, ::sqrt(s.b * inv_n)) : rho;
  scalars[0] = alpha / clip;
  scalars[1] = alpha * a.weight_decay;
}

}  // namespace cuda
}  // namespace tessera
