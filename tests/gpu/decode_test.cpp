// TransformerLM::decode on the GPU (the key/value cache of generation): the logits of positions
// fed in chunks equal those of logits() over the whole window, f32 and under bf16 autocast, dense
// and sparse attention layouts, two sequences.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "gpu_check.h"
#include "kernels/ops.h"
#include "models/models.h"

namespace tessera {
namespace {

using gpu_test::kGpu;

TEST(CudaDecode, ChunkedDecodeGivesTheLogitsOfTheFullWindow) {
  REQUIRE_GPU();
  const int64_t B = 2;
  for (const char* layout : {"dense", "strided"})
    for (DType amp : {DType::f32, DType::bf16}) {
      models::TransformerLMConfig c;
      c.vocab = 29;
      c.seq_len = 64;
      c.width = 64;
      c.layers = 2;
      c.heads = 4;
      c.attn_block = 16;
      c.attn_layout = layout;
      c.stride = 2;
      c.seed = 3;
      models::TransformerLM model(c);
      model.to(kGpu);
      model.eval();
      NoGradGuard no_grad;
      const autocast::Guard guard(amp);
      std::vector<int32_t> all(static_cast<size_t>(B * c.seq_len));
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>((i * 11 + i * i / 5) % c.vocab);
      const std::vector<float> full =
          cast(model.logits(from_vector(all, {B * c.seq_len}).to(kGpu), B), DType::f32).to_vector<float>();
      models::TransformerLM::DecodeState state = model.start_decoding(B);
      int64_t at = 0;
      // bf16: products of bf16 operands summed in another order (and through another path)
      const double tol = amp == DType::f32 ? 1e-4 : 5e-2;
      for (int64_t n : {7, 1, 24, 32}) {
        std::vector<int32_t> chunk;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < n; ++i) chunk.push_back(all[static_cast<size_t>(b * c.seq_len + at + i)]);
        const std::vector<float> got =
            cast(model.decode(from_vector(chunk, {B * n}).to(kGpu), n, state), DType::f32).to_vector<float>();
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t v = 0; v < c.vocab; ++v) {
              const float want = full[static_cast<size_t>((b * c.seq_len + at + i) * c.vocab + v)];
              const float g = got[static_cast<size_t>((b * n + i) * c.vocab + v)];
              ASSERT_NEAR(g, want, tol * (1 + std::abs(want)))
                  << layout << " " << dtype_name(amp) << " position " << at + i << " sequence " << b;
            }
        at += n;
      }
    }
}

}  // namespace
}  // namespace tessera
