// The bandwidth probe of bsmm_gpu (CUDA builds only): a streaming read kernel that measures how
// fast all SMs can read a buffer, from HBM (a buffer much larger than the L2 cache, read once)
// or from the L2 cache (a buffer that fits in it, read many times in one launch).
//
// Every thread reads 16 bytes at a time with ld.global.cg (cached in L2 only, not in L1), four
// independent loads in flight per loop trip, grid-stride over the buffer; the words are summed
// and each CUDA block writes its sum to out[blockIdx.x], so no load can be optimized away.
// The grid is blocks_per_sm() blocks of kThreads threads on every SM (full occupancy).
// Also here: a busy-wait kernel that holds the stream while bsmm_gpu queues the calls it times.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera {
namespace bench {

namespace {

constexpr int kThreads = 256;

// A non-zero hash of the word index (the probe's buffers hold no zeros).
__global__ void fill_words(uint32_t* __restrict__ p, int64_t n, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    p[i] = h | 1u;
  }
}

__device__ __forceinline__ uint32_t words_sum(const uint4& v) { return v.x + v.y + v.z + v.w; }

// out[blockIdx.x] = sum of the words this block read, over `passes` sweeps of p[0 .. n).
__global__ void __launch_bounds__(kThreads)
    read_sum(const uint4* __restrict__ p, int64_t n, int passes, uint32_t* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  uint32_t acc = 0;
  for (int pass = 0; pass < passes; ++pass) {
    int64_t i = first;
    for (; i + 3 * stride < n; i += 4 * stride) {
      // __ldcg is `asm volatile("ld.global.cg.v4.u32 ...")`: never merged across passes.
      const uint4 a = __ldcg(p + i), b = __ldcg(p + i + stride), c = __ldcg(p + i + 2 * stride),
                  d = __ldcg(p + i + 3 * stride);
      acc += words_sum(a) + words_sum(b) + words_sum(c) + words_sum(d);
    }
    for (; i < n; i += stride) acc += words_sum(__ldcg(p + i));
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ uint32_t warp_sums[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t s = 0;
    for (int w = 0; w < kThreads / 32; ++w) s += warp_sums[w];
    out[blockIdx.x] = s;
  }
}

// Busy-waits `ns` nanoseconds of the GPU's global timer (one thread): holds the stream while the
// host queues the calls to be timed behind it.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

}  // namespace

// The functions bsmm_gpu.h declares.

/// CUDA blocks of read_sum per SM: full occupancy (2048 threads per SM on sm_80 and sm_90).
int stream_blocks_per_sm() { return 2048 / kThreads; }

/// Fills `bytes` (a multiple of 4) at `p` with non-zero words, on `stream`.
cudaError_t stream_fill(void* p, size_t bytes, uint32_t seed, cudaStream_t stream) {
  fill_words<<<1024, kThreads, 0, stream>>>(static_cast<uint32_t*>(p), static_cast<int64_t>(bytes / 4), seed);
  return cudaGetLastError();
}

/// Reads `bytes` (a multiple of 16) at `p`, 16-byte aligned, `passes` times in one launch of
/// `blocks` CUDA blocks; writes one sum per block to out[0 .. blocks).
cudaError_t stream_read(const void* p, size_t bytes, int passes, uint32_t* out, int blocks, cudaStream_t stream) {
  read_sum<<<blocks, kThreads, 0, stream>>>(static_cast<const uint4*>(p), static_cast<int64_t>(bytes / 16), passes,
                                            out);
  return cudaGetLastError();
}

/// Holds `stream` for `microseconds` (a one-thread busy-wait kernel).
cudaError_t stream_spin(double microseconds, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(microseconds * 1e3));
  return cudaGetLastError();
}

}  // namespace bench
}  // namespace tessera
