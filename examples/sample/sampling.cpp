// Temperature / top-k sampling (see sampling.h for the math).
#include "examples/sample/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace tessera {
namespace examples {

std::vector<double> sampling_probabilities(const std::vector<float>& logits, const SamplingOptions& opts) {
  const int64_t V = static_cast<int64_t>(logits.size());
  TS_CHECK(V > 0, ValueError, "sampling: no logits");
  TS_CHECK(std::isfinite(opts.temperature) && opts.temperature >= 0, ValueError,
           "sampling: temperature must be finite and >= 0, got " << opts.temperature);
  TS_CHECK(opts.top_k >= 0, ValueError, "sampling: top_k must be >= 0, got " << opts.top_k);
  for (int64_t i = 0; i < V; ++i)
    TS_CHECK(std::isfinite(logits[i]), ValueError, "sampling: logit " << i << " is " << logits[i]);

  // Ids by decreasing logit, ties by increasing id: the first k are the top-k set K.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const int64_t k = opts.top_k == 0 ? V : std::min(opts.top_k, V);
  const double max_logit = logits[order[0]];

  std::vector<double> p(V, 0.0);
  if (opts.temperature == 0) {  // greedy: all mass on the first largest logit
    p[order[0]] = 1.0;
    return p;
  }
  // exp((l - max) / T) <= 1, and = 1 for the largest, so the sum z >= 1 never underflows.
  double z = 0;
  for (int64_t r = 0; r < k; ++r) {
    const int32_t i = order[r];
    z += p[i] = std::exp((logits[i] - max_logit) / opts.temperature);
  }
  for (double& x : p) x /= z;
  return p;
}

int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& opts, Generator& gen) {
  const std::vector<double> p = sampling_probabilities(logits, opts);
  if (opts.temperature == 0) return static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  const double u = uniform({1}, 0.0, 1.0, gen, DType::f64).item<double>();  // u in [0, 1)
  // Inverse CDF: the first id whose cumulative probability passes u. Rounding can leave the total
  // a hair below 1; then u falls past the end and the last id with p > 0 is the answer.
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    cum += p[i];
    if (u < cum) return last;
  }
  return last;
}

std::vector<int32_t> sample_causal_windows(const std::function<Tensor(const Tensor& window)>& logits_of, int64_t T,
                                           int32_t first, int64_t count, const SamplingOptions& opts,
                                           Generator& gen) {
  std::vector<int32_t> context{first}, ids;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(context.size()), T);
    std::vector<int32_t> window(static_cast<size_t>(T), 0);  // [T]: the context, then zeros
    std::copy(context.end() - n, context.end(), window.begin());
    const Tensor logits = logits_of(from_vector(window, {T}));  // [T, V]
    const int64_t V = logits.size(1);
    const std::vector<float> all = logits.to_vector<float>();
    const int32_t id = sample_token({all.begin() + (n - 1) * V, all.begin() + n * V}, opts, gen);
    context.push_back(id);
    ids.push_back(id);
  }
  return ids;
}

}  // namespace examples
}  // namespace tessera
