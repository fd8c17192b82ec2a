// index_select_backward on the GPU, deterministic (the embedding gradient):
//   out[o, r, i] = sum over n with indices[n] == r, in increasing n, of g[o, n, i]
// (g [outer, N, inner], out [outer, R, inner]). No atomics: every output element is summed by
// one thread in the order the CPU uses, so the result is the same bits on every run, and equal
// to the CPU's (f32/f64: the same additions in the same order; bf16/f16: summed in f32 and
// rounded once, as the CPU's widened kernel does).
//
//   1. Sort (index, position) pairs by index: cub::DeviceRadixSort::SortPairs, which is stable,
//      so the positions of one index stay in increasing order. [N] -> sorted_idx, sorted_pos.
//   2. start[r] = first p with sorted_idx[p] >= r, for r in [0, R] (binary search, one thread
//      each); the positions of row r are sorted_pos[start[r] .. start[r+1]). Indices outside
//      [0, R) sort before start[0] or after start[R] and are left out; the smallest and the
//      largest of them are recorded in the index-error record (core/cuda/index_errors.cuh).
//   3. One thread per output element (o, r, i): walk row r's positions in order and sum
//      g[o, n, i]; consecutive threads take consecutive i, so the reads of g are coalesced.
// Scratch (pairs, row starts, CUB's temporary storage) comes from the stream-ordered pool.
#include <cub/device/device_radix_sort.cuh>

#include <limits>

#include "core/cuda/check.cuh"
#include "core/cuda/index_errors.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/index_select/index_select.h"
#include "kernels/index_select_backward/index_select_backward.h"

namespace tessera {

namespace {

__global__ void iota_kernel(int32_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<int32_t>(i);
}

// start[r] = lower_bound(sorted, sorted + n, r) for r in [0, R]. The threads of r = 0 and r = R
// record a bad index at either end of the sorted indices (with its position, from `pos`).
__global__ void row_starts_kernel(const int32_t* sorted, const int32_t* pos, int64_t n, int32_t* start, int64_t R,
                                  cuda::IndexErrorRecord* err, const char* site) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r <= R; r += int64_t{gridDim.x} * blockDim.x) {
    if (r == 0 && n > 0 && sorted[0] < 0) cuda::report_bad_index(err, site, cuda::kBadIndex, sorted[0], pos[0], R);
    if (r == R && n > 0 && sorted[n - 1] >= R)
      cuda::report_bad_index(err, site, cuda::kBadIndex, sorted[n - 1], pos[n - 1], R);
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted[mid] < r) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    start[r] = static_cast<int32_t>(lo);
  }
}

template <class T>
__global__ void gather_sum_kernel(const T* g, const int32_t* pos, const int32_t* start, T* y, int64_t N, int64_t R,
                                  int64_t inner, int64_t total) {
  using A = cuda::acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner, t = e / inner;  // t = o·R + r
    const int64_t r = t % R, o = t / R;
    A acc = A(0);
    for (int32_t p = start[r]; p < start[r + 1]; ++p) acc += cuda::to_acc(g[(o * N + pos[p]) * inner + i]);
    y[e] = cuda::from_acc<T>(acc);
  }
}

Tensor scratch(int64_t bytes, Device dev) {
  return empty({bytes > 0 ? bytes : 1}, TensorOptions(DType::u8).device(dev));
}

}  // namespace

void IndexSelectBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &g = in[0], &indices = in[1], &y = out[0];
  const Shape& s = g.shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t R = attrs.size, N = s[d], inner = s.prod(d + 1, s.ndim());
  cuda::check_indices_when_syncing(kName, indices, R, y.meta());
  const int64_t total = y.numel();
  if (total == 0) return;
  const cudaStream_t stream = cuda::current_stream(y);
  const Device dev = y.device();
  TS_CHECK(N <= std::numeric_limits<int32_t>::max(), ShapeError, kName << ": too many indices (" << N << ")");
  // 1. Sort the (index, position) pairs by index.
  Tensor pairs = scratch(3 * 4 * N, dev);  // positions, sorted indices, sorted positions (i32 each)
  int32_t* pos = static_cast<int32_t*>(pairs.data_ptr());
  int32_t* sorted_idx = pos + N;
  int32_t* sorted_pos = pos + 2 * N;
  const int32_t* idx = static_cast<const int32_t*>(indices.data_ptr());
  if (N > 0) {
    iota_kernel<<<cuda::blocks_for(N), 256, 0, stream>>>(pos, N);
    TS_CUDA_LAUNCH_CHECK(kName);
    size_t temp_bytes = 0;
    const int n = static_cast<int>(N);
    TS_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, idx, sorted_idx, pos, sorted_pos, n, 0, 32, stream));
    Tensor temp = scratch(static_cast<int64_t>(temp_bytes), dev);
    TS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, idx, sorted_idx, pos, sorted_pos, n, 0,
                                                  32, stream));
  }
  // 2. Where each row's positions start.
  Tensor starts = scratch(4 * (R + 1), dev);
  int32_t* start = static_cast<int32_t*>(starts.data_ptr());
  row_starts_kernel<<<cuda::blocks_for(R + 1), 256, 0, stream>>>(sorted_idx, sorted_pos, N, start, R,
                                                                  cuda::index_error_record(dev.index), kName);
  TS_CUDA_LAUNCH_CHECK(kName);
  // 3. The sums, one thread per output element.
  cuda::dispatch_cuda_float(y.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gather_sum_kernel<T><<<cuda::blocks_for(total), 256, 0, stream>>>(
        static_cast<const T*>(g.data_ptr()), sorted_pos, start, static_cast<T*>(y.data_ptr()), N, R, inner, total);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
