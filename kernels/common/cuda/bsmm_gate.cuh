// The gate epilogue of bsmm_dw as a kernel of its own, for the dW paths whose sums P are not in
// registers when they end: the sm_90a kernel's split of N (its f32 partial sums, added here in
// the order of the parts), the exact scalar kernel (its P in a temporary) and the dense route
// (P in a dense f32 product, DenseSums; ungated there too: dw (+)= S). The tensor-core kernels
// with one part apply the same epilogue to their accumulators in registers.
//
//   S[k] = partial[0][k] + partial[1][k] + ... + partial[parts-1][k]    [bs, bs], in that order
//   dw[k] (+)= gate[k]·S[k]                                             (+: the accumulate mode)
//   dgate[k] = sum_ij S[k]_ij·w[k]_ij
//
// Thread blocks of 256 threads; a stored block of bs × bs goes to kSpan = min(256, bs²/4)
// consecutive threads (16 blocks per thread block at bs 8, 4 at bs 16, one at bs 32 and 64), each
// thread four consecutive elements per pass (four passes at bs 64). dgate: each thread's sum in
// element order, then a fixed shuffle tree over the span's lanes, then (spans of several warps)
// the warps in order through shared memory. Deterministic: no atomics, the order depends on bs
// only. (The same count of blocks per thread block for every nnz: the last one's extra spans
// have no block and store nothing.)
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

template <int BS>
struct GateEpilogueShape {
  static constexpr int kThreads = 256;
  static constexpr int kSpan = BS * BS / 4 < kThreads ? BS * BS / 4 : kThreads;  // threads per stored block
  static constexpr int kBlocks = kThreads / kSpan;                               // stored blocks per thread block
  static constexpr int kPasses = BS * BS / 4 / kSpan;
};

/// Where the epilogue reads S[k]: the sum of `parts` partial sums [parts][nnz][bs][bs], added in
/// part order (the sm_90a split of N; the scalar kernel's P with parts = 1).
template <class A, int BS>
struct PartialSums {
  const A* partial;
  int parts;
  int64_t nnz;
  /// S[k][i][j .. j+3] (at = k·bs² + i·bs + j)
  __device__ __forceinline__ void load4(int64_t /*k*/, int64_t at, int /*i*/, int /*j*/, A v[4]) const {
    const int64_t part_stride = nnz * BS * BS;
    if constexpr (std::is_same_v<A, float>) {
      const float4 f = *reinterpret_cast<const float4*>(partial + at);
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
      for (int q = 1; q < parts; ++q) {
        const float4 d = *reinterpret_cast<const float4*>(partial + q * part_stride + at);
        v[0] += d.x, v[1] += d.y, v[2] += d.z, v[3] += d.w;
      }
    } else {
      for (int e = 0; e < 4; ++e) {
        v[e] = partial[at + e];
        for (int q = 1; q < parts; ++q) v[e] += partial[q * part_stride + at + e];
      }
    }
  }
};

/// S[k] read from a dense f32 product P = Xᵀ·dY [C, ld] (row-major) that holds the block columns
/// col0 .. of W (the dense route, bsmm_dense.cu): block k at rows block_row[k]·bs, columns
/// (block_col[k] − col0)·bs.
template <int BS>
struct DenseSums {
  const float* p;
  int64_t ld;
  int32_t col0;
  const int32_t* block_row;
  const int32_t* block_col;
  __device__ __forceinline__ void load4(int64_t k, int64_t /*at*/, int i, int j, float v[4]) const {
    const float4 f = *reinterpret_cast<const float4*>(
        p + (static_cast<int64_t>(block_row[k]) * BS + i) * ld + static_cast<int64_t>(block_col[k] - col0) * BS + j);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  }
};

