// cross_entropy (and cross_entropy_backward through it): values against −log(softmax) in
// double, reductions, ignore_index, stability, gradients, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_randn;

// Per-row −log(softmax(x_i)[t_i]) in double (0 where t_i == ignore).
std::vector<double> ref_rows(const Tensor& logits, const std::vector<int32_t>& t, int32_t ignore = -100) {
  std::vector<double> x = logits.to_vector<double>();
  const int64_t v = logits.size(1);
  std::vector<double> loss(t.size(), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore) continue;
    double mx = x[i * v];
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, x[i * v + j]);
    double s = 0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[i * v + j] - mx);
    loss[i] = -std::log(std::exp(x[i * v + t[i]] - mx) / s);
  }
  return loss;
}

Tensor targets_of(const std::vector<int32_t>& t) { return from_vector(t, {static_cast<int64_t>(t.size())}); }

void expect_message_has(const std::string& what, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
}

TEST(CrossEntropy, HandValues) {
  // Row 0: logits [1, 2, 3], target 2: lse − 3 = log(1 + e^-1 + e^-2); row 1: uniform over 3: log 3.
  Tensor logits = tensor({1, 2, 3, 1, 1, 1}, {2, 3}, DType::f64);
  Tensor t = targets_of({2, 0});
  const double l0 = std::log(1 + std::exp(-1.0) + std::exp(-2.0)), l1 = std::log(3.0);
  EXPECT_TRUE(
      all_close(cross_entropy(logits, t, CrossEntropyOptions().reduction(Reduction::none)), {l0, l1}, 1e-12));
  EXPECT_TRUE(all_close(cross_entropy(logits, t), {(l0 + l1) / 2}, 1e-12));
  EXPECT_TRUE(
      all_close(cross_entropy(logits, t, CrossEntropyOptions().reduction(Reduction::sum)), {l0 + l1}, 1e-12));
  EXPECT_EQ(cross_entropy(logits, t).shape(), Shape{});
}

TEST(CrossEntropy, RandomAgainstReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor logits = test_randn({5, 11}, 2, dt);
    std::vector<int32_t> tv{3, 0, 10, 7, 7};
    std::vector<double> ref = ref_rows(logits, tv);
    double total = 0;
    for (double l : ref) total += l;
    EXPECT_TRUE(all_close(
        cross_entropy(logits, targets_of(tv), CrossEntropyOptions().reduction(Reduction::none)), ref, 1e-5));
    EXPECT_TRUE(all_close(cross_entropy(logits, targets_of(tv)), {total / 5}, 1e-5));
  }
  // Large enough for the parallel loops.
  Tensor big = test_randn({300, 257}, 3, DType::f32);
  std::vector<int32_t> tv(300);
  for (int i = 0; i < 300; ++i) tv[i] = (i * 37) % 257;
  tv[5] = -100;
  std::vector<double> ref = ref_rows(big, tv);
  double total = 0;
  for (double l : ref) total += l;
  EXPECT_TRUE(all_close(cross_entropy(big, targets_of(tv)), {total / 299}, 1e-5));
}

TEST(CrossEntropy, HalfLogits) {
  Tensor logits = test_randn({4, 9}, 9, DType::f32);
  Tensor half = from_vector(logits.to_vector<float>(), logits.shape(), DType::bf16);
  std::vector<int32_t> tv{8, 0, 4, -100};
  std::vector<double> ref = ref_rows(half, tv);
  Tensor loss = cross_entropy(half, targets_of(tv), CrossEntropyOptions().reduction(Reduction::sum));
  EXPECT_EQ(loss.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(loss, {ref[0] + ref[1] + ref[2]}, 1e-2));
}

TEST(CrossEntropy, IgnoreIndex) {
  Tensor logits = test_randn({3, 4}, 4);
  std::vector<int32_t> tv{1, -100, 3};
  std::vector<double> ref = ref_rows(logits, tv);
  EXPECT_TRUE(
      all_close(cross_entropy(logits, targets_of(tv), CrossEntropyOptions().reduction(Reduction::none)),
                {ref[0], 0.0, ref[2]}, 1e-12));
  EXPECT_TRUE(
      all_close(cross_entropy(logits, targets_of(tv)), {(ref[0] + ref[2]) / 2}, 1e-12));  // mean over 2
  // A custom ignore_index (here a valid class, 0).
  std::vector<int32_t> tz{0, 2, 0};
  std::vector<double> rz = ref_rows(logits, tz, 0);
  EXPECT_TRUE(all_close(cross_entropy(logits, targets_of(tz), CrossEntropyOptions().ignore_index(0)), {rz[1]},
                        1e-12));
}

