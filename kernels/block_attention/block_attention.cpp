#include "kernels/block_attention/block_attention.h"

#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "core/philox.h"
#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/cast/cast.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"

namespace tessera {

Tensor block_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayoutPtr& layout,
                       double scale, double dropout, Generator& gen) {
  const int64_t D = q.shape().ndim() == 4 ? q.size(3) : 0;  // infer reports a bad rank
  op::BlockAttention::Attrs attrs{layout, D > 0 ? detail::attention_scale(scale, D) : scale};
  detail::check_attention_dropout("block_attention", dropout, q.meta(), nullptr);
  if (dropout > 0) {
    attrs.dropout = dropout;
    attrs.seed = gen.seed();
    attrs.start = gen.reserve(q.shape().ndim() == 4 ? detail::attention_dropout_blocks(q.shape()) : 0);
  }
  if (autocast::applies({&q, &k, &v}))  // low-precision q, k, v; f32 result
    return cast(call<op::BlockAttention>(attrs, {autocast::operand(q), autocast::operand(k), autocast::operand(v)})[0],
                DType::f32);
  return call<op::BlockAttention>(attrs, {q, k, v})[0];
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
  TS_CHECK(k.shape == v.shape && k.shape.ndim() == 4 && k.shape[0] == q.shape[0] && k.shape[2] == q.shape[2] &&
               k.shape[3] == q.shape[3] && k.shape[1] > 0 && q.shape[1] % k.shape[1] == 0,
           ShapeError,
           op << ": q must be [B, H, T, D] and k, v [B, Hkv, T, D] with H a multiple of Hkv, got q " << q << ", k "
              << k << ", v " << v);
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

void check_attention_dropout(const char* op, double p, const TensorMeta& q, const TensorMeta* base) {
  TS_CHECK(p >= 0 && p < 1, ValueError, op << ": dropout must be in [0, 1), got " << p);
  if (!base) return;
  TS_CHECK(p > 0, ValueError, op << ": a Philox base input was given but dropout is 0 (nothing is drawn)");
  TS_CHECK(base->dtype == DType::i32 && base->shape == Shape{2}, DTypeError,
           op << ": the Philox base must be i32[2] (low, high words of a block offset), got " << *base);
  TS_CHECK(base->device == q.device, DeviceError,
           op << ": the Philox base " << *base << " is not on q's device (q is " << q << ")");
}

uint64_t attention_dropout_blocks(const Shape& q) {
  const uint64_t n = static_cast<uint64_t>(q[0]) * q[1] * q[2] * q[2];
  return philox::blocks_for_uniform_f32(n);
}

}  // namespace detail

std::vector<TensorMeta> op::BlockAttention::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  TS_CHECK(in.size() == 3 || in.size() == 4, ValueError,
           kName << ": expected 3 or 4 inputs (q, k, v, optional Philox base), got " << in.size());
  TensorMeta lse = detail::check_block_attention(kName, in[0], in[1], in[2], attrs.layout, attrs.scale);
  detail::check_attention_dropout(kName, attrs.dropout, in[0], in.size() == 4 ? &in[3] : nullptr);
  return {in[0], lse};
}

namespace detail {

AttentionDropout attention_dropout_on_host(const std::vector<Tensor>& in, size_t base_input, double p,
                                           uint64_t seed, uint64_t start) {
  const AttentionDropout d = AttentionDropout::make(p, seed, start);
  return in.size() > base_input ? d.with_base(in[base_input].data<int32_t>()) : d;  // the base, read on the host
}

}  // namespace detail

