// Test support: the f64 finite-difference gradient checker and value comparisons.
//
//   EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); },
//                         {test_randn({3, 4}), test_randn({4})}));
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace tessera {
namespace testing {

struct GradcheckOptions {
  double eps = 1e-6;   ///< central-difference step
  double atol = 1e-6;  ///< |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;
};

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Checks d/dx of L = sum(fn(x) * W) (W fixed, random) against central differences, for
/// every f64 input (other inputs, e.g. indices, are passed through untouched). Inputs are
/// cloned; the function must be deterministic. Fails with the input, element and both values.
::testing::AssertionResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs,
                                     GradcheckOptions opts = {});

/// Random N(0,1) tensor (f64 by default), drawn from a fixed seed so tests are reproducible.
Tensor test_randn(const Shape& shape, uint64_t seed = 1, DType dtype = DType::f64);
/// Random uniform [low, high) tensor.
Tensor test_rand(const Shape& shape, double low, double high, uint64_t seed = 1, DType dtype = DType::f64);

/// Elementwise |a - b| <= atol + rtol * |b|; the message names the first bad index.
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol = 1e-6, double atol = 1e-9);
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-6,
                                     double atol = 1e-9);

/// Runs f and expects an exception of type E whose message contains every word in `words`.
template <class E, class F>
void expect_error(F f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "expected an exception, none was thrown";
  } catch (const E& e) {
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

}  // namespace testing
}  // namespace tessera
