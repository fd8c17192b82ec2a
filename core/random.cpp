#include "core/random.h"

#include <cmath>

#include "core/philox.h"

namespace tessera {

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

enum class Dist { uniform, normal };

// Draws n standard values (uniform [0,1) or N(0,1)), scaled by `a` and shifted by `b`.
Tensor draw(const Shape& shape, Dist dist, double a, double b, Generator& gen, TensorOptions opts, const char* op) {
  DType dt = opts.dtype_or(DType::f32);
  TS_CHECK(is_floating(dt), DTypeError, op << ": dtype must be floating point, got " << dt);
  bool rg = opts.requires_grad_;
  Tensor out = empty(shape, opts.dtype(dt).requires_grad(false));
  TS_CHECK(out.device().is_cpu(), NotImplementedError, op << ": drawing on " << out.device() << " is not available yet");
  const uint64_t n = static_cast<uint64_t>(out.numel()), seed = gen.seed();
  if (dt == DType::f64) {
    double* p = out.data<double>();
    uint64_t start = gen.reserve(dist == Dist::uniform ? philox::blocks_for_pairs(n) : n);
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
      double z = dist == Dist::uniform ? philox::uniform_f64(seed, start, i) : philox::normal_f64(seed, start, i);
      p[i] = a * z + b;
    }
  } else {
    // f32, and bf16/f16 rounded from the f32 values (so half draws match f32 draws).
    Tensor f = dt == DType::f32 ? out : empty(shape, DType::f32);
    float* p = f.data<float>();
    uint64_t start =
        gen.reserve(dist == Dist::uniform ? philox::blocks_for_uniform_f32(n) : philox::blocks_for_pairs(n));
    const float fa = static_cast<float>(a), fb = static_cast<float>(b);
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
      float z = dist == Dist::uniform ? philox::uniform_f32(seed, start, i) : philox::normal_f32(seed, start, i);
      p[i] = fa * z + fb;
    }
    if (dt != DType::f32) convert_elements(p, DType::f32, out.data_ptr(), dt, out.numel());
  }
  if (rg) out.requires_grad_();
  return out;
}

}  // namespace

Tensor uniform(const Shape& shape, double low, double high, Generator& gen, TensorOptions opts) {
  TS_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, ValueError,
           "uniform(): need finite low <= high, got [" << low << ", " << high << ")");
  return draw(shape, Dist::uniform, high - low, low, gen, opts, "uniform");
}
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts) {
  return uniform(shape, low, high, default_generator(), opts);
}

Tensor normal(const Shape& shape, double mean, double std, Generator& gen, TensorOptions opts) {
  TS_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, ValueError,
           "normal(): need finite mean and std >= 0, got mean " << mean << ", std " << std);
  return draw(shape, Dist::normal, std, mean, gen, opts, "normal");
}
Tensor normal(const Shape& shape, double mean, double std, TensorOptions opts) {
  return normal(shape, mean, std, default_generator(), opts);
}

Tensor bernoulli(const Shape& shape, double p, Generator& gen, TensorOptions opts) {
  TS_CHECK(p >= 0 && p <= 1, ValueError, "bernoulli(): probability must be in [0, 1], got " << p);
  bool rg = opts.requires_grad_;
  Tensor out = empty(shape, opts.dtype(opts.dtype_or(DType::f32)).requires_grad(false));
  TS_CHECK(out.device().is_cpu(), NotImplementedError, "bernoulli(): drawing on " << out.device() << " is not available yet");
  const uint64_t n = static_cast<uint64_t>(out.numel()), seed = gen.seed();
  const uint64_t start = gen.reserve(philox::blocks_for_uniform_f32(n));
  std::vector<uint8_t> bits(n);
  const float fp = static_cast<float>(p);
  for (uint64_t i = 0; i < n; ++i) bits[i] = philox::uniform_f32(seed, start, i) < fp ? 1 : 0;
  convert_elements(bits.data(), DType::u8, out.data_ptr(), out.dtype(), out.numel());
  if (rg) out.requires_grad_();
  return out;
}
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts) {
  return bernoulli(shape, p, default_generator(), opts);
}

}  // namespace tessera
