#include "layers/embedding.h"

#include <cmath>

#include "kernels/ops.h"

namespace tessera {
namespace nn {

Embedding::Embedding(const EmbeddingOptions& options, Generator& gen) : options_(options) {
  const int64_t num = options.num_embeddings(), dim = options.embedding_dim();
  TS_CHECK(num > 0 && dim > 0, ValueError,
           "Embedding: num_embeddings (" << num << ") and embedding_dim (" << dim << ") must be > 0");
  TS_CHECK(std::isfinite(options.std()) && options.std() >= 0, ValueError,
           "Embedding: std must be >= 0, got " << options.std());
  weight_ = register_parameter("weight", normal({num, dim}, 0.0, options.std(), gen, options.dtype()));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight_, ids); }

}  // namespace nn
}  // namespace tessera
