// block_attention_backward on the GPU: dq, dk, dv over the layout's tiles only. bf16/f16 with
// head dims 32/64/128 and blocks of 32/64 run the tensor-core kernels of flash_sm80_backward.cu after
// Δ; everything else the scalar kernels below (correct and simple, not tuned: P and dS are
// recomputed per use, no tensor cores).
//
// With g = dO, per batch·head bh (head h), tile (query block i, key block j), rows t of block i
// and s of block j (see block_attention_backward.h):
//   Δ_t = sum_d dO[t, d] · O[t, d]                               (attention_row_dot.cuh, a warp a row)
//   P_ts = exp(scale · q_t·k_s − lse_t)   (0 where s > t on the diagonal block)
//   dS_ts = P_ts · (dO_t·v_s − Δ_t)
//   dQ_i = scale · sum_j dS_ij·K_j             over the key blocks of row (h, i)   (attention_dq)
//   dV_j = sum_i P_ijᵀ·dO_i,   dK_j = scale · sum_i dS_ijᵀ·Q_i
//                                              over the query blocks of column (h, j) (attention_dkdv)
// g, q, o, dq [B, H, T, D]; k, v, dk, dv [B, H / G, T, D] (query head h reads k/v head h / G;
// dk/dv sum over the G heads); lse [B, H, T] in acc_t (f32, or f64 for f64).
//
// Thread mapping: attention_dq: one CUDA block of
// kThreads threads per (bh, i); attention_dkdv: one per (b·k/v head, j). In both, all threads compute a
// tile of P or dS into shared memory (element e -> (t, s) = (e / bs, e % bs), D-long dot
// products), then a thread owns the outputs e = tid, tid + kThreads, ... of its [bs, D] block
// (e -> (row, d) = (e / D, e % D)) and adds that block's row of the tile product to each; the
// running sums stay in memory across tiles (acc_t): in the output itself for f32/f64, in one
// f32 scratch for bf16/f16, rounded once at the last tile. dkdv sweeps its column twice, for dV
// (P tiles) and then dK (dS tiles), so one tile of shared memory suffices (f64 at bs = 64 too).
// With dropout (the forward's mask Z, regenerated from its Philox stream; c = 1/(1 − p)): the
// tiles hold c·Z ⊙ P for dV and P ⊙ (c·Z ⊙ dP − Δ) for dQ and dK.
// No atomics: deterministic. The CPU kernel in block_attention_backward.cpp is the reference.
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/block_attention_backward/flash_sm80_backward.h"
#include "kernels/common/cuda/attention_row_dot.cuh"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

