// bsconv_dw on the GPU: one thread block of 256 threads per (stored block k, tap t). Rows (n, o)
// come in tiles of 32: the tile's gathered input rows x[n, in(o, t), r-block] and dy rows
// [32, bs] are staged in shared memory (as the accumulation type), then each thread adds the tile
// to the bs²/256 elements it owns, (i, j) = (e / bs, e % bs) for e = thread, thread + 256, …:
// every element is one sum over (n, o) in order, in f32 for bf16/f16 (f64 for f64). The
// tensor-core form is not built yet.
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/bsconv_dw/bsconv_dw.h"
#include "kernels/common/conv_index.h"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

namespace {

constexpr int kThreads = 256, kTileRows = 32;

template <class T, class TO, int BS>
__global__ void __launch_bounds__(kThreads) bsconv_weight_grad(const T* __restrict__ x, const T* __restrict__ dy,
                                                               TO* __restrict__ dw, int64_t rows_total, int64_t C,
                                                               int64_t K, ConvIndex ci,
                                                               const int32_t* __restrict__ block_row,
                                                               const int32_t* __restrict__ block_col) {
  using A = cuda::acc_t<T>;
  constexpr int kPer = (BS * BS + kThreads - 1) / kThreads;  // elements per thread
  __shared__ A xs[kTileRows][BS];
  __shared__ A gs[kTileRows][BS];
  const int64_t task = blockIdx.x, k = task / ci.taps, t = task % ci.taps;
  const int64_t r = block_row[k], c = block_col[k];
  A acc[kPer];
#pragma unroll
  for (int m = 0; m < kPer; ++m) acc[m] = 0;
  for (int64_t q0 = 0; q0 < rows_total; q0 += kTileRows) {
    for (int e = threadIdx.x; e < kTileRows * BS; e += kThreads) {
      const int q = e / BS, col = e % BS;
      const int64_t row = q0 + q;
      A xv = 0, gv = 0;
      if (row < rows_total) {
        const int64_t s = row / ci.out_positions, o = row % ci.out_positions, i = ci.input_of(o, t);
        if (i >= 0) xv = cuda::to_acc(x[(s * ci.in_positions + i) * C + r * BS + col]);
        gv = cuda::to_acc(dy[row * K + c * BS + col]);
      }
      xs[q][col] = xv;
      gs[q][col] = gv;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      const int e = threadIdx.x + m * kThreads;
      if (e < BS * BS) {
        const int i = e / BS, j = e % BS;
        A sum = acc[m];
        for (int q = 0; q < kTileRows; ++q) sum += xs[q][i] * gs[q][j];
        acc[m] = sum;
      }
    }
    __syncthreads();  // before the next tile overwrites xs and gs
  }
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int e = threadIdx.x + m * kThreads;
    if (e < BS * BS) dw[task * BS * BS + e] = cuda::from_acc<TO>(acc[m]);
  }
}

}  // namespace

void op::BsConvDw::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &dy = in[1], &dw = out[0];
  if (dw.numel() == 0) return;
  const BlockLayout& l = *attrs.layout;
  const ConvIndex ci = conv_index(attrs.geometry, attrs.geometry.spatial_of(x.shape(), kName, "x"), kName);
  const int dev = dw.device().index;
  const cuda::BlockTables t = cuda::device_tables(attrs.layout, dev);
  if (x.dtype() != DType::f64) {  // a tensor-core kernel (bsmm_tc.h)
    const int64_t batch = x.size(0);
    cuda::BlockGradient g{x.dtype(), dw.dtype(), static_cast<int>(l.block_size()), /*accumulate=*/false,
                          x.data_ptr(), dy.data_ptr(), dw.data_ptr(), batch * ci.out_positions,
                          l.in_features(), l.out_features(), l.nnz() * ci.taps, t.dw_groups, t.dw_group,
                          /*col_runs=*/0, /*col_run=*/nullptr, t.col_blocks, t.col_rows, t.block_row, t.block_col,
                          t.counter};
    if (cuda::conv_gradient_takes(g, ci, dev)) {
      const cuda::ConvRuns runs = cuda::conv_dw_runs(attrs.layout, static_cast<int32_t>(ci.taps),
                                                     cuda::conv_gradient_run_size(g, ci, batch, dev), dev);
      g.col_runs = runs.runs;
      g.col_run = runs.run;
      return cuda::run_conv_gradient(g, ci, batch, dev, cuda::current_stream(dw));
    }
  }
  const int64_t tasks = l.nnz() * ci.taps, rows_total = x.size(0) * ci.out_positions;
  TS_CHECK(tasks <= INT32_MAX, ShapeError, kName << ": " << tasks << " (block, tap) pairs are too many for one launch");
  cuda::dispatch_cuda_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::dispatch_block_size(l.block_size(), kName, [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      auto launch = [&](auto out_tag) {
        using TO = typename decltype(out_tag)::type;
        bsconv_weight_grad<T, TO, BS><<<static_cast<unsigned>(tasks), kThreads, 0, cuda::current_stream(dw)>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(dy.data_ptr()), static_cast<TO*>(dw.data_ptr()),
            rows_total, l.in_features(), l.out_features(), ci, t.block_row, t.block_col);
        TS_CUDA_LAUNCH_CHECK(kName);
      };
      cuda::with_output_type<T>(attrs.f32_output, launch);
    });
  });
}

}  // namespace tessera
