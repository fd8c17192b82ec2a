// block_attention_packed and its backward on CUDA against the f64 CPU reference: the tensor-core
// kernels on the packed rows (head dims 64 and 128, blocks of 64 and 128, grouped-query heads,
// dropout; the launch counts show which kernel ran) and the unpacking fallback (blocks of 16).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_check.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using gpu_test::close_to;
using gpu_test::random;
using gpu_test::run_on_gpu_host;

// Forward and backward of (B 2, H 4, K, D, layout of block bs, T 4·bs) on the GPU against the
// f64 CPU; returns the tensor-core launches they took (2 or 0).
uint64_t check(int64_t bs, int64_t D, int64_t K, double p, uint64_t seed) {
  const int64_t B = 2, H = 4, T = 4 * bs;
  const AttentionLayoutPtr l = AttentionLayout::strided(T, bs, H, 2);
  const op::BlockAttentionPacked::Attrs a{l, H, K, 0, p, 7, 300};
  const Tensor qkv = random({B * T, (H + 2 * K) * D}, seed, DType::bf16);
  const Tensor g = random({B * T, H * D}, seed + 1, DType::bf16);
  const std::vector<Tensor> want = call<op::BlockAttentionPacked>(a, {cast(qkv, DType::f64)});
  const Tensor dwant =
      call<op::BlockAttentionPackedBackward>(a, {cast(g, DType::f64), cast(qkv, DType::f64), want[0], want[1]})[0];
  const uint64_t before = gpu_test::flash_attention_launches();
  const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttentionPacked>(a, {qkv});
  const Tensor dgot = run_on_gpu_host<op::BlockAttentionPackedBackward>(
      a, {g, qkv, cast(want[0], DType::bf16), cast(want[1], DType::f32)})[0];
  const std::string what = "bs " + std::to_string(bs) + " D " + std::to_string(D) + " kv " + std::to_string(K) +
                           " p " + std::to_string(p);
  EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], 2e-2)) << "o, " << what;
  EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], 1e-4)) << "lse, " << what;
  EXPECT_TRUE(close_to(cast(dgot, DType::f64), dwant, 3e-2)) << "dqkv, " << what;
  return gpu_test::flash_attention_launches() - before;
}

TEST(CudaAttentionPacked, TensorCoreKernelsOnThePackedRowsMatchTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 700;
  for (int64_t bs : {64, 128})
    for (int64_t D : {64, 128})
      for (int64_t K : {4, 2})
        for (double p : {0.0, 0.2}) EXPECT_EQ(check(bs, D, K, p, seed += 2), 2u) << "the tensor-core kernels";
}

// The training path at long rows with sharp scores: (B 2, H 2, K 2, D 64, T 2048) in attention
// blocks of 128 (run as 64-blocks: 32 per row), dense causal and fixed with stride 8 blocks as the
// gcide runs use, the q columns scaled by 4 (scores of standard deviation 4), dropout 0; the
// default kernels (sm_90a where the GPU has them) and the mma.sync ones (TESSERA_ATTENTION_PATH=sm80).
TEST(CudaAttentionPacked, LongRowsWithSharpScoresMatchTheCpu) {
  REQUIRE_GPU();
  const int64_t B = 2, H = 2, K = 2, D = 64, T = 2048, bs = 128;
  std::vector<double> column_scale((H + 2 * K) * D, 1.0);
  for (int64_t c = 0; c < H * D; ++c) column_scale[c] = 4.0;  // q | k | v: the q columns
  uint64_t seed = 900;
  for (const AttentionLayoutPtr& l : {AttentionLayout::dense_causal(T, bs, H), AttentionLayout::fixed(T, bs, H, 8, 1)}) {
    const op::BlockAttentionPacked::Attrs a{l, H, K, 0, 0.0, 7, 300};
    const Tensor scale = from_vector(column_scale, {1, (H + 2 * K) * D});
    const Tensor qkv = cast(mul(random({B * T, (H + 2 * K) * D}, seed += 2, DType::f64), scale), DType::bf16);
    const Tensor g = random({B * T, H * D}, seed + 1, DType::bf16);
    const std::vector<Tensor> want = call<op::BlockAttentionPacked>(a, {cast(qkv, DType::f64)});
    const Tensor dwant =
        call<op::BlockAttentionPackedBackward>(a, {cast(g, DType::f64), cast(qkv, DType::f64), want[0], want[1]})[0];
    for (const char* path : {"default", "sm80"}) {
      if (std::string(path) == "sm80") setenv("TESSERA_ATTENTION_PATH", "sm80", 1);
      const std::string what = l->str() + ", path " + path;
      const uint64_t before = gpu_test::flash_attention_launches();
      const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttentionPacked>(a, {qkv});
      const Tensor dgot = run_on_gpu_host<op::BlockAttentionPackedBackward>(
          a, {g, qkv, cast(want[0], DType::bf16), cast(want[1], DType::f32)})[0];
      unsetenv("TESSERA_ATTENTION_PATH");
      EXPECT_EQ(gpu_test::flash_attention_launches(), before + 2) << "the tensor-core kernels, " << what;
      EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], 2e-2)) << "o, " << what;
      EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], 1e-4)) << "lse, " << what;
      EXPECT_TRUE(close_to(cast(dgot, DType::f64), dwant, 3e-2)) << "dqkv, " << what;
    }
  }
}

TEST(CudaAttentionPacked, UnpackingFallbackMatchesTheCpu) {
  REQUIRE_GPU();
  EXPECT_EQ(check(16, 64, 2, 0.2, 800), 0u) << "blocks of 16: the scalar kernels through temporaries";
  EXPECT_EQ(check(32, 24, 4, 0.0, 810), 0u) << "head dim 24";
}

}  // namespace
}  // namespace tessera
