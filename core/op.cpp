#include "core/op.h"

#include <string_view>

namespace tessera {

namespace {
thread_local Tracer* g_tracer = nullptr;
std::atomic<uint64_t> g_kernels_run{0};
}  // namespace

Tracer* current_tracer() { return g_tracer; }
Tracer* set_current_tracer(Tracer* t) {
  Tracer* prev = g_tracer;
  g_tracer = t;
  return prev;
}

uint64_t kernels_run() { return g_kernels_run.load(std::memory_order_relaxed); }

// ---- BackwardContext ----

// BackwardContext::grad_output fills missing gradients with zeros (the fill op): defined with the
// backward pass, in core/engine/backward.cpp.

const Tensor& BackwardContext::input(int i) const {
  TS_CHECK(i >= 0 && i < static_cast<int>(node_.saved_inputs.size()) && node_.saved_inputs[i].defined(), ValueError,
           node_.op->name() << " backward: input " << i << " was not declared in kSaveInputs");
  return node_.saved_inputs[i];
}

const Tensor& BackwardContext::output(int i) const {
  TS_CHECK(i >= 0 && i < static_cast<int>(node_.saved_outputs.size()) && node_.saved_outputs[i].defined(), ValueError,
           node_.op->name() << " backward: output " << i << " was not declared in kSaveOutputs");
  return node_.saved_outputs[i];
}

const TensorMeta& BackwardContext::input_meta(int i) const { return node_.input_metas.at(i); }
const TensorMeta& BackwardContext::output_meta(int i) const { return node_.output_metas.at(i); }
bool BackwardContext::needs_input_grad(int i) const { return node_.next.at(i).defined(); }
bool BackwardContext::input_grad_may_be_f32(int i) const {
  const Edge& e = node_.next.at(i);
  const DType dt = node_.input_metas.at(i).dtype;
  return e.node && (dt == DType::bf16 || dt == DType::f16) && e.node->op->name() == std::string_view("cast") &&
         e.node->input_metas.at(0).dtype == DType::f32;
}

// ---- checks shared by shape rules ----

void check_floating(const char* op, const TensorMeta& m, const char* what) {
  TS_CHECK(is_floating(m.dtype), DTypeError, op << ": " << what << " must be floating point, got " << m);
}

void check_same_dtype(const char* op, const TensorMeta& a, const TensorMeta& b) {
  TS_CHECK(a.dtype == b.dtype, DTypeError, op << ": dtypes differ: " << a << " and " << b);
}

void check_num_inputs(const char* op, const std::vector<TensorMeta>& in, size_t n) {
  TS_CHECK(in.size() == n, ValueError, op << ": expected " << n << " inputs, got " << in.size());
}

namespace detail {

void count_kernel() { g_kernels_run.fetch_add(1, std::memory_order_relaxed); }

Device kernel_device(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  for (const std::vector<Tensor>* ts : {&inputs, &outputs})
    for (const Tensor& t : *ts)
      if (t.defined() && t.device().is_cuda()) return t.device();
  return Device::cpu();
}

namespace {

std::vector<TensorMeta> metas_of(const char* op, const std::vector<Tensor>& inputs) {
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TS_CHECK(inputs[i].defined(), ValueError, op << ": input " << i << " is an undefined tensor");
    metas.push_back(inputs[i].meta());
    TS_CHECK(metas[i].device == metas[0].device, DeviceError,
             op << ": inputs are on different devices: " << metas[0] << " and " << metas[i]);
  }
  return metas;
}

Tensor widen(const Tensor& t) {
  if (!is_half(t.dtype())) return t;
  Tensor w = empty(t.shape(), TensorOptions(DType::f32).device(t.device()));
  convert_elements(t.data_ptr(), t.dtype(), w.data_ptr(), DType::f32, t.numel());
  return w;
}

}  // namespace

void compute_cpu_widened(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                         void (*kernel)(const std::vector<Tensor>&, const std::vector<Tensor>&, const void*),
                         const void* attrs) {
  bool any_half = false;
  for (const Tensor& t : inputs) any_half |= t.defined() && is_half(t.dtype());
  for (const Tensor& t : outputs) any_half |= is_half(t.dtype());
  if (!any_half) return kernel(inputs, outputs, attrs);
  // bf16/f16 on CPU: compute in f32, round once when storing.
  std::vector<Tensor> in, out;
  for (const Tensor& t : inputs) in.push_back(t.defined() ? widen(t) : t);
  for (const Tensor& t : outputs)
    out.push_back(is_half(t.dtype()) ? empty(t.shape(), TensorOptions(DType::f32).device(t.device())) : t);
  kernel(in, out, attrs);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!out[i].same(outputs[i]))
      convert_elements(out[i].data_ptr(), DType::f32, outputs[i].data_ptr(), outputs[i].dtype(), outputs[i].numel());
}

