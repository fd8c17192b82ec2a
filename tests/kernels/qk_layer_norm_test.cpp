// qk_layer_norm (and qk_layer_norm_backward through it): the same bits as layer_norm on q's and
// k's columns with v copied, in f32 and with a bf16 output; f64 finite-difference gradients of y
// and the four parameters; the backward against autograd through the split path; errors.
#include <gtest/gtest.h>

#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// The unfused reference: split into q | k | v, layer_norm q and k, concat.
Tensor reference(const Tensor& y, int64_t cq, const Tensor& gq, const Tensor& bq, const Tensor& gk, const Tensor& bk,
                 double eps) {
  const int64_t ck = (y.size(-1) - cq) / 2;
  const int last = static_cast<int>(y.dim()) - 1;
  const std::vector<Tensor> p = split(y, {cq, ck, ck}, last);
  return concat({layer_norm(p[0], gq, bq, eps), layer_norm(p[1], gk, bk, eps), p[2]}, last);
}

TEST(QkLayerNorm, EqualsLayerNormOnTheColumnsAndCopiesV) {
  // q 12 columns, k and v 4 each (grouped heads), and q = k = v = 8; rows [2, 3] and [5]
  for (auto [cq, ck] : {std::pair<int64_t, int64_t>{12, 4}, {8, 8}}) {
    const Tensor y = test_randn({2, 3, cq + 2 * ck}, 1, DType::f32), gq = test_randn({cq}, 2, DType::f32),
                 bq = test_randn({cq}, 3, DType::f32), gk = test_randn({ck}, 4, DType::f32),
                 bk = test_randn({ck}, 5, DType::f32);
    const Tensor got = qk_layer_norm(y, cq, gq, bq, gk, bk, 1e-5, DType::f32);
    const Tensor want = reference(y, cq, gq, bq, gk, bk, 1e-5);
    EXPECT_EQ(got.shape(), y.shape());
    EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());  // the same bits
    // bf16 out: the f32 values rounded once
    const Tensor half = qk_layer_norm(y, cq, gq, bq, gk, bk, 1e-5, DType::bf16);
    EXPECT_EQ(half.dtype(), DType::bf16);
    EXPECT_EQ(half.to_vector<float>(), cast(want, DType::bf16).to_vector<float>());
  }
  // v passes unchanged, whatever its values (a constant row's q normalizes to beta)
  const Tensor y = from_vector(std::vector<float>{3, 3, 1, 2, 7, -9}, {1, 6});
  const Tensor one = ones({2}), zero = zeros({2});
  const Tensor got = qk_layer_norm(y, 2, one, from_vector(std::vector<float>{0.5f, -0.5f}, {2}), one, zero, 1e-5,
                                   DType::f32);
  const std::vector<float> v = got.to_vector<float>();
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], -0.5f);
  EXPECT_NEAR(v[2], -1.0f, 1e-4);
  EXPECT_NEAR(v[3], 1.0f, 1e-4);
  EXPECT_EQ(v[4], 7.0f);
  EXPECT_EQ(v[5], -9.0f);
}

TEST(QkLayerNorm, Gradients) {
  auto f = [](int64_t cq) {
    return [cq](const std::vector<Tensor>& x) {
      return qk_layer_norm(x[0], cq, x[1], x[2], x[3], x[4], 1e-5, DType::f64);
    };
  };
  EXPECT_TRUE(gradcheck(f(6), {test_randn({3, 14}, 1), test_randn({6}, 2), test_randn({6}, 3), test_randn({4}, 4),
                               test_randn({4}, 5)}));
  EXPECT_TRUE(gradcheck(f(5), {test_randn({2, 2, 9}, 6), test_randn({5}, 7), test_randn({5}, 8), test_randn({2}, 9),
                               test_randn({2}, 10)}));
}

TEST(QkLayerNorm, BackwardMatchesAutogradThroughTheSplitPath) {
  // 300 rows: the parameter gradients' row blocks are exercised
  const int64_t cq = 24, ck = 8;
  std::vector<Tensor> fused{test_randn({300, cq + 2 * ck}, 11), test_randn({cq}, 12), test_randn({cq}, 13),
                            test_randn({ck}, 14), test_randn({ck}, 15)};
  std::vector<Tensor> split_path;
  for (Tensor& t : fused) {
    split_path.push_back(t.detach().clone().requires_grad_());
    t.requires_grad_();
  }
  const Tensor g = test_randn({300, cq + 2 * ck}, 16);
  qk_layer_norm(fused[0], cq, fused[1], fused[2], fused[3], fused[4], 1e-5, DType::f64).backward(g);
  reference(split_path[0], cq, split_path[1], split_path[2], split_path[3], split_path[4], 1e-5).backward(g);
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_TRUE(all_close(fused[i].grad(), split_path[i].grad(), 1e-12, 1e-12)) << "input " << i;
}

TEST(QkLayerNorm, Errors) {
  const Tensor y = zeros({2, 10}), p4 = zeros({4}), p3 = zeros({3});
  const Tensor p5 = zeros({5}), p2 = zeros({2});
  expect_error<ValueError>([&] { qk_layer_norm(y, 5, p5, p5, p2, p2, 1e-5, DType::f32); },
                           {"qk_layer_norm", "10 columns", "q_cols 5"});
  expect_error<ValueError>([&] { qk_layer_norm(y, 10, zeros({10}), zeros({10}), p3, p3, 1e-5, DType::f32); },
                           {"qk_layer_norm", "q_cols 10"});
  expect_error<ShapeError>([&] { qk_layer_norm(y, 4, p4, p4, p3, p4, 1e-5, DType::f32); },
                           {"qk_layer_norm", "bk f32[4]", "must be f32[3]"});
  expect_error<ShapeError>([&] { qk_layer_norm(y, 4, p3, p4, p3, p3, 1e-5, DType::f32); },
                           {"qk_layer_norm", "gq", "[4]"});
  expect_error<ShapeError>([&] { qk_layer_norm(y, 4, zeros({4}, DType::f64), p4, p3, p3, 1e-5, DType::f32); },
                           {"qk_layer_norm", "gq", "f64[4]"});
  expect_error<DTypeError>([&] { qk_layer_norm(zeros({2, 10}, DType::f64), 4, zeros({4}, DType::f64),
                                               zeros({4}, DType::f64), zeros({3}, DType::f64), zeros({3}, DType::f64),
                                               1e-5, DType::bf16); },
                           {"qk_layer_norm", "bf16"});
  EXPECT_THROW(qk_layer_norm(y, 4, p4, p4, p3, p3, -1.0, DType::f32), ValueError);
  EXPECT_THROW(qk_layer_norm(zeros({2, 10}, DType::i32), 4, p4, p4, p3, p3, 1e-5, DType::f32), DTypeError);
  const std::vector<Tensor> st = call<op::QkLayerNorm>({4, 1e-5, std::nullopt}, {y, p4, p4, p3, p3});
  expect_error<ShapeError>([&] { qk_layer_norm_backward(zeros({2, 9}), y, st[1], st[2], st[3], st[4], p4, p3); },
                           {"qk_layer_norm_backward", "g"});
  expect_error<ShapeError>([&] { qk_layer_norm_backward(y, y, st[1], st[2], st[3], st[4], p4, p4); },
                           {"qk_layer_norm_backward", "gk"});
  EXPECT_THROW(qk_layer_norm_backward(y, y, zeros({3}), st[2], st[3], st[4], p4, p3), ShapeError);
}

}  // namespace
}  // namespace tessera
