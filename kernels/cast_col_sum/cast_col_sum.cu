// cast_col_sum on the GPU: y = cast(x, dtype) and s[m] = Σ_n x[n, m] for x [N, M] in one read
// of x (a linear layer's backward under autocast: the bf16 copy of dy for the GEMMs and the
// bias gradient).
//
// f32 x, M a multiple of 4, aligned pointers (the case that matters): blocks of 32×8 threads
// own a tile of 128 columns × kRowsPerBlock rows. Thread (tx, ty) takes the column quad tx
// (one 16-byte load per row; a warp reads 512 contiguous bytes) and the rows ty, ty + 8, ...,
// issuing all kRowsPerLane loads before adding them (in row order). It stores y's four
// elements rounded to nearest even, and the 8 lanes' sums are added in lane order through
// shared memory into partial[chunk, m]. The same kernel, without y, then sums the partials
// [chunks, M] (chunks = ⌈N/kRowsPerBlock⌉) until one row is left: that row is s. Every sum has
// a fixed order, so s repeats bit for bit. Other dtypes or shapes: cast and sum's kernels.
#include <cstdint>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/cast/cast.h"
#include "kernels/cast_col_sum/cast_col_sum.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"
#include "kernels/sum/sum.h"

namespace tessera {

namespace {

constexpr int kQuads = 32;                              // column quads per block (threadIdx.x)
constexpr int kLanes = 8;                               // row lanes per block (threadIdx.y)
constexpr int kRowsPerLane = 16;                        // loads in flight per thread
constexpr int kRowsPerBlock = kLanes * kRowsPerLane;    // 128 rows per tile
constexpr unsigned kMaxGridY = 65535;

__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
}

// part[c, 4q .. 4q+3] = Σ of x rows c·kRowsPerBlock .. +kRowsPerBlock (clipped to n) over the
// columns of quad q; with Out != void also y[r, 4q ..] = x[r, 4q ..] rounded to Out.
template <class Out>
__global__ void __launch_bounds__(kQuads * kLanes)
    col_partials(const float* __restrict__ x, Out* __restrict__ y, float* __restrict__ part, int64_t n,
                 int64_t quads, int64_t chunks) {
  __shared__ float4 lanes[kLanes][kQuads];
  const int64_t q = blockIdx.x * int64_t{kQuads} + threadIdx.x;
  for (int64_t c = blockIdx.y; c < chunks; c += gridDim.y) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (q < quads) {
      const int64_t r0 = c * kRowsPerBlock + threadIdx.y;
      float4 v[kRowsPerLane];
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        const int64_t r = r0 + int64_t{j} * kLanes;
        v[j] = r < n ? reinterpret_cast<const float4*>(x)[r * quads + q] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        add4(acc, v[j]);
        if constexpr (!std::is_void_v<Out>) {
          const int64_t r = r0 + int64_t{j} * kLanes;
          if (r < n) {
            cuda::Pack<Out, 4> p;
            p.v[0] = cuda::from_acc<Out>(v[j].x), p.v[1] = cuda::from_acc<Out>(v[j].y);
            p.v[2] = cuda::from_acc<Out>(v[j].z), p.v[3] = cuda::from_acc<Out>(v[j].w);
            reinterpret_cast<cuda::Pack<Out, 4>*>(y)[r * quads + q] = p;
          }
        }
      }
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && q < quads) {
      float4 s = lanes[0][threadIdx.x];
#pragma unroll
      for (int l = 1; l < kLanes; ++l) add4(s, lanes[l][threadIdx.x]);
      reinterpret_cast<float4*>(part)[c * quads + q] = s;
    }
    __syncthreads();  // lanes is rewritten by the next chunk
  }
}

template <class Out>
void launch_partials(const float* x, Out* y, float* part, int64_t n, int64_t m, cudaStream_t stream) {
  const int64_t quads = m / 4, chunks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(static_cast<unsigned>((quads + kQuads - 1) / kQuads),
                  static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
  col_partials<Out><<<grid, dim3(kQuads, kLanes), 0, stream>>>(x, y, part, n, quads, chunks);
  TS_CUDA_LAUNCH_CHECK("cast_col_sum");
}

template <class Out>
void fused(const Tensor& x, const Tensor& y, const Tensor& s) {
  const int64_t n = x.size(0), m = x.size(1);
  const cudaStream_t stream = cuda::current_stream(y);
  const auto opts = TensorOptions(DType::f32).device(y.device());
  int64_t rows = (n + kRowsPerBlock - 1) / kRowsPerBlock;  // partial rows after pass 1
  Tensor part = rows > 1 ? empty({rows, m}, opts) : s;
  launch_partials<Out>(static_cast<const float*>(x.data_ptr()), static_cast<Out*>(y.data_ptr()),
                       static_cast<float*>(part.data_ptr()), n, m, stream);
  while (rows > 1) {  // sum the partials' rows, kRowsPerBlock at a time
    const int64_t next = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    Tensor dst = next > 1 ? empty({next, m}, opts) : s;
    launch_partials<void>(static_cast<const float*>(part.data_ptr()), nullptr, static_cast<float*>(dst.data_ptr()),
                          rows, m, stream);
    part = dst;
    rows = next;
  }
}

}  // namespace

void op::CastColSum::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &y = out[0], &s = out[1];
  const int64_t n = x.size(0), m = x.size(1);
  if (m == 0) return;
  const auto* px = static_cast<const float*>(x.data_ptr());
  const auto* ps = static_cast<const float*>(s.data_ptr());
  const bool fast = x.dtype() == DType::f32 && n > 0 && m % 4 == 0 && cuda::packable<4>(px, ps);
  const void* py = y.data_ptr();
  if (fast && y.dtype() == DType::bf16 && cuda::packable<4>(static_cast<const __nv_bfloat16*>(py)))
    return fused<__nv_bfloat16>(x, y, s);
  if (fast && y.dtype() == DType::f16 && cuda::packable<4>(static_cast<const __half*>(py)))
    return fused<__half>(x, y, s);
  if (fast && y.dtype() == DType::f32 && cuda::packable<4>(static_cast<const float*>(py)))
    return fused<float>(x, y, s);
  // Any other case: the two ops' own kernels, one after the other.
  op::Cast::cuda({x}, {y}, op::Cast::Attrs{attrs.dtype});
  op::Sum::cuda({x}, {s}, op::Sum::Attrs{0, false});
}

}  // namespace tessera
