#include "kernels/index_select_backward/index_select_backward.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/index_select/index_select.h"

namespace tessera {

Tensor index_select_backward(const Tensor& g, const Tensor& indices, int dim, int64_t size) {
  return call<op::IndexSelectBackward>({dim, size}, {g, indices})[0];
}

std::vector<TensorMeta> op::IndexSelectBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  check_floating(kName, in[0], "gradient");
  const Shape& s = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(in[1].dtype == DType::i32, DTypeError, "index_select_backward: indices must be i32, got " << in[1]);
  TS_CHECK(in[1].shape.ndim() == 1, ShapeError, "index_select_backward: indices must be 1-D, got " << in[1]);
  TS_CHECK(nd >= 1 && attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "index_select_backward: dim " << attrs.dim << " is out of range for gradient " << in[0]);
  const int d = s.normalize_dim(attrs.dim);
  TS_CHECK(s[d] == in[1].shape[0], ShapeError,
           "index_select_backward: gradient " << in[0] << " has size " << s[d] << " at dim " << attrs.dim
                                              << " but there are " << in[1].shape[0] << " indices");
  TS_CHECK(attrs.size >= 0, ValueError, "index_select_backward: negative size " << attrs.size);
  std::vector<int64_t> dims = s.vec();
  dims[d] = attrs.size;
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

void op::IndexSelectBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t R = attrs.size, N = s[d], outer = s.prod(0, d), inner = s.prod(d + 1, s.ndim());
  cpu::check_indices(kName, in[1], R, out[0].meta());  // before the parallel loop: no throwing inside it
  std::memset(out[0].data_ptr(), 0, out[0].nbytes());
  const int32_t* idx = in[1].data<int32_t>();
  // Counting sort, stable: order[p] = the n at sorted place p; row r's places are
  // [start[r], start[r + 1]).
  std::vector<int64_t> start(static_cast<size_t>(R) + 1, 0), order(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) ++start[idx[n] + 1];
  for (int64_t r = 0; r < R; ++r) start[r + 1] += start[r];
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t n = 0; n < N; ++n) order[next[idx[n]]++] = n;
  }
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    T* y = out[0].data<T>();
    // Threads own disjoint column blocks [i0, i1) of one outer index and walk the runs in
    // order, so each sum is formed in the same order whatever the thread count (no atomics).
    constexpr int64_t kCols = 256;
    const int64_t blocks = (inner + kCols - 1) / kCols;
#pragma omp parallel for if (outer * N * inner > kParallelGrain)
    for (int64_t task = 0; task < outer * blocks; ++task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * kCols, i1 = std::min(inner, i0 + kCols);
      T run[kCols];
      for (int64_t r = 0; r < R; ++r) {
        T* dst = y + (o * R + r) * inner;  // starts at 0; += each run's sum
        for (int64_t p = start[r]; p < start[r + 1];) {
          const int64_t end = std::min(start[r + 1], (p / kRun + 1) * kRun);
          std::fill(run, run + (i1 - i0), T(0));
          for (; p < end; ++p) {
            const T* src = g + (o * N + order[p]) * inner;
            for (int64_t i = i0; i < i1; ++i) run[i - i0] += src[i];
          }
          for (int64_t i = i0; i < i1; ++i) dst[i] += run[i - i0];
        }
      }
    }
  });
}

std::vector<Tensor> op::IndexSelectBackward::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {index_select(ctx.grad_output(), ctx.input(1), attrs.dim), Tensor()};
}

}  // namespace tessera
