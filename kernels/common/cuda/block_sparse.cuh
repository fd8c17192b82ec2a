// Helpers shared by the block-sparse CUDA kernels (bsmm, bsmm_dx, bsmm_dw, block_attention,
// block_attention_backward): the block size as a compile-time constant, running sums kept in
// memory across a kernel's loop steps.
//
//   cuda::dispatch_block_size(l.block_size(), "bsmm", [&](auto bs) {
//     constexpr int BS = decltype(bs)::value;     // 8, 16, 32 or 64
//     kernel<T, BS><<<grid, dim3(BS, rows), 0, stream>>>(...);
//   });
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

/// Calls f(std::integral_constant<int, bs>{}) for the block sizes layouts support (8, 16, 32,
/// 64); ValueError naming `op` otherwise (layouts never hold another one).
template <class F>
void dispatch_block_size(int64_t bs, const char* op, F&& f) {
  switch (bs) {
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    default: break;
  }
  TS_THROW(ValueError, op << ": no CUDA kernel for block size " << bs);
}

/// One step of a sum over a kernel's loop (steps first .. last) whose running totals live in
/// memory between steps because a thread owns more outputs than fit in registers: the first step
/// starts the total with `term`, later ones add to acc[i]; the last stores from_acc<T>(scale·total)
/// into out[i] instead of keeping it. acc may alias out when T is its own accumulation type.
/// Each element must be owned by one thread for all steps (no other thread reads or writes it).
template <class T>
__device__ __forceinline__ void accumulate_step(acc_t<T>* acc, T* out, int64_t i, acc_t<T> term, bool first,
                                                bool last, acc_t<T> scale = 1) {
  const acc_t<T> total = first ? term : acc[i] + term;
  if (last) {
    out[i] = from_acc<T>(scale * total);
  } else {
    acc[i] = total;
  }
}

}  // namespace cuda
}  // namespace tessera
