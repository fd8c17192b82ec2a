// cuBLAS handles per device and the TF32 switch (see blas.h).
#include "kernels/common/cuda/blas.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

#include "core/cuda/check.cuh"

namespace tessera {
namespace cuda {
namespace {

constexpr int kMaxDevices = 64;

bool env_flag(const char* name) {
  const char* e = std::getenv(name);
  return e && *e != '\0' && std::strcmp(e, "0") != 0;
}

std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{env_flag("TESSERA_ALLOW_TF32")};
  return flag;
}

// Handles are created once and never destroyed, like the device streams they are bound to
// (static tensors may still run kernels while the process shuts down).
std::array<std::atomic<cublasHandle_t>, kMaxDevices> g_handles{};
// Written before g_handles[device] is published (release), read after it is seen (acquire).
std::array<cublasLtHandle_t, kMaxDevices> g_lt_handles{};
std::array<void*, kMaxDevices> g_workspaces{};
std::mutex g_create_mutex;

}  // namespace

void set_allow_tf32(bool allow) { tf32_flag().store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_flag().load(std::memory_order_relaxed); }

cublasHandle_t blas_handle(int device) {
  TS_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "cuBLAS: cuda:" << device << " is not a valid device");
  if (cublasHandle_t h = g_handles[device].load(std::memory_order_acquire)) return h;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  if (cublasHandle_t h = g_handles[device].load(std::memory_order_acquire)) return h;
  set_device(device);
  auto s = static_cast<cudaStream_t>(stream(device));
  // The workspace comes from the stream-ordered pool: inside a capture that allocation would
  // belong to the graph, not to the handle.
  TS_CHECK(!is_capturing(device), DeviceError,
           "cuBLAS: the handle of cuda:" << device << " is created by the first GEMM on that device, which ran "
                                         << "during CUDA graph capture; run one GEMM (e.g. one step) eagerly first");
  cublasHandle_t h = nullptr;
  TS_CUBLAS_CHECK(cublasCreate(&h));
  // Stream first: cublasSetStream resets the workspace to cuBLAS's own pool.
  TS_CUBLAS_CHECK(cublasSetStream(h, s));
  void* workspace = allocate(kBlasWorkspaceBytes, device);  // 256-byte aligned, as cuBLAS needs
  TS_CUBLAS_CHECK(cublasSetWorkspace(h, workspace, kBlasWorkspaceBytes));
  // Half-precision GEMMs (f32 compute) must not reduce split-K partial sums in bf16/f16.
  TS_CUBLAS_CHECK(cublasSetMathMode(
      h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  cublasLtHandle_t lt = nullptr;
  TS_CUBLAS_CHECK(cublasLtCreate(&lt));
  g_lt_handles[device] = lt;
  g_workspaces[device] = workspace;
  g_handles[device].store(h, std::memory_order_release);
  return h;
}

cublasLtHandle_t blas_lt_handle(int device) {
  blas_handle(device);  // creates both on first use
  return g_lt_handles[device];
}

void* blas_workspace(int device) {
  blas_handle(device);
  return g_workspaces[device];
}

GemmTypes gemm_types(DType dt, const char* op) {
  switch (dt) {
    case DType::f32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    default: break;
  }
  TS_THROW(DTypeError, op << ": no CUDA kernel for dtype " << dt);
}

void gemm_row_major(int device, const char* op, DType in, DType out, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
                    void* c, int64_t ldc) {
  const GemmTypes types = gemm_types(in, op);
  const cudaDataType_t c_type = out == in ? types.data : gemm_types(out, op).data;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  for (const int64_t v : {m, n, k, lda, ldb, ldc})
    TS_CHECK(v <= kIntMax, ShapeError, op << ": a GEMM of [" << m << ", " << k << "] x [" << k << ", " << n
                                          << "] exceeds cuBLAS's 32-bit sizes");
  // alpha = 1 and beta in the compute type (double for f64, float otherwise)
  const double one64 = 1.0, beta64 = beta;
  const float one32 = 1.0f, beta32 = static_cast<float>(beta);
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  TS_CUBLAS_CHECK(cublasGemmEx(blas_handle(device), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                               trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                               static_cast<int>(k), f64 ? static_cast<const void*>(&one64) : &one32, b, types.data,
                               static_cast<int>(ldb), a, types.data, static_cast<int>(lda),
                               f64 ? static_cast<const void*>(&beta64) : &beta32, c, c_type, static_cast<int>(ldc),
                               types.compute, CUBLAS_GEMM_DEFAULT));
}

const char* blas_status_name(cublasStatus_t s) { return cublasGetStatusName(s); }
const char* blas_status_string(cublasStatus_t s) { return cublasGetStatusString(s); }

}  // namespace cuda
}  // namespace tessera
