// block_attention on the GPU: causal self-attention over the layout's (query block, key block)
// tiles only. bf16/f16 with head dims 32/64/128 and blocks of 32/64 run the tensor-core kernel
// of flash_sm80.cu; everything else the scalar kernel below (correct and simple, not tuned: no
// tensor cores, scores computed twice).
//
// Per batch·head bh (head h) and query block i, with the listed key blocks j of (h, i) (the
// layout's row table; the diagonal block j = i last) and t, s the rows of blocks i and j:
//   S_ij [bs, bs] = scale · Q_i·K_jᵀ, −inf where key s > query t on the diagonal block;
//   pass 1: lse_t = log sum over the listed blocks and keys of exp(S_ts), by a running max m_t
//           and sum l_t of exp(S − m_t) per row (l rescaled by exp(m_old − m_new) as m grows);
//   pass 2: O_i [bs, D] = sum_j P_ij·V_j with P_ij = exp(S_ij − lse) (S recomputed; with dropout,
//           times c·z, the mask z of attention_dropout.h and c = 1/(1 − p)).
// q, o [B, H, T, D]; k, v [B, H / G, T, D] (query head h reads k/v head h / G); lse [B, H, T] in
// acc_t (f32, or f64 for f64).
//
// Thread mapping: one CUDA block of kThreads threads per (bh, i). A tile of S (or P) is computed
// into shared memory by all threads, element e -> (t, s) = (e / bs, e % bs), each a D-long dot
// product. Pass 1: thread t < bs folds row t of the tile into (m_t, l_t). Pass 2: a thread owns
// the outputs e = tid, tid + kThreads, ... of O_i (e -> (t, d) = (e / D, e % D)) and adds
// P_ij[t, :]·V_j[:, d] to each per key block; these running sums stay in memory between key
// blocks (acc_t): in o itself for f32/f64, in an f32 scratch for bf16/f16, rounded once into o
// at the last block. The CPU kernel in block_attention.cpp is the reference.
#include <limits>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention/flash_sm80.h"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

namespace {

constexpr int kThreads = 128;

// s[t][c] = scale · q_t·k_c of query block rows qi [bs, D] and key block rows kj [bs, D];
// masked (c > t on the diagonal block) -inf. With `lse` (the rows' log-sum-exp), the
// probabilities exp(S − lse_t) instead, masked 0, and dropped by `drop` (element n0 + t·T + c
// of its stream, n0 that of the tile's (0, 0)) when it is on.
template <class T, int BS>
__device__ void score_tile(cuda::acc_t<T> (*s)[BS + 1], const T* qi, const T* kj, int64_t D,
                           cuda::acc_t<T> scale, bool diagonal, const cuda::acc_t<T>* lse,
                           const AttentionDropout& drop = {}, uint64_t n0 = 0, int64_t T_ = 0) {
  using A = cuda::acc_t<T>;
  for (int e = threadIdx.x; e < BS * BS; e += blockDim.x) {
    const int t = e / BS, c = e % BS;
    A value;
    if (diagonal && c > t) {
      value = lse ? A(0) : -std::numeric_limits<A>::infinity();
    } else {
      A dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += cuda::to_acc(qi[t * D + d]) * cuda::to_acc(kj[c * D + d]);
      value = scale * dot;
      if (lse) {
        value = cuda::dev_exp(value - lse[t]);
        if (drop.on()) value = drop.keeps_element(n0 + t * T_ + c) ? value * A(drop.scale) : A(0);
      }
    }
    s[t][c] = value;
  }
}

template <class T, int BS>
__global__ void attention_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  T* o, cuda::acc_t<T>* __restrict__ lse, cuda::acc_t<T>* acc, int64_t H, int64_t G,
                                  int64_t nb, int64_t D, cuda::acc_t<T> scale, const int32_t* __restrict__ row_ptr,
                                  const int32_t* __restrict__ key_blocks, AttentionDropout drop,
                                  const int32_t* __restrict__ base) {
  using A = cuda::acc_t<T>;
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  __shared__ A s[BS][BS + 1];  // one tile of S or P
  __shared__ A row_lse[BS];
  const int tid = threadIdx.x;
  const int64_t bh = blockIdx.x / nb, i = blockIdx.x % nb, h = bh % H;
  const int64_t head = bh * nb * BS * D;          // (b, h) in [B, H, T, D]
  const int64_t kv_head = bh / G * nb * BS * D;  // (b, h / G) in [B, H / G, T, D]
  const T* qi = q + head + i * BS * D;
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];

  // Pass 1: running max m and sum l of exp(S − m) of row tid (threads tid < bs).
  A m = kNegInf, l = 0;
  for (int32_t p = begin; p < end; ++p) {
    const int64_t j = key_blocks[p];
    score_tile<T, BS>(s, qi, k + kv_head + j * BS * D, D, scale, j == i, nullptr);
    __syncthreads();
    if (tid < BS) {
      A m_new = m;
      for (int c = 0; c < BS; ++c) m_new = s[tid][c] > m_new ? s[tid][c] : m_new;
      if (m_new != kNegInf) {  // else the row has no allowed key yet
        A sum = 0;
        for (int c = 0; c < BS; ++c) sum += cuda::dev_exp(s[tid][c] - m_new);  // exp(−inf) = 0
        l = (m == kNegInf ? A(0) : l * cuda::dev_exp(m - m_new)) + sum;
        m = m_new;
      }
    }
    __syncthreads();  // before the next tile overwrites s
  }
  if (tid < BS) {
    row_lse[tid] = m + cuda::dev_log(l);  // finite: the diagonal key of every row is allowed
    lse[bh * nb * BS + i * BS + tid] = row_lse[tid];
  }
  __syncthreads();

  // Pass 2: O_i = sum_j P_ij·V_j, thread-owned outputs summed in memory across key blocks.
  T* oi = o + head + i * BS * D;
  A* ai = acc + head + i * BS * D;
  drop = drop.with_base(base);
  const int64_t T_ = nb * BS;
  for (int32_t p = begin; p < end; ++p) {
    const int64_t j = key_blocks[p];
    const uint64_t n0 = static_cast<uint64_t>(bh * T_ + i * BS) * T_ + j * BS;
    score_tile<T, BS>(s, qi, k + kv_head + j * BS * D, D, scale, j == i, row_lse, drop, n0, T_);
    __syncthreads();
    const T* vj = v + kv_head + j * BS * D;
    for (int64_t e = tid; e < BS * D; e += blockDim.x) {
      const int64_t t = e / D, d = e % D;
      A dot = 0;
      for (int c = 0; c < BS; ++c) dot += s[t][c] * cuda::to_acc(vj[c * D + d]);
      cuda::accumulate_step<T>(ai, oi, e, dot, p == begin, p == end - 1);
    }
    __syncthreads();
  }
}

}  // namespace

