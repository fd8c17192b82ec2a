// linear on the GPU: y [N, M] = x [N, K]·W [K, M] + b [M] as one cuBLASLt GEMM whose epilogue
// adds b, so y is written once (no second pass for the bias).
//
// Column-major view (as in matmul.cu): the row-major y [N, M] is the column-major yᵀ [M, N]
// (ld M), and yᵀ = Wᵀ·xᵀ where W's buffer read column-major is Wᵀ [M, K] (ld M) and x's is
// xᵀ [K, N] (ld K): cuBLASLt's A is W, its B is x, no transposes, no data moves.
// CUBLASLT_EPILOGUE_BIAS adds a vector along D's rows — the M rows of yᵀ — to every column,
// i.e. y[n, m] += b[m], in the compute type before the one store.
//
// Types, as matmul: f32 (TF32 tensor cores only when cuda::allow_tf32()); bf16/f16 inputs with
// f32 sums, y in the inputs' dtype or f32 (f32_output). b has y's dtype, cuBLASLt's default bias
// type (D's). Split-K partial sums of bf16/f16 outputs are reduced in f32 (reduction scheme
// mask), as the cuBLAS handle's DISALLOW_REDUCED_PRECISION_REDUCTION does for matmul.
//
// f32_bias (bf16/f16 y, f32 b): cuBLASLt takes no f32 bias for a bf16/f16 D (its heuristic answers
// CUBLAS_STATUS_INVALID_VALUE for CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = CUDA_R_32F; H100, CUDA 13),
// so the f32-output GEMM with the bias epilogue writes an f32 temporary that one pass rounds into
// y: bitwise the f32 output cast, one f32 write and read more than a bf16 D would take.
//
// Fallback — f64, an empty inner dimension, sizes past 32 bits, or no cuBLASLt algorithm for
// the case: matmul's cuBLAS GEMM, then add_bias_rows. The algorithm cuBLASLt's heuristic picks
// is cached per (device, types, sizes, pointer alignments); descriptors are made per call (host
// only). Nothing synchronizes, so the op can be captured in a CUDA graph once the handles exist.
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/blas.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/linear/linear.h"
#include "kernels/matmul/matmul.h"

namespace tessera {

namespace {

// y [rows, m] row-major, y[r, j] += b[j]; one element per thread, grid-stride.
template <class T>
__global__ void add_bias_rows(T* __restrict__ y, const T* __restrict__ b, int64_t total, int64_t m) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride)
    y[i] = cuda::from_acc<T>(cuda::to_acc(y[i]) + cuda::to_acc(b[i % m]));
}

// Largest power of two (<= 256) dividing the address: what the heuristic may assume.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct AlgoKey {
  int device, dtype;
  bool f32_output, tf32;
  int64_t n, k, m;
  uint32_t align_x, align_w, align_y, align_b;
  bool operator==(const AlgoKey& o) const {
    return device == o.device && dtype == o.dtype && f32_output == o.f32_output && tf32 == o.tf32 && n == o.n &&
           k == o.k && m == o.m && align_x == o.align_x && align_w == o.align_w && align_y == o.align_y &&
           align_b == o.align_b;
  }
};

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) {
      h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    mix((static_cast<uint64_t>(k.device) << 32) | (static_cast<uint64_t>(k.dtype) << 2) |
        (uint64_t{k.f32_output} << 1) | uint64_t{k.tf32});
    mix(static_cast<uint64_t>(k.n));
    mix(static_cast<uint64_t>(k.k));
    mix(static_cast<uint64_t>(k.m));
    mix((uint64_t{k.align_x} << 48) | (uint64_t{k.align_w} << 32) | (uint64_t{k.align_y} << 16) | k.align_b);
    return h;
  }
};

struct CachedAlgo {
  bool found = false;  // false: cuBLASLt has no algorithm for this case, use the fallback
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_algo_mutex;
std::unordered_map<AlgoKey, CachedAlgo, AlgoKeyHash> g_algos;

// cuBLASLt descriptors of one call, destroyed on every exit path.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cudaDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: break;
  }
  TS_THROW(DTypeError, "linear: no cuBLASLt path for dtype " << dt);
}

