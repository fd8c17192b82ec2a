// Adafactor and its ops against a plain f64 reference written here from the paper's algorithm
// (factored rows/columns for 2-D and 3-D parameters, full for 1-D, β2 = 1 - t^-0.8, update
// clipping active, relative step and parameter scaling, decoupled decay), in f64 and f32;
// in-place runs; a traced update; errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::Adafactor;
using optim::AdafactorOptions;
using testing::all_close;
using testing::expect_error;
using testing::test_rand;
using testing::test_randn;
using Vec = std::vector<double>;

Tensor scalar(double v) { return full({}, v, DType::f64); }

// The factored state's shape for a parameter [..., n, m]: [..., n + m].
Shape factored_shape(const Shape& s) {
  std::vector<int64_t> v(s.begin(), s.end() - 2);
  v.push_back(s[-2] + s[-1]);
  return Shape(v);
}

// Adafactor for one parameter of shape [B, n, m] (factored) or of n elements (full), in f64
// with plain loops, following Shazeer & Stern 2018 (Alg. 4 and 5) with update clipping.
struct Reference {
  AdafactorAttrs a;
  double lr = 0;
  bool factored = false;
  int64_t B = 1, n = 1, m = 1;
  Vec p, row, col, v;
  bool clipped = false;  // whether update clipping was active at some step

  // The optimizer's layout of the factored state: per matrix, its rows then its columns.
  Vec factored_state() const {
    Vec st;
    for (int64_t b = 0; b < B; ++b) {
      st.insert(st.end(), row.begin() + b * n, row.begin() + (b + 1) * n);
      st.insert(st.end(), col.begin() + b * m, col.begin() + (b + 1) * m);
    }
    return st;
  }

  void step(const Vec& g, int t) {
    const double beta = 1.0 - std::pow(static_cast<double>(t), a.decay_rate);
    const size_t N = p.size();
    Vec u(N);
    if (factored) {
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (int64_t j = 0; j < m; ++j) s += g[(b * n + i) * m + j] * g[(b * n + i) * m + j] + a.eps1;
          row[b * n + i] = beta * row[b * n + i] + (1 - beta) * s / m;
        }
        for (int64_t j = 0; j < m; ++j) {
          double s = 0;
          for (int64_t i = 0; i < n; ++i) s += g[(b * n + i) * m + j] * g[(b * n + i) * m + j] + a.eps1;
          col[b * m + j] = beta * col[b * m + j] + (1 - beta) * s / n;
        }
        double mean_row = 0;
        for (int64_t i = 0; i < n; ++i) mean_row += row[b * n + i] / n;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) {
            const double vhat = row[b * n + i] * col[b * m + j] / mean_row;
            u[(b * n + i) * m + j] = g[(b * n + i) * m + j] / std::sqrt(vhat);
          }
      }
    } else {
      for (size_t k = 0; k < N; ++k) {
        v[k] = beta * v[k] + (1 - beta) * (g[k] * g[k] + a.eps1);
        u[k] = g[k] / std::sqrt(v[k]);
      }
    }
    double su = 0, sp = 0;
    for (size_t k = 0; k < N; ++k) su += u[k] * u[k], sp += p[k] * p[k];
    const double clip = std::max(1.0, std::sqrt(su / N) / a.clip_threshold);
    clipped = clipped || clip > 1.0;
    double alpha = a.relative_step ? std::min(1e-2, 1.0 / std::sqrt(static_cast<double>(t))) : lr;
    if (a.scale_parameter) alpha *= std::max(a.eps2, std::sqrt(sp / N));
    for (size_t k = 0; k < N; ++k) p[k] = p[k] - alpha * a.weight_decay * p[k] - alpha * u[k] / clip;
  }
};