namespace {

using cpu::RowMap;
using cpu::ConstRowMap;

// Packet-aligned scratch: Eigen's reductions peel unaligned leading elements, so the summation
// order (and the rounding) of a row would otherwise depend on where the allocator put it.
template <class T>
using Scratch = std::vector<T, Eigen::aligned_allocator<T>>;

// One task: batch·head bh (head h; its key/value head at offset kv_head of k and v), query block
// i. With n listed key blocks j_0 < ... < j_{n−1} = i:
//   S [bs, n·bs] = scale · Q_i·[K_j0; ...]ᵀ, −inf where key > query on the diagonal block,
//   lse_r = m_r + log sum_c exp(S_rc − m_r)   (m_r = row max; the sum in double),
//   P = exp(S − lse) (with dropout: P ⊙ z / (1 − p)),   O_i [bs, D] = sum_jj P[:, jj·bs:(jj+1)·bs] · V_j.
template <class T>
void attend_block(const AttentionLayout& L, int64_t bh, int64_t h, int64_t kv_head, int64_t i, int64_t T_, int64_t D,
                  T scale, const AttentionDropout& drop, const T* q, const T* k, const T* v, T* o, T* lse,
                  Scratch<T>& scratch) {
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
    ConstRowMap<T> Kj(k + kv_head + j * bs * D, bs, D);
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
    if (drop.on()) {
      const uint64_t n0 = static_cast<uint64_t>(bh * T_ + i * bs + r) * T_;  // element (bh, t, 0)
      AttentionMaskReader mask(drop);
      for (int64_t jj = 0; jj < n; ++jj)
        for (int64_t c = 0; c < bs; ++c) {
          T& x = S(r, jj * bs + c);
          x = mask.keeps(n0 + kb[jj] * bs + c) ? x * static_cast<T>(drop.scale) : T(0);
        }
    }
  }
  RowMap<T> Oi(o + head + i * bs * D, bs, D);
  for (int64_t jj = 0; jj < n; ++jj) {
    ConstRowMap<T> Vj(v + kv_head + kb[jj] * bs * D, bs, D);
    if (jj == 0)
      Oi.noalias() = S.middleCols(0, bs) * Vj;
    else
      Oi.noalias() += S.middleCols(jj * bs, bs) * Vj;
  }
}

}  // namespace

void op::BlockAttention::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int64_t B = s[0], H = s[1], T_ = s[2], D = s[3], G = H / in[1].size(1);  // query heads per k/v head
  const AttentionLayout& L = *attrs.layout;
  const int64_t nb = L.blocks(), bs = L.block_size();
  const int64_t tasks = B * H * nb;
  const int64_t work = B * L.nnz() * bs * bs * D;  // multiply-adds of Q·Kᵀ (and of P·V)
  const double scale = detail::attention_scale(attrs.scale, D);
  const AttentionDropout drop = detail::attention_dropout_on_host(in, 3, attrs.dropout, attrs.seed, attrs.start);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* q = in[0].data<T>();
    const T* k = in[1].data<T>();
    const T* v = in[2].data<T>();
    T* o = out[0].data<T>();
    T* lse = out[1].data<T>();
    auto task = [&](int64_t t, Scratch<T>& scratch) {
      const int64_t bh = t / nb, i = t % nb, kv_head = bh / G * T_ * D;  // (b, h / G) in [B, H / G, T, D]
      attend_block<T>(L, bh, bh % H, kv_head, i, T_, D, static_cast<T>(scale), drop, q, k, v, o, lse, scratch);
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

std::vector<Tensor> op::BlockAttention::backward(const BackwardContext& ctx, const Attrs& attrs) {
  std::vector<Tensor> in{ctx.grad_output(0), ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0),
                         ctx.output(1)};
  if (ctx.num_inputs() == 4) in.push_back(ctx.input(3));  // the Philox base: the same mask
  std::vector<Tensor> d = call<op::BlockAttentionBackward>(
      {attrs.layout, attrs.scale, attrs.dropout, attrs.seed, attrs.start}, in);
  for (int i = 0; i < 3; ++i)
    if (!ctx.needs_input_grad(i)) d[i] = Tensor();
  if (ctx.num_inputs() == 4) d.push_back(Tensor());  // no gradient for the base
  return d;
}

}  // namespace tessera
