// bsmm_dx on the GPU: dx [N, C] = dy [N, K] · Wᵀ over the layout's stored blocks (w [nnz, bs,
// bs]), block k scaled by gate[k] when gated. Where the block-sparse kernels would be slower
// than the dense product, the dense route (kernels/common/cuda/bsmm_dense.h: a cuBLAS GEMM on the
// blocks laid out densely); otherwise bf16/f16 (and f32 when TF32 is allowed) run on tensor cores
// (kernels/common/cuda/bsmm_tc.h: the forward's kernels with W transposed); f32 and f64
// otherwise, and operands that are not 16-byte aligned, run the exact scalar kernel below.
//
//   dx[n, r·bs + i] = sum over the stored blocks k of block row r (k = row_ptr[r] ..
//                     row_ptr[r+1], increasing block column c = block_col[k], as on the CPU) of
//                     gate[k] · sum_j dy[n, c·bs + j] · W[k][i][j]
//
// Thread mapping: one CUDA block per (tile of kRows rows of dy, input block row r), threads
// (i, t) with i < bs, t < kRows = 256 / bs; thread (i, t) computes dx[n0 + t, r·bs + i]. For each
// block k of the row, W[k] and the tile's dy block [kRows, bs] are staged in shared memory (as
// acc_t; W padded by one column so that threads reading W[k][i][·] for consecutive i hit
// different banks). A row without stored blocks gives zeros. The CPU kernel in bsmm_dx.cpp is
// the reference.
#include "core/cuda/check.cuh"
#include "kernels/bsmm_dx/bsmm_dx.h"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/bsmm_dense.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

namespace {

template <class T, int BS>
__global__ void bsmm_dx_kernel(const T* __restrict__ dy, const T* __restrict__ w, const T* __restrict__ gate,
                               T* __restrict__ dx, int64_t n, int64_t C, int64_t K, int64_t R,
                               const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ block_col) {
  using A = cuda::acc_t<T>;
  constexpr int kRows = 256 / BS;
  __shared__ A ws[BS][BS + 1];  // W[k], row i = input feature i of the block
  __shared__ A gs[kRows][BS];   // dy[n0 .. n0 + kRows, c·bs .. (c+1)·bs]
  const int i = threadIdx.x, t = threadIdx.y;
  const int64_t r = blockIdx.x % R, row = (blockIdx.x / R) * kRows + t;
  A acc = 0;
  for (int32_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
    const int64_t c = block_col[k];
    for (int e = t * BS + i; e < BS * BS; e += BS * kRows)
      ws[e / BS][e % BS] = cuda::to_acc(w[static_cast<int64_t>(k) * BS * BS + e]);
    gs[t][i] = row < n ? cuda::to_acc(dy[row * K + c * BS + i]) : A(0);
    __syncthreads();
    A dot = 0;
    for (int j = 0; j < BS; ++j) dot += gs[t][j] * ws[i][j];
    acc += gate ? cuda::to_acc(gate[k]) * dot : dot;
    __syncthreads();  // before the next block overwrites ws and gs
  }
  if (row < n) dx[row * C + r * BS + i] = cuda::from_acc<T>(acc);
}

}  // namespace

void op::BsmmDx::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &dy = in[0], &w = in[1], &dx = out[0];
  const BlockLayout& l = *attrs.layout;
  const int64_t n = dy.size(0), C = l.in_features(), K = l.out_features(), R = l.block_rows();
  if (dx.numel() == 0) return;
  const int dev = dx.device().index;
  const cuda::BlockTables tables = cuda::device_tables(attrs.layout, dev);
  {
    const cuda::GatherProduct p{dx.dtype(), dx.dtype(), static_cast<int>(l.block_size()), /*transpose_w=*/true,
                                /*accumulate=*/false, dy.data_ptr(), w.data_ptr(),
                                attrs.gated ? in[2].data_ptr() : nullptr, dx.data_ptr(), n, K, C,
                                static_cast<int32_t>(R), l.nnz(), tables.row_work, /*list=*/nullptr, tables.block_col,
                                tables.counter,
                                tables.row_pairs.work,
                                tables.row_pairs.entries,
                                tables.row_pairs.pairs,
                                tables.row_pairs.steps};
    if (cuda::dense_route_takes(cuda::BsmmOp::dx, dy.dtype(), l, n, {p.a, p.w, p.out}, dev)) {
      cuda::dense_product(p, l, tables, dev, cuda::current_stream(dx));
      return;
    }
    if (cuda::run_gather(p, dev, cuda::current_stream(dx))) return;
  }
  cuda::dispatch_cuda_float(dx.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::dispatch_block_size(l.block_size(), kName, [&](auto bs) {
      constexpr int BS = decltype(bs)::value, kRows = 256 / BS;
      const int64_t blocks = (n + kRows - 1) / kRows * R;
      TS_CHECK(blocks <= INT32_MAX, ShapeError, kName << ": dy " << dy.shape() << " is too large for one launch");
      bsmm_dx_kernel<T, BS><<<static_cast<unsigned>(blocks), dim3(BS, kRows), 0, cuda::current_stream(dx)>>>(
          static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(w.data_ptr()),
          attrs.gated ? static_cast<const T*>(in[2].data_ptr()) : nullptr, static_cast<T*>(dx.data_ptr()), n, C,
          K, R, tables.row_ptr, tables.block_col);
      TS_CUDA_LAUNCH_CHECK(kName);
    });
  });
}

}  // namespace tessera
