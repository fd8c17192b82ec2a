#include "kernels/block_attention/block_attention.h"

#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/cast/cast.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"

namespace tessera {

Tensor block_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayoutPtr& layout,
                       double scale) {
  const int64_t D = q.shape().ndim() == 4 ? q.size(3) : 0;  // infer reports a bad rank
  const BlockAttention::Attrs attrs{layout, D > 0 ? detail::attention_scale(scale, D) : scale};
  if (autocast::applies({&q, &k, &v}))  // low-precision q, k, v; f32 result
    return cast(call<BlockAttention>(attrs, {autocast::operand(q), autocast::operand(k), autocast::operand(v)})[0],
                DType::f32);
  return call<BlockAttention>(attrs, {q, k, v})[0];
}

namespace detail {

double attention_scale(double scale, int64_t D) {
  return scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(D));
}

TensorMeta check_block_attention(const char* op, const TensorMeta& q, const TensorMeta& k, const TensorMeta& v,
                                 const AttentionLayoutPtr& layout, double scale) {
  check_floating(op, q, "q");
  check_same_dtype(op, q, k);
  check_same_dtype(op, q, v);
  TS_CHECK(q.shape.ndim() == 4, ShapeError, op << ": q must be [B, H, T, D], got q " << q);
  TS_CHECK(
      k.shape == q.shape && v.shape == q.shape, ShapeError,
      op << ": q, k and v must have the same shape [B, H, T, D], got q " << q << ", k " << k << ", v " << v);
  TS_CHECK(q.shape[3] > 0, ShapeError, op << ": head size D must be positive, got q " << q);
  TS_CHECK(layout != nullptr, ValueError, op << ": no attention layout given (q " << q << ")");
  TS_CHECK(layout->heads() == q.shape[1], ShapeError,
           op << ": q " << q << " has H=" << q.shape[1] << " heads but the layout has " << layout->heads()
              << " heads: " << layout->str());
  TS_CHECK(layout->seq_len() == q.shape[2], ShapeError,
           op << ": q " << q << " has T=" << q.shape[2] << " tokens but the layout has T=" << layout->seq_len()
              << ": " << layout->str());
  TS_CHECK(std::isfinite(scale), ValueError, op << ": scale must be finite, got " << scale);
  const DType stats = q.dtype == DType::f64 ? DType::f64 : DType::f32;
  return TensorMeta{Shape{q.shape[0], q.shape[1], q.shape[2]}, stats, q.device};
}

}  // namespace detail

std::vector<TensorMeta> BlockAttention::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 3);
  TensorMeta lse = detail::check_block_attention(kName, in[0], in[1], in[2], attrs.layout, attrs.scale);
  return {in[0], lse};
}

