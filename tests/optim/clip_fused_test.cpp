// Global-norm clipping folded into the update: adam_update (both decay modes) with grad_scale
// equal bitwise to the update on mul(g, cast(s, T)) (every floating dtype, in place too), its
// argument errors; Adam and AdamW with set_clip_norm equal to the unfused formulation written
// out (global_grad_norm, clip_factor, scale_grad, update without grad_scale) bitwise, with no
// kernel per gradient for the clipping; global_grad_norm as one sum_squares per dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::test_rand;
using testing::test_randn;

Tensor scalar(double v) { return full({}, v, DType::f64); }

const DType kFloats[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

Tensor random(const Shape& s, uint64_t seed, DType dt) { return cast(test_randn(s, seed, DType::f64), dt); }

// Inputs (p, g, m, v, lr, step) of dtype dt.
std::vector<Tensor> adam_inputs(const Shape& s, DType dt, uint64_t seed) {
  return {random(s, seed, dt), random(s, seed + 1, dt), cast(mul(test_randn(s, seed + 2), 0.1), dt),
          cast(test_rand(s, 0.0, 0.5, seed + 3), dt), scalar(1e-2), scalar(7)};
}

void expect_grad_scale_is_the_scaled_update(AdamDecay decay) {
  using Op = op::AdamUpdate;
  const Op::Attrs attrs{0.9, 0.99, 1e-8, decay, 0.1};
  uint64_t seed = 10;
  for (DType dt : kFloats) {
    for (const Shape& s : {Shape{1}, Shape{7, 33}, Shape{40001}}) {
      for (double scale : {0.3141592653589793, 1.0 / 3.0, 2.5e-3, 1.0}) {
        std::vector<Tensor> in = adam_inputs(s, dt, seed += 4);
        const Tensor f = scalar(scale);
        // Unfused: g·s as scale_grad computes it, then the update.
        std::vector<Tensor> plain = in;
        plain[1] = optim::scale_grad(in[1], f);
        const std::vector<Tensor> want = call<Op>(attrs, plain);
        std::vector<Tensor> fused_in = in;
        fused_in.push_back(f);
        const std::vector<Tensor> got = call<Op>(attrs, fused_in);
        const std::string what = std::string(decay == AdamDecay::coupled ? "adam " : "adamw ") + dtype_name(dt) +
                                 s.str() + " scale " + std::to_string(scale);
        ASSERT_EQ(got.size(), 3u);
        for (int k = 0; k < 3; ++k) EXPECT_TRUE(all_close(got[k], want[k], 0, 0)) << what << " output " << k;
        // The scale does something (the moments see g·s, not g).
        if (scale != 1.0) {
          EXPECT_FALSE(all_close(got[1], call<Op>(attrs, in)[1], 0, 0)) << what;
        }
        // In place: p', m', v' into the buffers of p, m, v.
        std::vector<Tensor> alias;
        for (const Tensor& t : fused_in) alias.push_back(t.clone());
        call_out<Op>(attrs, alias, {alias[0], alias[2], alias[3]});
        EXPECT_TRUE(all_close(alias[0], want[0], 0, 0)) << what << " in place";
        EXPECT_TRUE(all_close(alias[2], want[1], 0, 0)) << what << " in place";
        EXPECT_TRUE(all_close(alias[3], want[2], 0, 0)) << what << " in place";
      }
    }
  }
}

TEST(GradScale, AdamUpdateDecoupledEqualsTheUpdateOnTheScaledGradientBitwise) {
  expect_grad_scale_is_the_scaled_update(AdamDecay::decoupled);
}

TEST(GradScale, AdamUpdateCoupledEqualsTheUpdateOnTheScaledGradientBitwise) {
  expect_grad_scale_is_the_scaled_update(AdamDecay::coupled);
}

TEST(GradScale, PublicFunctionsTakeItLast) {
  const std::vector<Tensor> in = adam_inputs({5}, DType::f32, 3);
  const Tensor f = scalar(0.25);
  const Tensor gs = optim::scale_grad(in[1], f);
  const AdamDecay w = AdamDecay::decoupled;
  const std::vector<Tensor> a = adam_update(in[0], in[1], in[2], in[3], in[4], in[5], w, 0.9, 0.999, 1e-8, 0.01, f);
  const std::vector<Tensor> b = adam_update(in[0], gs, in[2], in[3], in[4], in[5], w, 0.9, 0.999, 1e-8, 0.01);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(all_close(a[k], b[k], 0, 0));
  const AdamDecay l2 = AdamDecay::coupled;
  const std::vector<Tensor> c = adam_update(in[0], in[1], in[2], in[3], in[4], in[5], l2, 0.9, 0.999, 1e-8, 0.0, f);
  const std::vector<Tensor> d = adam_update(in[0], gs, in[2], in[3], in[4], in[5], l2);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(all_close(c[k], d[k], 0, 0));
  // Symbolic.
  const Tensor p = symbolic({3, 5}), s = symbolic({}, DType::f64);
  for (const Tensor& x : adam_update(p, p, p, p, s, s, w, 0.9, 0.999, 1e-8, 0.01, s))
    EXPECT_TRUE(x.is_symbolic() && x.meta() == p.meta());
}

TEST(GradScale, Errors) {
  const Tensor p = zeros({3}), lr = scalar(0.1), t = scalar(1);
  const AdamDecay w = AdamDecay::decoupled, l2 = AdamDecay::coupled;
  expect_error<DTypeError>([&] { adam_update(p, p, p, p, lr, t, w, 0.9, 0.999, 1e-8, 0.0, full({}, 0.5)); },
                           {"adam_update (adamw)", "grad_scale", "f32[]"});
  const Tensor one_element = full({1}, 0.5, DType::f64);
  expect_error<ShapeError>([&] { adam_update(p, p, p, p, lr, t, l2, 0.9, 0.999, 1e-8, 0.0, one_element); },
                           {"adam_update", "grad_scale", "f64[1]"});
  expect_error<ValueError>([&] { call<op::AdamUpdate>({0.9, 0.999, 1e-8, w, 0.0}, {p, p, p, p, lr, t, lr, lr}); },
                           {"adam_update (adamw)", "expected 6 inputs", "got 8"});
  expect_error<ValueError>([&] { call<op::AdamUpdate>({}, {p, p, p, p, lr}); }, {"adam_update", "got 5"});
}

// ---- optimizers ----

struct Net {
  Tensor w = mul(test_randn({5, 4}, 1, DType::f32), 0.5).detach().requires_grad_();
  Tensor b = test_randn({4}, 2, DType::f64).requires_grad_();
  Tensor c = test_randn({3}, 3, DType::f32).requires_grad_();  // no gradient on odd steps
  std::vector<Tensor> params() const { return {w, b, c}; }
};

// One step written out the old way: factor = clip_factor(global_grad_norm(grads)), then each
// parameter's update on scale_grad(g, factor), copied into p, m, v.
template <class UpdateFn>
void unfused_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& m,
                  std::vector<Tensor>& v, double lr, int64_t step, double max_norm, UpdateFn update) {
  NoGradGuard no_grad;
  const Tensor factor = optim::clip_factor(optim::global_grad_norm(grads), max_norm);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    const std::vector<Tensor> out =
        update(params[i], optim::scale_grad(grads[i], factor), m[i], v[i], scalar(lr), scalar(double(step)));
    copy_into(out[0], params[i]);
    copy_into(out[1], m[i]);
    copy_into(out[2], v[i]);
  }
}

