#pragma once

#include "core/op.h"

namespace tessera {

/// s [M] = Σ_n x[n, :] for x [N, M], in f32 for bf16/f16/f32 x (f64 for f64): the bias gradient
/// of a product that wrote its output in bf16/f16 under autocast while its bias stays f32.
Tensor col_sum(const Tensor& x);

namespace op {
/// Input x [N, M] (floating); output s [M] in acc dtype (f32, or f64 for f64 x), summed in f64
/// on the CPU (as sum does) and on CUDA in f32 in a fixed order (the bits repeat run to run; a
/// bf16 x gives the bits cast_col_sum gives for its exact f32 copy). Not differentiable: it is a
/// backward helper.
struct ColSum : OpBase {
  static constexpr const char* kName = "col_sum";
  static constexpr bool kDifferentiable = false;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