void op::BlockAttention::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &q = in[0], &k = in[1], &v = in[2], &o = out[0], &lse = out[1];
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3);
  // Blocks of 128 run as their refinement into 64-blocks (the same token-level pattern).
  const AttentionLayoutPtr& layout = attrs.layout->refined64() ? attrs.layout->refined64() : attrs.layout;
  const AttentionLayout& L = *layout;
  const int64_t nb = L.blocks();
  if (o.numel() == 0) return;
  const double scale = detail::attention_scale(attrs.scale, D);
  const cuda::AttentionTables tables = cuda::device_tables(layout, o.device().index);
  const AttentionDropout drop = AttentionDropout::make(attrs.dropout, attrs.seed, attrs.start);
  const int32_t* base = in.size() == 4 ? static_cast<const int32_t*>(in[3].data_ptr()) : nullptr;
  {
    cuda::FlashForward f{o.dtype(),    static_cast<int>(L.block_size()),
                               B,            H,
                               nb,           D,
                               scale,        q.data_ptr(),
                               k.data_ptr(), v.data_ptr(),
                               o.data_ptr(), static_cast<float*>(lse.data_ptr()),
                               tables.row_ptr, tables.key_blocks,
                               drop,         base};
    f.G = H / k.size(1);
    if (cuda::flash_forward(f, o.device().index, cuda::current_stream(o))) return;
  }
  const int64_t blocks = B * H * nb;
  TS_CHECK(blocks <= INT32_MAX, ShapeError, kName << ": q " << q.shape() << " is too large for one launch");
  cuda::dispatch_cuda_float(o.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    // Running sums of O: in o itself when T is its own accumulation type, else in f32 scratch.
    Tensor scratch;
    A* acc;
    if constexpr (std::is_same_v<T, A>) {
      acc = static_cast<A*>(o.data_ptr());
    } else {
      scratch = empty(o.shape(), TensorOptions(DType::f32).device(o.device()));
      acc = static_cast<A*>(scratch.data_ptr());
    }
    cuda::dispatch_block_size(L.block_size(), kName, [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      attention_forward<T, BS><<<static_cast<unsigned>(blocks), kThreads, 0, cuda::current_stream(o)>>>(
          static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
          static_cast<const T*>(v.data_ptr()), static_cast<T*>(o.data_ptr()), static_cast<A*>(lse.data_ptr()), acc,
          H, H / k.size(1), nb, D, static_cast<A>(scale), tables.row_ptr, tables.key_blocks, drop, base);
      TS_CUDA_LAUNCH_CHECK(kName);
    });
  });
}

}  // namespace tessera
