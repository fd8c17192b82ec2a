// bsmm_dw on the GPU: dw [nnz, bs, bs] = X_rᵀ·dY_c on the layout's stored blocks only. Where
// the block-sparse kernels would be slower than the dense product, the dense route
// (kernels/common/cuda/bsmm_dense.h: P = Xᵀ·dY by cuBLAS in f32, the blocks gathered from it);
// otherwise bf16/f16 (and f32 when TF32 is allowed) run on tensor cores (kernels/common/cuda/bsmm_tc.h:
// runs of blocks share a strip of X or dY; where the kernel asks for them, X and dY are
// transposed here into temporaries first); f32 and f64 otherwise, and operands that are not
// 16-byte aligned, run the exact scalar kernel below.
//
//   dw[k][i][j] = sum over n < N of x[n, r·bs + i] · dy[n, c·bs + j]     (r = block_row[k],
//                                                                          c = block_col[k])
//
// Thread mapping: one CUDA block per (stored block k, tile of kRows rows i of that block),
// threads (j, t) with j < bs, t < kRows = min(bs, 256 / bs); thread (j, t) computes
// dw[k][i0 + t][j], summing over all N rows in order (acc_t). Within a warp the dy reads are
// consecutive and the x reads shared, straight from global memory. N = 0 gives zeros. Gated,
// this kernel writes P in f32 (f64) into a temporary and bsmm_gate.cuh's epilogue kernel scales
// it into dw and sums dgate. The CPU kernel in bsmm_dw.cpp is the reference.
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/bsmm_dw/bsmm_dw.h"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/bsmm_dense.h"
#include "kernels/common/cuda/bsmm_gate.cuh"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/permute/permute.h"

namespace tessera {

namespace {

template <int BS>
constexpr int dw_rows() {
  return BS < 256 / BS ? BS : 256 / BS;  // 8, 16, 8, 4
}

template <class T, class TO, int BS>
__global__ void bsmm_dw_kernel(const T* __restrict__ x, const T* __restrict__ dy, TO* __restrict__ dw, int64_t n,
                               int64_t C, int64_t K, const int32_t* __restrict__ block_row,
                               const int32_t* __restrict__ block_col, bool accumulate) {
  using A = cuda::acc_t<T>;
  constexpr int kRows = dw_rows<BS>(), kTiles = BS / kRows;
  const int j = threadIdx.x, t = threadIdx.y;
  const int64_t k = blockIdx.x / kTiles, i = (blockIdx.x % kTiles) * kRows + t;
  const T* xr = x + block_row[k] * int64_t{BS} + i;   // column r·bs + i of x
  const T* gc = dy + block_col[k] * int64_t{BS} + j;  // column c·bs + j of dy
  A acc = 0;
  for (int64_t row = 0; row < n; ++row) acc += cuda::to_acc(xr[row * C]) * cuda::to_acc(gc[row * K]);
  TO* out = dw + (k * BS + i) * BS + j;
  *out = cuda::from_acc<TO>(accumulate ? cuda::to_acc(*out) + acc : acc);
}

}  // namespace

void op::BsmmDw::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &dy = in[1], &dw = out[0];
  const BlockLayout& l = *attrs.layout;
  const int64_t n = x.size(0), C = l.in_features(), K = l.out_features();
  const int dev = dw.device().index;
  const cudaStream_t stream = cuda::current_stream(dw);
  const cuda::BlockTables tables = cuda::device_tables(attrs.layout, dev);
  if (attrs.accumulate && dw.numel() > 0)  // dw = acc first; the kernels then add their sums to it
    TS_CUDA_CHECK(cudaMemcpyAsync(dw.data_ptr(), in[attrs.gated ? 4 : 2].data_ptr(), dw.nbytes(),
                                  cudaMemcpyDeviceToDevice, stream));
  {
    cuda::BlockGradient g{x.dtype(), dw.dtype(), static_cast<int>(l.block_size()), attrs.accumulate,
                                x.data_ptr(), dy.data_ptr(), dw.data_ptr(), n, C, K, l.nnz(), tables.dw_groups,
                                tables.dw_group, tables.dw_col_runs, tables.dw_col_run, tables.col_blocks,
                                tables.col_rows, tables.block_row, tables.block_col, tables.counter};
    if (attrs.gated) {
      g.w = in[2].data_ptr();
      g.gate = in[3].data_ptr();
      g.dgate = out[1].data_ptr();
    }
    if (cuda::dense_route_takes(cuda::BsmmOp::dw, x.dtype(), l, n, {g.x, g.dy, g.dw, g.w}, dev)) {
      cuda::dense_gradient(g, l, tables, dev, stream);
      return;
    }
    Tensor xt, dyt;  // Xᵀ [C, n], dYᵀ [K, n] when the kernel takes them (temporaries of the pool)
    if (cuda::gradient_wants_transposed(g, dev)) {
      xt = empty({C, n}, TensorOptions(x.dtype()).device(x.device()));
      dyt = empty({K, n}, TensorOptions(dy.dtype()).device(dy.device()));
      cuda::permute_copy(x, xt, {1, 0});
      cuda::permute_copy(dy, dyt, {1, 0});
      g.x = xt.data_ptr();
      g.dy = dyt.data_ptr();
      g.transposed = true;
    }
    if (!g.transposed && cuda::run_gate_gradient(g, attrs.layout, dev, stream)) return;
    if (cuda::run_gradient(g, dev, stream)) return;
  }
  cuda::dispatch_cuda_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    cuda::dispatch_block_size(l.block_size(), kName, [&](auto bs) {
      constexpr int BS = decltype(bs)::value, kRows = dw_rows<BS>();
      const int64_t blocks = l.nnz() * (BS / kRows);
      TS_CHECK(blocks <= INT32_MAX, ShapeError, kName << ": " << l.str() << " is too large for one launch");
      auto launch = [&](auto out_tag) {
        using TO = typename decltype(out_tag)::type;
        if (!attrs.gated) {
          bsmm_dw_kernel<T, TO, BS><<<static_cast<unsigned>(blocks), dim3(BS, kRows), 0, stream>>>(
              static_cast<const T*>(x.data_ptr()), static_cast<const T*>(dy.data_ptr()),
              static_cast<TO*>(dw.data_ptr()), n, C, K, tables.block_row, tables.block_col, attrs.accumulate);
          TS_CUDA_LAUNCH_CHECK(kName);
          return;
        }
        // gated: P in the accumulator's precision into a temporary, then the gate epilogue
        const Tensor p = empty({l.nnz(), BS, BS}, TensorOptions(std::is_same_v<A, double> ? DType::f64 : DType::f32)
                                                     .device(dw.device()));
        bsmm_dw_kernel<T, A, BS><<<static_cast<unsigned>(blocks), dim3(BS, kRows), 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(dy.data_ptr()), static_cast<A*>(p.data_ptr()),
            n, C, K, tables.block_row, tables.block_col, false);
        TS_CUDA_LAUNCH_CHECK(kName);
        cuda::launch_bsmm_gate_epilogue<A, T, TO>(static_cast<const A*>(p.data_ptr()), 1, l.nnz(), BS,
                                                  in[2].data_ptr(), in[3].data_ptr(), dw.data_ptr(),
                                                  out[1].data_ptr(), attrs.accumulate, stream);
        TS_CUDA_LAUNCH_CHECK("bsmm_dw (gate epilogue)");
      };
      cuda::with_output_type<T>(attrs.f32_output, launch);
    });
  });
}

}  // namespace tessera
