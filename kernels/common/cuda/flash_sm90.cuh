// What the sm_90a attention kernels (kernels/block_attention/flash_sm90.cu, forward, and
// kernels/block_attention_backward/flash_sm90_backward.cu) share: the tile geometry, the 4-D
// tensor maps over (d, token, head, batch) that read q, k, v, dO in place whatever their
// strides, and the switch that keeps the mma.sync kernels. Compiled into sm_90a objects only.
#pragma once

#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/flash_sm80.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace flash90 {

constexpr int kBlock = 64;           // attention block (query and key rows per tile)
constexpr int kBoxBytes = 64 * 128;  // one TMA box: [64 rows, 64 values] (128-byte rows, swizzled by 128)

/// A 4-D map over an operand of strides s: (d < D, token < T, head < heads, batch < B), boxes
/// of [64 tokens, 64 values] swizzled by 128 bytes; false when the driver refuses it.
inline bool head_map(CUtensorMap* map, const void* base, DType dt, int64_t D, int64_t T, int64_t heads, int64_t B,
                     const FlashStrides& s) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(T), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(B)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.token) * 2, static_cast<cuuint64_t>(s.head) * 2,
                                 static_cast<cuuint64_t>(s.batch) * 2};
  const cuuint32_t box[4] = {64, kBlock, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode_tiled()(map, dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                    4, const_cast<void*>(base), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

/// TESSERA_ATTENTION_PATH=sm80 or TESSERA_BSMM_PATH=sm80 (read on every call): the mma.sync
/// kernels, also on Hopper; TESSERA_ATTENTION_PATH=sm80-forward or sm80-backward: those for that
/// pass only (the other on sm_90a), to tell which pass a difference comes from.
inline bool forced_off(bool backward) {
  const char* a = std::getenv("TESSERA_ATTENTION_PATH");
  const char* b = std::getenv("TESSERA_BSMM_PATH");
  if ((a && std::strcmp(a, "sm80") == 0) || (b && std::strcmp(b, "sm80") == 0)) return true;
  return a && std::strcmp(a, backward ? "sm80-backward" : "sm80-forward") == 0;
}

}  // namespace flash90
}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
