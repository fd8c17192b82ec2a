#include "layers/transformer_block.h"

#include "core/autocast.h"
#include "kernels/ops.h"

namespace tessera {
namespace nn {

Activation activation_from_string(const std::string& name) {
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_tanh") return Activation::gelu_tanh;
  if (name == "fast_gelu") return Activation::fast_gelu;
  TS_THROW(ValueError, "activation \"" << name << "\" is not one of gelu, gelu_tanh, fast_gelu");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::fast_gelu:
      return "fast_gelu";
  }
  return "?";
}

Tensor apply_activation(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::gelu:
      return gelu(x);
    case Activation::gelu_tanh:
      return gelu(x, GeluApprox::tanh);
    case Activation::fast_gelu:
      return fast_gelu(x);
  }
  TS_THROW(ValueError, "apply_activation: unknown activation " << static_cast<int>(a));
}

Tensor apply_activation(Activation a, const Tensor& x, DType out) {
  if (out == x.dtype()) return apply_activation(a, x);
  switch (a) {
    case Activation::gelu:
      return gelu(x, GeluApprox::none, out);
    case Activation::gelu_tanh:
      return gelu(x, GeluApprox::tanh, out);
    case Activation::fast_gelu:
      return cast(fast_gelu(x), out);
  }
  TS_THROW(ValueError, "apply_activation: unknown activation " << static_cast<int>(a));
}

TransformerBlock::TransformerBlock(const TransformerBlockOptions& o, Generator& gen) : options_(o) {
  const int64_t C = o.width();
  TS_CHECK(o.mlp_ratio() > 0, ValueError, "TransformerBlock: mlp_ratio must be > 0, got " << o.mlp_ratio());
  const DType dt = o.attention().dtype();
  ln1_ = register_module("ln1", std::make_shared<LayerNorm>(LayerNormOptions(C).eps(o.eps()).dtype(dt)));
  attn_ = register_module("attn", std::make_shared<MultiHeadAttention>(o.attention(), gen));
  ln2_ = register_module("ln2", std::make_shared<LayerNorm>(LayerNormOptions(C).eps(o.eps()).dtype(dt)));
  const int64_t M = o.mlp_ratio() * C;
  fc_ = Projection(
      ProjectionOptions(C, M).block_size(o.linear_block_size()).density(o.density(), o.seed()).dtype(dt),
      gen);
  fc2_ = Projection(
      ProjectionOptions(M, C).block_size(o.linear_block_size()).density(o.density(), o.seed() + 1).dtype(dt),
      gen);
  register_module("fc", fc_.module());
  register_module("fc2", fc2_.module());
  drop_ = register_module("drop", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
}

Tensor TransformerBlock::forward(const Tensor& x, int64_t B, Generator& dropout_gen) const {
  return apply(x, [&](const Tensor& a) { return attn_->forward(a, B, dropout_gen); }, dropout_gen);
}

Tensor TransformerBlock::decode(const Tensor& x, int64_t B, KVCache& cache) const {
  TS_CHECK(!is_training() || options_.dropout() == 0, ValueError,
           "TransformerBlock::decode draws no dropout: call eval() first (dropout " << options_.dropout() << ")");
  // no dropout is drawn (checked above): the generator is never used
  return apply(x, [&](const Tensor& a) { return attn_->decode(a, B, cache); }, default_generator());
}

Tensor TransformerBlock::apply(const Tensor& x, const std::function<Tensor(const Tensor&)>& attention,
                               Generator& dropout_gen) const {
  // ln1, ln2 and the activation feed only qkv, fc and fc2: under autocast (f32 inputs) each is
  // written in the dtype the product would cast it to (operand_dtype), else in its input's. fc's
  // output feeds only the activation: under autocast fc writes it in that dtype too (its f32 sums
  // plus the f32 bias rounded once, as PyTorch's autocast linear), and the activation reads it.
  using autocast::operand_dtype;
  Tensor h = add(x, attention(ln1_->forward(x, operand_dtype(x))));  // [B*T, C]
  const Tensor u = fc_.forward(ln2_->forward(h, operand_dtype(h)), operand_dtype(h));     // [B*T, r·C]
  Tensor m = fc2_.forward(apply_activation(options_.activation(), u, operand_dtype(u)));  // [B*T, C]
  if (is_training() && options_.dropout() > 0) m = drop_->forward(m, dropout_gen);
  return add(h, m);
}

}  // namespace nn
}  // namespace tessera
