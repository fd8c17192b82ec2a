// adam_multi_update, the multi-tensor Adam/AdamW update: bitwise equal to one adam_update
// (of the same decay) per parameter (per-parameter weight decays, with and without grad_scale, empty
// parameters, the OpenMP path), in place equal to fresh outputs, symbolic, argument errors
// naming the parameter; and AdamW's update_all (one op per dtype) equal to update_scaled() per
// parameter on mixed f32/f64 parameters with clipping on; its buckets (params() backwards, closed
// at kAdamBucketElements), one op each.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/op.h"
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

struct Params {
  std::vector<Tensor> p, g, m, v;
  std::vector<double> wd;
};

// Five parameters: 7, none, 40001 (> the OpenMP grain), [3, 5], 1 elements.
Params make_params(DType dt, uint64_t seed) {
  Params s;
  const Shape shapes[] = {{7}, {0}, {40001}, {3, 5}, {1}};
  const double wds[] = {0.0, 0.1, 0.01, 0.5, 0.0};
  for (int i = 0; i < 5; ++i) {
    s.p.push_back(test_randn(shapes[i], ++seed, dt));
    s.g.push_back(test_randn(shapes[i], ++seed, dt));
    s.m.push_back(test_randn(shapes[i], ++seed, dt));
    s.v.push_back(test_rand(shapes[i], 0.0, 2.0, ++seed, dt));
    s.wd.push_back(wds[i]);
  }
  return s;
}

TEST(AdamMultiUpdate, EqualsOneSingleUpdatePerParameterBitwise) {
  const Tensor lr = scalar(0.01), t = scalar(7);
  for (DType dt : {DType::f32, DType::f64}) {
    const Params s = make_params(dt, 10);
    for (AdamDecay decay : {AdamDecay::coupled, AdamDecay::decoupled}) {
      for (const Tensor& scale : {Tensor(), scalar(0.3141592653589793)}) {
        const std::vector<Tensor> got =
            adam_multi_update(s.p, s.g, s.m, s.v, lr, t, decay, 0.8, 0.99, 1e-6, s.wd, scale);
        ASSERT_EQ(got.size(), 15u);
        for (size_t i = 0; i < 5; ++i) {
          const std::vector<Tensor> want =
              adam_update(s.p[i], s.g[i], s.m[i], s.v[i], lr, t, decay, 0.8, 0.99, 1e-6, s.wd[i], scale);
          const std::string what = std::string(dtype_name(dt)) + (decay == AdamDecay::coupled ? " adam" : " adamw") +
                                   (scale.defined() ? " scaled" : "") + " parameter " + std::to_string(i);
          for (size_t k = 0; k < 3; ++k)
            EXPECT_TRUE(all_close(got[k * 5 + i], want[k], 0, 0)) << what << " output " << k;
        }
      }
    }
  }
}

TEST(AdamMultiUpdate, InPlaceMatchesFreshOutputs) {
  const Params s = make_params(DType::f32, 100);
  const op::AdamMultiUpdate::Attrs a{0.9, 0.999, 1e-8, AdamDecay::decoupled, s.wd};
  std::vector<Tensor> in;
  for (const auto* list : {&s.p, &s.g, &s.m, &s.v})
    for (const Tensor& x : *list) in.push_back(x.clone());
  in.push_back(scalar(0.01));
  in.push_back(scalar(3));
  const std::vector<Tensor> fresh = call<op::AdamMultiUpdate>(a, in);
  std::vector<Tensor> out;  // p'_i into p_i, m'_i into m_i, v'_i into v_i
  for (size_t i = 0; i < 5; ++i) out.push_back(in[i]);
  for (size_t i = 0; i < 5; ++i) out.push_back(in[10 + i]);
  for (size_t i = 0; i < 5; ++i) out.push_back(in[15 + i]);
  call_out<op::AdamMultiUpdate>(a, in, out);
  for (size_t k = 0; k < 15; ++k) EXPECT_TRUE(all_close(out[k], fresh[k], 0, 0)) << "output " << k;
}