std::vector<Tensor> run_op(const std::shared_ptr<const OpInstance>& op, const std::vector<Tensor>& inputs) {
  std::vector<TensorMeta> in_metas = metas_of(op->name(), inputs);
  std::vector<TensorMeta> out_metas = op->infer(in_metas);

  Tracer* tracer = current_tracer();
  bool symbolic_run = tracer && tracer->symbolic();
  for (const Tensor& t : inputs) symbolic_run |= t.is_symbolic();

  std::vector<Tensor> outputs;
  outputs.reserve(out_metas.size());
  std::optional<size_t> view = op->view_offset(in_metas);
  for (size_t i = 0; i < out_metas.size(); ++i) {
    auto impl = std::make_shared<TensorImpl>();
    impl->meta = out_metas[i];
    if (!symbolic_run) {
      if (i == 0 && view) {
        impl->storage = inputs[0].impl()->storage;
        impl->offset = inputs[0].impl()->offset + *view;
      } else {
        impl->storage = Storage::allocate(out_metas[i].nbytes(), out_metas[i].device);
      }
    }
    outputs.emplace_back(impl);
  }
  if (!symbolic_run && !(view && out_metas.size() == 1)) op->compute(inputs, outputs);
  if (tracer) tracer->record(op, inputs, outputs);

  // Autograd: record a node when grad mode is on and some input requires grad.
  if (!GradMode::is_enabled() || !op->differentiable()) return outputs;
  bool any_requires = false;
  for (const Tensor& t : inputs) any_requires |= t.requires_grad();
  if (!any_requires) return outputs;

  auto node = std::make_shared<Node>();
  node->op = op;
  node->input_metas = in_metas;
  node->output_metas = out_metas;
  node->next.resize(inputs.size());
  node->saved_inputs.resize(inputs.size());
  node->saved_outputs.resize(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& impl = inputs[i].impl_ptr();
    if (impl->requires_grad) {
      if (impl->grad_fn) {
        node->next[i].node = impl->grad_fn;
        node->next[i].output_nr = impl->output_nr;
      } else {
        node->next[i].leaf = impl;
      }
    }
    if (op->saved_inputs_mask() & (1u << i)) node->saved_inputs[i] = inputs[i].detach();
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (op->saved_outputs_mask() & (1u << i)) node->saved_outputs[i] = outputs[i].detach();
    node->outputs.push_back(outputs[i].impl_ptr());
    if (is_floating(out_metas[i].dtype)) {
      outputs[i].impl()->requires_grad = true;
      outputs[i].impl()->grad_fn = node;
      outputs[i].impl()->output_nr = static_cast<int>(i);
    }
  }
  return outputs;
}

void run_op_into(const OpInstance& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  std::vector<TensorMeta> out_metas = op.infer(metas_of(op.name(), inputs));
  TS_CHECK(out_metas.size() == outputs.size(), ValueError,
           op.name() << ": " << outputs.size() << " output buffers given, op makes " << out_metas.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    TS_CHECK(outputs[i].meta() == out_metas[i], ShapeError,
             op.name() << ": output buffer " << i << " is " << outputs[i].meta() << ", op makes " << out_metas[i]);
  op.compute(inputs, outputs);
}

}  // namespace detail
}  // namespace tessera
