// nn::Dropout: inverted dropout while training, the identity in eval mode.
//
//   nn::Dropout drop(nn::DropoutOptions(0.1));
//   Tensor h = drop.forward(x, gen);   // training: zeroes ~10%, scales the rest by 1/0.9
//   drop.eval();
//   Tensor e = drop.forward(x);        // e is x
#pragma once

#include "core/random.h"
#include "layers/module.h"

namespace tessera {
namespace nn {

/// Options of Dropout: the drop probability p in [0, 1).
struct DropoutOptions {
  explicit DropoutOptions(double p = 0.5) : p_(p) {}
  DropoutOptions& p(double v) { p_ = v; return *this; }
  double p() const { return p_; }

 private:
  double p_;
};

/// forward(x, gen) = dropout(x, p, gen, is_training()); no parameters. The mask is drawn from
/// `gen` (the default generator unless given), only in training mode.
class Dropout : public Module {
 public:
  /// ValueError unless p is in [0, 1).
  explicit Dropout(const DropoutOptions& options = DropoutOptions());

  Tensor forward(const Tensor& x, Generator& gen = default_generator()) const;

  const DropoutOptions& options() const { return options_; }

 private:
  DropoutOptions options_;
};

}  // namespace nn
}  // namespace tessera
