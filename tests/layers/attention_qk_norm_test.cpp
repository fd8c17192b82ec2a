// nn::MultiHeadAttention with qk_norm (LayerNorm on the queries and keys): values against a
// reference written as plain loops (both impls, and with grouped-query heads), decoding equal to
// forward, its parameters, and f64 gradient checks of the input and every parameter; the
// max_logit probe of logit growth against loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using Kind = nn::AttentionLayoutKind;
using Impl = nn::AttentionImpl;
using testing::gradcheck;
using testing::parameters_gradcheck;
using testing::set_values;
using testing::test_randn;


std::vector<double> param(const nn::Module& m, const std::string& name) {
  for (const auto& p : m.named_parameters())
    if (p.name == name) return p.tensor.to_vector<double>();
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

// Gains and biases of the norms away from 1 and 0, so that a norm left out or applied to the
// wrong columns shows.
void randomize_norms(const nn::MultiHeadAttention& attn, uint64_t seed) {
  for (const auto& p : attn.named_parameters())
    if (p.name.find("_norm.") != std::string::npos) {
      const double mean = p.name.find("gamma") != std::string::npos ? 1.0 : 0.0;
      set_values(p.tensor, add(test_randn(p.tensor.shape(), seed++), mean));
    }
}

// Dense causal attention with QK-norm as loops, x [B*T, C] batch-major:
//   qkv = x·Wqkv + b                         [B*T, C + 2·Hkv·D], columns q | k | v
//   q = LN(q)·γ_q + β_q over C, k = LN(k)·γ_k + β_k over Hkv·D (mean, biased variance, eps 1e-5)
//   o_h = softmax(q_h·k_{h/G}ᵀ / √D, keys <= query)·v_{h/G};  y = [o_0 | .. | o_{H-1}]·Wproj + bproj
std::vector<double> reference(const nn::MultiHeadAttention& attn, const std::vector<double>& x, int64_t B) {
  const auto& o = attn.options();
  const int64_t T = o.seq_len(), C = o.width(), H = o.heads(), D = C / H, K = o.kv_heads(), G = H / K;
  const int64_t W = C + 2 * K * D;
  const std::vector<double> wq = param(attn, "qkv.weight"), bq = param(attn, "qkv.bias");
  const std::vector<double> wp = param(attn, "proj.weight"), bp = param(attn, "proj.bias");
  const std::vector<double> gq = param(attn, "q_norm.gamma"), betq = param(attn, "q_norm.beta");
  const std::vector<double> gk = param(attn, "k_norm.gamma"), betk = param(attn, "k_norm.beta");
  std::vector<double> y(static_cast<size_t>(B * T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> qkv(static_cast<size_t>(T * W));
    for (int64_t t = 0; t < T; ++t) {
      double* r = &qkv[t * W];
      for (int64_t j = 0; j < W; ++j) {
        r[j] = bq[j];
        for (int64_t c = 0; c < C; ++c) r[j] += x[(b * T + t) * C + c] * wq[c * W + j];
      }
      auto norm = [](double* v, int64_t n, const std::vector<double>& g, const std::vector<double>& beta) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; ++j) mean += v[j] / n;
        for (int64_t j = 0; j < n; ++j) var += (v[j] - mean) * (v[j] - mean) / n;
        for (int64_t j = 0; j < n; ++j) v[j] = (v[j] - mean) / std::sqrt(var + 1e-5) * g[j] + beta[j];
      };
      norm(r, C, gq, betq);
      norm(r + C, K * D, gk, betk);
    }
    std::vector<double> heads(static_cast<size_t>(T * C), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          s[u] = 0;
          for (int64_t d = 0; d < D; ++d) s[u] += qkv[t * W + h * D + d] * qkv[u * W + C + (h / G) * D + d];
          s[u] /= std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[u]);
        }
        for (int64_t u = 0; u <= t; ++u) sum += (s[u] = std::exp(s[u] - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t d = 0; d < D; ++d)
            heads[t * C + h * D + d] += s[u] / sum * qkv[u * W + C + K * D + (h / G) * D + d];
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < C; ++j) {
        double v = bp[j];
        for (int64_t c = 0; c < C; ++c) v += heads[t * C + c] * wp[c * C + j];
        y[(b * T + t) * C + j] = v;
      }
  }
  return y;
}

nn::AttentionOptions tiny(int64_t C, int64_t H, int64_t T) {
  return nn::AttentionOptions(C, H, T).block_size(8).dtype(DType::f64).qk_norm(true);
}

TEST(MultiHeadAttentionQkNorm, MatchesLoopsOnBothImplsAndWithGroupedHeads) {
  struct Case {
    Impl impl;
    int64_t kv_heads;
  };
  for (const Case& c : {Case{Impl::automatic, 0}, Case{Impl::dense, 0}, Case{Impl::automatic, 1}}) {
    SCOPED_TRACE(std::string(nn::attention_impl_name(c.impl)) + " kv_heads " + std::to_string(c.kv_heads));
    Generator gen(3);
    nn::MultiHeadAttention attn(tiny(16, 4, 16).impl(c.impl).kv_heads(c.kv_heads), gen);
    randomize_norms(attn, 11);
    const int64_t B = 2;
    const Tensor x = test_randn({B * 16, 16}, 4);
    const std::vector<double> got = attn.forward(x, B).to_vector<double>();
    const std::vector<double> want = reference(attn, x.to_vector<double>(), B);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-9) << "element " << i;
  }
}

