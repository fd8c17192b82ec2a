// Byte-moving helpers for the data-movement kernels (copy, concat, split, slice, index_select,
// permute, where, masked_fill, ...), which do not look at values and so serve every dtype.
//
//   cuda::dispatch_word(dtype_size(t.dtype()), "where", [&](auto tag) {
//     using W = typename decltype(tag)::type;   // uint8_t, uint16_t, uint32_t, uint64_t or uint4
//     ...
//   });
//   // rows of `width` bytes, `spitch` apart in src, to `dpitch` apart in dst:
//   cuda::copy_rows(dst, dpitch, src, spitch, width, rows, stream);
//
// copy_rows moves the widest word (16, 8, 4, 2 or 1 bytes) that divides both addresses, both
// pitches and the width, so that rows of f32 features go 4 elements per load.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

/// Calls f(TypeTag<W>{}) with W the unsigned word of `bytes` bytes (1, 2, 4, 8 or 16: uint4).
template <class F>
void dispatch_word(size_t bytes, const char* op, F&& f) {
  switch (bytes) {
    case 1: return f(TypeTag<uint8_t>{});
    case 2: return f(TypeTag<uint16_t>{});
    case 4: return f(TypeTag<uint32_t>{});
    case 8: return f(TypeTag<uint64_t>{});
    case 16: return f(TypeTag<uint4>{});
    default: break;
  }
  TS_THROW(DTypeError, op << ": no CUDA kernel for elements of " << bytes << " bytes");
}

/// The largest of 16, 8, 4, 2, 1 that divides every value (byte counts and addresses).
inline size_t widest_word(std::initializer_list<uint64_t> values) {
  uint64_t all = 16;
  for (uint64_t v : values) all |= v;
  return static_cast<size_t>(all & (~all + 1));  // lowest set bit, at most 16
}

inline uint64_t address(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

/// Row r, word c: dst[r * dpitch + c] = src[r * spitch + c] (pitches and counts in words W).
/// One thread per word (grid-stride), so consecutive threads read and write consecutive words.
template <class W>
__global__ void copy_rows_kernel(W* dst, int64_t dpitch, const W* src, int64_t spitch, int64_t row_words, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / row_words, c = i - r * row_words;
    dst[r * dpitch + c] = src[r * spitch + c];
  }
}

/// Copies `rows` rows of `width` bytes: row r goes from src + r * spitch to dst + r * dpitch
/// (all in bytes, device memory of one device), ordered on `stream`. Regions must not overlap.
inline void copy_rows(void* dst, int64_t dpitch, const void* src, int64_t spitch, int64_t width, int64_t rows,
                      cudaStream_t stream) {
  if (width <= 0 || rows <= 0) return;
  if ((dpitch == width && spitch == width) || rows == 1) {  // one contiguous block
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(width * rows), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const size_t w = widest_word({address(dst), address(src), static_cast<uint64_t>(dpitch),
                                static_cast<uint64_t>(spitch), static_cast<uint64_t>(width)});
  dispatch_word(w, "copy_rows", [&](auto tag) {
    using W = typename decltype(tag)::type;
    const int64_t ws = static_cast<int64_t>(sizeof(W)), row_words = width / ws, n = row_words * rows;
    copy_rows_kernel<W><<<blocks_for(n), 256, 0, stream>>>(static_cast<W*>(dst), dpitch / ws,
                                                           static_cast<const W*>(src), spitch / ws, row_words, n);
    TS_CUDA_LAUNCH_CHECK("copy_rows");
  });
}

}  // namespace cuda
}  // namespace tessera