TEST(AdamMultiUpdate, SymbolicAndErrors) {
  const Tensor ps = symbolic({3, 5}), qs = symbolic({2}), lrs = symbolic({}, DType::f64);
  const std::vector<Tensor> r = adam_multi_update({ps, qs}, {ps, qs}, {ps, qs}, {ps, qs}, lrs, lrs,
                                                  AdamDecay::decoupled, 0.9, 0.999, 1e-8, {0.1, 0.0});
  ASSERT_EQ(r.size(), 6u);
  EXPECT_TRUE(r[1].is_symbolic() && r[1].meta() == qs.meta() && r[4].meta() == ps.meta());

  const Tensor p = zeros({2, 3}), q = zeros({4}), lr = scalar(0.1), t = scalar(1);
  const AdamDecay w = AdamDecay::decoupled;
  expect_error<ValueError>([&] { adam_multi_update({p, q}, {p}, {p, q}, {p, q}, lr, t, w, 0.9, 0.999, 1e-8, {0, 0}); },
                           {"adam_multi_update", "2 params", "1 grads"});
  expect_error<ValueError>([&] { adam_multi_update({}, {}, {}, {}, lr, t, w, 0.9, 0.999, 1e-8, {}); },
                           {"adam_multi_update", "at least one parameter"});
  expect_error<ShapeError>(
      [&] { adam_multi_update({p, q}, {p, q}, {p, zeros({5})}, {p, q}, lr, t, w, 0.9, 0.999, 1e-8, {0, 0}); },
      {"adam_multi_update", "parameter 1", "exp_avg", "f32[5]", "f32[4]"});
  const Tensor d = zeros({4}, DType::f64);
  expect_error<DTypeError>(
      [&] { adam_multi_update({p, d}, {p, d}, {p, d}, {p, d}, lr, t, w, 0.9, 0.999, 1e-8, {0, 0}); },
      {"adam_multi_update", "parameter 1", "f64[4]", "dtype"});
  expect_error<ValueError>(
      [&] { adam_multi_update({p, q}, {p, q}, {p, q}, {p, q}, lr, t, w, 0.9, 0.999, 1e-8, {0, -1}); },
      {"adam_multi_update", "parameter 1", "weight_decay"});
  expect_error<ValueError>(
      [&] { adam_multi_update({p}, {p}, {p}, {p}, lr, scalar(0), w, 0.9, 0.999, 1e-8, {0}); },
      {"adam_multi_update", "step", ">= 1"});
}

// update_all batches the parameters (one op per dtype); the writes hold bitwise what
// update_scaled gives each parameter with the same clip factor.
TEST(AdamMultiUpdate, AdamWUpdateAllEqualsThePerParameterUpdates) {
  NoGradGuard no_grad;
  const std::vector<Shape> shapes = {{5, 3}, {7}, {40001}, {2}};
  const DType dts[] = {DType::f32, DType::f64, DType::f32, DType::f64};
  std::vector<Tensor> params, grads;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(test_randn(shapes[i], 200 + i, dts[i]).requires_grad_());
    grads.push_back(test_randn(shapes[i], 300 + i, dts[i]));
  }
  grads[1] = Tensor();  // no gradient: no update
  optim::AdamW opt({{{params[0], params[1]}, 0.1}, {{params[2], params[3]}, 0.0}}, optim::AdamWOptions(1e-2));
  opt.set_clip_norm(0.5);
  const Tensor lr = scalar(1e-2), t = scalar(1);
  const std::vector<optim::Write> batched = opt.update_all(grads, lr, t);
  ASSERT_EQ(batched.size(), 9u);
  const Tensor factor = optim::clip_factor(optim::global_grad_norm(grads), 0.5);
  EXPECT_LT(factor.item<double>(), 1.0) << "clipping engages";
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) {
    const std::vector<optim::Write> want = opt.update_scaled(i, grads[i], lr, t, factor);
    int found = 0;
    for (const optim::Write& w : batched) {
      for (const optim::Write& e : want) {
        if (w.target.impl() != e.target.impl()) continue;
        ++found;
        EXPECT_TRUE(all_close(w.value, e.value, 0, 0)) << "parameter " << i;
      }
    }
    EXPECT_EQ(found, 3) << "parameter " << i << ": p, m and v are written";
  }
}

// Buckets: params() walked backwards, closed at kAdamBucketElements; one op (one kernel run on
// the CPU) per bucket. Sizes 3M, 2M, 1 elements: {1, 2M} then {3M}.
TEST(AdamMultiUpdate, UpdateAllBucketsTheParametersBackwards) {
  NoGradGuard no_grad;
  std::vector<Tensor> params, grads;
  for (int64_t n : {int64_t{3} << 20, int64_t{2} << 20, int64_t{1}}) {
    params.push_back(zeros({n}).requires_grad_());
    grads.push_back(full({n}, 0.5));
  }
  optim::AdamW opt(params, optim::AdamWOptions(1e-2));
  const Tensor lr = scalar(1e-2), t = scalar(1);
  const uint64_t before = kernels_run();
  const std::vector<optim::Write> w = opt.update_all(grads, lr, t);
  EXPECT_EQ(kernels_run() - before, 2u) << "two buckets";
  ASSERT_EQ(w.size(), 9u);
  EXPECT_EQ(w[0].target.impl(), params[2].impl()) << "the last parameter first";
  EXPECT_EQ(w[3].target.impl(), params[1].impl());
  EXPECT_EQ(w[6].target.impl(), params[0].impl());
  EXPECT_NEAR(w[6].value.to_vector<double>()[0], -1e-2, 1e-6) << "p' = -lr·m̂/(sqrt(v̂) + eps)";
}

}  // namespace
}  // namespace tessera
