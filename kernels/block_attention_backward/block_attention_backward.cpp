#include "kernels/block_attention_backward/block_attention_backward.h"

#include <Eigen/Core>
#include <limits>

#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"

namespace tessera {

std::vector<Tensor> block_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& o, const Tensor& lse,
                                             const AttentionLayoutPtr& layout, double scale) {
  return call<op::BlockAttentionBackward>({layout, scale}, {g, q, k, v, o, lse});
}

std::vector<TensorMeta> op::BlockAttentionBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  TS_CHECK(in.size() == 6 || in.size() == 7, ValueError,
           kName << ": expected 6 or 7 inputs (g, q, k, v, o, lse, optional Philox base), got " << in.size());
  const TensorMeta& q = in[1];
  const TensorMeta lse = detail::check_block_attention(kName, q, in[2], in[3], attrs.layout, attrs.scale);
  detail::check_attention_dropout(kName, attrs.dropout, q, in.size() == 7 ? &in[6] : nullptr);
  TS_CHECK(in[0] == q, ShapeError, kName << ": output gradient " << in[0] << " must match q " << q);
  const TensorMeta& kv = in[2];
  TS_CHECK(in[4] == q, ShapeError, kName << ": saved output o " << in[4] << " must match q " << q);
  TS_CHECK(in[5] == lse, ShapeError, kName << ": saved lse " << in[5] << " must be " << lse << " for q " << q);
  return {q, kv, kv};
}

namespace {

using cpu::RowMap;
using cpu::ConstRowMap;

// The tensors of one (b, h): [T, D] row-major slices (k, v, dk, dv those of its key/value head),
// lse and Δ [T]; bh and T for the mask.
template <class T>
struct Head {
  const T *g, *q, *k, *v, *lse, *delta;
  T *dq, *dk, *dv;
  int64_t bh, T_;
};

// Tile (query block i, key block j) of one head, bs×bs each:
//   P  = exp(scale · Q_i·K_jᵀ − lse)          (0 where key > query on the diagonal block)
//   dS = P ⊙ (dO_i·V_jᵀ − Δ)                  (Δ broadcast along each row)
// With dropout (mask Z, c = 1/(1 − p)): dS = P ⊙ (c·Z ⊙ dO_i·V_jᵀ − Δ), and P is returned as
// c·Z ⊙ P (what dV needs).
template <class T>
void tile(const Head<T>& x, int64_t i, int64_t j, int64_t bs, int64_t D, T scale, const AttentionDropout& drop,
          RowMap<T>& P, RowMap<T>& dS) {
  ConstRowMap<T> Qi(x.q + i * bs * D, bs, D), Kj(x.k + j * bs * D, bs, D);
  ConstRowMap<T> dOi(x.g + i * bs * D, bs, D), Vj(x.v + j * bs * D, bs, D);
  P.noalias() = scale * (Qi * Kj.transpose());
  if (i == j)
    for (int64_t r = 0; r < bs; ++r)
      for (int64_t c = r + 1; c < bs; ++c) P(r, c) = -std::numeric_limits<T>::infinity();
  dS.noalias() = dOi * Vj.transpose();  // dP
  for (int64_t r = 0; r < bs; ++r) {
    P.row(r) = (P.row(r).array() - x.lse[i * bs + r]).exp().matrix();
    if (drop.on()) {
      const uint64_t n0 = static_cast<uint64_t>(x.bh * x.T_ + i * bs + r) * x.T_ + j * bs;  // (bh, t, j·bs)
      AttentionMaskReader mask(drop);
      for (int64_t c = 0; c < bs; ++c) {
        const T zc = mask.keeps(n0 + c) ? static_cast<T>(drop.scale) : T(0);
        dS(r, c) = P(r, c) * (zc * dS(r, c) - x.delta[i * bs + r]);
        P(r, c) *= zc;
      }
      continue;
    }
    dS.row(r) = (P.row(r).array() * (dS.row(r).array() - x.delta[i * bs + r])).matrix();
  }
}

// Runs f(task, P, dS) for every task, on OpenMP threads when `parallel` (each task owns the
// rows it writes, so the schedule does not change the result), else serially with no omp
// region around Eigen's products (see matmul.cpp).
template <class T, class F>
void run_tasks(int64_t tasks, bool parallel, int64_t bs, F f) {
  auto loop = [&](bool omp_for) {
    // Packet-aligned: Eigen's row reductions then sum in the same order wherever buf lands.
    std::vector<T, Eigen::aligned_allocator<T>> buf(static_cast<size_t>(2 * bs * bs));
    RowMap<T> P(buf.data(), bs, bs), dS(buf.data() + bs * bs, bs, bs);
    if (omp_for) {
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) f(t, P, dS);
    } else {
      for (int64_t t = 0; t < tasks; ++t) f(t, P, dS);
    }
  };
  if (parallel) {
#pragma omp parallel
    loop(true);
  } else {
    loop(false);
  }
}

}  // namespace

