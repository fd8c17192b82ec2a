// The dense route of bsmm, bsmm_dx and bsmm_dw (see bsmm_dense.h): the rule, the fill of a dense
// chunk of W from its stored blocks, the GEMMs, and the weight gradient's gather.
#include "kernels/common/cuda/bsmm_dense.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cuda/check.cuh"
#include "core/tensor.h"
#include "kernels/common/cuda/blas.h"
#include "kernels/common/cuda/bsmm_gate.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace {

std::atomic<uint64_t> g_calls{0};

enum class Override { rule, never, always };

Override route_override() {
  const char* e = std::getenv("TESSERA_BSMM_DENSE");
  if (!e || *e == '\0') return Override::rule;
  if (std::strcmp(e, "0") == 0) return Override::never;
  if (std::strcmp(e, "1") == 0) return Override::always;
  TS_THROW(ValueError, "TESSERA_BSMM_DENSE='" << e << "' is not 0 (never the dense route) or 1 (always)");
}

bool path_is(const char* want) {
  const char* e = std::getenv("TESSERA_BSMM_PATH");
  return e && std::strcmp(e, want) == 0;
}

bool is_sm90(int device) {
  int major = 0, minor = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

int bs_index(int bs) { return bs == 8 ? 0 : bs == 16 ? 1 : bs == 32 ? 2 : 3; }

/// The four 16-byte lanes of a uint4 of T, each value times s rounded to T (as the block-sparse
/// kernels scale a gated block).
template <class T>
__device__ __forceinline__ uint4 scale16(uint4 v, float s) {
  if constexpr (std::is_same_v<T, float>) {
    float4 f = *reinterpret_cast<float4*>(&v);
    f.x *= s, f.y *= s, f.z *= s, f.w *= s;
    return *reinterpret_cast<uint4*>(&f);
  } else {
    return make_uint4(sm80::scale_pair<T>(v.x, s), sm80::scale_pair<T>(v.y, s), sm80::scale_pair<T>(v.z, s),
                      sm80::scale_pair<T>(v.w, s));
  }
}

/// dense[(block_row[k] − row0)·bs + i][(block_col[k] − col0)·bs + j] = gate[k]·w[k][i][j] for the
/// `count` blocks k = list[first + b] (first + b without a list), 16 bytes per thread and step.
/// The rest of dense is zeroed before.
template <class T>
__global__ void fill_dense_kernel(const T* __restrict__ w, const T* __restrict__ gate, const int32_t* __restrict__ list,
                                  int64_t first, int64_t count, const int32_t* __restrict__ block_row,
                                  const int32_t* __restrict__ block_col, int bs, int32_t row0, int32_t col0,
                                  T* __restrict__ dense, int64_t ld) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const int per_block = bs * bs / kVec;
  const int64_t total = count * per_block;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / per_block;
    const int off = static_cast<int>(e % per_block) * kVec;
    const int64_t k = list ? list[first + b] : first + b;
    uint4 v = *reinterpret_cast<const uint4*>(w + k * bs * bs + off);
    if (gate) v = scale16<T>(v, to_acc(gate[k]));
    const int64_t row = static_cast<int64_t>(block_row[k] - row0) * bs + off / bs;
    const int64_t col = static_cast<int64_t>(block_col[k] - col0) * bs + off % bs;
    *reinterpret_cast<uint4*>(dense + row * ld + col) = v;
  }
}

/// Zeroes dense [rows, ld] and fills the `count` blocks of `list` from first (see fill_dense_kernel).
void fill_dense(DType dt, const void* w, const void* gate, const int32_t* list, int64_t first, int64_t count,
                const BlockTables& t, int bs, int32_t row0, int32_t col0, void* dense, int64_t rows, int64_t ld,
                cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(rows * ld) * dtype_size(dt);
  TS_CUDA_CHECK(cudaMemsetAsync(dense, 0, bytes, stream));
  if (count == 0) return;
  dispatch_cuda_float(dt, "bsmm (dense route)", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int kThreads = 256;
      const int64_t vecs = count * bs * bs / (16 / static_cast<int>(sizeof(T)));
      constexpr int64_t kMaxBlocks = 2048;  // a grid-stride loop past that
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>((vecs + kThreads - 1) / kThreads, kMaxBlocks));
      fill_dense_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(w), static_cast<const T*>(gate), list,
                                                          first, count, t.block_row, t.block_col, bs, row0, col0,
                                                          static_cast<T*>(dense), ld);
      TS_CUDA_LAUNCH_CHECK("bsmm (dense route: fill)");
    }
  });
}