template <class Opt, class Options, class UpdateFn>
void expect_fused_clipping_is_the_unfused_step(const Options& options, UpdateFn update) {
  for (double max_norm : {0.3, 1e3}) {
    Net fused, plain;
    Opt opt(fused.params(), options);
    opt.set_clip_norm(max_norm);
    std::vector<Tensor> m, v;
    for (const Tensor& p : plain.params()) {
      m.push_back(zeros(p.shape(), p.dtype()));
      v.push_back(zeros(p.shape(), p.dtype()));
    }
    for (int64_t s = 1; s <= 4; ++s) {
      std::vector<Tensor> grads = {random({5, 4}, 10 + s, DType::f32), random({4}, 20 + s, DType::f64),
                                   s % 2 ? Tensor() : random({3}, 30 + s, DType::f32)};
      if (s == 1) {  // the small clip norm engages
        const double norm = optim::global_grad_norm(grads).item<double>();
        EXPECT_EQ(norm > max_norm, max_norm < 1.0) << norm;
      }
      for (size_t i = 0; i < grads.size(); ++i)
        if (grads[i].defined()) fused.params()[i].set_grad(grads[i]);
      opt.step();
      opt.zero_grad();
      unfused_step(plain.params(), grads, m, v, options.lr(), s, max_norm, update);
    }
    const std::vector<Tensor> st = opt.state();
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(all_close(fused.params()[i], plain.params()[i], 0, 0)) << "param " << i << " " << max_norm;
      EXPECT_TRUE(all_close(st[i], m[i], 0, 0)) << "exp_avg " << i << " " << max_norm;
      EXPECT_TRUE(all_close(st[3 + i], v[i], 0, 0)) << "exp_avg_sq " << i << " " << max_norm;
    }
  }
}

