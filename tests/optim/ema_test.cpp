// EMA of weights: the averages against the closed form after several updates, swap() and
// apply_to() for evaluation (parameters keep their buffers), and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::EMA;
using testing::all_close;
using testing::expect_error;

TEST(EMA, AveragesInClosedForm) {
  // Parameter values x_0 (at construction), x_1, x_2, x_3: with decay d the shadow is
  //   d³·x_0 + (1-d)·(d²·x_1 + d·x_2 + x_3).
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-6 : 1e-15;
    const double d = 0.9;
    const std::vector<std::vector<double>> xs = {{1.0, -2.0, 4.0}, {2.0, 0.0, 3.0}, {-1.0, 1.0, 0.5}, {0.0, 5.0, 2.0}};
    Tensor p = from_vector(xs[0], {3}, dt).requires_grad_();
    EMA ema({p}, d);
    for (size_t k = 1; k < xs.size(); ++k) {
      std::memcpy(p.data_ptr(), from_vector(xs[k], {3}, dt).data_ptr(), p.nbytes());
      ema.update();
    }
    std::vector<double> expected(3);
    for (int i = 0; i < 3; ++i)
      expected[i] = d * d * d * xs[0][i] + (1 - d) * (d * d * xs[1][i] + d * xs[2][i] + xs[3][i]);
    EXPECT_TRUE(all_close(ema.shadows()[0], expected, tol, tol)) << dtype_name(dt);
    EXPECT_EQ(ema.num_updates(), 3);
    EXPECT_EQ(ema.shadows()[0].dtype(), dt);
    EXPECT_FALSE(ema.shadows()[0].requires_grad());
  }
}

TEST(EMA, ExplicitDecay) {
  Tensor p = tensor({1.0, 3.0}, DType::f64).requires_grad_();
  EMA ema({p}, 0.999);
  std::memcpy(p.data_ptr(), tensor({3.0, 7.0}, DType::f64).data_ptr(), p.nbytes());
  ema.update(0.5);
  EXPECT_TRUE(all_close(ema.shadows()[0], {2.0, 5.0}));
  ema.update(0.0);  // decay 0: the shadow becomes the parameter
  EXPECT_TRUE(all_close(ema.shadows()[0], {3.0, 7.0}));
}

TEST(EMA, SwapAndApplyTo) {
  Tensor p = tensor({1.0, 2.0}).requires_grad_();
  EMA ema({p}, 0.5);
  std::memcpy(p.data_ptr(), tensor({3.0, 4.0}).data_ptr(), p.nbytes());
  ema.update();  // shadow {2, 3}
  const void* buffer = p.data_ptr();
  ema.swap();
  EXPECT_TRUE(all_close(p, {2.0, 3.0}, 0, 0));
  EXPECT_TRUE(all_close(ema.shadows()[0], {3.0, 4.0}, 0, 0));
  ema.swap();
  EXPECT_TRUE(all_close(p, {3.0, 4.0}, 0, 0));
  EXPECT_TRUE(all_close(ema.shadows()[0], {2.0, 3.0}, 0, 0));
  EXPECT_EQ(p.data_ptr(), buffer);
  EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  Tensor other = zeros({2});
  ema.apply_to({other});
  EXPECT_TRUE(all_close(other, {2.0, 3.0}, 0, 0));
  ema.apply_to();
  EXPECT_TRUE(all_close(p, {2.0, 3.0}, 0, 0));
}

TEST(EMA, Errors) {
  Tensor p = zeros({2}).requires_grad_();
  expect_error<ValueError>([&] { EMA({p}, 1.5); }, {"EMA", "decay"});
  EMA ema({p});
  expect_error<ValueError>([&] { ema.update(-0.1); }, {"EMA", "decay"});
  expect_error<ShapeError>([&] { ema.apply_to({zeros({3})}); }, {"EMA", "f32[3]", "f32[2]"});
  expect_error<ValueError>([&] { ema.apply_to({}); }, {"EMA", "0 tensors", "1 averages"});
}

}  // namespace
}  // namespace tessera
