#include "gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "kernels/ops.h"

namespace tessera {
namespace testing {

namespace {

double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  std::vector<double> v = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

::testing::AssertionResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone();
    if (c.dtype() == DType::f64) c.requires_grad_();
    xs.push_back(c);
  }
  Tensor out = fn(xs);
  if (out.dtype() != DType::f64) return ::testing::AssertionFailure() << "gradcheck: output dtype is " << out.dtype() << ", expected f64";
  Generator gen(12345);
  Tensor w = normal(out.shape(), 0.0, 1.0, gen, DType::f64);
  const std::vector<double> wv = w.to_vector<double>();
  if (!out.requires_grad()) return ::testing::AssertionFailure() << "gradcheck: output does not require grad";
  out.backward(w);

  NoGradGuard no_grad;
  for (size_t j = 0; j < xs.size(); ++j) {
    if (xs[j].dtype() != DType::f64) continue;
    Tensor analytic = xs[j].grad();
    std::vector<double> a = analytic.defined() ? analytic.to_vector<double>() : std::vector<double>(xs[j].numel(), 0.0);
    double* p = xs[j].data<double>();
    for (int64_t e = 0; e < xs[j].numel(); ++e) {
      const double orig = p[e];
      p[e] = orig + opts.eps;
      double lp = weighted_sum(fn(xs), wv);
      p[e] = orig - opts.eps;
      double lm = weighted_sum(fn(xs), wv);
      p[e] = orig;
      double numeric = (lp - lm) / (2 * opts.eps);
      if (!(std::abs(a[e] - numeric) <= opts.atol + opts.rtol * std::abs(numeric)))
        return ::testing::AssertionFailure() << "gradcheck: input " << j << " " << xs[j].shape() << ", element " << e
                                             << ": analytic " << a[e] << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult parameters_gradcheck(const std::vector<graph::NamedParam>& params,
                                                const std::function<Tensor()>& f, GradcheckOptions opts,
                                                uint64_t seed) {
  for (const graph::NamedParam& p : params) Tensor(p.tensor).zero_grad();
  Tensor out = f();
  if (out.dtype() != DType::f64)
    return ::testing::AssertionFailure() << "parameters_gradcheck: output dtype is " << out.dtype() << ", expected f64";
  if (!out.requires_grad()) return ::testing::AssertionFailure() << "parameters_gradcheck: output does not require grad";
  const Tensor r = test_randn(out.shape(), seed);
  sum(mul(out, r)).backward();

  NoGradGuard no_grad;
  auto loss = [&] { return sum(mul(f(), r)).item<double>(); };
  for (const graph::NamedParam& p : params) {
    if (p.tensor.dtype() != DType::f64) continue;
    if (!p.tensor.grad().defined()) return ::testing::AssertionFailure() << p.name << " got no gradient";
    const std::vector<double> analytic = p.tensor.grad().to_vector<double>();
    double* v = p.tensor.data<double>();
    for (int64_t e = 0; e < p.tensor.numel(); ++e) {
      const double orig = v[e];
      v[e] = orig + opts.eps;
      const double lp = loss();
      v[e] = orig - opts.eps;
      const double lm = loss();
      v[e] = orig;
      const double numeric = (lp - lm) / (2 * opts.eps);
      if (!(std::abs(analytic[e] - numeric) <= opts.atol + opts.rtol * std::abs(numeric)))
        return ::testing::AssertionFailure() << "parameters_gradcheck: " << p.name << " " << p.tensor.shape()
                                             << ", element " << e << ": analytic " << analytic[e] << " vs numeric "
                                             << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> dense_from_blocks(const Tensor& w, const BlockLayout& l, const Tensor& gate) {
  const int64_t bs = l.block_size(), K = l.out_features();
  const std::vector<double> wv = w.to_vector<double>();
  const std::vector<double> gv = gate.defined() ? gate.to_vector<double>() : std::vector<double>();
  std::vector<double> d(l.in_features() * K, 0.0);
  for (int64_t k = 0; k < l.nnz(); ++k)
    for (int64_t i = 0; i < bs; ++i)
      for (int64_t j = 0; j < bs; ++j)
        d[(l.block_row()[k] * bs + i) * K + l.block_col()[k] * bs + j] =
            wv[(k * bs + i) * bs + j] * (gate.defined() ? gv[k] : 1.0);
  return d;
}

Tensor test_randn(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return normal(shape, 0.0, 1.0, gen, dtype);
}

Tensor test_rand(const Shape& shape, double low, double high, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return uniform(shape, low, high, gen, dtype);
}

void set_values(const Tensor& p, const Tensor& values) {
  std::vector<double> v = values.to_vector<double>();
  convert_elements(v.data(), DType::f64, p.data_ptr(), p.dtype(), p.numel());
}

::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected, double rtol, double atol) {
  if (actual.numel() != static_cast<int64_t>(expected.size()))
    return ::testing::AssertionFailure() << "all_close: " << actual.numel() << " elements vs " << expected.size()
                                         << " expected";
  std::vector<double> a = actual.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    bool both_nan = std::isnan(a[i]) && std::isnan(expected[i]);
    bool same_inf = std::isinf(a[i]) && a[i] == expected[i];
    if (!both_nan && !same_inf && !(std::abs(a[i] - expected[i]) <= atol + rtol * std::abs(expected[i])))
      return ::testing::AssertionFailure() << "all_close: element " << i << " is " << a[i] << ", expected "
                                           << expected[i] << " (shape " << actual.shape() << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "all_close: shape " << actual.shape() << " vs expected " << expected.shape();
  return all_close(actual, expected.to_vector<double>(), rtol, atol);
}

}  // namespace testing
}  // namespace tessera