/// Whole units (block columns or rows of `unit_bytes` each) per chunk: as many as fit in
/// kDenseChunkBytes, at least one, at most `units`.
int64_t chunk_units(int64_t units, int64_t unit_bytes) {
  return std::max<int64_t>(1, std::min<int64_t>(units, kDenseChunkBytes / std::max<int64_t>(1, unit_bytes)));
}

}  // namespace

double sparse_useful_frac(BsmmOp op, DType dt, int bs, int device) {
  // Measured on the H200 (bench/bsmm_gpu, N 8192 x 4096 x 4096, random layouts at densities
  // 0.05-0.5, docs/bsmm_kernels.md): about the best useful-frac each kernel family reaches,
  // [fwd/dx, dW][bs 8, 16, 32, 64].
  const int b = bs_index(bs);
  const bool dw = op == BsmmOp::dw;
  if (dt == DType::f32 && !allow_tf32()) {  // the exact scalar kernels against cuBLAS's f32 GEMM
    static constexpr double kScalar[2][4] = {{0.10, 0.144, 0.159, 0.142}, {0.062, 0.06, 0.09, 0.09}};
    return kScalar[dw][b];
  }
  if (dt == DType::f32) {  // the sm_80 kernels on tf32 against cuBLAS's TF32 GEMM
    static constexpr double kTf32[2][4] = {{0.036, 0.077, 0.142, 0.19}, {0.034, 0.066, 0.118, 0.204}};
    return kTf32[dw][b];
  }
  const bool sm90 = have_sm90_kernels() && !path_is("sm80") && is_sm90(device) && (dw || bs >= 16);
  if (sm90) {
    // sm_90a fwd/dx at bs 16, 32, 64 (bs 8 runs the sm_80 kernel: its entry is unused), dW at
    // every block size
    static constexpr double kSm90[2][4] = {{0.0, 0.084, 0.28, 0.85}, {0.033, 0.077, 0.25, 0.49}};
    return kSm90[dw][b];
  }
  // the sm_80 kernels (measured on the H200 with TESSERA_BSMM_PATH=sm80; an A100 was not at hand)
  static constexpr double kSm80[2][4] = {{0.027, 0.068, 0.15, 0.26}, {0.023, 0.068, 0.125, 0.16}};
  return kSm80[dw][b];
}

bool dense_route_takes(BsmmOp op, DType dt, const BlockLayout& l, int64_t n,
                       std::initializer_list<const void*> operands, int device) {
  const Override o = route_override();  // a bad value is an error wherever the variable is read
  if (o == Override::never || path_is("simt")) return false;
  for (const void* q : operands)
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
  if (!(dt == DType::bf16 || dt == DType::f16 || dt == DType::f32)) return false;
  if (o == Override::always) return true;
  if (n < kDenseRouteMinRows) return false;
  // density > u·(1 + r/N): r = (extra bytes per element of Wd or P) · (dense GEMM rate) / (2 ·
  // memory rate), with the GEMM rates of the H200 (bf16 800, TF32 370, f32 50 TFLOP/s) and 3 TB/s
  // for the fill and the f32 product's traffic. Extra bytes: fwd/dx zeroing, filling and reading
  // Wd (3 per element of its dtype), dw writing and reading P (8).
  const double rate = dt != DType::f32 ? 800e12 : allow_tf32() ? 370e12 : 50e12;
  const double extra = op == BsmmOp::dw ? 8.0 : 3.0 * static_cast<double>(dtype_size(dt));
  const double r = extra * rate / (2.0 * 3e12);
  const double u = sparse_useful_frac(op, dt, static_cast<int>(l.block_size()), device);
  return l.density() > u * (1.0 + r / static_cast<double>(n));
}

