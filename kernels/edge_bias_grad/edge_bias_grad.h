// The parameter gradients of edge_bias (kernels/edge_bias/edge_bias.h):
//
//   dgain[e, k] = Σ_n Σ_{p : groups[p] = e} dy[n, p, k]·x[n, p, k]
//   dbias[e, k] = Σ_n Σ_{p : groups[p] = e} dy[n, p, k]
//
// summed in order of n, then p (deterministic on every device).
#pragma once

#include <utility>

#include "core/op.h"

namespace tessera {

/// {dgain, dbias}, each [E, K] in x's dtype, for x and dy [N, spatial…, K] and groups i32 [P].
std::pair<Tensor, Tensor> edge_bias_grad(const Tensor& x, const Tensor& dy, const Tensor& groups, int64_t count);

namespace op {
/// Inputs x, dy (one shape and dtype), groups i32 [P]; outputs dgain, dbias [E, K] (E = `count`).
/// Group indices outside [0, E) add nowhere (-1: interior). CPU: a task per channel chunk; CUDA: a
/// thread per (group, channel) walking the positions in order. Not differentiable itself.
struct EdgeBiasGrad : OpBase {
  static constexpr const char* kName = "edge_bias_grad";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    int64_t count = 0;  ///< E, the number of edge groups
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
