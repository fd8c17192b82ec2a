#include "core/tensor.h"

#include <cmath>
#include <sstream>

#include "core/op.h"

namespace tessera {

std::string TensorMeta::str() const {
  std::ostringstream os;
  os << dtype << shape << '@' << device;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const TensorMeta& m) { return os << m.str(); }

void* Tensor::data_ptr() const {
  const TensorImpl* t = checked();
  TS_CHECK(t->storage != nullptr, ValueError,
           "cannot access the data of symbolic tensor " << t->meta
                                                         << " (it has a shape but no storage; are you reading a value while tracing?)");
  return static_cast<char*>(t->storage->data()) + t->offset;
}

template <class T> std::vector<T> Tensor::to_vector() const {
  if (device().is_cuda()) return to(Device::cpu()).to_vector<T>();
  std::vector<T> out(static_cast<size_t>(numel()));
  convert_elements(data_ptr(), dtype(), out.data(), dtype_of<T>::value, numel());
  return out;
}

template <class T> T Tensor::item() const {
  TS_CHECK(!is_symbolic(), ValueError,
           "item(): cannot read the value of symbolic tensor " << meta() << " (reading values is not allowed while tracing)");
  TS_CHECK(numel() == 1, ShapeError, "item(): tensor of shape " << shape() << " has " << numel() << " elements, expected 1");
  return to_vector<T>()[0];
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int32_t Tensor::item<int32_t>() const;
template uint8_t Tensor::item<uint8_t>() const;

Tensor& Tensor::requires_grad_(bool r) {
  TensorImpl* t = checked();
  TS_CHECK(!r || is_floating(t->meta.dtype), DTypeError,
           "requires_grad_(): only floating-point tensors can require grad, got " << t->meta.dtype);
  TS_CHECK(t->grad_fn == nullptr || r, ValueError,
           "requires_grad_(false) on a non-leaf tensor; use detach() instead");
  t->requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(checked()->grad); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    TS_CHECK(g.meta() == meta(), ShapeError, "set_grad(): gradient " << g.meta() << " does not match tensor " << meta());
  checked()->grad = g.impl_ptr();
}

void Tensor::zero_grad() { checked()->grad.reset(); }

Tensor& Tensor::retain_grad() {
  checked()->retains_grad = true;
  return *this;
}

Tensor& Tensor::add_grad_ready_hook(std::function<void()> fn) {
  TS_CHECK(is_leaf(), ValueError, "add_grad_ready_hook(): " << meta() << " is not a leaf (an op made it)");
  checked()->grad_ready_hooks.push_back(std::move(fn));
  return *this;
}

void Tensor::clear_grad_ready_hooks() { checked()->grad_ready_hooks.clear(); }

Tensor Tensor::detach() const {
  const TensorImpl* t = checked();
  auto d = std::make_shared<TensorImpl>();
  d->storage = t->storage;
  d->offset = t->offset;
  d->meta = t->meta;
  Tensor out(d);
  if (Tracer* tracer = current_tracer()) tracer->alias(out, *this);
  return out;
}

// ---- creation ----
// full, zeros and ones fill CUDA tensors with the fill op: defined in core/engine/tensor_ops.cpp.

Tensor empty(const Shape& shape, TensorOptions opts) {
  auto t = std::make_shared<TensorImpl>();
  t->meta = {shape, opts.dtype_or(DType::f32), opts.device_};
  t->storage = Storage::allocate(t->meta.nbytes(), t->meta.device);
  Tensor out(t);
  if (opts.requires_grad_) out.requires_grad_();
  return out;
}

Tensor symbolic(const Shape& shape, DType dtype, Device device) {
  auto t = std::make_shared<TensorImpl>();
  t->meta = {shape, dtype, device};
  return Tensor(t);
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  TS_CHECK(step != 0 && std::isfinite(step), ValueError, "arange(): step must be finite and non-zero, got " << step);
  double n = std::ceil((end - start) / step);
  std::vector<double> v(static_cast<size_t>(std::max(0.0, n)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i) * step;
  return from_vector(v, Shape{static_cast<int64_t>(v.size())}, opts.dtype(opts.dtype_or(DType::f32)));
}

Tensor arange(int64_t n, TensorOptions opts) {
  return arange(0.0, static_cast<double>(n), 1.0, opts.dtype(opts.dtype_or(DType::i32)));
}

template <class T> Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  TS_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ShapeError,
           "from_vector(): " << values.size() << " values do not fill shape " << shape << " (" << shape.numel() << " elements)");
  bool rg = opts.requires_grad_;
  Tensor out = empty(shape, opts.dtype(opts.dtype_or(dtype_of<T>::value)).requires_grad(false));
  convert_elements(values.data(), dtype_of<T>::value, out.data_ptr(), out.dtype(), out.numel());
  if (rg) out.requires_grad_();
  return out;
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, TensorOptions);

Tensor tensor(std::initializer_list<double> values, TensorOptions opts) {
  return tensor(values, Shape{static_cast<int64_t>(values.size())}, opts);
}

Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions opts) {
  return from_vector(std::vector<double>(values), shape, opts.dtype(opts.dtype_or(DType::f32)));
}

// ---- printing ----

namespace {

// Like numpy: tensors of more than kSummarizeAbove elements show kEdge items at each end of
// every dim longer than 2·kEdge.
constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdge = 3;

void print_values(std::ostream& os, const std::vector<double>& v, const Shape& s, int dim, int64_t base, int indent,
                  bool summarize) {
  if (s.ndim() == 0) {
    os << v[0];
    return;
  }
  int64_t n = s[dim];
  int64_t stride = s.prod(dim + 1, s.ndim());
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << (dim + 1 == s.ndim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdge;
    }
    if (dim + 1 == s.ndim()) {
      os << v[base + i];
    } else {
      print_values(os, v, s, dim + 1, base + i * stride, indent + 1, summarize);
    }
    if (i + 1 < n) os << (dim + 1 == s.ndim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape() << ", dtype=" << dtype() << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  if (is_symbolic()) {
    os << ", symbolic)";
    return os.str();
  }
  os << ")\n";
  if (device().is_cpu()) {
    print_values(os, to_vector<double>(), shape(), 0, 0, 0, numel() > kSummarizeAbove);
  } else {
    os << "<values on " << device() << ">";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace tessera