namespace {

using cpu::RowMap;
using cpu::ConstRowMap;

// Packet-aligned scratch: Eigen's reductions peel unaligned leading elements, so the summation
// order (and the rounding) of a row would otherwise depend on where the allocator put it.
template <class T>
using Scratch = std::vector<T, Eigen::aligned_allocator<T>>;

// One task: batch·head bh (head h), query block i. With n listed key blocks j_0 < ... < j_{n−1} = i:
//   S [bs, n·bs] = scale · Q_i·[K_j0; ...]ᵀ, −inf where key > query on the diagonal block,
//   lse_r = m_r + log sum_c exp(S_rc − m_r)   (m_r = row max; the sum in double),
//   P = exp(S − lse),   O_i [bs, D] = sum_jj P[:, jj·bs:(jj+1)·bs] · V_j.
template <class T>
void attend_block(const AttentionLayout& L, int64_t bh, int64_t h, int64_t i, int64_t T_, int64_t D, T scale,
                  const T* q, const T* k, const T* v, T* o, T* lse, Scratch<T>& scratch) {
  const int64_t bs = L.block_size(), nb = L.blocks();
  const int32_t begin = L.row_ptr()[h * nb + i], end = L.row_ptr()[h * nb + i + 1];
  const int32_t* kb = L.key_blocks().data() + begin;
  const int64_t n = end - begin, width = n * bs;
  scratch.resize(static_cast<size_t>(bs * width));
  RowMap<T> S(scratch.data(), bs, width);
  const int64_t head = bh * T_ * D;  // offset of (b, h) in [B, H, T, D]
  ConstRowMap<T> Qi(q + head + i * bs * D, bs, D);
  for (int64_t jj = 0; jj < n; ++jj) {
    const int64_t j = kb[jj];
    ConstRowMap<T> Kj(k + head + j * bs * D, bs, D);
    S.middleCols(jj * bs, bs).noalias() = scale * (Qi * Kj.transpose());
    if (j == i)  // intra-block causal mask: key c > query r
      for (int64_t r = 0; r < bs; ++r)
        for (int64_t c = r + 1; c < bs; ++c) S(r, jj * bs + c) = -std::numeric_limits<T>::infinity();
  }
  T* lse_i = lse + bh * T_ + i * bs;
  for (int64_t r = 0; r < bs; ++r) {
    auto row = S.row(r).array();
    const T m = row.maxCoeff();  // finite: the diagonal entry is never masked
    row = (row - m).exp();
    const double l = row.template cast<double>().sum();
    lse_i[r] = static_cast<T>(static_cast<double>(m) + std::log(l));
    row *= static_cast<T>(1.0 / l);
  }
  RowMap<T> Oi(o + head + i * bs * D, bs, D);
  for (int64_t jj = 0; jj < n; ++jj) {
    ConstRowMap<T> Vj(v + head + kb[jj] * bs * D, bs, D);
    if (jj == 0)
      Oi.noalias() = S.middleCols(0, bs) * Vj;
    else
      Oi.noalias() += S.middleCols(jj * bs, bs) * Vj;
  }
}

}  // namespace

void BlockAttention::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int64_t B = s[0], H = s[1], T_ = s[2], D = s[3];
  const AttentionLayout& L = *attrs.layout;
  const int64_t nb = L.blocks(), bs = L.block_size();
  const int64_t tasks = B * H * nb;
  const int64_t work = B * L.nnz() * bs * bs * D;  // multiply-adds of Q·Kᵀ (and of P·V)
  const double scale = detail::attention_scale(attrs.scale, D);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* q = in[0].data<T>();
    const T* k = in[1].data<T>();
    const T* v = in[2].data<T>();
    T* o = out[0].data<T>();
    T* lse = out[1].data<T>();
    auto task = [&](int64_t t, Scratch<T>& scratch) {
      const int64_t bh = t / nb, i = t % nb;
      attend_block<T>(L, bh, bh % H, i, T_, D, static_cast<T>(scale), q, k, v, o, lse, scratch);
    };
    if (work > kParallelGrain) {
      // One task per (b, h, query block): each writes its own rows of o and lse only, so the
      // result does not depend on the schedule. Rows differ in length (causal): dynamic.
#pragma omp parallel
      {
        Scratch<T> scratch;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; ++t) task(t, scratch);
      }
    } else {
      // Small: serial, with no omp region around Eigen's products (see matmul.cpp).
      Scratch<T> scratch;
      for (int64_t t = 0; t < tasks; ++t) task(t, scratch);
    }
  });
}

std::vector<Tensor> BlockAttention::backward(const BackwardContext& ctx, const Attrs& attrs) {
  std::vector<Tensor> d = block_attention_backward(ctx.grad_output(0), ctx.input(0), ctx.input(1), ctx.input(2),
                                                   ctx.output(0), ctx.output(1), attrs.layout, attrs.scale);
  for (int i = 0; i < 3; ++i)
    if (!ctx.needs_input_grad(i)) d[i] = Tensor();
  return d;
}

}  // namespace tessera
