// The op machinery: how an op is described once and then run eagerly, symbolically
// (shape rule only), or traced into a graph.
//
// An op is a struct in namespace tessera::op, in kernels/<op>/, that derives from OpBase and
// provides (the op structs have a namespace of their own so that a user's `using namespace
// tessera;` never makes a bare `Linear` or `LayerNorm` name an op instead of the nn:: layer)
//
//   struct Add : OpBase {
//     static constexpr const char* kName = "add";
//     struct Attrs {};                                          // typed parameters
//     static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
//     static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
//     static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
//     static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
//   };
//
// - infer is the shape/dtype rule and holds every argument check (it runs on symbolic
//   tensors too, so it must not look at data);
// - cpu computes into preallocated contiguous outputs (f32/f64; bf16/f16 arrive as f32
//   unless the op sets kHalfNative);
// - cuda (in kernels/<op>/<op>.cu, CUDA builds) does the same on the device's stream
//   (core/cuda/check.cuh), bf16/f16 as they are; launch errors are checked after every op;
// - backward maps output gradients to input gradients using other ops (so it works on every
//   device and when traced); an op whose gradient needs its own kernel calls a separate
//   <op>_backward op there. Non-differentiable ops set kDifferentiable = false.
// - inputs/outputs the backward rule reads are declared in kSaveInputs / kSaveOutputs (bit i
//   = input/output i); the rule cannot see anything else. Ops never capture tensors.
//
// The public function runs it: `Tensor add(a, b) { return call<op::Add>({}, {a, b})[0]; }`.
//
// Layering: the op machinery is core's base. Ops (kernels/) include it; it includes no op.
// BackwardContext::grad_output, whose missing gradients are zeros made by the fill op, is
// defined above the ops, with the backward pass (core/engine/backward.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "tessera/build_config.h"
#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace tessera {

/// Defaults for the optional parts of an op description.
struct OpBase {
  static constexpr unsigned kSaveInputs = 0;   ///< bit i: backward reads input i
  static constexpr unsigned kSaveOutputs = 0;  ///< bit i: backward reads output i
  static constexpr bool kDifferentiable = true;
  /// Output k may share the buffer of input k (same meta): the kernel reads element i of its
  /// inputs before writing element i of its outputs. Planners reuse buffers on this promise.
  static constexpr bool kInPlace = false;
  static constexpr bool kHalfNative = false;   ///< cpu() handles bf16/f16 itself (copies, casts)
  static constexpr bool kView = false;         ///< output 0 is a view of input 0 (see view_offset)
  /// Draws random numbers from the Philox stream fixed in its attributes, which then have
  /// `uint64_t seed` and `uint64_t start` (first block). Such an op also takes an optional last
  /// input, its Philox base: an i32 tensor of shape {2} on the op's device holding the low and
  /// high 32 bits of a block offset added to `start` (the CUDA kernel reads it on the device).
  /// Compiled steps append it: their nodes keep `start` relative to the step's share of the
  /// stream and the executor writes each run's base into it, so a captured CUDA graph stays valid.
  /// An op whose drawing depends on its attributes (block attention draws only with dropout > 0)
  /// also declares `static bool draws_random(const Attrs&)`: false makes it an ordinary op.
  static constexpr bool kRandom = false;
  /// Joins work that runs beside the device's stream (collective_wait after an all_reduce):
  /// compiled steps place it as late as they can, after the last backward node, so that the
  /// work it joins overlaps the rest of backward.
  static constexpr bool kJoin = false;
};

/// What a backward rule sees.
class BackwardContext {
 public:
  BackwardContext(const Node& node, std::vector<Tensor>& grad_outputs) : node_(node), grad_outputs_(grad_outputs) {}

  /// Gradient w.r.t. output i. An output that received none reads as zeros, made on first
  /// access (so rules that ignore an output, e.g. layer_norm's statistics, cost nothing).
  const Tensor& grad_output(int i = 0) const;
  /// Saved input i; ValueError if the op did not declare it in kSaveInputs.
  const Tensor& input(int i) const;
  /// Saved output i; ValueError if the op did not declare it in kSaveOutputs.
  const Tensor& output(int i) const;
  const TensorMeta& input_meta(int i) const;
  const TensorMeta& output_meta(int i) const;
  int num_inputs() const { return static_cast<int>(node_.input_metas.size()); }
  /// Whether input i needs a gradient (rules may skip work for the others).
  bool needs_input_grad(int i) const;
  /// Whether the rule may return input i's gradient in f32 although the input is bf16/f16: the
  /// input is a cast of an f32 tensor (autocast's copy of an f32 parameter), whose own gradient
  /// is f32. The engine then sums that input's gradients in f32 and hands them to the cast
  /// unrounded, so a kernel that can write f32 (bsmm_dw) skips a bf16 rounding and a cast pass.
  bool input_grad_may_be_f32(int i) const;