namespace {

constexpr int kThreads = 128;

// The rows of one (bh) and tile (i, j): [bs, D] blocks and the [bs] statistics of block i;
// for the dropout mask, the stream index n0 of element (bh, i·bs, j·bs) and seq = T.
template <class T>
struct Tile {
  const T *qi, *kj, *vj, *gi;
  const cuda::acc_t<T>* lse_i;
  const cuda::acc_t<T>* delta_i;
  bool diagonal;  // i == j
  uint64_t n0;
  int64_t seq;  // T
};

// s[t][c] = P_tc (c·Z ⊙ P with dropout), or dS_tc when kGradS, for query row t of block i and
// key row c of block j.
template <class T, int BS, bool kGradS>
__device__ void prob_tile(cuda::acc_t<T> (*s)[BS + 1], const Tile<T>& x, int64_t D, cuda::acc_t<T> scale,
                          const AttentionDropout& drop) {
  using A = cuda::acc_t<T>;
  for (int e = threadIdx.x; e < BS * BS; e += blockDim.x) {
    const int t = e / BS, c = e % BS;
    A value = 0;  // masked: P = dS = 0
    if (!(x.diagonal && c > t)) {
      A qk = 0;
      for (int64_t d = 0; d < D; ++d) qk += cuda::to_acc(x.qi[t * D + d]) * cuda::to_acc(x.kj[c * D + d]);
      value = cuda::dev_exp(scale * qk - x.lse_i[t]);  // P
      const A zc = !drop.on() ? A(1) : drop.keeps_element(x.n0 + t * x.seq + c) ? A(drop.scale) : A(0);
      if (kGradS) {
        A dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += cuda::to_acc(x.gi[t * D + d]) * cuda::to_acc(x.vj[c * D + d]);
        value *= zc * dp - x.delta_i[t];  // dS = P ⊙ (c·Z ⊙ dP − Δ)
      } else {
        value *= zc;
      }
    }
    s[t][c] = value;
  }
}

// Pointers of tile (i, j) of batch·head bh (k and v those of its key/value head bh / G).
template <class T>
__device__ Tile<T> tile_at(const T* g, const T* q, const T* k, const T* v, const cuda::acc_t<T>* lse,
                           const cuda::acc_t<T>* delta, int64_t bh, int64_t G, int64_t i, int64_t j, int64_t nb,
                           int64_t bs, int64_t D) {
  const int64_t head = bh * nb * bs * D, kv_head = bh / G * nb * bs * D, stats = bh * nb * bs, seq = nb * bs;
  return Tile<T>{q + head + i * bs * D,
                 k + kv_head + j * bs * D,
                 v + kv_head + j * bs * D,
                 g + head + i * bs * D,
                 lse + stats + i * bs,
                 delta + stats + i * bs,
                 i == j,
                 static_cast<uint64_t>(stats + i * bs) * seq + j * bs,
                 seq};
}

// dQ_i [bs, D] = scale · sum over the key blocks j of (h, i) of dS_ij·K_j.
template <class T, int BS>
__global__ void attention_dq(const T* __restrict__ g, const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, const cuda::acc_t<T>* __restrict__ lse,
                             const cuda::acc_t<T>* __restrict__ delta, T* dq, cuda::acc_t<T>* acc, int64_t H,
                             int64_t G, int64_t nb, int64_t D, cuda::acc_t<T> scale, const int32_t* __restrict__ row_ptr,
                             const int32_t* __restrict__ key_blocks, AttentionDropout drop,
                             const int32_t* __restrict__ base) {
  using A = cuda::acc_t<T>;
  __shared__ A s[BS][BS + 1];  // dS_ij
  drop = drop.with_base(base);
  const int64_t bh = blockIdx.x / nb, i = blockIdx.x % nb, h = bh % H;
  const int64_t out = (bh * nb + i) * BS * D;  // block i of (b, h) in [B, H, T, D]
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];
  if (begin == end) {  // no key block (layouts keep the diagonal, so never): dQ_i = 0
    for (int64_t e = threadIdx.x; e < BS * D; e += blockDim.x) dq[out + e] = cuda::from_acc<T>(A(0));
    return;
  }
  for (int32_t p = begin; p < end; ++p) {
    const int64_t j = key_blocks[p];
    const Tile<T> x = tile_at(g, q, k, v, lse, delta, bh, G, i, j, nb, BS, D);
    prob_tile<T, BS, true>(s, x, D, scale, drop);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < BS * D; e += blockDim.x) {
      const int64_t t = e / D, d = e % D;
      A dot = 0;
      for (int c = 0; c < BS; ++c) dot += s[t][c] * cuda::to_acc(x.kj[c * D + d]);
      cuda::accumulate_step<T>(acc + out, dq + out, e, dot, p == begin, p == end - 1, scale);
    }
    __syncthreads();  // before the next tile overwrites s
  }
}

// dV_j = sum_h sum_i P_ijᵀ·dO_i and dK_j = scale · sum_h sum_i dS_ijᵀ·Q_i of key/value head bkv
// over its G query heads h in order and the query blocks i that attend to (h, j); one sweep
// over them for each.
template <class T, int BS>
__global__ void attention_dkdv(const T* __restrict__ g, const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, const cuda::acc_t<T>* __restrict__ lse,
                               const cuda::acc_t<T>* __restrict__ delta, T* dk, T* dv, cuda::acc_t<T>* acc_dk,
                               cuda::acc_t<T>* acc_dv, int64_t H, int64_t G, int64_t nb, int64_t D,
                               cuda::acc_t<T> scale, const int32_t* __restrict__ col_ptr,
                               const int32_t* __restrict__ query_blocks, AttentionDropout drop,
                               const int32_t* __restrict__ base) {
  using A = cuda::acc_t<T>;
  __shared__ A s[BS][BS + 1];  // P_ij, then dS_ij
  drop = drop.with_base(base);
  const int64_t bkv = blockIdx.x / nb, j = blockIdx.x % nb;
  const int64_t out = (bkv * nb + j) * BS * D;  // block j of (b, k/v head) in [B, H / G, T, D]
  // Every column (h, j) lists its diagonal block i = j: each head has at least one tile.
  for (int sweep = 0; sweep < 2; ++sweep) {
    const bool grad_s = sweep == 1;  // sweep 0: dV from P; sweep 1: dK from dS
    for (int64_t bh = bkv * G; bh < (bkv + 1) * G; ++bh) {
      const int64_t h = bh % H;
      const int32_t begin = col_ptr[h * nb + j], end = col_ptr[h * nb + j + 1];
      for (int32_t p = begin; p < end; ++p) {
        const int64_t i = query_blocks[p];
        const Tile<T> x = tile_at(g, q, k, v, lse, delta, bh, G, i, j, nb, BS, D);
        if (grad_s) {
          prob_tile<T, BS, true>(s, x, D, scale, drop);
        } else {
          prob_tile<T, BS, false>(s, x, D, scale, drop);
        }
        __syncthreads();
        const T* rows_i = grad_s ? x.qi : x.gi;  // Q_i for dK, dO_i for dV
        const bool first = bh == bkv * G && p == begin, last = bh == (bkv + 1) * G - 1 && p == end - 1;
        for (int64_t e = threadIdx.x; e < BS * D; e += blockDim.x) {
          const int64_t c = e / D, d = e % D;  // key row c of block j
          A dot = 0;
          for (int t = 0; t < BS; ++t) dot += s[t][c] * cuda::to_acc(rows_i[t * D + d]);
          if (grad_s) {
            cuda::accumulate_step<T>(acc_dk + out, dk + out, e, dot, first, last, scale);
          } else {
            cuda::accumulate_step<T>(acc_dv + out, dv + out, e, dot, first, last);
          }
        }
        __syncthreads();  // before the next tile overwrites s
      }
    }
  }
}

}  // namespace

