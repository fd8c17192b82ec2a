// index_select_backward on the GPU, deterministic (the embedding gradient):
//   out[o, r, i] = sum over n with indices[n] == r of g[o, n, i]
// (g [outer, N, inner], out [outer, R, inner]), in the order the header defines: row r's
// positions, at sorted places [start_r, start_{r+1}), summed in runs cut where the place is a
// multiple of kRun, run sums added in order. No atomics; the CPU adds in the same order, so
// the two agree bit for bit (f32/f64; bf16/f16 are summed in f32 and rounded once, as the
// CPU's widened kernel does).
//
//   1. Sort (index, position) pairs by index: cub::DeviceRadixSort::SortPairs, which is stable,
//      so the positions of one index stay in increasing order. [N] -> sorted_idx, sorted_pos.
//   2. start[r] = first p with sorted_idx[p] >= r, for r in [0, R] (binary search, one thread
//      each). Indices outside [0, R) sort before start[0] or after start[R] and are left out;
//      the smallest and the largest of them are recorded in the index-error record
//      (core/cuda/index_errors.cuh).
//   3. Runs: one thread per (o, run q, i) walks the places [q·kRun, (q+1)·kRun) in order and
//      sums g[o, n, i] per row; a row's part of run q goes to slot q + r of partial [outer,
//      Q + R, inner] (Q = ⌈N/kRun⌉; the slot is unique: a later row or run has a larger q + r).
//      A frequent index is thereby spread over many threads instead of one long chain.
//   4. One thread per output element (o, r, i) adds row r's run sums, slots q + r for the runs
//      q its places touch, in order. Consecutive threads take consecutive i: coalesced.
// Scratch (pairs, row starts, partial sums, CUB's temporary storage) comes from the
// stream-ordered pool.
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

constexpr int64_t kRun = op::IndexSelectBackward::kRun;
constexpr int kAhead = 8;  // places whose g values are loaded before any is added

// Step 3: thread (o, q, i) sums its run's places per row into partial[o, q + r, i].
template <class T>
__global__ void run_sums_kernel(const T* g, const int32_t* sorted_idx, const int32_t* sorted_pos,
                                cuda::acc_t<T>* partial, int64_t N, int64_t R, int64_t inner, int64_t Q,
                                int64_t total) {
  using A = cuda::acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner, t = e / inner;  // t = o·Q + q
    const int64_t q = t % Q, o = t / Q;
    const T* gi = g + o * N * inner + i;  // g[o, n, i] = gi[n·inner]
    A* out = partial + o * (Q + R) * inner + i;
    const int64_t p1 = ::min(N, (q + 1) * kRun);
    int64_t row = -1;  // the row being summed (none yet)
    A acc = A(0);
    for (int64_t p0 = q * kRun; p0 < p1; p0 += kAhead) {
      int32_t r[kAhead];
      A v[kAhead];
#pragma unroll
      for (int k = 0; k < kAhead; ++k) {
        const int64_t p = p0 + k;
        r[k] = p < p1 ? sorted_idx[p] : -1;
        v[k] = r[k] >= 0 && r[k] < R ? cuda::to_acc(gi[int64_t{sorted_pos[p]} * inner]) : A(0);
      }
#pragma unroll
      for (int k = 0; k < kAhead; ++k) {
        if (r[k] < 0 || r[k] >= R) continue;  // past the run, or a bad index (reported in step 2)
        if (r[k] != row) {
          if (row >= 0) out[(q + row) * inner] = acc;
          row = r[k];
          acc = A(0);
        }
        acc += v[k];
      }
    }
    if (row >= 0) out[(q + row) * inner] = acc;
  }
}

// Step 4: y[o, r, i] = Σ over the runs q of row r, in order, of partial[o, q + r, i].
template <class T>
__global__ void row_sums_kernel(const cuda::acc_t<T>* partial, const int32_t* start, T* y, int64_t R,
                                int64_t inner, int64_t Q, int64_t total) {
  using A = cuda::acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner, t = e / inner;  // t = o·R + r
    const int64_t r = t % R, o = t / R;
    const A* part = partial + o * (Q + R) * inner + i;
    const int64_t s0 = start[r], s1 = start[r + 1];
    A acc = A(0);
    if (s1 > s0)
      for (int64_t q = s0 / kRun; q <= (s1 - 1) / kRun; ++q) acc += part[(q + r) * inner];
    y[e] = cuda::from_acc<T>(acc);
  }
}

Tensor scratch(int64_t bytes, Device dev) {
  return empty({bytes > 0 ? bytes : 1}, TensorOptions(DType::u8).device(dev));
}

}  // namespace

void op::IndexSelectBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
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
  // 3. Run sums per row, then 4. each row's run sums in order.
  const int64_t outer = total / (R * inner), Q = (N + kRun - 1) / kRun;
  cuda::dispatch_cuda_float(y.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    Tensor partial = scratch(static_cast<int64_t>(sizeof(A)) * outer * (Q + R) * inner, dev);
    A* part = static_cast<A*>(partial.data_ptr());
    const int64_t runs = outer * Q * inner;
    if (runs > 0) {
      run_sums_kernel<T><<<cuda::blocks_for(runs), 256, 0, stream>>>(
          static_cast<const T*>(g.data_ptr()), sorted_idx, sorted_pos, part, N, R, inner, Q, runs);
      TS_CUDA_LAUNCH_CHECK(kName);
    }
    row_sums_kernel<T><<<cuda::blocks_for(total), 256, 0, stream>>>(part, start, static_cast<T*>(y.data_ptr()), R,
                                                                     inner, Q, total);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
