// bsconv on the GPU. bf16/f16 (and f32 as tf32 where allowed) may take a tensor-core kernel in
// convolution mode (bsmm_tc.h's run_conv, an implicit GEMM: per output tile and block column, the
// stored blocks' taps in order, each a product of the input rows the tap reads). Otherwise a
// scalar kernel, one thread per output element, summing in the order of bsconv.h (the column's
// blocks by increasing block row, then taps, then the block's rows) in f32 for bf16/f16 (f64 for
// f64).
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/bsconv/bsconv.h"
#include "kernels/common/conv_index.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

namespace {

template <class T, class TO>
__global__ void bsconv_forward(const T* __restrict__ x, const T* __restrict__ w, TO* __restrict__ y, int64_t elems,
                               int64_t C, int64_t K, int bs, ConvIndex ci, const int32_t* __restrict__ col_ptr,
                               const int32_t* __restrict__ col_blocks, const int32_t* __restrict__ block_row) {
  using A = cuda::acc_t<T>;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < elems;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / K, col = e % K, c = col / bs, j = col % bs;
    const int64_t s = row / ci.out_positions, o = row % ci.out_positions;
    A acc = 0;
    for (int32_t p = col_ptr[c]; p < col_ptr[c + 1]; ++p) {
      const int64_t k = col_blocks[p], r = block_row[k];
      for (int64_t t = 0; t < ci.taps; ++t) {
        const int64_t i = ci.input_of(o, t);
        if (i < 0) continue;
        const T* xr = x + (s * ci.in_positions + i) * C + r * bs;
        const T* wk = w + (k * ci.taps + t) * bs * bs + j;
        for (int ii = 0; ii < bs; ++ii) acc += cuda::to_acc(xr[ii]) * cuda::to_acc(wk[ii * bs]);
      }
    }
    y[e] = cuda::from_acc<TO>(acc);
  }
}

}  // namespace

void op::BsConv::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1], &y = out[0];
  if (y.numel() == 0) return;
  const BlockLayout& l = *attrs.layout;
  const ConvIndex ci = conv_index(attrs.geometry, attrs.geometry.spatial_of(x.shape(), kName, "x"), kName);
  const int dev = y.device().index;
  const cuda::BlockTables t = cuda::device_tables(attrs.layout, dev);
  if (x.dtype() != DType::f64) {  // a tensor-core kernel (bsmm_tc.h)
    const int64_t batch = x.size(0);
    const cuda::GatherProduct p{x.dtype(), y.dtype(), static_cast<int>(l.block_size()), /*transpose_w=*/false,
                                /*accumulate=*/false, x.data_ptr(), w.data_ptr(), /*gate=*/nullptr, y.data_ptr(),
                                batch * ci.out_positions, l.in_features(), l.out_features(),
                                static_cast<int32_t>(l.block_cols()), l.nnz() * ci.taps, t.col_work, t.col_blocks,
                                t.col_rows, t.counter};
    if (cuda::conv_takes(p, ci, dev)) return cuda::run_conv(p, ci, batch, dev, cuda::current_stream(y));
  }
  const int64_t elems = y.numel();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((elems + 255) / 256, 1 << 20));
  cuda::dispatch_cuda_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto out_tag) {
      using TO = typename decltype(out_tag)::type;
      bsconv_forward<T, TO><<<blocks, 256, 0, cuda::current_stream(y)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()), static_cast<TO*>(y.data_ptr()),
          elems, l.in_features(), l.out_features(), static_cast<int>(l.block_size()), ci, t.col_ptr, t.col_blocks,
          t.block_row);
      TS_CUDA_LAUNCH_CHECK(kName);
    };
    cuda::with_output_type<T>(attrs.f32_output, launch);
  });
}

}  // namespace tessera