void op::BlockAttentionBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                  const Attrs& attrs) {
  const Tensor &g = in[0], &q = in[1], &k = in[2], &v = in[3], &o = in[4], &lse = in[5];
  const Tensor &dq = out[0], &dk = out[1], &dv = out[2];
  const int64_t B = q.size(0), H = q.size(1), T_ = q.size(2), D = q.size(3), G = H / k.size(1);
  // Blocks of 128 run as their refinement into 64-blocks (the same token-level pattern).
  const AttentionLayoutPtr& layout = attrs.layout->refined64() ? attrs.layout->refined64() : attrs.layout;
  const AttentionLayout& L = *layout;
  const int64_t nb = L.blocks(), rows = B * H * T_;
  if (dq.numel() == 0) return;
  const double scale = detail::attention_scale(attrs.scale, D);
  const cuda::AttentionTables tables = cuda::device_tables(layout, dq.device().index);
  const AttentionDropout drop = AttentionDropout::make(attrs.dropout, attrs.seed, attrs.start);
  const int32_t* base = in.size() == 7 ? static_cast<const int32_t*>(in[6].data_ptr()) : nullptr;
  const int64_t blocks = B * H * nb;
  TS_CHECK(blocks <= INT32_MAX, ShapeError, kName << ": q " << q.shape() << " is too large for one launch");
  cudaStream_t stream = cuda::current_stream(dq);
  cuda::dispatch_cuda_float(dq.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    auto ptr = [](const Tensor& t) { return static_cast<T*>(t.data_ptr()); };
    const DType acc_dtype = std::is_same_v<A, double> ? DType::f64 : DType::f32;
    Tensor delta = empty({rows}, TensorOptions(acc_dtype).device(dq.device()));  // Δ [B·H·T]
    A* pdelta = static_cast<A*>(delta.data_ptr());
    const A* plse = static_cast<const A*>(lse.data_ptr());
    cuda::attention_row_dot<T>(ptr(g), ptr(o), cuda::FlashStrides::contiguous(H, T_, D), pdelta, B, H, T_, D, stream);
    if constexpr (std::is_same_v<A, float> && !std::is_same_v<T, float>) {  // bf16/f16: tensor cores?
      cuda::FlashBackward f{dq.dtype(),     static_cast<int>(L.block_size()), B, H, nb, D, scale,
                                  g.data_ptr(),   q.data_ptr(),  k.data_ptr(),  v.data_ptr(), plse, pdelta,
                                  dq.data_ptr(),  dk.data_ptr(), dv.data_ptr(), tables.row_ptr, tables.key_blocks,
                                  tables.col_ptr, tables.query_blocks, drop,     base};
      f.G = G;
      if (cuda::flash_backward_supported(f, dq.device().index)) return cuda::flash_backward(f, stream);
    }
    // Running sums: in each output itself when T is its own accumulation type, else in one f32
    // scratch that dq's kernel and then dkdv's two sweeps reuse (stream order separates them).
    Tensor scratch;
    A *acc_dq, *acc_dk, *acc_dv;
    if constexpr (std::is_same_v<T, A>) {
      acc_dq = ptr(dq), acc_dk = ptr(dk), acc_dv = ptr(dv);
    } else {
      scratch = empty(q.shape(), TensorOptions(DType::f32).device(dq.device()));
      acc_dq = acc_dk = acc_dv = static_cast<A*>(scratch.data_ptr());
    }
    cuda::dispatch_block_size(L.block_size(), kName, [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      attention_dq<T, BS><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          ptr(g), ptr(q), ptr(k), ptr(v), plse, pdelta, ptr(dq), acc_dq, H, G, nb, D, static_cast<A>(scale),
          tables.row_ptr, tables.key_blocks, drop, base);
      TS_CUDA_LAUNCH_CHECK(kName);
      attention_dkdv<T, BS><<<static_cast<unsigned>(blocks / G), kThreads, 0, stream>>>(
          ptr(g), ptr(q), ptr(k), ptr(v), plse, pdelta, ptr(dk), ptr(dv), acc_dk, acc_dv, H, G, nb, D,
          static_cast<A>(scale), tables.col_ptr, tables.query_blocks, drop, base);
      TS_CUDA_LAUNCH_CHECK(kName);
    });
  });
}

}  // namespace tessera