/// The epilogue over `count` stored blocks: k = list[first + b] (or first + b without a list) for
/// b < count. Ungated (gate null): dw[k] (+)= S[k], no dgate.
template <class A, class T, class TO, int BS, class Sums>
__global__ void __launch_bounds__(256)
    bsmm_gate_epilogue_kernel(Sums sums, const int32_t* __restrict__ list, int64_t first, int64_t count,
                              const T* __restrict__ w, const T* __restrict__ gate, TO* __restrict__ dw,
                              TO* __restrict__ dgate, bool accumulate) {
  using Shape = GateEpilogueShape<BS>;
  constexpr int kSpan = Shape::kSpan, kElems = BS * BS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = threadIdx.x % kSpan;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * Shape::kBlocks + threadIdx.x / kSpan;
  const bool have = b < count;
  const int64_t k = !have ? 0 : list ? list[first + b] : first + b;
  A s = 0;
  if (have) {
    const A g = gate ? static_cast<A>(to_acc(gate[k])) : A(1);
#pragma unroll
    for (int pass = 0; pass < Shape::kPasses; ++pass) {
      const int off = (pass * kSpan + r) * 4;
      const int64_t at = k * kElems + off;
      A v[4];
      sums.load4(k, at, off / BS, off % BS, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (gate) s += v[e] * static_cast<A>(to_acc(w[at + e]));
        A out = g * v[e];
        if (accumulate) out += static_cast<A>(to_acc(dw[at + e]));
        dw[at + e] = from_acc<TO>(out);
      }
    }
  }
  if (!gate) return;  // uniform over the launch
  if constexpr (kSpan < 32) {
    for (int o = kSpan / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);  // within the span
    if (r == 0 && have) dgate[k] = from_acc<TO>(s);
  } else {
    __shared__ A partial_sums[256 / 32];
    s = warp_reduce(s, SumOp{});
    if (lane == 0) partial_sums[warp] = s;
    __syncthreads();
    if (r == 0 && have) {
      A total = 0;
      for (int m = 0; m < kSpan / 32; ++m) total += partial_sums[warp + m];
      dgate[k] = from_acc<TO>(total);
    }
  }
}

/// Launches bsmm_gate_epilogue_kernel<A, T, TO, BS> on `stream` for `count` blocks of `list`
/// (see the kernel); make_sums(bs constant) gives the Sums of that block size.
template <class A, class T, class TO, class MakeSums>
void launch_gate_epilogue(int bs, MakeSums make_sums, const int32_t* list, int64_t first, int64_t count,
                          const void* w, const void* gate, void* dw, void* dgate, bool accumulate, cudaStream_t stream) {
  if (count <= 0) return;
  auto launch = [&](auto bs_constant) {
    constexpr int BS = decltype(bs_constant)::value;
    constexpr int per_block = GateEpilogueShape<BS>::kBlocks;
    const int64_t blocks = (count + per_block - 1) / per_block;
    const auto sums = make_sums(bs_constant);
    bsmm_gate_epilogue_kernel<A, T, TO, BS><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        sums, list, first, count, static_cast<const T*>(w), static_cast<const T*>(gate), static_cast<TO*>(dw),
        static_cast<TO*>(dgate), accumulate);
  };
  switch (bs) {
    case 8: return launch(std::integral_constant<int, 8>{});
    case 16: return launch(std::integral_constant<int, 16>{});
    case 32: return launch(std::integral_constant<int, 32>{});
    default: return launch(std::integral_constant<int, 64>{});
  }
}

/// The epilogue of partial sums [parts][nnz][bs][bs] for every stored block, on `stream`.
template <class A, class T, class TO>
void launch_bsmm_gate_epilogue(const A* partial, int parts, int64_t nnz, int bs, const void* w, const void* gate,
                               void* dw, void* dgate, bool accumulate, cudaStream_t stream) {
  launch_gate_epilogue<A, T, TO>(
      bs,
      [&](auto bs_constant) {
        return PartialSums<A, decltype(bs_constant)::value>{partial, parts, nnz};
      },
      nullptr, 0, nnz, w, gate, dw, dgate, accumulate, stream);
}

}  // namespace cuda
}  // namespace tessera