// Runs `steps` steps of Adafactor on a parameter of `shape` in f64 and f32 against the
// reference; gradients grow at step 2 so that update clipping engages.
void check_against_reference(const Shape& shape, const AdafactorOptions& o, int steps = 4) {
  const Tensor p0 = test_randn(shape, 3);
  std::vector<Tensor> grads;
  for (int s = 0; s < steps; ++s) grads.push_back(mul(test_randn(shape, 10 + s), s == 1 ? 10.0 : 1.0));
  const bool factored = o.factored() && shape.ndim() >= 2;
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    Reference ref;
    ref.a = o.attrs();
    ref.lr = o.lr();
    ref.factored = factored;
    ref.p = p0.to_vector<double>();
    if (factored) {
      ref.m = shape[-1];
      ref.n = shape[-2];
      ref.B = shape.numel() / (ref.n * ref.m);
      ref.row.assign(ref.B * ref.n, 0.0);
      ref.col.assign(ref.B * ref.m, 0.0);
    } else {
      ref.v.assign(ref.p.size(), 0.0);
    }
    Tensor p = cast(p0, dt).requires_grad_();
    Adafactor opt({p}, o);
    ASSERT_EQ(opt.is_factored(0), factored);
    for (int s = 0; s < steps; ++s) {
      // The f32 run sees the same (rounded) gradient as its reference.
      Tensor g = cast(grads[s], dt);
      ref.step(g.to_vector<double>(), s + 1);
      p.set_grad(g);
      opt.step();
      ASSERT_TRUE(all_close(p, ref.p, tol, tol)) << dtype_name(dt) << " " << shape << " step " << s + 1;
      std::vector<Tensor> st = opt.state();
      ASSERT_EQ(st.size(), 1u);
      if (factored) {
        ASSERT_EQ(st[0].shape(), factored_shape(shape));
        EXPECT_TRUE(all_close(st[0], ref.factored_state(), tol, 0)) << "row/col state, step " << s + 1;
      } else {
        ASSERT_EQ(st[0].shape(), shape);
        EXPECT_TRUE(all_close(st[0], ref.v, tol, 0)) << "v state, step " << s + 1;
      }
    }
    EXPECT_TRUE(ref.clipped) << "update clipping never engaged for " << shape;
  }
}

TEST(Adafactor, FactoredMatrixMatchesReference) {
  check_against_reference({5, 7}, AdafactorOptions(0.01));
  check_against_reference({9, 4}, AdafactorOptions(0.02).weight_decay(0.1));
}

TEST(Adafactor, FactoredBatchOfMatricesMatchesReference) {
  check_against_reference({3, 4, 6}, AdafactorOptions(0.01));
}

TEST(Adafactor, VectorKeepsFullSecondMoment) {
  check_against_reference({11}, AdafactorOptions(0.01));
  check_against_reference({11}, AdafactorOptions(0.03).weight_decay(0.5));
}

TEST(Adafactor, UnfactoredMatrixWhenFactoringIsOff) {
  check_against_reference({5, 7}, AdafactorOptions(0.01).factored(false));
}

TEST(Adafactor, RelativeStepAndParameterScale) {
  check_against_reference({6, 5}, AdafactorOptions().relative_step(true).scale_parameter(true));
  check_against_reference({6, 5}, AdafactorOptions(0.05).scale_parameter(true).eps(1e-30, 2.0));  // eps2 floor
  check_against_reference({13}, AdafactorOptions().relative_step(true));
  check_against_reference({4, 3}, AdafactorOptions(0.01).clip_threshold(0.25).decay_rate(-0.5));
}

TEST(Adafactor, FirstStepOfAVectorIsClippedSign) {
  // t = 1: β2 = 0, v = g² + eps1, u = g/|g| (up to eps1): RMS(u) = 1 = d, so no clipping and
  // p1 = p0 - lr·sign(g).
  Tensor p = tensor({1.0, -2.0, 0.5}, DType::f64).requires_grad_();
  Adafactor opt({p}, AdafactorOptions(0.1));
  p.set_grad(tensor({3.0, -0.01, 2e5}, DType::f64));
  opt.step();
  EXPECT_TRUE(all_close(p, {0.9, -1.9, 0.4}, 1e-12));
  EXPECT_TRUE(all_close(opt.state()[0], {9.0, 1e-4, 4e10}, 1e-12));
}

// Runs `op` into fresh outputs and into outputs aliasing p and the state; both must agree.
template <class Op>
void check_in_place(const AdafactorAttrs& attrs, const std::vector<Tensor>& inputs, const std::vector<int>& state) {
  std::vector<Tensor> fresh = call<Op>(attrs, inputs);
  std::vector<Tensor> in, out;
  for (const Tensor& t : inputs) in.push_back(t.clone());
  for (int k : state) out.push_back(in[k]);
  call_out<Op>(attrs, in, out);
  for (size_t k = 0; k < out.size(); ++k) EXPECT_TRUE(all_close(out[k], fresh[k], 0, 0)) << Op::kName << " " << k;
}

TEST(AdafactorUpdate, InPlaceMatchesFreshOutputs) {
  AdafactorAttrs a;
  a.weight_decay = 0.01;
  a.scale_parameter = true;
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t n : {int64_t{7}, int64_t{40001}}) {  // 40001: the OpenMP path
      check_in_place<op::AdafactorUpdate>(
          a, {test_randn({n}, 1, dt), test_randn({n}, 2, dt), test_rand({n}, 0.1, 2.0, 3, dt), scalar(0.01), scalar(5)},
          {0, 2});
    }
    for (Shape s : {Shape{5, 3}, Shape{301, 211}, Shape{2, 3, 130}}) {
      check_in_place<op::AdafactorFactoredUpdate>(a,
                                              {test_randn(s, 1, dt), test_randn(s, 2, dt),
                                               test_rand(factored_shape(s), 0.1, 2.0, 3, dt), scalar(0.01), scalar(5)},
                                              {0, 2});
    }
  }
}

