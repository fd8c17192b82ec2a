// Dropout inside block attention's CUDA kernels (tensor-core and scalar, forward and backward)
// against the f64 CPU reference on the same Philox stream and base input: every head dim × block
// size of the tensor-core kernels, blocks of 16 on the scalar kernel, the scalar kernel forced by
// TESSERA_ATTENTION_PATH=simt; a wrong mask would be off by O(1), far past the tolerances. Two
// runs give the same bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_check.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using gpu_test::close_to;
using gpu_test::kGpu;
using gpu_test::random;
using gpu_test::run_on_gpu;
using gpu_test::run_on_gpu_host;

// Forward and backward with dropout p = 0.3 on the GPU and on the CPU in f64, the same attrs and
// base; `simt` forces the scalar kernels. Returns the number of tensor-core launches (0 or 2).
uint64_t check(const AttentionLayoutPtr& l, int64_t D, DType dt, bool simt, uint64_t seed) {
  const op::BlockAttention::Attrs fa{l, 0, 0.3, 4242, 1000 + seed};
  const op::BlockAttentionBackward::Attrs ba{l, 0, 0.3, 4242, 1000 + seed};
  const Shape s{1, 3, l->seq_len(), D};  // batch·heads = 3
  const std::vector<Tensor> qkv{random(s, seed, dt), random(s, seed + 1, dt), random(s, seed + 2, dt)};
  const Tensor g = random(s, seed + 3, dt), base = philox_base(77 + seed);
  std::vector<Tensor> in64;
  for (const Tensor& t : qkv) in64.push_back(cast(t, DType::f64));
  const std::vector<Tensor> fwd = call<op::BlockAttention>(fa, {in64[0], in64[1], in64[2], base});
  const std::vector<Tensor> want = call<op::BlockAttentionBackward>(
      ba, {cast(g, DType::f64), in64[0], in64[1], in64[2], fwd[0], fwd[1], base});
  const std::string what = l->str() + " " + dtype_name(dt) + " D " + std::to_string(D) + (simt ? " simt" : "");
  if (simt) setenv("TESSERA_ATTENTION_PATH", "simt", 1);
  const uint64_t before = gpu_test::flash_attention_launches();
  const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttention>(fa, {qkv[0], qkv[1], qkv[2], base});
  const std::vector<Tensor> grads = run_on_gpu_host<op::BlockAttentionBackward>(
      ba, {g, qkv[0], qkv[1], qkv[2], cast(fwd[0], dt), cast(fwd[1], DType::f32), base});
  const uint64_t ran = gpu_test::flash_attention_launches() - before;
  if (simt) unsetenv("TESSERA_ATTENTION_PATH");
  EXPECT_TRUE(close_to(cast(got[0], DType::f64), fwd[0], 2e-2)) << "o, " << what;
  EXPECT_TRUE(close_to(cast(got[1], DType::f64), fwd[1], 1e-4)) << "lse (of the undropped P), " << what;
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(close_to(cast(grads[i], DType::f64), want[i], 3e-2)) << names[i] << ", " << what;
  return ran;
}

TEST(CudaAttentionDropout, TensorCoreKernelsMatchTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (int64_t bs : {32, 64})
    for (int64_t D : {32, 64, 128})
      for (const AttentionLayoutPtr& l :
           {AttentionLayout::dense_causal(5 * bs, bs, 3), AttentionLayout::strided(5 * bs, bs, 3, 2)}) {
        EXPECT_EQ(check(l, D, DType::bf16, false, seed += 4), 2u) << "tensor-core kernels, " << l->str();
      }
  EXPECT_EQ(check(AttentionLayout::fixed(3 * 64, 64, 3, 2, 1), 64, DType::f16, false, seed += 4), 2u);
}

TEST(CudaAttentionDropout, ScalarKernelsMatchTheCpu) {
  REQUIRE_GPU();
  EXPECT_EQ(check(AttentionLayout::local_window(5 * 16, 16, 3, 2), 64, DType::bf16, false, 7), 0u) << "blocks of 16";
  EXPECT_EQ(check(AttentionLayout::dense_causal(3 * 8, 8, 3), 24, DType::f32, false, 11), 0u) << "f32, D 24";
  EXPECT_EQ(check(AttentionLayout::strided(4 * 64, 64, 3, 2), 64, DType::bf16, true, 13), 0u) << "forced";
}

TEST(CudaAttentionDropout, TwoRunsGiveTheSameBits) {
  REQUIRE_GPU();
  const AttentionLayoutPtr l = AttentionLayout::strided(8 * 64, 64, 2, 3);
  const Shape s{3, 2, l->seq_len(), 64};
  const Tensor q = random(s, 1, DType::bf16).to(kGpu), k = random(s, 2, DType::bf16).to(kGpu),
               v = random(s, 3, DType::bf16).to(kGpu), g = random(s, 4, DType::bf16).to(kGpu);
  const op::BlockAttention::Attrs fa{l, 0, 0.2, 5, 0};
  const std::vector<Tensor> a = run_on_gpu<op::BlockAttention>(fa, {q, k, v}), b = run_on_gpu<op::BlockAttention>(fa, {q, k, v});
  EXPECT_TRUE(gpu_test::same_bits(a[0], b[0]));
  const op::BlockAttentionBackward::Attrs ba{l, 0, 0.2, 5, 0};
  const std::vector<Tensor> in{g, q, k, v, a[0], a[1]};
  const std::vector<Tensor> x = run_on_gpu<op::BlockAttentionBackward>(ba, in), y = run_on_gpu<op::BlockAttentionBackward>(ba, in);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(gpu_test::same_bits(x[i], y[i])) << "gradient " << i;
}

}  // namespace
}  // namespace tessera
