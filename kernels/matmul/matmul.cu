// matmul on the GPU through cuBLAS: C = op(A)·op(B), 2-D or batched 3-D (same batch on both).
//
// cuBLAS is column-major; tessera is row-major. A row-major [r, c] buffer is the column-major
// [c, r] matrix, i.e. its transpose, so the row-major product C [M,N] = op(A)·op(B) is computed
// as the column-major product Cᵀ [N,M] = op(B)ᵀ·op(A)ᵀ: cuBLAS's first operand is B (with
// trans_b), its second is A (with trans_a), and no data moves. Leading dimensions are the
// row-major row lengths: B is [K,N] (ld N) or, transposed, [N,K] (ld K); A is [M,K] (ld K) or
// [K,M] (ld M); C is [M,N] (ld N).
//
// Types (inputs and output share one dtype, except f32_output: bf16/f16 inputs, f32 output):
//   f32   compute f32 (CUBLAS_COMPUTE_32F), or TF32 tensor cores when cuda::allow_tf32();
//   f64   compute f64;
//   bf16, f16   inputs and output in 16 bits, products summed in f32, rounded once on store.
#include <limits>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/blas.h"
#include "kernels/matmul/matmul.h"

namespace tessera {

void op::Matmul::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &a = in[0], &b = in[1], &c = out[0];
  const Shape& sc = c.shape();
  const int r = sc.ndim();
  const int64_t batch = r == 3 ? sc[0] : 1, m = sc[r - 2], n = sc[r - 1];
  const int64_t k = attrs.trans_a ? a.size(r - 2) : a.size(r - 1);
  const cuda::GemmTypes types = cuda::gemm_types(a.dtype(), kName);  // dtype check first, even for empty outputs
  const cudaDataType_t c_type = attrs.f32_output ? CUDA_R_32F : types.data;
  if (c.numel() == 0) return;
  cudaStream_t stream = cuda::current_stream(c);
  if (k == 0) {  // empty inner dimension: C = 0 (all-zero bits are 0 in every float dtype)
    TS_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    return;
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  TS_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax && batch <= kIntMax, ShapeError,
           "matmul: A " << a.shape() << " and B " << b.shape() << " exceed cuBLAS's 32-bit sizes");

  // Column-major view (see the file comment): Cᵀ [n, m] = op(B)ᵀ [n, k] · op(A)ᵀ [k, m].
  const cublasOperation_t op_b = attrs.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = attrs.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = static_cast<int>(attrs.trans_b ? k : n), lda = static_cast<int>(attrs.trans_a ? m : k);
  const int ldc = static_cast<int>(n);
  const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
  cublasHandle_t h = cuda::blas_handle(c.device().index);

  // alpha = 1, beta = 0 in the compute type (double for f64, float otherwise).
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.0f, zero32 = 0.0f;
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : static_cast<const void*>(&one32);
  const void* beta = f64 ? static_cast<const void*>(&zero64) : static_cast<const void*>(&zero32);

  if (batch == 1) {
    cuda::gemm_row_major(c.device().index, kName, a.dtype(), c.dtype(), attrs.trans_a, attrs.trans_b, m, n, k,
                         a.data_ptr(), lda, b.data_ptr(), ldb, 0.0, c.data_ptr(), ldc);
  } else {
    // Batch i reads A + i·m·k, B + i·k·n and writes C + i·m·n (contiguous [batch, ., .] tensors).
    TS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, M, N, K, alpha, b.data_ptr(), types.data, ldb,
                                               static_cast<long long>(k * n), a.data_ptr(), types.data, lda,
                                               static_cast<long long>(m * k), beta, c.data_ptr(), c_type, ldc,
                                               static_cast<long long>(m * n), static_cast<int>(batch),
                                               types.compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace tessera
