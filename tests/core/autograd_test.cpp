#include <gtest/gtest.h>

#include "core/autograd.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;

TEST(Autograd, LeafGradientsAccumulateAcrossBackwardCalls) {
  Tensor w = tensor({1, 2, 3}).requires_grad_();
  sum(mul(w, 2.0)).backward();
  EXPECT_TRUE(all_close(w.grad(), {2, 2, 2}));
  sum(mul(w, 3.0)).backward();
  EXPECT_TRUE(all_close(w.grad(), {5, 5, 5}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, TensorUsedTwiceGetsBothContributions) {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor y = add(x, x);          // dy/dx = 2
  Tensor z = sum(add(y, x));     // dz/dx = 3
  z.backward();
  EXPECT_TRUE(all_close(x.grad(), {3, 3}));
}

TEST(Autograd, DiamondGraph) {
  Tensor x = tensor({1, 2, 3}).requires_grad_();
  Tensor a = mul(x, 2.0), b = mul(x, 5.0);
  Tensor y = sum(add(a, b));
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), {7, 7, 7}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = tensor({1, 2}).requires_grad_();
  {
    NoGradGuard g;
    Tensor y = mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(Autograd, DetachCutsTheGraph) {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor d = mul(x, 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  Tensor y = sum(add(mul(x, 1.0), d));
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), {1, 1}));
}

TEST(Autograd, SavedTensorsAreFreedUnlessRetained) {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor b = tensor({1, 0, 0, 1}, {2, 2}).requires_grad_();
  Tensor y = sum(matmul(a, b));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // second pass works because the first retained the graph
  EXPECT_TRUE(all_close(a.grad(), {2, 2, 2, 2}));
  try {
    y.backward();
    FAIL() << "a third backward must fail: saved tensors were freed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
}

TEST(Autograd, RetainGradOnIntermediate) {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor h = mul(x, 3.0);
  h.retain_grad();
  sum(mul(h, 2.0)).backward();
  EXPECT_TRUE(all_close(h.grad(), {2, 2}));
  EXPECT_TRUE(all_close(x.grad(), {6, 6}));
}

TEST(Autograd, ErrorsNameTheProblem) {
  Tensor x = tensor({1, 2});
  EXPECT_THROW(sum(x).backward(), ValueError);  // nothing requires grad
  Tensor w = tensor({1, 2}).requires_grad_();
  EXPECT_THROW(mul(w, 2.0).backward(), ShapeError);  // non-scalar without a gradient
  EXPECT_THROW(mul(w, 2.0).backward(tensor({1, 2, 3})), ShapeError);
}

TEST(Autograd, LongChainDoesNotOverflowTheStack) {
  Tensor x = tensor({1.0}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = add(y, x);
  sum(y).backward();
  EXPECT_TRUE(all_close(x.grad(), {200001}));
  // Dropping the last handle frees the 200000-node chain without recursing through it.
  y = Tensor();
}

}  // namespace
}  // namespace tessera