 private:
  const Node& node_;
  std::vector<Tensor>& grad_outputs_;
};

/// An op together with its attributes: the unit eager mode runs and graphs store.
class OpInstance {
 public:
  virtual ~OpInstance() = default;
  virtual const char* name() const = 0;
  /// Shape/dtype rule (throws on bad arguments).
  virtual std::vector<TensorMeta> infer(const std::vector<TensorMeta>& inputs) const = 0;
  /// Runs the kernel for the inputs' device into preallocated outputs.
  virtual void compute(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const = 0;
  /// Input gradients (undefined where none) from output gradients.
  virtual std::vector<Tensor> backward(const BackwardContext& ctx) const = 0;
  /// For views: byte offset of output 0 inside input 0's storage, else nullopt.
  virtual std::optional<size_t> view_offset(const std::vector<TensorMeta>& inputs) const = 0;
  virtual bool differentiable() const = 0;
  virtual bool in_place_safe() const = 0;
  /// Draws random numbers from (seed, start) attributes: a traced copy would repeat them.
  virtual bool random() const = 0;
  /// Random ops: the Philox seed and first block their attributes fix; others {0, 0}.
  virtual std::pair<uint64_t, uint64_t> random_stream() const = 0;
  /// Random ops: a copy that draws from block `start` instead (same seed); others ValueError.
  virtual std::shared_ptr<const OpInstance> with_random_start(uint64_t start) const = 0;
  virtual unsigned saved_inputs_mask() const = 0;
  virtual unsigned saved_outputs_mask() const = 0;
  /// OpBase::kJoin: scheduled after the last backward node in compiled steps.
  virtual bool joins() const = 0;
};

/// Receives every op applied while it is installed (the graph tracer; tools that log or count ops).
class Tracer {
 public:
  virtual ~Tracer() = default;
  virtual void record(const std::shared_ptr<const OpInstance>& op, const std::vector<Tensor>& inputs,
                      const std::vector<Tensor>& outputs) = 0;
  /// `alias` is a new handle on `of`'s data (detach(), saved tensors): the same value.
  virtual void alias(const Tensor& alias, const Tensor& of) { (void)alias, (void)of; }
  /// While installed, every op runs symbolically (shape rules only), even one without inputs.
  virtual bool symbolic() const { return false; }
};

/// The tracer of this thread (nullptr when none).
Tracer* current_tracer();
/// Installs `t` for this thread; returns the previous one.
Tracer* set_current_tracer(Tracer* t);

/// Number of kernels run so far by this process (all threads); for tests and profiling.
uint64_t kernels_run();

namespace detail {

/// Runs `op` on `inputs`: device check, shape rule, output allocation (or view, or symbolic
/// outputs when any input is symbolic), kernel, tracer, autograd node.
std::vector<Tensor> run_op(const std::shared_ptr<const OpInstance>& op, const std::vector<Tensor>& inputs);

/// Runs `op`'s kernel into existing `outputs` (checked against the shape rule); no autograd.
/// Used for in-place accumulation and by executors.
void run_op_into(const OpInstance& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

/// CPU compute with bf16/f16 arguments widened to f32 around a kernel that takes f32/f64.
void compute_cpu_widened(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                         void (*kernel)(const std::vector<Tensor>&, const std::vector<Tensor>&, const void*),
                         const void* attrs);

void count_kernel();

/// The device an op's kernel runs on: the first CUDA device among its inputs and outputs (a
/// copy between devices runs there), else the CPU.
Device kernel_device(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

/// Whether op struct Op declares a CUDA kernel `static void cuda(in, out, attrs)` (defined in its
/// kernels/<op>/<op>.cu). Ops without one raise NotImplementedError on CUDA tensors.
template <class Op, class = void>
struct has_cuda_kernel : std::false_type {};
template <class Op>
struct has_cuda_kernel<Op, std::void_t<decltype(&Op::cuda)>> : std::true_type {};

/// Whether op struct Op declares `static bool draws_random(const Attrs&)` (see OpBase::kRandom).
template <class Op, class = void>
struct has_draws_random : std::false_type {};
template <class Op>
struct has_draws_random<Op, std::void_t<decltype(&Op::draws_random)>> : std::true_type {};

template <class Op>
class OpInstanceT final : public OpInstance {
 public:
  using Attrs = typename Op::Attrs;
  explicit OpInstanceT(Attrs attrs) : attrs_(std::move(attrs)) {}

  const Attrs& attrs() const { return attrs_; }
  const char* name() const override { return Op::kName; }
  std::vector<TensorMeta> infer(const std::vector<TensorMeta>& inputs) const override {
    return Op::infer(inputs, attrs_);
  }
  void compute(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    const Device dev = kernel_device(in, out);
    count_kernel();
    if (dev.is_cuda()) return compute_cuda(in, out, dev);
    if constexpr (Op::kHalfNative) {
      Op::cpu(in, out, attrs_);
    } else {
      compute_cpu_widened(in, out, &cpu_thunk, &attrs_);
    }
  }
  std::vector<Tensor> backward(const BackwardContext& ctx) const override {
    if constexpr (Op::kDifferentiable) {
      return Op::backward(ctx, attrs_);
    } else {
      TS_THROW(NotImplementedError, Op::kName << " is not differentiable");
    }
  }
  std::optional<size_t> view_offset(const std::vector<TensorMeta>& inputs) const override {
    if constexpr (Op::kView) {
      return Op::view_offset(inputs, attrs_);
    } else {
      (void)inputs;
      return std::nullopt;
    }
  }
  bool differentiable() const override { return Op::kDifferentiable; }
  bool in_place_safe() const override { return Op::kInPlace; }
  bool random() const override {
    if constexpr (has_draws_random<Op>::value) {
      return Op::kRandom && Op::draws_random(attrs_);
    } else {
      return Op::kRandom;
    }
  }
  std::pair<uint64_t, uint64_t> random_stream() const override {
    if constexpr (Op::kRandom) {
      return {attrs_.seed, attrs_.start};
    } else {
      return {0, 0};
    }
  }
  std::shared_ptr<const OpInstance> with_random_start(uint64_t start) const override {
    if constexpr (Op::kRandom) {
      Attrs a = attrs_;
      a.start = start;
      return std::make_shared<OpInstanceT<Op>>(std::move(a));
    } else {
      (void)start;
      TS_THROW(ValueError, Op::kName << " draws no random numbers");
    }
  }
  unsigned saved_inputs_mask() const override { return Op::kSaveInputs; }
  unsigned saved_outputs_mask() const override { return Op::kSaveOutputs; }
  bool joins() const override { return Op::kJoin; }

 private:
  // CUDA kernels take bf16/f16 as they are (no widening) and run on the device's stream.
  void compute_cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, Device dev) const {
#ifdef TESSERA_WITH_CUDA
    if constexpr (has_cuda_kernel<Op>::value) {
      cuda::set_device(dev.index);
      Op::cuda(in, out, attrs_);
      cuda::check_op(Op::kName, dev.index);
      return;
    }
#endif
    (void)in, (void)out;
    TS_THROW(NotImplementedError, Op::kName << ": no CUDA kernel yet (tensors on " << dev << ")");
  }
  static void cpu_thunk(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const void* attrs) {
    Op::cpu(in, out, *static_cast<const Attrs*>(attrs));
  }
  Attrs attrs_;
};

}  // namespace detail

/// Applies op `Op` with `attrs` to `inputs` and returns its outputs.
template <class Op>
std::vector<Tensor> call(typename Op::Attrs attrs, const std::vector<Tensor>& inputs) {
  return detail::run_op(std::make_shared<detail::OpInstanceT<Op>>(std::move(attrs)), inputs);
}

/// Runs op `Op` with `attrs` on `inputs` into the existing tensors `outputs` (ATen's `*_out`
/// form), recording no autograd: for in-place updates and accumulation into a buffer one owns.
/// Each output must have exactly the meta the op's shape rule gives (ValueError for a wrong
/// count, ShapeError for a wrong meta, naming the op and the output). An output may share the
/// buffer of an input only where the op allows it: ops with kInPlace (the optimizer updates:
/// output k over input k), and elementwise ops over their same-meta input (add, mul,
/// mul_scalar, copy...), which read element i before they write it.
template <class Op>
void call_out(typename Op::Attrs attrs, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  detail::run_op_into(detail::OpInstanceT<Op>(std::move(attrs)), inputs, outputs);
}

/// The output metas that op `Op` with `attrs` gives for inputs of metas `inputs` (its shape
/// rule: throws on bad arguments as the op would), e.g. to allocate outputs for call_out.
template <class Op>
std::vector<TensorMeta> output_metas(const typename Op::Attrs& attrs, const std::vector<TensorMeta>& inputs) {
  return Op::infer(inputs, attrs);
}

/// Shape rule helper: throws DTypeError unless `m` is floating (names op and input).
void check_floating(const char* op, const TensorMeta& m, const char* what = "input");
/// Shape rule helper: throws DTypeError unless a and b share a dtype.
void check_same_dtype(const char* op, const TensorMeta& a, const TensorMeta& b);
/// Shape rule helper: throws ValueError unless there are `n` inputs.
void check_num_inputs(const char* op, const std::vector<TensorMeta>& in, size_t n);

}  // namespace tessera