void dense_product(const GatherProduct& p, const BlockLayout& l, const BlockTables& t, int device,
                   cudaStream_t stream) {
  TS_CHECK(p.bias == nullptr, DeviceError, "bsmm (dense route): the GEMMs take no bias (the caller adds it)");
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const int bs = p.bs;
  const size_t e = dtype_size(p.in_dtype), eo = dtype_size(p.out_dtype);
  const char* name = p.transpose_w ? "bsmm_dx (dense route)" : "bsmm (dense route)";
  const double beta = p.accumulate ? 1.0 : 0.0;
  const TensorOptions opts = TensorOptions(p.in_dtype).device(Device::cuda(device));
  // Chunks of whole units of Wd [C, K]: fwd block columns (their blocks listed by col_blocks),
  // Y[:, chunk] = X · Wd[:, chunk] with the chunk [C, span]; dx block rows (blocks k in row
  // order), dX[:, chunk] = dY · Wd[chunk, :]ᵀ with the chunk [span, K]. `inner` is the product's
  // inner size, C or K.
  const bool dx = p.transpose_w;
  const int64_t units = dx ? l.block_rows() : l.block_cols(), inner = p.a_cols;
  const std::vector<int32_t>& ptr = dx ? l.row_ptr() : l.col_ptr();
  const int64_t per = chunk_units(units, inner * bs * static_cast<int64_t>(e));
  const Tensor wd = empty({inner * per * bs}, opts);
  for (int64_t u0 = 0; u0 < units; u0 += per) {
    const int64_t u1 = std::min(units, u0 + per), span = (u1 - u0) * bs;
    const int64_t first = ptr[u0], count = ptr[u1] - first;
    const auto at = static_cast<int32_t>(u0);
    fill_dense(p.in_dtype, p.w, p.gate, dx ? nullptr : t.col_blocks, first, count, t, bs, dx ? at : 0, dx ? 0 : at,
               wd.data_ptr(), dx ? span : inner, dx ? inner : span, stream);
    gemm_row_major(device, name, p.in_dtype, p.out_dtype, false, dx, p.n, span, inner, p.a, inner, wd.data_ptr(),
                   dx ? inner : span, beta, static_cast<char*>(p.out) + u0 * bs * eo, p.out_cols);
  }
}

void dense_gradient(const BlockGradient& g, const BlockLayout& l, const BlockTables& t, int device,
                    cudaStream_t stream) {
  TS_CHECK(!g.transposed, DeviceError, "bsmm_dw: transposed operands reached the dense route, which takes none");
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const int bs = g.bs;
  const int64_t Q = l.block_cols();
  // chunks of block columns q0 .. q1: P [C, width] = Xᵀ · dY[:, q0·bs ..] in f32, then the blocks
  // of those columns gathered from it (gate epilogue)
  const int64_t per = chunk_units(Q, g.C * bs * 4);
  const Tensor p = empty({g.C * per * bs}, TensorOptions(DType::f32).device(Device::cuda(device)));
  const size_t e = dtype_size(g.in_dtype);
  for (int64_t q0 = 0; q0 < Q; q0 += per) {
    const int64_t q1 = std::min(Q, q0 + per), width = (q1 - q0) * bs;
    const int64_t first = l.col_ptr()[q0], count = l.col_ptr()[q1] - first;
    if (count == 0) continue;
    if (g.n == 0) {
      TS_CUDA_CHECK(cudaMemsetAsync(p.data_ptr(), 0, static_cast<size_t>(g.C * width) * 4, stream));
    } else {
      gemm_row_major(device, "bsmm_dw (dense route)", g.in_dtype, DType::f32, true, false, g.C, width, g.n, g.x,
                     g.C, static_cast<const char*>(g.dy) + q0 * bs * e, g.K, 0.0, p.data_ptr(), width);
    }
    auto epilogue = [&](auto tin, auto tout) {
      using T = typename decltype(tin)::type;
      using TO = typename decltype(tout)::type;
      launch_gate_epilogue<float, T, TO>(
          bs,
          [&](auto bs_constant) {
            return DenseSums<decltype(bs_constant)::value>{static_cast<const float*>(p.data_ptr()), width,
                                                           static_cast<int32_t>(q0), t.block_row, t.block_col};
          },
          t.col_blocks, first, count, g.w, g.gate, g.dw, g.dgate, g.accumulate, stream);
      TS_CUDA_LAUNCH_CHECK("bsmm_dw (dense route: gather)");
    };
    dispatch_cuda_float(g.in_dtype, "bsmm_dw (dense route)", [&](auto tin) {
      using T = typename decltype(tin)::type;
      if constexpr (!std::is_same_v<T, double>) {
        if (g.out_dtype == DType::f32) return epilogue(tin, TypeTag<float>{});
        return epilogue(tin, tin);
      }
    });
  }
}

uint64_t dense_route_calls() { return g_calls.load(std::memory_order_relaxed); }

}  // namespace cuda
}  // namespace tessera
