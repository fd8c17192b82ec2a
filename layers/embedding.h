// nn::Embedding: a table of learned vectors indexed by integer ids.
//
//   nn::Embedding emb(nn::EmbeddingOptions(256, 512), gen);   // 256 byte values -> 512 features
//   Tensor h = emb.forward(ids);                              // ids i32 [T, B] -> [T, B, 512]
#pragma once

#include <cstdint>

#include "core/random.h"
#include "layers/module.h"

namespace tessera {
namespace nn {

/// Options of Embedding: table size, init std, parameter dtype.
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim) : num_(num_embeddings), dim_(embedding_dim) {}
  EmbeddingOptions& std(double s) { std_ = s; return *this; }
  EmbeddingOptions& dtype(DType t) { dtype_ = t; return *this; }
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }
  double std() const { return std_; }
  DType dtype() const { return dtype_; }

 private:
  int64_t num_, dim_;
  double std_ = 0.02;
  DType dtype_ = DType::f32;
};

/// Parameter "weight" [num, dim], initialized normal(0, std) from `gen`.
/// forward(ids i32 [...]) = embedding(weight, ids) -> [..., dim]; ids outside [0, num) are a
/// ValueError (from the op).
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options, Generator& gen = default_generator());

  Tensor forward(const Tensor& ids) const;

  const Tensor& weight() const { return weight_; }
  const EmbeddingOptions& options() const { return options_; }

 private:
  EmbeddingOptions options_;
  Tensor weight_;
};

}  // namespace nn
}  // namespace tessera
