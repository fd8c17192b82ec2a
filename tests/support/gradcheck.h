// Test support: the f64 finite-difference gradient checkers (of inputs and of parameters),
// value comparisons and reference helpers.
//
//   EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); },
//                         {test_randn({3, 4}), test_randn({4})}));
//   EXPECT_TRUE(parameters_gradcheck(module.named_parameters(), [&] { return module.forward(x); }));
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/graph/trace.h"
#include "core/random.h"
#include "core/sparse/block_layout.h"
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

/// Checks d/dp of L = sum(f() * R) (R = test_randn(f().shape(), seed), fixed) against central
/// differences, for every element of every f64 parameter in `params` (others are skipped).
/// Gradients of the parameters are dropped first, then filled by one backward. `f` must be
/// deterministic and read the parameters in place. Fails if an f64 parameter gets no gradient,
/// or with the parameter name, element and both values.
::testing::AssertionResult parameters_gradcheck(const std::vector<graph::NamedParam>& params,
                                                const std::function<Tensor()>& f, GradcheckOptions opts = {},
                                                uint64_t seed = 77);

/// Random N(0,1) tensor (f64 by default), drawn from a fixed seed so tests are reproducible.
Tensor test_randn(const Shape& shape, uint64_t seed = 1, DType dtype = DType::f64);
/// Random uniform [low, high) tensor.
Tensor test_rand(const Shape& shape, double low, double high, uint64_t seed = 1, DType dtype = DType::f64);
/// Overwrites a (CPU) parameter's values with `values` (same element count; no autograd history).
void set_values(const Tensor& p, const Tensor& values);

/// Elementwise |a - b| <= atol + rtol * |b|; the message names the first bad index.
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol = 1e-6, double atol = 1e-9);
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-6,
                                     double atol = 1e-9);

/// The dense W [C, K] (row-major, as f64) that block-sparse weights w [nnz, bs, bs] on layout `l`
/// stand for: block k at (block_row[k], block_col[k]), scaled by gate[k] when `gate` is given;
/// zeros off the layout.
std::vector<double> dense_from_blocks(const Tensor& w, const BlockLayout& l, const Tensor& gate = Tensor());

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