TEST(AdafactorUpdate, LargeFactoredMatchesReference) {
  // Above the parallel grain: the chunked sums and column blocks agree with the plain reference.
  const Shape s{301, 211};
  AdafactorOptions o(0.01);
  Tensor p = test_randn(s, 5).requires_grad_();
  Reference ref;
  ref.a = o.attrs();
  ref.lr = o.lr();
  ref.factored = true;
  ref.n = 301;
  ref.m = 211;
  ref.p = p.to_vector<double>();
  ref.row.assign(301, 0.0);
  ref.col.assign(211, 0.0);
  Adafactor opt({p}, o);
  for (int t = 1; t <= 2; ++t) {
    Tensor g = test_randn(s, 20 + t);
    ref.step(g.to_vector<double>(), t);
    p.set_grad(g);
    opt.step();
  }
  EXPECT_TRUE(all_close(p, ref.p, 1e-11, 1e-11));
}

TEST(Adafactor, TracedUpdateIsSymbolic) {
  Tensor w = zeros({3, 4}).requires_grad_(), b = zeros({4}).requires_grad_();
  Adafactor opt({w, b});
  std::vector<Tensor> st = opt.state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].shape(), Shape({7}));  // 3 row averages, then 4 column averages
  EXPECT_EQ(st[1].shape(), Shape({4}));
  EXPECT_EQ(opt.state_names(), std::vector<std::string>{"exp_avg_sq"});
  const uint64_t before = kernels_run();
  Tensor lr = symbolic({}, DType::f64), t = symbolic({}, DType::f64);
  std::vector<optim::Write> ww = opt.update(0, symbolic({3, 4}), lr, t), wb = opt.update(1, symbolic({4}), lr, t);
  EXPECT_EQ(kernels_run(), before);
  ASSERT_EQ(ww.size(), 2u);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_TRUE(ww[0].target.same(w) && ww[1].target.same(st[0]));
  EXPECT_TRUE(wb[0].target.same(b) && wb[1].target.same(st[1]));
  for (const auto* ws : {&ww, &wb})
    for (const optim::Write& x : *ws) EXPECT_TRUE(x.value.is_symbolic() && x.value.meta() == x.target.meta());
}

TEST(Adafactor, Errors) {
  Tensor p = zeros({3, 4}).requires_grad_();
  expect_error<ValueError>([&] { Adafactor({p}, AdafactorOptions(-1)); }, {"Adafactor", "lr"});
  expect_error<ValueError>([&] { Adafactor({p}, AdafactorOptions().clip_threshold(0)); },
                           {"Adafactor", "clip_threshold"});
  expect_error<ValueError>([&] { Adafactor({p}, AdafactorOptions().decay_rate(0.8)); },
                           {"Adafactor", "decay_rate"});
  expect_error<ValueError>([&] { Adafactor({p}, AdafactorOptions().eps(-1, 1e-3)); }, {"Adafactor", "eps1"});
  Tensor lr = scalar(0.1), t = scalar(1);
  expect_error<ShapeError>([&] { adafactor_factored_update(p, p, zeros({12}), lr, t); },
                           {"adafactor_factored_update", "state", "f32[12]", "f32[3, 4]", "f32[7]"});
  expect_error<DTypeError>([&] { adafactor_factored_update(p, p, zeros({7}, DType::f64), lr, t); },
                           {"adafactor_factored_update", "state", "f64[7]", "f32[7]"});
  expect_error<ShapeError>([&] { adafactor_factored_update(zeros({4}), zeros({4}), zeros({4}), lr, t); },
                           {"adafactor_factored_update", "2 or more dims", "f32[4]"});
  expect_error<DTypeError>([&] { adafactor_factored_update(p, zeros({3, 4}, DType::f64), zeros({7}), lr, t); },
                           {"adafactor_factored_update", "f32[3, 4]", "f64[3, 4]"});
  expect_error<ShapeError>([&] { adafactor_update(zeros({5}), zeros({5}), zeros({4}), lr, t); },
                           {"adafactor_update", "exp_avg_sq", "f32[4]", "f32[5]"});
  expect_error<ValueError>([&] { adafactor_update(zeros({5}), zeros({5}), zeros({5}), lr, scalar(0)); },
                           {"adafactor_update", "step"});
  AdafactorAttrs bad;
  bad.eps2 = -1;
  expect_error<ValueError>([&] { adafactor_update(zeros({5}), zeros({5}), zeros({5}), lr, t, bad); },
                           {"adafactor_update", "eps2"});
}

}  // namespace
}  // namespace tessera