TEST(CrossEntropy, AllIgnoredIsZeroNotNaN) {
  Tensor logits = test_randn({2, 5}, 5).requires_grad_();
  Tensor t = targets_of({-100, -100});
  Tensor loss = cross_entropy(logits, t);
  EXPECT_TRUE(all_close(loss, {0.0}));
  loss.backward();
  EXPECT_TRUE(all_close(logits.grad(), std::vector<double>(10, 0.0)));
  // No rows at all: mean is 0 as well.
  EXPECT_TRUE(all_close(cross_entropy(zeros({0, 3}), from_vector(std::vector<int32_t>{}, {0})), {0.0}));
}

TEST(CrossEntropy, LargeLogitsStayFinite) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor logits = tensor({1000, 1001, 1002, 1000, 1000, 1000}, {2, 3}, dt).requires_grad_();
    Tensor loss = cross_entropy(logits, targets_of({0, 1}), CrossEntropyOptions().reduction(Reduction::none));
    const double l0 = std::log(1 + std::exp(1.0) + std::exp(2.0)), l1 = std::log(3.0);
    EXPECT_TRUE(all_close(loss, {l0, l1}, 1e-5));
    sum(loss).backward();
    for (double g : logits.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(CrossEntropy, BackwardValues) {
  // dlogits = (softmax − onehot) · g / count for mean.
  Tensor logits = test_randn({3, 4}, 6).requires_grad_();
  std::vector<int32_t> tv{2, -100, 0};
  cross_entropy(logits, targets_of(tv)).backward(full({}, 3.0, DType::f64));
  std::vector<double> x = logits.to_vector<double>(), want(12, 0.0);
  for (int i : {0, 2}) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += std::exp(x[i * 4 + j]);
    for (int j = 0; j < 4; ++j) want[i * 4 + j] = (std::exp(x[i * 4 + j]) / s - (j == tv[i])) * 3.0 / 2;
  }
  EXPECT_TRUE(all_close(logits.grad(), want, 1e-12, 1e-14));
}

TEST(CrossEntropy, Gradients) {
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    CrossEntropyOptions opts = CrossEntropyOptions().reduction(red);
    Tensor t = targets_of({6, 0, 3});
    auto f = [opts, t](const std::vector<Tensor>& x) { return cross_entropy(x[0], t, opts); };
    EXPECT_TRUE(gradcheck(f, {test_randn({3, 7}, 7)}));
    // With ignored rows (and the targets passed as an input: gradcheck leaves them alone).
    auto fi = [opts](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1], opts); };
    EXPECT_TRUE(gradcheck(fi, {test_randn({5, 3}, 8), targets_of({2, -100, 1, -100, 0})}));
  }
}

TEST(CrossEntropy, Errors) {
  Tensor logits = zeros({3, 5});
  try {
    cross_entropy(logits, zeros({3}));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    expect_message_has(e.what(), {"cross_entropy", "targets", "f32[3]"});
  }
  try {
    cross_entropy(logits, targets_of({1, 2}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    expect_message_has(e.what(), {"cross_entropy", "[2]", "[3, 5]"});
  }
  try {
    cross_entropy(zeros({5}), targets_of({1}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    expect_message_has(e.what(), {"cross_entropy", "[5]"});
  }
  try {
    cross_entropy(logits, targets_of({1, 7, 2}));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    expect_message_has(e.what(), {"cross_entropy", "target 7", "V = 5"});
  }
  EXPECT_THROW(cross_entropy(logits, targets_of({1, -1, 2})), ValueError);
  EXPECT_THROW(cross_entropy(logits, targets_of({-100, 0, 5})), ValueError);
  // The check also guards the parallel path (and the backward kernel).
  std::vector<int32_t> tv(300, 1);
  tv[299] = 257;
  EXPECT_THROW(cross_entropy(zeros({300, 257}), targets_of(tv)), ValueError);
  EXPECT_THROW(cross_entropy_backward(logits, targets_of({0, 9, 0}), full({}, 1.0)), ValueError);
  // reduction mean wants a 0-d g.
  EXPECT_THROW(cross_entropy_backward(logits, targets_of({0, 1, 0}), zeros({3})), ShapeError);
}

}  // namespace
}  // namespace tessera
