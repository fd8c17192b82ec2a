// Token ids for benchmark inputs: the same ids for the same seed on every machine.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {
namespace bench {

/// `n` token ids drawn uniformly from [0, vocab): i32 [n], the same for the same seed
/// (splitmix64, not a std:: distribution, whose streams differ between libraries).
Tensor random_tokens(int64_t n, int64_t vocab, uint64_t seed);

}  // namespace bench
}  // namespace tessera
