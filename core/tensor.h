// Tensor: a cheap shared handle to a contiguous, row-major n-d array.
//
//   using namespace tessera;
//   Tensor w = normal({784, 10}, 0.0, 0.01).requires_grad_();
//   Tensor x = ones({32, 784});
//   Tensor loss = mean(matmul(x, w));
//   loss.backward();                      // w.grad() now holds d loss / d w
//   std::cout << w.grad() << "\n";        // prints shape, dtype, device and values
//
// Copies of a Tensor share the same impl (storage, shape, grad, autograd node).
// A tensor without storage is *symbolic*: it has shape, dtype and device only, and
// ops on it run their shape rules but no kernels (used to trace graphs).
//
// Layering: this header is core's base, which includes no op. The few functions declared here
// that run an op are defined above the ops, in core's engine: to(), clone(), full/zeros/ones
// (core/engine/tensor_ops.cpp) and backward() (core/engine/backward.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tessera {

class Node;

/// Shape, dtype and device of a tensor: all an op's shape rule sees.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string str() const;  ///< "f32[2, 3]@cpu"
  bool operator==(const TensorMeta& o) const {
    return shape == o.shape && dtype == o.dtype && device == o.device;
  }
};

std::ostream& operator<<(std::ostream& os, const TensorMeta& m);

/// What a Tensor handle points to. Users go through Tensor; ops and the autograd engine
/// read the fields directly.
struct TensorImpl {
  std::shared_ptr<Storage> storage;  ///< null for symbolic tensors
  size_t offset = 0;                 ///< bytes into storage
  TensorMeta meta;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  ///< accumulated gradient (leaves, or retain_grad)
  std::shared_ptr<Node> grad_fn;     ///< the node that made this tensor (null for leaves)
  int output_nr = 0;                 ///< which output of grad_fn this is
  bool retains_grad = false;         ///< non-leaf that keeps its .grad
  /// Leaves: called by each backward pass once this leaf's gradient is final in it (every
  /// contribution of the pass added), in the order they were added (Tensor::add_grad_ready_hook).
  std::vector<std::function<void()>> grad_ready_hooks;
};

/// Creation options with chainable setters: TensorOptions().dtype(DType::f64).requires_grad(true).
struct TensorOptions {
  std::optional<DType> dtype_;
  Device device_;
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}  // NOLINT: implicit so zeros(s, DType::f64) reads well
  TensorOptions& dtype(DType t) { dtype_ = t; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
  TensorOptions& requires_grad(bool r) { requires_grad_ = r; return *this; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
};

class Tensor {
 public:
  /// An undefined tensor (defined() is false); used for "no gradient" and optional inputs.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const TensorMeta& meta() const { return checked()->meta; }
  const Shape& shape() const { return meta().shape; }
  int dim() const { return shape().ndim(); }
  int64_t size(int d) const { return shape()[d]; }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const { return meta().dtype; }
  Device device() const { return meta().device; }
  size_t nbytes() const { return meta().nbytes(); }
  /// True when the tensor has no storage (made by symbolic() or by an op on symbolic tensors).
  bool is_symbolic() const { return checked()->storage == nullptr; }

  /// Raw pointer to the first element; Error for symbolic tensors.
  void* data_ptr() const;
  /// Typed pointer; DTypeError unless T matches dtype().
  template <class T> T* data() const {
    TS_CHECK(dtype() == dtype_of<T>::value, DTypeError,
             "data<" << dtype_name(dtype_of<T>::value) << ">() called on a " << dtype() << " tensor");
    return static_cast<T*>(data_ptr());
  }

  /// Values converted to T (any numeric dtype; bf16/f16 widened exactly); CUDA tensors are
  /// copied to the host first (waiting for their stream).
  template <class T> std::vector<T> to_vector() const;
  /// The single value of a one-element tensor, converted to T.
  template <class T> T item() const;

  // ---- autograd ----
  bool requires_grad() const { return checked()->requires_grad; }
  /// Marks a leaf as requiring grad (floating dtypes only). Returns *this.
  Tensor& requires_grad_(bool r = true);
  /// Gradient accumulated by backward() (undefined until then).
  Tensor grad() const;
  void set_grad(const Tensor& g);
  /// Drops the accumulated gradient.
  void zero_grad();
  /// A leaf has no grad_fn: made by the user, not by an op on tensors requiring grad.
  bool is_leaf() const { return checked()->grad_fn == nullptr; }
  /// Keeps .grad on this non-leaf tensor during backward().
  Tensor& retain_grad();
  /// Calls fn in each backward pass once this leaf's gradient is final in that pass (after the
  /// last contribution the pass adds to .grad; also when the pass adds none), before backward
  /// returns: data parallelism reduces a bucket of gradients as soon as all of them are final,
  /// while the rest of backward still runs. Eager backward only (a compiled step's traced
  /// backward does not run them). ValueError on a non-leaf.
  Tensor& add_grad_ready_hook(std::function<void()> fn);
  /// Removes every grad-ready hook of this leaf.
  void clear_grad_ready_hooks();
  /// Same storage, no autograd history, requires_grad false.
  Tensor detach() const;
  /// Reverse-mode differentiation from this tensor. `grad` defaults to 1 for a scalar;
  /// saved tensors are freed afterwards unless `retain_graph`.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  /// A new tensor with a copy of the data (differentiable; the copy op).
  Tensor clone() const;
  /// The data on `device` (this tensor itself when it is there already); differentiable (the
  /// to_device op).
  Tensor to(Device device) const;

  /// Shape, dtype, device and (for CPU tensors) values, nested like numpy.
  std::string str() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  TensorImpl* checked() const {
    TS_CHECK(impl_ != nullptr, ValueError, "use of an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- creation ----

/// Uninitialized tensor.
Tensor empty(const Shape& shape, TensorOptions opts = {});
/// Tensors filled with one value (on CUDA by the fill op).
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
/// [start, start+step, ...) below end (above, for negative step); f32 unless opts say otherwise.
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
/// 0, 1, ..., n-1 as i32 unless opts say otherwise.
Tensor arange(int64_t n, TensorOptions opts = DType::i32);
/// A tensor holding `values` (converted to opts' dtype, default the type of T) in `shape`.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions opts = {});
/// 1-D f32 tensor from literal values: tensor({1, 2, 3}).
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
/// Literal values in a shape: tensor({1, 2, 3, 4}, {2, 2}).
Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions opts = {});
/// A symbolic tensor: shape, dtype and device, no storage.
Tensor symbolic(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());

/// Copies n elements of dtype `src_t` to dtype `dst_t`, converting (CPU memory).
void convert_elements(const void* src, DType src_t, void* dst, DType dst_t, int64_t n);

}  // namespace tessera
