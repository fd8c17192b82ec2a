#include "layers/lstm.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/autocast.h"
#include "core/graph/trace.h"
#include "core/sparse/generators.h"
#include "kernels/ops.h"

namespace tessera {
namespace nn {

namespace {

constexpr int64_t kGates = 4;  // i, f, o, u

// The per-gate layout of a weight [in, H]: the given one (checked), else random or dense.
LayoutPtr per_gate_layout(const LSTMOptions& o, const LayoutPtr& given, int64_t in, const char* what,
                          uint64_t seed) {
  const int64_t bs = o.block_size(), hs = o.hidden_size();
  if (given) {
    TS_CHECK(given->in_features() == in && given->out_features() == hs && given->block_size() == bs,
             ShapeError,
             "LSTM: " << what << " layout " << given->str() << " must be [" << in << ", " << hs
                      << "] with block size " << bs);
    return given;
  }
  return o.density() < 1 ? random_layout(in, hs, bs, o.density(), seed) : dense_layout(in, hs, bs);
}

}  // namespace

// Full block column g*Q + c (gate g, per-gate column c) is stored when per-gate column c is.
LayoutPtr lstm_gate_layout(const BlockLayout& l) {
  const int64_t rows = l.block_rows(), q = l.block_cols();
  const std::vector<uint8_t> m = l.mask();
  std::vector<uint8_t> full(static_cast<size_t>(rows * kGates * q));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < kGates; ++g)
      for (int64_t c = 0; c < q; ++c) full[(r * kGates + g) * q + c] = m[r * q + c];
  return BlockLayout::from_mask(l.in_features(), kGates * l.out_features(), l.block_size(), full);
}

Projection LSTMCell::make_weight(const std::string& name, int64_t in, int64_t out, const LayoutPtr& layout,
                                 Generator& gen) {
  Projection w(ProjectionOptions(in, out).layout(layout).bias(false).dtype(options_.dtype()), gen);
  register_module(name, w.module());
  return w;
}

LSTMCell::LSTMCell(const LSTMOptions& o, Generator& gen) : options_(o) {
  const int64_t in = o.input_size(), hs = o.hidden_size(), bs = o.block_size();
  TS_CHECK(in > 0 && hs > 0, ValueError,
           "LSTM: input_size (" << in << ") and hidden_size (" << hs << ") must be > 0");
  TS_CHECK(std::isfinite(o.forget_bias()), ValueError,
           "LSTM: forget_bias must be finite, got " << o.forget_bias());
  TS_CHECK(o.density() > 0 && o.density() <= 1, ValueError,
           "LSTM: density " << o.density() << " must be in (0, 1]");
  TS_CHECK(o.recompute_chunk() >= 0, ValueError,
           "LSTM: recompute_chunk " << o.recompute_chunk() << " must be >= 0");
  if (o.cudnn()) {  // one cudnn_lstm op: a plain dense LSTM
    auto conflict = [](bool bad, const char* what) {
      TS_CHECK(!bad, ValueError, "LSTM: cudnn(true) runs a plain dense LSTM; it cannot be combined with " << what);
    };
    conflict(bs > 0, "block_size > 0 (block-sparse weights)");
    conflict(o.layer_norm(), "layer_norm");
    conflict(o.multiplicative(), "multiplicative (mLSTM)");
    conflict(o.recompute_chunk() > 0, "recompute_chunk");
  }
  if (bs == 0) {
    TS_CHECK(o.density() == 1 && !o.input_layout() && !o.recurrent_layout(), ValueError,
             "LSTM: density " << o.density() << " and layouts need block_size > 0 (block_size 0 = dense)");
  } else {
    TS_CHECK(BlockLayout::valid_block_size(bs), ValueError,
             "LSTM: block_size " << bs << " must be 0, 8, 16, 32 or 64");
    TS_CHECK(
        in % bs == 0 && hs % bs == 0, ShapeError,
        "LSTM: input_size " << in << " and hidden_size " << hs << " must be multiples of block_size " << bs);
    input_layout_ = per_gate_layout(o, o.input_layout(), in, "input", o.seed());
    recurrent_layout_ = per_gate_layout(o, o.recurrent_layout(), hs, "recurrent", o.seed() + 1);
  }
  wx_ = make_weight("wx", in, kGates * hs, input_layout_ ? lstm_gate_layout(*input_layout_) : nullptr, gen);
  wh_ = make_weight("wh", hs, kGates * hs, recurrent_layout_ ? lstm_gate_layout(*recurrent_layout_) : nullptr, gen);
  if (o.multiplicative()) {
    wmx_ = make_weight("wmx", in, hs, input_layout_, gen);
    wmh_ = make_weight("wmh", hs, hs, recurrent_layout_, gen);
  }
  bias_ = register_parameter("bias", zeros({kGates * hs}, o.dtype()));
  if (o.layer_norm()) {
    gamma_x_ = register_parameter("gamma_x", ones({kGates * hs}, o.dtype()));
    gamma_h_ = register_parameter("gamma_h", ones({kGates * hs}, o.dtype()));
  }
}

LSTMCell::InputTerms LSTMCell::input_terms(const Tensor& x) const {
  const int64_t in = options_.input_size();
  TS_CHECK(x.dim() == 2 && x.size(1) == in, ShapeError,
           "LSTM: x " << x.meta() << " must be [N, " << in << "]");
  InputTerms t;
  Tensor gx = wx_.forward(x);  // [N, 4H]
  if (options_.layer_norm()) gx = layer_norm(gx, gamma_x_);
  t.gates = add(gx, bias_);
  if (options_.multiplicative()) t.m = wmx_.forward(x);  // [N, H]
  return t;
}

LSTMState LSTMCell::step(const Tensor& gates_x, const Tensor& m_x, const LSTMState& s) const {
  // r: what the recurrent weights see, h itself or the multiplicative m = (x·Wmx) ⊙ (h·Wmh).
  const Tensor r = options_.multiplicative() ? mul(m_x, wmh_.forward(s.h)) : s.h;  // [B, H]
  Tensor gh = wh_.forward(r);                                                      // [B, 4H]
  if (options_.layer_norm()) gh = layer_norm(gh, gamma_h_);
  auto [h, c] = lstm_gates(add(gates_x, gh), s.c, options_.forget_bias());
  return {h, c};
}

LSTMState LSTMCell::zero_state(int64_t batch, DType dtype, Device device) const {
  const TensorMeta m{Shape({batch, options_.hidden_size()}), dtype, device};
  return {fill(m, 0.0), fill(m, 0.0)};
}

void LSTMCell::check_state(const char* who, const LSTMState& s, int64_t batch) const {
  if (!s.h.defined() && !s.c.defined()) return;
  const Shape want({batch, options_.hidden_size()});
  TS_CHECK(s.h.defined() && s.c.defined() && s.h.shape() == want && s.c.shape() == want, ShapeError,
           who << ": state h " << (s.h.defined() ? s.h.meta().str() : "undefined") << " and c "
               << (s.c.defined() ? s.c.meta().str() : "undefined") << " must both be " << want);
}

bool LSTMCell::fused_recurrence(const Tensor& x, int64_t steps, int64_t batch) const {
  const LSTMOptions& o = options_;
  if (!o.fuse() || o.cudnn() || o.multiplicative() || o.layer_norm() || o.recompute_chunk() > 0 ||
      !x.device().is_cuda())
    return false;
  const char* env = std::getenv("TESSERA_LSTM_FUSED");
  if (env && std::strcmp(env, "0") == 0) return false;
  const TensorMeta gx{Shape({steps, batch, 4 * o.hidden_size()}), autocast::operand_dtype(x), x.device()};
  return lstm_recurrence_fused(gx, o.hidden_size(), recurrent_weight_layout());
}

std::pair<Tensor, LSTMState> LSTMCell::fused_sequence(const Tensor& product_x, const LSTMState& s,
                                                      const InputOperands& paired) const {
  const Tensor wh = wh_.sparse() ? wh_.sparse()->effective_weight() : wh_.dense()->weight();
  const LayoutPtr x_layout = paired.x.defined() ? wx_.sparse()->layout() : nullptr;
  auto [y, h, c] = lstm_recurrence(product_x, s.h, s.c, wh, recurrent_weight_layout(), options_.forget_bias(), bias_,
                                   paired.x, paired.wx, x_layout);
  return {y, LSTMState{h, c}};
}

LSTMCell::InputOperands LSTMCell::paired_input_operands(const Tensor& x, int64_t batch) const {
  const auto &sx = wx_.sparse(), &sh = wh_.sparse();
  if (!sx || !sh || sx->gate().defined() || x.dim() != 2 || x.size(0) <= batch) return {};
  using autocast::operand;  // t itself with autocast off
  const TensorMeta xm{x.shape(), autocast::operand_dtype(x), x.device()};
  const int64_t rows = x.size(0), hs = options_.hidden_size();
  const TensorMeta y_prev{Shape({rows - batch, hs}), xm.dtype, x.device()};
  const TensorMeta dpre{Shape({rows, kGates * hs}), xm.dtype, x.device()};
  if (!bsmm_dw_pair_fused(xm, y_prev, dpre, sx->layout(), sh->layout(), batch)) return {};
  return {operand(x), operand(sx->effective_weight())};
}

Tensor LSTMCell::fused_input_product(const Tensor& x, const InputOperands& paired) const {
  if (paired.x.defined()) return bsmm(paired.x, paired.wx.detach(), wx_.sparse()->layout());
  if (!autocast::enabled() || autocast::operand_dtype(x) != autocast::dtype()) return wx_.forward(x);
  // Under autocast the product would be written in f32 [N, 4H] and cast by the recurrence (and
  // its gradient cast back and forth in the backward): at H 4096, B 64, T 256 about 4 GB of
  // memory traffic per step more than writing it in the autocast dtype at once.
  using autocast::operand;
  if (const auto& s = wx_.sparse())
    return bsmm(operand(x), operand(s->effective_weight()), s->layout(), operand(s->gate()));
  return matmul(operand(x), operand(wx_.dense()->weight()));
}

std::pair<Tensor, LSTMState> LSTMCell::cudnn_sequence(const Tensor& x, const LSTMState& s) const {
  auto [y, h, c] =
      cudnn_lstm(x, s.h, s.c, wx_.dense()->weight(), wh_.dense()->weight(), bias_, options_.forget_bias());
  return {y, LSTMState{h, c}};
}

LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& state) const {
  TS_CHECK(x.dim() == 2, ShapeError,
           "LSTMCell: x " << x.meta() << " must be [B, " << options_.input_size() << "]");
  check_state("LSTMCell", state, x.size(0));
  const LSTMState s = state.defined() ? state : zero_state(x.size(0), x.dtype(), x.device());
  const InputTerms t = input_terms(x);
  return step(t.gates, t.m, s);
}

