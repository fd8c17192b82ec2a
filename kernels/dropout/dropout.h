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

/// y = x · mask / (1 − p), mask_i = [philox::uniform_f32(seed, start, i) >= p]; x floating, y like x.
/// Linear in x, so backward is this same op (same attrs) on g: the mask is regenerated from
/// (seed, start) and nothing is saved.
struct Dropout : OpBase {
  static constexpr const char* kName = "dropout";
  static constexpr bool kRandom = true;
  struct Attrs {
    double p = 0.0;
    uint64_t seed = 0;
    uint64_t start = 0;  ///< first Philox block of the draw
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};

}  // namespace tessera
