#include "kernels/sum_squares/sum_squares.h"

#include <algorithm>
#include <cstdint>

#include "core/half.h"
#include "kernels/common/dispatch.h"

namespace tessera {

Tensor sum_squares(const std::vector<Tensor>& xs) { return call<op::SumSquares>({}, xs)[0]; }

std::vector<TensorMeta> op::SumSquares::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  TS_CHECK(!in.empty(), ValueError, "sum_squares: expected at least one input, got none");
  check_floating(kName, in[0], "input 0");
  for (size_t k = 1; k < in.size(); ++k) {
    TS_CHECK(in[k].dtype == in[0].dtype, DTypeError,
             "sum_squares: input " << k << " " << in[k] << " does not match input 0 " << in[0] << " (one dtype)");
    TS_CHECK(in[k].device == in[0].device, DeviceError,
             "sum_squares: input " << k << " " << in[k] << " is not on the device of input 0 " << in[0]);
  }
  return {TensorMeta{Shape{}, DType::f64, in[0].device}};
}

namespace {

// x² rounded to the element type as mul(x, x) stores it, then widened to f64. bf16/f16 arrive as
// their bits: the product of the f32 values is rounded once to the half type.
inline double square(float x) { return static_cast<double>(x * x); }
inline double square(double x) { return x * x; }
struct Bf16 {
  static double square(uint16_t b) {
    const float f = bf16_bits_to_float(b);
    return bf16_bits_to_float(float_to_bf16_bits(f * f));
  }
};
struct F16 {
  static double square(uint16_t b) {
    const float f = f16_bits_to_float(b);
    return f16_bits_to_float(float_to_f16_bits(f * f));
  }
};

// Σ_{i in [i0, i1)} square(x[i]) in f64, in index order.
template <class Sq, class T>
double chunk_sum(const T* x, int64_t i0, int64_t i1, Sq sq) {
  double s = 0;
  for (int64_t i = i0; i < i1; ++i) s += sq(x[i]);
  return s;
}

}  // namespace

// Work items (tensor k, chunk c) of kParallelGrain elements each, summed in parallel into
// partials[item]; the partials are then added in item order, so the result does not depend on
// the number of threads.
void op::SumSquares::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  struct Item {
    size_t k;
    int64_t i0, i1;
  };
  std::vector<Item> items;
  for (size_t k = 0; k < in.size(); ++k)
    for (int64_t i0 = 0; i0 < in[k].numel(); i0 += kParallelGrain)
      items.push_back({k, i0, std::min(in[k].numel(), i0 + kParallelGrain)});
  std::vector<double> partials(items.size(), 0.0);
  const DType dt = in[0].dtype();
  const int64_t n_items = static_cast<int64_t>(items.size());
#pragma omp parallel for if (n_items > 1)
  for (int64_t j = 0; j < n_items; ++j) {
    const Item& it = items[j];
    const void* x = in[it.k].data_ptr();
    switch (dt) {
      case DType::f32:
        partials[j] = chunk_sum(static_cast<const float*>(x), it.i0, it.i1, [](float v) { return square(v); });
        break;
      case DType::f64:
        partials[j] = chunk_sum(static_cast<const double*>(x), it.i0, it.i1, [](double v) { return square(v); });
        break;
      case DType::bf16:
        partials[j] = chunk_sum(static_cast<const uint16_t*>(x), it.i0, it.i1, &Bf16::square);
        break;
      default:  // f16 (infer admits floating dtypes only)
        partials[j] = chunk_sum(static_cast<const uint16_t*>(x), it.i0, it.i1, &F16::square);
        break;
    }
  }
  double total = 0;
  for (double p : partials) total += p;
  *static_cast<double*>(out[0].data_ptr()) = total;
}

}  // namespace tessera