LSTMOutput LSTM::forward(const Tensor& x, const LSTMState& state, int64_t batch) const {
  const int64_t in = options().input_size();
  TS_CHECK((x.dim() == 3 || x.dim() == 2) && x.size(-1) == in, ShapeError,
           "LSTM: x " << x.meta() << " must be [T, B, " << in << "] or [T*B, " << in << "]");
  int64_t b = x.dim() == 3 ? x.size(1) : state.h.defined() ? state.h.size(0) : batch;
  TS_CHECK(b > 0, ValueError, "LSTM: x " << x.meta() << " is [T*B, In]: pass the batch size or a state");
  const int64_t rows = x.dim() == 3 ? x.size(0) * x.size(1) : x.size(0);
  TS_CHECK(rows % b == 0 && rows > 0, ShapeError,
           "LSTM: x " << x.meta() << " has no whole steps of batch " << b);
  const int64_t steps = rows / b;
  check_state("LSTM", state, b);

  if (options().cudnn()) {  // the whole sequence in one op; out.steps stays empty (see LSTMOutput)
    const LSTMState s0 = state.defined() ? state : zero_state(b, x.dtype(), x.device());
    auto [y, last] = cudnn_sequence(x.dim() == 3 ? x : reshape(x, {steps, b, in}), s0);
    LSTMOutput out;
    out.output = reshape(y, {rows, options().hidden_size()});
    out.state = last;
    return out;
  }

  // Input terms of every step in one product.
  const Tensor x2 = x.dim() == 3 ? reshape(x, {rows, in}) : x;
  if (fused_recurrence(x, steps, b)) {  // the recurrence in one op (the GPU's persistent kernel)
    const LSTMState s0 = state.defined() ? state : zero_state(b, x.dtype(), x.device());
    const Shape gates_shape({steps, b, 4 * options().hidden_size()});
    const InputOperands paired = paired_input_operands(x2, b);
    auto [y, last] = fused_sequence(reshape(fused_input_product(x2, paired), gates_shape), s0, paired);
    LSTMOutput out;
    out.output = reshape(y, {rows, options().hidden_size()});
    out.state = last;
    return out;
  }
  // Otherwise one piece per step: split's backward is one concat, where per-step slices would
  // each write a full-size zero-padded gradient.
  const InputTerms t = input_terms(x2);
  const std::vector<Tensor> gx = steps > 1 ? chunk(t.gates, steps, 0) : std::vector<Tensor>{t.gates};
  std::vector<Tensor> mx(static_cast<size_t>(steps));
  if (t.m.defined() && steps > 1) mx = chunk(t.m, steps, 0);
  if (t.m.defined() && steps == 1) mx[0] = t.m;

  LSTMOutput out;
  LSTMState s = state.defined() ? state : zero_state(b, x.dtype(), x.device());
  const int64_t span = options().recompute_chunk() > 0 ? options().recompute_chunk() : steps;
  for (int64_t t0 = 0; t0 < steps; t0 += span) {
    auto run = [&] {
      for (int64_t k = t0; k < std::min(steps, t0 + span); ++k) {
        s = step(gx[k], mx[k], s);
        out.steps.push_back(s.h);
      }
    };
    if (options().recompute_chunk() > 0) {
      graph::recompute(run);
    } else {
      run();
    }
  }
  out.output = steps > 1 ? concat(out.steps, 0) : out.steps[0];
  out.state = s;
  return out;
}

}  // namespace nn
}  // namespace tessera
