#pragma once

#include <vector>

#include "core/op.h"

namespace tessera {

/// One pass over a gradient for a linear layer's backward under mixed precision: returns
/// {cast(x, dtype), sum(x, 0)} for x [N, M] — the copy the GEMMs read and the bias gradient —
/// reading x once instead of twice.
std::vector<Tensor> cast_col_sum(const Tensor& x, DType dtype);

namespace op {
/// Inputs x [N, M] (floating); attrs dtype (floating). Outputs y [N, M] in dtype, y = x
/// converted element by element (rounded to nearest even), and s [M] in x's dtype,
/// s[m] = Σ_n x[n, m] summed in acc_t (f64 on the CPU, as sum does; on CUDA f32 for f32 x, in
/// a fixed order, so the bits repeat run to run). Not differentiable: it is a backward helper.
struct CastColSum : OpBase {
  static constexpr const char* kName = "cast_col_sum";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    DType dtype = DType::bf16;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