void op::BlockAttentionBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                 const Attrs& attrs) {
  const Shape& s = in[1].shape();
  const int64_t B = s[0], H = s[1], T_ = s[2], D = s[3], G = H / in[2].size(1);  // query heads per k/v head
  const AttentionLayout& L = *attrs.layout;
  const int64_t nb = L.blocks(), bs = L.block_size();
  const int64_t tasks = B * H * nb, kv_tasks = tasks / G, rows = B * H * T_;
  const bool parallel = B * L.nnz() * bs * bs * D > kParallelGrain;
  const double scale = detail::attention_scale(attrs.scale, D);
  const AttentionDropout drop = detail::attention_dropout_on_host(in, 6, attrs.dropout, attrs.seed, attrs.start);
  const std::vector<int32_t>&row_ptr = L.row_ptr(), &key_blocks = L.key_blocks();
  const std::vector<int32_t>&col_ptr = L.col_ptr(), &query_blocks = L.query_blocks();
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    const T* o = in[4].data<T>();
    // Δ_t = rowsum(dO ⊙ O)_t  [B·H·T], accumulated in double.
    std::vector<T> delta(static_cast<size_t>(rows));
#pragma omp parallel for if (rows * D > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(g[r * D + d]) * o[r * D + d];
      delta[r] = static_cast<T>(acc);
    }
    auto head = [&](int64_t bh) {
      const int64_t off = bh * T_ * D, kv = bh / G * T_ * D;  // (b, h) and (b, h / G)
      return Head<T>{g + off,
                     in[1].data<T>() + off,
                     in[2].data<T>() + kv,
                     in[3].data<T>() + kv,
                     in[5].data<T>() + bh * T_,
                     delta.data() + bh * T_,
                     out[0].data<T>() + off,
                     out[1].data<T>() + kv,
                     out[2].data<T>() + kv,
                     bh,
                     T_};
    };
    const T sc = static_cast<T>(scale);
    // dq, per (b, h, query block i): dQ_i = scale · sum_j dS_ij · K_j over the row's key blocks.
    run_tasks<T>(tasks, parallel, bs, [&](int64_t t, RowMap<T>& P, RowMap<T>& dS) {
      const int64_t bh = t / nb, h = bh % H, i = t % nb;
      const Head<T> x = head(bh);
      RowMap<T> dQi(x.dq + i * bs * D, bs, D);
      dQi.setZero();
      for (int32_t p = row_ptr[h * nb + i]; p < row_ptr[h * nb + i + 1]; ++p) {
        const int64_t j = key_blocks[p];
        tile<T>(x, i, j, bs, D, sc, drop, P, dS);
        dQi.noalias() += sc * (dS * ConstRowMap<T>(x.k + j * bs * D, bs, D));
      }
    });
    // dk, dv, per (b, key/value head, key block j), over its G query heads h in order and the
    // query blocks i of (h, j) that attend to it:
    //   dK_j = scale · sum_h sum_i dS_ijᵀ · Q_i,   dV_j = sum_h sum_i P_ijᵀ · dO_i.
    run_tasks<T>(kv_tasks, parallel, bs, [&](int64_t t, RowMap<T>& P, RowMap<T>& dS) {
      const int64_t bkv = t / nb, j = t % nb;
      for (int64_t bh = bkv * G; bh < (bkv + 1) * G; ++bh) {
        const int64_t h = bh % H;
        const Head<T> x = head(bh);
        RowMap<T> dKj(x.dk + j * bs * D, bs, D), dVj(x.dv + j * bs * D, bs, D);
        if (bh == bkv * G) {
          dKj.setZero();
          dVj.setZero();
        }
        for (int32_t p = col_ptr[h * nb + j]; p < col_ptr[h * nb + j + 1]; ++p) {
          const int64_t i = query_blocks[p];
          tile<T>(x, i, j, bs, D, sc, drop, P, dS);
          dKj.noalias() += sc * (dS.transpose() * ConstRowMap<T>(x.q + i * bs * D, bs, D));
          dVj.noalias() += P.transpose() * ConstRowMap<T>(x.g + i * bs * D, bs, D);
        }
      }
    });
  });
}

}  // namespace tessera