TEST(ClipInTheUpdate, AdamWEqualsTheUnfusedStepBitwise) {
  const auto o = optim::AdamWOptions(0.05).weight_decay(0.1);
  expect_fused_clipping_is_the_unfused_step<optim::AdamW>(o, [&](auto p, auto g, auto m, auto v, auto lr, auto t) {
    return adam_update(p, g, m, v, lr, t, AdamDecay::decoupled, o.beta1(), o.beta2(), o.eps(), o.weight_decay());
  });
}

TEST(ClipInTheUpdate, AdamEqualsTheUnfusedStepBitwise) {
  const auto o = optim::AdamOptions(0.05).weight_decay(0.1);
  expect_fused_clipping_is_the_unfused_step<optim::Adam>(o, [&](auto p, auto g, auto m, auto v, auto lr, auto t) {
    return adam_update(p, g, m, v, lr, t, AdamDecay::coupled, o.beta1(), o.beta2(), o.eps(), o.weight_decay());
  });
}

// Kernels of one eager step with clipping on, minus those with it off, for n parameters.
template <class Opt, class Options>
uint64_t clipping_kernels(int n, const Options& options) {
  uint64_t counts[2];
  for (int clip = 0; clip < 2; ++clip) {
    std::vector<Tensor> params;
    for (int i = 0; i < n; ++i) {
      params.push_back(test_randn({7, 3}, 40 + i, DType::f32).requires_grad_());
      params.back().set_grad(test_randn({7, 3}, 60 + i, DType::f32));
    }
    Opt opt(params, options);
    if (clip) opt.set_clip_norm(0.5);
    const uint64_t before = kernels_run();
    opt.step();
    counts[clip] = kernels_run() - before;
  }
  return counts[1] - counts[0];
}

TEST(ClipInTheUpdate, NoKernelPerGradientForAdamFamily) {
  // The norm (one sum_squares for one dtype, its sqrt) and the factor cost the same for 2 or 9
  // parameters; the factor rides in the update ops.
  const uint64_t k2 = clipping_kernels<optim::AdamW>(2, optim::AdamWOptions());
  EXPECT_EQ(clipping_kernels<optim::AdamW>(9, optim::AdamWOptions()), k2);
  EXPECT_EQ(clipping_kernels<optim::Adam>(9, optim::AdamOptions()), k2);
  EXPECT_LE(k2, 10u);
  // SGD keeps scale_grad (cast and mul per gradient).
  EXPECT_EQ(clipping_kernels<optim::SGD>(9, optim::SGDOptions(0.1)),
            clipping_kernels<optim::SGD>(2, optim::SGDOptions(0.1)) + 7 * 2);
}

TEST(GlobalGradNorm, OneSumSquaresPerDtypeInFirstAppearanceOrder) {
  const Tensor a = random({5, 3}, 1, DType::f32), b = random({4}, 2, DType::f64), c = random({7}, 3, DType::f32);
  const Tensor d = random({2, 2}, 4, DType::f64), e = random({9}, 5, DType::bf16);
  const uint64_t before = kernels_run();
  const double norm = optim::global_grad_norm({a, b, Tensor(), c, d, e}).item<double>();
  EXPECT_EQ(kernels_run() - before, 6u);  // 3 sum_squares, 2 adds, 1 sqrt
  const double f32 = sum_squares({a, c}).item<double>(), f64 = sum_squares({b, d}).item<double>();
  const double bf16 = sum_squares({e}).item<double>();
  EXPECT_EQ(norm, std::sqrt((f32 + f64) + bf16));
  // Against the plain sum of the squares of the values.
  double ref = 0;
  for (const Tensor& t : {a, b, c, d, e})
    for (double x : mul(t, t).to_vector<double>()) ref += x;
  EXPECT_NEAR(norm, std::sqrt(ref), 1e-14 * std::sqrt(ref));
  EXPECT_EQ(optim::global_grad_norm({Tensor(), Tensor()}).item<double>(), 0.0);
}

}  // namespace
}  // namespace tessera
