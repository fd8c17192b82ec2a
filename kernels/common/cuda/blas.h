// cuBLAS for tessera's CUDA kernels (CUDA builds only): one handle per device, bound to the
// device's stream, with its workspace set once from the memory pool, so GEMMs queue on the same
// stream as every other kernel and can be captured in a CUDA graph; the TF32 switch for f32
// GEMMs; the status check.
//
//   cublasHandle_t h = cuda::blas_handle(device);          // created on first use
//   TS_CUBLAS_CHECK(cublasGemmEx(h, ...));
//   const cublasComputeType_t ct = cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
//
// TF32 (f32 inputs rounded to a 10-bit mantissa inside the tensor cores, about 1e-3 relative)
// is off by default, so f32 GEMMs match the CPU to f32 rounding. TESSERA_ALLOW_TF32=1 in the
// environment turns it on at startup; cuda::set_allow_tf32 changes it at run time (process-wide,
// read when a GEMM is queued: a captured graph keeps the mode it was captured with).
//
// The first GEMM on a device creates its handle and allocates the workspace on the device's
// stream; do that outside stream capture (any eager op or warm-up step does): creating it while
// the stream is being captured is a DeviceError that says so. A handle is used by one host thread
// at a time, as the rest of the per-device runtime is. A cuBLASLt handle per device is made with
// it (blas_lt_handle); cuBLASLt calls take the device's stream and blas_workspace explicitly.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera {
namespace cuda {

/// Allows (true) or forbids (false, the default) TF32 tensor-core math in f32 GEMMs.
void set_allow_tf32(bool allow);
/// Whether f32 GEMMs may use TF32: TESSERA_ALLOW_TF32=1 at startup, or set_allow_tf32.
bool allow_tf32();

/// The cuBLAS handle of `device`, bound to cuda::stream(device), with a workspace of
/// kBlasWorkspaceBytes from the device's pool and reductions kept in the compute type. Created
/// on first use and kept for the life of the process.
cublasHandle_t blas_handle(int device);
/// Workspace per handle: cuBLAS's recommendation for Hopper (32 MiB) covers older GPUs too.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

/// The cuBLASLt handle of `device`, created together with blas_handle(device) (same rules: the
/// first call must not run during stream capture). cuBLASLt takes the stream and the workspace
/// per call: pass cuda::stream(device) and blas_workspace(device).
cublasLtHandle_t blas_lt_handle(int device);
/// blas_handle(device)'s workspace (kBlasWorkspaceBytes, 256-byte aligned). cuBLAS and cuBLASLt
/// calls share it safely because both queue on the device's one stream.
void* blas_workspace(int device);

/// The cuBLAS data and compute types of a GEMM on `dt` operands: f32 computes in f32, or on TF32
/// tensor cores when allow_tf32(); f64 in f64; bf16/f16 sum in f32. A DTypeError naming `op` for
/// any other dtype.
struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
GemmTypes gemm_types(DType dt, const char* op);

/// One GEMM on row-major matrices, queued on blas_handle(device)'s stream:
///   C [m, n] = op(A)·op(B) + beta·C,   op(A) [m, k] (A stored [k, m] when trans_a),
///                                      op(B) [k, n] (B stored [n, k] when trans_b),
/// leading dimensions the row lengths of the stored matrices (elements). A and B in `in` (see
/// gemm_types), C in `in` or, for bf16/f16 operands, f32; beta 0 or 1. cuBLAS is column-major, so
/// this is the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ with no data moved. Sizes must fit in int
/// (a ShapeError naming `op` otherwise).
void gemm_row_major(int device, const char* op, DType in, DType out, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
                    void* c, int64_t ldc);

/// "CUBLAS_STATUS_INVALID_VALUE: an invalid value was used as an argument" for a status.
const char* blas_status_name(cublasStatus_t s);
const char* blas_status_string(cublasStatus_t s);

}  // namespace cuda
}  // namespace tessera

/// Throws DeviceError naming the call and the status when a cuBLAS call fails.
#define TS_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                              \
    const cublasStatus_t ts_blas_status_ = (expr);                                                  \
    TS_CHECK(ts_blas_status_ == CUBLAS_STATUS_SUCCESS, DeviceError,                                 \
             #expr << " failed: " << ::tessera::cuda::blas_status_name(ts_blas_status_) << ": "     \
                   << ::tessera::cuda::blas_status_string(ts_blas_status_));                        \
  } while (0)
