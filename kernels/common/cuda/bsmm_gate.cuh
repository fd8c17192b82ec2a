// The gate epilogue of bsmm_dw as a kernel of its own, for the dW paths whose sums P are not in
// registers when they end: the sm_90a kernel's split of N (its f32 partial sums, added here in
// the order of the parts) and the exact scalar kernel (its P in a temporary). The tensor-core
// kernels with one part apply the same epilogue to their accumulators in registers.
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

template <class A, class T, class TO, int BS>
__global__ void __launch_bounds__(256)
    bsmm_gate_epilogue_kernel(const A* __restrict__ partial, int parts, int64_t nnz, const T* __restrict__ w,
                              const T* __restrict__ gate, TO* __restrict__ dw, TO* __restrict__ dgate,
                              bool accumulate) {
  using Shape = GateEpilogueShape<BS>;
  constexpr int kSpan = Shape::kSpan, kElems = BS * BS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = threadIdx.x % kSpan;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * Shape::kBlocks + threadIdx.x / kSpan;
  const int64_t part_stride = nnz * kElems;
  A s = 0;
  if (k < nnz) {
    const A g = static_cast<A>(to_acc(gate[k]));
#pragma unroll
    for (int pass = 0; pass < Shape::kPasses; ++pass) {
      const int64_t at = k * kElems + (pass * kSpan + r) * 4;
      A v[4];
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
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s += v[e] * static_cast<A>(to_acc(w[at + e]));
        A out = g * v[e];
        if (accumulate) out += static_cast<A>(to_acc(dw[at + e]));
        dw[at + e] = from_acc<TO>(out);
      }
    }
  }
  if constexpr (kSpan < 32) {
    for (int o = kSpan / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);  // within the span
    if (r == 0 && k < nnz) dgate[k] = from_acc<TO>(s);
  } else {
    __shared__ A sums[256 / 32];
    s = warp_reduce(s, SumOp{});
    if (lane == 0) sums[warp] = s;
    __syncthreads();
    if (r == 0 && k < nnz) {
      A total = 0;
      for (int m = 0; m < kSpan / 32; ++m) total += sums[warp + m];
      dgate[k] = from_acc<TO>(total);
    }
  }
}

/// Launches bsmm_gate_epilogue_kernel for nnz blocks of bs × bs on `stream`.
template <class A, class T, class TO>
void launch_bsmm_gate_epilogue(const A* partial, int parts, int64_t nnz, int bs, const void* w, const void* gate,
                               void* dw, void* dgate, bool accumulate, cudaStream_t stream) {
  if (nnz == 0) return;
  auto launch = [&](auto kernel, int per_block) {
    const int64_t blocks = (nnz + per_block - 1) / per_block;
    kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(partial, parts, nnz, static_cast<const T*>(w),
                                                              static_cast<const T*>(gate), static_cast<TO*>(dw),
                                                              static_cast<TO*>(dgate), accumulate);
  };
  switch (bs) {
    case 8: return launch(&bsmm_gate_epilogue_kernel<A, T, TO, 8>, GateEpilogueShape<8>::kBlocks);
    case 16: return launch(&bsmm_gate_epilogue_kernel<A, T, TO, 16>, GateEpilogueShape<16>::kBlocks);
    case 32: return launch(&bsmm_gate_epilogue_kernel<A, T, TO, 32>, GateEpilogueShape<32>::kBlocks);
    default: return launch(&bsmm_gate_epilogue_kernel<A, T, TO, 64>, GateEpilogueShape<64>::kBlocks);
  }
}

}  // namespace cuda
}  // namespace tessera
