// permute (and transpose, which calls this) on the GPU: out[i_0, ..., i_{n-1}] = x[j] with
// j[perm[d]] = i_d, any dtype (values move as words of the element size).
//
// As on the CPU, output dims are first merged: size-1 dims dropped, and an output dim folded
// into the previous one when the two are adjacent and in order in x. What is left is m dims
// (sizes `size`, source strides `stride`, in elements). Then:
//   - nothing moved (m = 0, or one dim of stride 1): one device-to-device copy;
//   - the last two merged dims swap (stride[m-2] == 1): a batched tiled transpose: out viewed
//     as [B, A, C] with out[b, a, c] = x[src(b) + a + c·sc]; a block of 32x8 threads moves a
//     32x32 tile through shared memory so that both the reads (along a) and the writes (along
//     c) are coalesced; blocks loop over the B·ceil(A/32)·ceil(C/32) tiles;
//   - otherwise a gather: one thread per output element (coalesced writes; coalesced reads too
//     when the last dim is kept, e.g. [B,T,H,D] -> [B,H,T,D], where rows move as wide words).
#include <algorithm>

#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/permute/permute.h"

namespace tessera {
namespace cuda {

namespace {

constexpr int kMaxMerged = 8;
constexpr int kTile = 32, kTileRows = 8;

// Merged output dims: sizes and the source stride (elements) of each.
struct Merged {
  int m = 0;
  int64_t size[kMaxMerged] = {};
  int64_t stride[kMaxMerged] = {};

  // Source offset of index r over the merged dims [0, dims) (r row-major over their sizes).
  __device__ int64_t offset(int64_t r, int dims) const {
    int64_t off = 0;
    for (int d = dims - 1; d >= 0; --d) {
      off += (r % size[d]) * stride[d];
      r /= size[d];
    }
    return off;
  }
};

template <class W>
__global__ void gather_kernel(const W* x, W* y, int64_t n, Merged g) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[g.offset(i, g.m)];
}

// Tile (a0, c0) of batch b: tile[k][t] holds x's element (a0 + t, c0 + k), read along a and
// written along c; the padding column keeps the column reads free of bank conflicts.
template <class W>
__global__ void transpose_tiles_kernel(const W* x, W* y, Merged g, int64_t na, int64_t nc, int64_t sc, int64_t tiles_a,
                                       int64_t tiles_c, int64_t tasks) {
  __shared__ W tile[kTile][kTile + 1];
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int64_t b = task / (tiles_a * tiles_c);
    const int64_t a0 = (task / tiles_c) % tiles_a * kTile, c0 = task % tiles_c * kTile;
    const W* xb = x + g.offset(b, g.m - 2);
    W* yb = y + b * na * nc;
    for (int k = threadIdx.y; k < kTile; k += kTileRows) {
      const int64_t a = a0 + threadIdx.x, c = c0 + k;
      if (a < na && c < nc) tile[k][threadIdx.x] = xb[a + c * sc];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < kTile; k += kTileRows) {
      const int64_t a = a0 + k, c = c0 + threadIdx.x;
      if (a < na && c < nc) yb[a * nc + c] = tile[threadIdx.x][k];
    }
    __syncthreads();  // the tile is reused by the block's next task
  }
}

}  // namespace

void permute_copy(const Tensor& in, const Tensor& out, const std::vector<int>& perm) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const int64_t es = static_cast<int64_t>(dtype_size(in.dtype()));
  const Shape& s = in.shape();
  const std::vector<int64_t> in_strides = s.strides();
  Merged g;
  for (int p : perm) {
    const int64_t sz = s[p], st = in_strides[p];
    if (sz == 1) continue;
    if (g.m > 0 && g.stride[g.m - 1] == st * sz) {
      g.size[g.m - 1] *= sz;
      g.stride[g.m - 1] = st;
    } else {
      g.size[g.m] = sz;
      g.stride[g.m] = st;
      ++g.m;
    }
  }
  const cudaStream_t stream = current_stream(out);
  if (g.m == 0 || (g.m == 1 && g.stride[0] == 1)) {  // the order of elements does not change
    TS_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), in.data_ptr(), in.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const int m = g.m;
  if (m >= 2 && g.stride[m - 2] == 1) {
    const int64_t na = g.size[m - 2], nc = g.size[m - 1], sc = g.stride[m - 1];
    const int64_t tiles_a = (na + kTile - 1) / kTile, tiles_c = (nc + kTile - 1) / kTile;
    const int64_t tasks = n / (na * nc) * tiles_a * tiles_c;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tasks, int64_t{1} << 20));
    dispatch_word(static_cast<size_t>(es), "permute", [&](auto tag) {
      using W = typename decltype(tag)::type;
      transpose_tiles_kernel<W><<<blocks, dim3(kTile, kTileRows), 0, stream>>>(static_cast<const W*>(in.data_ptr()),
                                                                               static_cast<W*>(out.data_ptr()), g, na,
                                                                               nc, sc, tiles_a, tiles_c, tasks);
      TS_CUDA_LAUNCH_CHECK("permute");
    });
    return;
  }
  // Gather. When the last dim is kept, move r elements at once as one word of r·es bytes if the
  // row length, every other source stride and both addresses allow it.
  int64_t word = es;
  if (g.stride[m - 1] == 1) {
    uint64_t all = static_cast<uint64_t>(g.size[m - 1] * es) | address(in.data_ptr()) | address(out.data_ptr());
    for (int d = 0; d < m - 1; ++d) all |= static_cast<uint64_t>(g.stride[d] * es);
    word = std::max(es, static_cast<int64_t>(widest_word({all})));
    const int64_t r = word / es;  // elements per word (a power of two: es and word are)
    g.size[m - 1] /= r;
    for (int d = 0; d < m - 1; ++d) g.stride[d] /= r;
  }
  const int64_t words = n * es / word;
  dispatch_word(static_cast<size_t>(word), "permute", [&](auto tag) {
    using W = typename decltype(tag)::type;
    gather_kernel<W><<<blocks_for(words), 256, 0, stream>>>(static_cast<const W*>(in.data_ptr()),
                                                            static_cast<W*>(out.data_ptr()), words, g);
    TS_CUDA_LAUNCH_CHECK("permute");
  });
}

}  // namespace cuda

void op::Permute::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int nd = in[0].dim();
  std::vector<int> perm(nd);
  for (int d = 0; d < nd; ++d) perm[d] = (attrs.perm[d] + nd) % nd;
  cuda::permute_copy(in[0], out[0], perm);
}

}  // namespace tessera
