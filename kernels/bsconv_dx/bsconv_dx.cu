// bsconv_dx on the GPU: a scalar kernel, one thread per dx element, summing in the order of
// bsconv_dx.h (the block row's blocks by increasing k, then taps, then the block's columns) in
// f32 for bf16/f16 (f64 for f64). The tensor-core form is not built yet.
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/bsconv_dx/bsconv_dx.h"
#include "kernels/common/conv_index.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

namespace {

template <class T, class TO>
__global__ void bsconv_input_grad(const T* __restrict__ dy, const T* __restrict__ w, TO* __restrict__ dx,
                                  int64_t elems, int64_t C, int64_t K, int bs, ConvIndex ci,
                                  const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ block_col) {
  using A = cuda::acc_t<T>;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < elems;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / C, ch = e % C, r = ch / bs, i = ch % bs;
    const int64_t s = row / ci.in_positions, ip = row % ci.in_positions;
    A acc = 0;
    for (int32_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
      const int64_t c = block_col[k];
      for (int64_t t = 0; t < ci.taps; ++t) {
        const int64_t o = ci.output_of(ip, t);
        if (o < 0) continue;
        const T* g = dy + (s * ci.out_positions + o) * K + c * bs;
        const T* wk = w + ((k * ci.taps + t) * bs + i) * bs;
        for (int j = 0; j < bs; ++j) acc += cuda::to_acc(g[j]) * cuda::to_acc(wk[j]);
      }
    }
    dx[e] = cuda::from_acc<TO>(acc);
  }
}

}  // namespace

void op::BsConvDx::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &dy = in[0], &w = in[1], &dx = out[0];
  if (dx.numel() == 0) return;
  const BlockLayout& l = *attrs.layout;
  const ConvIndex ci = conv_index(attrs.geometry, attrs.in, kName);
  const int dev = dx.device().index;
  const cuda::BlockTables t = cuda::device_tables(attrs.layout, dev);
  if (dy.dtype() != DType::f64) {  // a tensor-core kernel (bsmm_tc.h)
    const int64_t batch = dy.size(0);
    const cuda::GatherProduct p{dy.dtype(), dx.dtype(), static_cast<int>(l.block_size()), /*transpose_w=*/true,
                                /*accumulate=*/false, dy.data_ptr(), w.data_ptr(), /*gate=*/nullptr, dx.data_ptr(),
                                batch * ci.in_positions, l.out_features(), l.in_features(),
                                static_cast<int32_t>(l.block_rows()), l.nnz() * ci.taps, t.row_work, /*list=*/nullptr,
                                t.block_col, t.counter};
    if (cuda::conv_takes(p, ci, dev)) return cuda::run_conv(p, ci, batch, dev, cuda::current_stream(dx));
  }
  const int64_t elems = dx.numel();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((elems + 255) / 256, 1 << 20));
  cuda::dispatch_cuda_float(dy.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto out_tag) {
      using TO = typename decltype(out_tag)::type;
      bsconv_input_grad<T, TO><<<blocks, 256, 0, cuda::current_stream(dx)>>>(
          static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(w.data_ptr()), static_cast<TO*>(dx.data_ptr()),
          elems, l.in_features(), l.out_features(), static_cast<int>(l.block_size()), ci, t.row_ptr, t.block_col);
      TS_CUDA_LAUNCH_CHECK(kName);
    };
    cuda::with_output_type<T>(attrs.f32_output, launch);
  });
}

}  // namespace tessera
