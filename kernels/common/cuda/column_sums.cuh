// Column sums of a row-major x [N, M] in one read of x, in a fixed order (the bits repeat run to
// run), optionally writing x converted to another dtype in the same pass: cast_col_sum's kernel
// (y = cast(x), s = Σ_n x) and col_sum's (s alone, for bf16/f16/f32 x).
//
// M a multiple of 4 and 16-byte (f32 x) or 8-byte (bf16/f16 x) aligned rows: blocks of 32×8
// threads own a tile of 128 columns × kRowsPerBlock rows. Thread (tx, ty) takes the column quad
// tx (one vector load per row) and the rows ty, ty + 8, ..., issuing all kRowsPerLane loads
// before adding them in f32 (in row order). With an Out type it stores y's four elements
// rounded to nearest even. The 8 lanes' sums are added in lane order through shared memory into
// partial[chunk, m]; the same kernel on f32 partials, without y, then sums [chunks, M] (chunks
// = ⌈N/kRowsPerBlock⌉) until one row is left: that row is s. A bf16 x widened to f32 and summed
// here gives the same bits as its f32 copy summed here (widening is exact, the order the same).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/tensor.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"

namespace tessera {
namespace cuda {
namespace column_sums_detail {

constexpr int kQuads = 32;                              // column quads per block (threadIdx.x)
constexpr int kLanes = 8;                               // row lanes per block (threadIdx.y)
constexpr int kRowsPerLane = 16;                        // loads in flight per thread
constexpr int kRowsPerBlock = kLanes * kRowsPerLane;    // 128 rows per tile
constexpr unsigned kMaxGridY = 65535;

__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
}

template <class In>
__device__ __forceinline__ float4 load4(const In* x, int64_t quad) {
  if constexpr (std::is_same_v<In, float>) {
    return reinterpret_cast<const float4*>(x)[quad];
  } else {
    const Pack<In, 4> p = reinterpret_cast<const Pack<In, 4>*>(x)[quad];
    return make_float4(to_acc(p.v[0]), to_acc(p.v[1]), to_acc(p.v[2]), to_acc(p.v[3]));
  }
}

// part[c, 4q .. 4q+3] = Σ of x rows c·kRowsPerBlock .. +kRowsPerBlock (clipped to n) over the
// columns of quad q; with Out != void also y[r, 4q ..] = x[r, 4q ..] rounded to Out.
template <class In, class Out>
__global__ void __launch_bounds__(kQuads * kLanes)
    col_partials(const In* __restrict__ x, Out* __restrict__ y, float* __restrict__ part, int64_t n, int64_t quads,
                 int64_t chunks) {
  __shared__ float4 lanes[kLanes][kQuads];
  const int64_t q = blockIdx.x * int64_t{kQuads} + threadIdx.x;
  for (int64_t c = blockIdx.y; c < chunks; c += gridDim.y) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (q < quads) {
      const int64_t r0 = c * kRowsPerBlock + threadIdx.y;
      float4 v[kRowsPerLane];
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        const int64_t r = r0 + int64_t{j} * kLanes;
        v[j] = r < n ? load4(x, r * quads + q) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        add4(acc, v[j]);
        if constexpr (!std::is_void_v<Out>) {
          const int64_t r = r0 + int64_t{j} * kLanes;
          if (r < n) {
            Pack<Out, 4> p;
            p.v[0] = from_acc<Out>(v[j].x), p.v[1] = from_acc<Out>(v[j].y);
            p.v[2] = from_acc<Out>(v[j].z), p.v[3] = from_acc<Out>(v[j].w);
            reinterpret_cast<Pack<Out, 4>*>(y)[r * quads + q] = p;
          }
        }
      }
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && q < quads) {
      float4 s = lanes[0][threadIdx.x];
#pragma unroll
      for (int l = 1; l < kLanes; ++l) add4(s, lanes[l][threadIdx.x]);
      reinterpret_cast<float4*>(part)[c * quads + q] = s;
    }
    __syncthreads();  // lanes is rewritten by the next chunk
  }
}

template <class In, class Out>
void launch_partials(const In* x, Out* y, float* part, int64_t n, int64_t m, cudaStream_t stream, const char* op) {
  const int64_t quads = m / 4, chunks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(static_cast<unsigned>((quads + kQuads - 1) / kQuads),
                  static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
  col_partials<In, Out><<<grid, dim3(kQuads, kLanes), 0, stream>>>(x, y, part, n, quads, chunks);
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace column_sums_detail

/// s [M] f32 = Σ_n x[n, :] for x [N, M] (N ≥ 1, M a multiple of 4, rows vector-aligned: the
/// caller checks), and with Out != void y [N, M] = x rounded to Out in the same read.
template <class In, class Out>
void column_sums(const Tensor& x, void* y, const Tensor& s, cudaStream_t stream, const char* op) {
  using namespace column_sums_detail;
  const int64_t n = x.size(0), m = x.size(1);
  const auto opts = TensorOptions(DType::f32).device(s.device());
  int64_t rows = (n + kRowsPerBlock - 1) / kRowsPerBlock;  // partial rows after pass 1
  Tensor part = rows > 1 ? empty({rows, m}, opts) : s;
  launch_partials<In, Out>(static_cast<const In*>(x.data_ptr()), static_cast<Out*>(y),
                           static_cast<float*>(part.data_ptr()), n, m, stream, op);
  while (rows > 1) {  // sum the partials' rows, kRowsPerBlock at a time
    const int64_t next = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    Tensor dst = next > 1 ? empty({next, m}, opts) : s;
    launch_partials<float, void>(static_cast<const float*>(part.data_ptr()), nullptr,
                                 static_cast<float*>(dst.data_ptr()), rows, m, stream, op);
    part = dst;
    rows = next;
  }
}

}  // namespace cuda
}  // namespace tessera