// y = x·W + b through cuBLASLt; false (nothing queued) when no algorithm fits the case.
bool lt_linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, bool f32_output) {
  const int dev = y.device().index;
  const int64_t n = x.size(0), k = x.size(1), m = w.size(1);
  const bool tf32 = x.dtype() == DType::f32 && cuda::allow_tf32();
  const cudaDataType_t in_type = data_type(x.dtype());
  const cudaDataType_t out_type = f32_output ? CUDA_R_32F : in_type;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const void* b_ptr = b.data_ptr();

  // Column-major: A = Wᵀ [M, K] ld M, B = xᵀ [K, N] ld K, C = D = yᵀ [M, N] ld M.
  LtDescs d;
  TS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  TS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  TS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b_ptr, sizeof(b_ptr)));
  const auto un = static_cast<uint64_t>(n), uk = static_cast<uint64_t>(k), um = static_cast<uint64_t>(m);
  TS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.w, in_type, um, uk, m));
  TS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.x, in_type, uk, un, k));
  TS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.y, out_type, um, un, m));
  cublasLtHandle_t lt = cuda::blas_lt_handle(dev);

  const AlgoKey key{dev, static_cast<int>(x.dtype()), f32_output, tf32, n, k, m, alignment(x.data_ptr()),
                    alignment(w.data_ptr()), alignment(y.data_ptr()), alignment(b_ptr)};
  CachedAlgo cached;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) cached = it->second, known = true;
  }
  if (!known) {
    TS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t ws = cuda::kBlasWorkspaceBytes;
    TS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                         sizeof(ws)));
    if (out_type != CUDA_R_32F) {  // 16-bit y: split-K partial sums stay in f32 (or no split)
      const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      TS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                           &mask, sizeof(mask)));
    }
    const uint32_t aligns[4] = {key.align_w, key.align_x, key.align_y, key.align_y};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      TS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, which[i], &aligns[i], sizeof(uint32_t)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.w, d.x, d.y, d.y, d.pref, 1, &result, &returned);
    TS_CHECK(s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED, DeviceError,
             "linear: cublasLtMatmulAlgoGetHeuristic failed: " << cuda::blas_status_name(s) << ": "
                                                               << cuda::blas_status_string(s));
    cached.found = s == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (cached.found) cached.algo = result.algo;
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algos.emplace(key, cached);
  }
  if (!cached.found) return false;

  const float one = 1.0f, zero = 0.0f;  // beta = 0: C (= y) is not read
  TS_CUBLAS_CHECK(cublasLtMatmul(lt, d.op, &one, w.data_ptr(), d.w, x.data_ptr(), d.x, &zero, y.data_ptr(), d.y,
                                 y.data_ptr(), d.y, &cached.algo, cuda::blas_workspace(dev),
                                 cuda::kBlasWorkspaceBytes, cuda::current_stream(y)));
  return true;
}

}  // namespace

void op::Linear::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1], &b = in[2], &y = out[0];
  if (y.numel() == 0) return;
  if (attrs.f32_bias) {  // the f32 output (b in its epilogue) into a temporary, rounded once into y
    const Tensor sums = empty(y.shape(), TensorOptions(DType::f32).device(y.device()));
    op::Linear::cuda(in, {sums}, Attrs{true, false});
    cuda::unary_op_narrowing(sums, y, kName, [] __device__(float v) { return v; });
    return;
  }
  constexpr int64_t kIntMax = 0x7fffffff;
  const int64_t n = x.size(0), k = x.size(1), m = w.size(1);
  const bool lt_case = x.dtype() != DType::f64 && k > 0 && n <= kIntMax && k <= kIntMax && m <= kIntMax;
  if (lt_case && lt_linear(x, w, b, y, attrs.f32_output)) return;

  // Fallback: y = x·W by matmul's GEMM (zeros when k = 0), then y[r, :] += b.
  op::Matmul::cuda({x, w}, {y}, op::Matmul::Attrs{false, false, attrs.f32_output});
  cuda::dispatch_cuda_float(y.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_bias_rows<T><<<cuda::blocks_for(y.numel()), 256, 0, cuda::current_stream(y)>>>(
        static_cast<T*>(y.data_ptr()), static_cast<const T*>(b.data_ptr()), y.numel(), m);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
