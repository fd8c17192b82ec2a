// How the GPU's reductions over one dim (sum, max, min: kernels/<op>/<op>.cu) split their work.
// Host code, a function of the shape only (so the order of every sum, and its result, is too);
// tested on the CPU (tests/kernels/dim_reduce_plan_test.cpp).
//
//   const cuda::DimReducePlan p(outer, n, inner);   // x viewed as [outer, n, inner], reduced over n
//   p.chunks == 1 ? one pass : pass 1 writes partials [outer, chunks, inner], pass 2 reduces them
#pragma once

#include <algorithm>
#include <cstdint>

namespace tessera {
namespace cuda {

/// How a reduction over the middle dim of x viewed as [outer, n, inner] is split (sum, max, min).
/// inner == 1: contiguous rows, one block per row piece; inner > 1: one thread per column
/// piece, walking k in order. Long rows are cut into pieces of kRowChunk elements. Columns are
/// cut until pass 1 has about kColThreads threads (enough loads in flight to run at DRAM speed:
/// a [16384, 16384] bf16 bias gradient took about 1 ms as 16384 threads walking whole columns), in
/// near-equal pieces of about kMinColChunk rows or more, at most kMaxColChunks of them. Pass 1 writes partials
/// [outer, chunks, inner], pass 2 reduces them in order (chunks == 1: one pass). The plan
/// depends on the shape only, so the reduction order (and the result) does too.
struct DimReducePlan {
  static constexpr int64_t kRowChunk = 8192;         ///< elements one block reduces in pass 1
  static constexpr int64_t kColThreads = 1 << 18;    ///< pass-1 threads wanted over columns
  static constexpr int64_t kMinColChunk = 64;        ///< fewest rows one thread walks in pass 1
  static constexpr int64_t kMaxColChunks = 1024;     ///< most partials per column (pass 2's walk)
  int64_t outer, n, inner, chunk, chunks;

  DimReducePlan(int64_t outer_, int64_t n_, int64_t inner_) : outer(outer_), n(n_), inner(inner_) {
    chunk = n > 0 ? n : 1;
    chunks = 1;
    if (inner == 1) {
      if (n > 2 * kRowChunk) chunk = kRowChunk, chunks = (n + chunk - 1) / chunk;
      return;
    }
    const int64_t columns = outer * inner;
    int64_t want = (kColThreads + columns - 1) / columns;
    want = std::min({want, (n + kMinColChunk - 1) / kMinColChunk, kMaxColChunks});
    if (want <= 1) return;
    chunk = (n + want - 1) / want;
    chunks = (n + chunk - 1) / chunk;
  }
};

}  // namespace cuda
}  // namespace tessera
