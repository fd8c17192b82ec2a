// What the sm_90a block-sparse matmul kernels (bsmm_sm90_gather.cu, bsmm_sm90_gradient.cu)
// share on the host and the device: tensor maps, the persistent grid size, dtype dispatch,
// support checks. Internal to those two files (everything here is in an unnamed namespace).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "kernels/common/cuda/bsmm_store.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/cuda/wgmma_sm90.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {

/// Launches of the sm_90a kernels so far (bsmm_sm90_gather.cu).
extern std::atomic<uint64_t> g_launches;

namespace {

constexpr int kThreads = 384;  // dW: producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;

__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    TS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    TS_CHECK(q == cudaDriverEntryPointSuccess && f, DeviceError,
             "bsmm: the CUDA driver has no cuTensorMapEncodeTiled (TMA)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// A 2-D row-major [rows, cols] tensor map (bf16, f16 or f32) with boxes of [box_rows, box_cols],
/// swizzled by the box's row length (128, 64 or 32 bytes; 16: not swizzled).
CUtensorMap tensor_map(const void* base, DType dt, uint64_t rows, uint64_t cols, uint32_t box_rows, uint32_t box_cols) {
  CUtensorMap map;
  const uint64_t elem = dt == DType::f32 ? 4 : 2;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * elem};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type = dt == DType::f32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode_tiled()(
      &map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      box_cols * elem == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
      : box_cols * elem == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
      : box_cols * elem == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                              : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TS_CHECK(r == CUDA_SUCCESS, DeviceError,
           "bsmm: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a [" << rows << ", " << cols
                                                   << "] tensor");
  return map;
}


/// Thread blocks of `kernel` that fit on one multiprocessor, times the multiprocessors.
template <auto Kernel>
int persistent_grid(int smem_bytes, int threads = kThreads) {
  static std::atomic<int> cached{0};
  int v = cached.load(std::memory_order_relaxed);
  if (v > 0) return v;
  int device = 0, sms = 0, per_sm = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  TS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem_bytes));
  v = sms * (per_sm > 0 ? per_sm : 1);
  cached.store(v, std::memory_order_relaxed);
  return v;
}


bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool half_dtype(DType dt) { return dt == DType::bf16 || dt == DType::f16; }

template <class F>
void dispatch_types(DType in, DType out, F&& f) {
  auto with_out = [&](auto tin) {
    if (out == DType::f32) return f(tin, TypeTag<float>{});
    return f(tin, tin);
  };
  if (in == DType::bf16) return with_out(TypeTag<__nv_bfloat16>{});
  return with_out(TypeTag<__half>{});
}


bool device_ok(int device) {
  int major = 0, minor = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}


}  // namespace
}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
