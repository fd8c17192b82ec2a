#pragma once

#include "core/op.h"

namespace tessera {

/// Gradient of index_select: zeros [.., size, ..] (g's shape with dim `dim` set to `size`)
/// plus, for n = 0, 1, ..., N-1 in order, g[.., n, ..] added at [.., indices[n], ..].
/// Deterministic: every output element sums its contributions in index order.
Tensor index_select_backward(const Tensor& g, const Tensor& indices, int dim, int64_t size);

namespace op {
/// out[o, r, i] = sum over n with indices[n] == r of g[o, n, i]
/// (g [outer, N, inner], indices i32 [N] -> out [outer, size, inner]).
/// Summation order (the same on every device, so CPU and CUDA agree bit for bit): sort the
/// positions n stably by index; row r's positions occupy sorted places start_r, start_r + 1, ...
/// (start_r = the number of indices < r). They are cut into runs where the sorted place is a
/// multiple of kRun; each run is summed from 0 in increasing n, and the run sums are added to 0
/// in order. The runs let a GPU spread a frequent index (a space in a character corpus holds
/// a sixth of the positions) over many threads, with a fixed order.
/// Backward (it is linear in g): index_select(gg, indices, dim); indices get no gradient.
struct IndexSelectBackward : OpBase {
  static constexpr const char* kName = "index_select_backward";
  static constexpr unsigned kSaveInputs = 0b10;  // indices
  static constexpr int64_t kRun = 32;             ///< sorted places per run (see above)
  struct Attrs {
    int dim = 0;
    int64_t size = 0;  ///< R, the size of dim in the index_select's input
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
