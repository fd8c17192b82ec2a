#pragma once

#include <cstdint>

#include "core/op.h"
#include "core/random.h"

namespace tessera {

/// Inverted dropout: in training, each element is kept with probability 1 − p and scaled by
/// 1/(1 − p), else zeroed; in eval (training = false) or with p == 0, x itself is returned.
/// p must be in [0, 1). The mask comes from `gen`'s counter-based stream (it reserves
/// blocks_for_uniform_f32(numel) blocks), so it is the same on every device for one generator state.
///
///   Tensor h = dropout(x, 0.1, gen);            // training
///   Tensor e = dropout(x, 0.1, gen, false);     // eval: e is x
Tensor dropout(const Tensor& x, double p, Generator& gen = default_generator(), bool training = true);
/// dropout with the default generator.
Tensor dropout(const Tensor& x, double p, bool training);

/// A Philox-base input for random ops (Dropout's optional second input): `offset` as i32[2]
/// {low 32 bits, high 32 bits} on `device`.
Tensor philox_base(uint64_t offset, Device device = Device::cpu());

namespace op {
/// y = x · mask / (1 − p), mask_i = [philox::uniform_f32(seed, first, i) >= p]; x floating, y like x.
/// Inputs: x, and optionally the Philox base b (i32[2] on x's device: the low and high 32 bits of
/// a block offset, see OpBase::kRandom); first = start + b (mod 2^64), or start without b. The
/// CUDA kernel reads b on the device, so a captured graph draws from whatever base was written.
/// Linear in x, so backward is this same op (same attrs, same b) on g: the mask is regenerated
/// from (seed, first) and nothing but b is saved.
struct Dropout : OpBase {
  static constexpr const char* kName = "dropout";
  static constexpr bool kRandom = true;
  static constexpr unsigned kSaveInputs = 0b10;  // the Philox base, when given
  struct Attrs {
    double p = 0.0;
    uint64_t seed = 0;
    uint64_t start = 0;  ///< first Philox block of the draw (relative to the base input, if any)
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
