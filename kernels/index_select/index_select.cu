// index_select on the GPU: out[o, n, :] = x[o, indices[n], :], x viewed as [outer, R, row] and
// out as [outer, N, row] (row = the bytes of one slice). One thread per output word, moving the
// widest word (up to 16 bytes) that divides the row and both addresses; consecutive threads
// copy consecutive words of a row, so reads and writes are coalesced.
// A bad index (outside [0, R)) reads nothing and writes NaN (0 for integer dtypes) over its row,
// and is recorded in the device's index-error record (core/cuda/index_errors.cuh): the ValueError
// comes at the next host wait, or at the op under TESSERA_CUDA_SYNC=1 (check_indices_when_syncing).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cuda/index_errors.cuh"
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/index_select/index_select.h"

namespace tessera {

namespace cuda {

void check_indices_when_syncing(const char* op, const Tensor& indices, int64_t R, const TensorMeta& of) {
  if (!sync_each_op() || indices.numel() == 0) return;
  // While a graph is recorded nothing runs and the host must not wait: the kernel's record reports.
  if (is_capturing(indices.device().index)) return;
  std::vector<int32_t> host(static_cast<size_t>(indices.numel()));
  cuda::copy(host.data(), Device::cpu(), indices.data_ptr(), indices.device(), indices.nbytes());  // waits
  cpu::check_indices(op, from_vector(host, indices.shape()), R, of);
}

}  // namespace cuda

namespace {

// y[t, c] = x[o·R + idx[n], c] for t = o·N + n, word c < row_words; `bad` for an index out of
// range, which the thread of its first word (o = 0, c = 0) also records in `err`.
template <class W>
__global__ void index_select_kernel(const W* x, const int32_t* idx, W* y, int64_t N, int64_t R, int64_t row_words,
                                    int64_t total, W bad, cuda::IndexErrorRecord* err, const char* site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / row_words, c = i - t * row_words;
    const int64_t o = t / N, n = t - o * N;
    const int64_t r = idx[n];
    const bool ok = r >= 0 && r < R;
    y[i] = ok ? x[(o * R + r) * row_words + c] : bad;
    if (!ok && o == 0 && c == 0) cuda::report_bad_index(err, site, cuda::kBadIndex, r, n, R);
  }
}

}  // namespace

void op::IndexSelect::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &indices = in[1], &y = out[0];
  const Shape& s = x.shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t R = s[d], outer = s.prod(0, d), N = indices.numel();
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t row_bytes = s.prod(d + 1, s.ndim()) * es;
  cuda::check_indices_when_syncing(kName, indices, R, x.meta());
  if (row_bytes == 0 || outer == 0 || N == 0) return;
  // The fill for bad indices: one element of NaN (or 0), repeated over a word of up to 16 bytes.
  unsigned char one[8] = {}, pattern[16] = {};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (is_floating(x.dtype())) convert_elements(&nan, DType::f64, one, x.dtype(), 1);
  for (int b = 0; b < 16; ++b) pattern[b] = one[b % es];
  const size_t w =
      cuda::widest_word({static_cast<uint64_t>(row_bytes), cuda::address(x.data_ptr()), cuda::address(y.data_ptr())});
  cuda::dispatch_word(w, kName, [&](auto tag) {
    using W = typename decltype(tag)::type;
    W bad;
    std::memcpy(&bad, pattern, sizeof(W));
    const int64_t row_words = row_bytes / static_cast<int64_t>(sizeof(W)), total = outer * N * row_words;
    index_select_kernel<W><<<cuda::blocks_for(total), 256, 0, cuda::current_stream(y)>>>(
        static_cast<const W*>(x.data_ptr()), static_cast<const int32_t*>(indices.data_ptr()),
        static_cast<W*>(y.data_ptr()), N, R, row_words, total, bad, cuda::index_error_record(y.device().index),
        kName);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