TEST(MultiHeadAttentionQkNorm, ParametersOnlyWhenOn) {
  Generator gen(1);
  nn::MultiHeadAttention on(tiny(24, 4, 16).kv_heads(2), gen);
  std::vector<std::string> names;
  for (const auto& p : on.named_parameters()) names.push_back(p.name + " " + p.tensor.shape().str());
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight [24, 48]", "qkv.bias [48]", "proj.weight [24, 24]",
                                             "proj.bias [24]", "q_norm.gamma [24]", "q_norm.beta [24]",
                                             "k_norm.gamma [12]", "k_norm.beta [12]"}));
  nn::MultiHeadAttention off(tiny(24, 4, 16).qk_norm(false), gen);
  EXPECT_EQ(off.named_parameters().size(), 4u);
}

TEST(MultiHeadAttentionQkNorm, DecodingEqualsForward) {
  Generator gen(5);
  nn::MultiHeadAttention attn(tiny(16, 2, 16).layout(Kind::strided).stride(1), gen);
  randomize_norms(attn, 21);
  attn.eval();
  const int64_t B = 2, T = 16;
  const Tensor x = test_randn({B * T, 16}, 6);
  const std::vector<double> want = attn.forward(x, B).to_vector<double>();
  const std::vector<double> xs = x.to_vector<double>();
  nn::KVCache cache;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> row;
    for (int64_t b = 0; b < B; ++b)
      row.insert(row.end(), xs.begin() + (b * T + t) * 16, xs.begin() + (b * T + t + 1) * 16);
    const std::vector<double> y = attn.decode(from_vector(row, {B, 16}), B, cache).to_vector<double>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < 16; ++c) ASSERT_NEAR(y[b * 16 + c], want[(b * T + t) * 16 + c], 1e-10) << "t " << t;
  }
}

// max_logit (the probe of logit growth): the largest scale·q·k of the last `rows` queries over
// their causal keys, with and without qk_norm and with grouped-query heads, against loops.
TEST(MultiHeadAttentionQkNorm, MaxLogitProbeMatchesLoops) {
  for (int64_t kv : {0, 2})
    for (bool qk : {false, true}) {
      SCOPED_TRACE(std::string(qk ? "qk_norm" : "plain") + " kv_heads " + std::to_string(kv));
      Generator gen(12);
      nn::MultiHeadAttention attn(tiny(16, 4, 16).kv_heads(kv).qk_norm(qk), gen);
      if (qk) randomize_norms(attn, 41);
      const auto& o = attn.options();
      const int64_t T = 16, C = 16, H = 4, D = 4, K = o.kv_heads(), W = C + 2 * K * D, rows = 5;
      const Tensor x = mul(test_randn({T, C}, 13), 3.0);
      // q, k by loops (with the norms when on)
      const std::vector<double> xs = x.to_vector<double>(), wq = param(attn, "qkv.weight"),
                                bq = param(attn, "qkv.bias");
      std::vector<double> y(static_cast<size_t>(T * W));
      for (int64_t t = 0; t < T; ++t) {
        double* r = &y[t * W];
        for (int64_t j = 0; j < W; ++j) {
          r[j] = bq[j];
          for (int64_t c = 0; c < C; ++c) r[j] += xs[t * C + c] * wq[c * W + j];
        }
        if (qk) {
          for (auto [first, n, name] : {std::tuple<int64_t, int64_t, const char*>{0, C, "q_norm"},
                                        std::tuple<int64_t, int64_t, const char*>{C, K * D, "k_norm"}}) {
            const std::vector<double> g = param(attn, std::string(name) + ".gamma"),
                                      b = param(attn, std::string(name) + ".beta");
            double mean = 0, var = 0;
            for (int64_t j = 0; j < n; ++j) mean += r[first + j] / n;
            for (int64_t j = 0; j < n; ++j) var += (r[first + j] - mean) * (r[first + j] - mean) / n;
            for (int64_t j = 0; j < n; ++j) r[first + j] = (r[first + j] - mean) / std::sqrt(var + 1e-5) * g[j] + b[j];
          }
        }
      }
      double want = -1e300;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = T - rows; t < T; ++t)
          for (int64_t u = 0; u <= t; ++u) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += y[t * W + h * D + d] * y[u * W + C + (h / (H / K)) * D + d];
            want = std::max(want, dot / std::sqrt(static_cast<double>(D)));
          }
      // f32 scores: agreement to f32 rounding
      EXPECT_NEAR(attn.max_logit(x, rows), want, 1e-5 * std::max(1.0, std::fabs(want)));
    }
  Generator gen(1);
  nn::MultiHeadAttention attn(tiny(16, 4, 16), gen);
  EXPECT_THROW(attn.max_logit(test_randn({8, 16}, 1), 2), ShapeError);
  EXPECT_THROW(attn.max_logit(test_randn({16, 16}, 1), 17), ValueError);
}

TEST(MultiHeadAttentionQkNorm, Gradients) {
  for (Kind kind : {Kind::dense, Kind::fixed}) {
    SCOPED_TRACE(nn::attention_layout_kind_name(kind));
    Generator gen(7);
    nn::MultiHeadAttention attn(tiny(8, 2, 16).layout(kind).stride(2), gen);
    randomize_norms(attn, 31);
    const int64_t B = 2;
    Tensor x = test_randn({B * 16, 8}, 8);
    EXPECT_TRUE(parameters_gradcheck(attn.named_parameters(), [&] { return attn.forward(x, B); }));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return attn.forward(a[0], B); }, {x}));
  }
}

}  // namespace
}  // namespace tessera
