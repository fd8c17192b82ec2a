// block_attention's tensor-core forward and backward (kernels/block_attention/flash_sm80.h,
// kernels/block_attention_backward/flash_sm80_backward.h) against the f64 CPU reference: every
// head dim (32/64/128, forward and backward) × block size (32, 64, and 128 as its 64-block
// refinement) × 16-bit dtype × layout
// kind, odd batch·head counts, the kernel that ran checked by its launch count; the scalar kernel
// forced by TESSERA_ATTENTION_PATH=simt agrees; grouped-query heads on both; the same bits twice;
// gradients through autograd match the CPU's. The sm_90a forward (flash_sm90.h) where the GPU and
// the build have it: blocks 64 and 128 × head dims 64 and 128 × dtype × layout kind, grouped-query
// heads, against the CPU and the mma.sync kernel (TESSERA_ATTENTION_PATH=sm80); the sm_90a
// backward (head dim 64) likewise. On both families: long rows with sharp scores (T 2048), and
// forward rounding without a bias at T 4096.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "gpu_check.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/ops.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#ifdef TESSERA_WITH_CUDA
#include "kernels/block_attention/flash_sm80.h"
#include "kernels/block_attention_backward/flash_sm80_backward.h"
#endif

namespace tessera {
namespace {

using gpu_test::kGpu;
using gpu_test::close_to;
using gpu_test::random;
using gpu_test::run_on_gpu;
using gpu_test::run_on_gpu_host;

uint64_t flash_launches() {
#ifdef TESSERA_WITH_CUDA
  return cuda::flash_forward_launches();
#else
  return 0;
#endif
}

uint64_t flash_backward_launches() {
#ifdef TESSERA_WITH_CUDA
  return cuda::flash_backward_launches();
#else
  return 0;
#endif
}

std::vector<AttentionLayoutPtr> layouts(int64_t bs, int64_t H) {
  const int64_t T = 5 * bs;
  std::vector<std::vector<uint8_t>> masks(H, std::vector<uint8_t>(25, 0));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j <= i; ++j) masks[h][i * 5 + j] = i == j || (i * 3 + j + h) % 2 == 0;
  return {AttentionLayout::dense_causal(T, bs, H), AttentionLayout::local_window(T, bs, H, 2),
          AttentionLayout::strided(T, bs, H, 2), AttentionLayout::fixed(T, bs, H, 2, 1),
          AttentionLayout::from_masks(T, bs, masks)};
}

// The f64 CPU forward and backward of 16-bit q, k, v and dO (of dtype dt), and the backward op's
// inputs as the GPU gets them: the reference's o and lse rounded as the GPU's forward stores them.
struct AttentionReference {
  std::vector<Tensor> fwd;              // o, lse (f64)
  std::vector<Tensor> grads;            // dq, dk, dv (f64)
  std::vector<Tensor> backward_inputs;  // dO, q, k, v, o (dt), lse (f32)
};

AttentionReference attention_reference(const AttentionLayoutPtr& l, const std::vector<Tensor>& qkv, const Tensor& g,
                                       DType dt) {
  std::vector<Tensor> in64;
  for (const Tensor& t : qkv) in64.push_back(cast(t, DType::f64));
  AttentionReference r;
  r.fwd = call<op::BlockAttention>({l, 0}, in64);
  r.grads = call<op::BlockAttentionBackward>(
      {l, 0}, {cast(g, DType::f64), in64[0], in64[1], in64[2], r.fwd[0], r.fwd[1]});
  r.backward_inputs = {g, qkv[0], qkv[1], qkv[2], cast(r.fwd[0], dt), cast(r.fwd[1], DType::f32)};
  return r;
}

TEST(CudaFlashAttention, ForwardMatchesTheCpuForEveryHeadDimBlockSizeDtypeAndLayout) {
  REQUIRE_GPU();
  uint64_t seed = 8000;
  for (int64_t bs : {32, 64, 128})
    for (int64_t D : {32, 64, 128})
      for (DType dt : {DType::bf16, DType::f16})
        for (const AttentionLayoutPtr& l : layouts(bs, 3)) {
          const Shape s{1, 3, l->seq_len(), D};  // batch·heads = 3
          const std::vector<Tensor> qkv{random(s, seed += 3, dt), random(s, seed + 1, dt), random(s, seed + 2, dt)};
          const std::string what = l->str() + " " + dtype_name(dt) + " D " + std::to_string(D);
          std::vector<Tensor> in64;
          for (const Tensor& t : qkv) in64.push_back(cast(t, DType::f64));
          const std::vector<Tensor> want = call<op::BlockAttention>({l, 0}, in64);  // f64 reference
          const uint64_t before = flash_launches();
          const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttention>({l, 0}, qkv);
          EXPECT_EQ(flash_launches(), before + 1) << "the tensor-core kernel, " << what;
          // 16-bit o (and P rounded to it before P·V); lse from f32 sums of exact products
          EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], 2e-2)) << "o, " << what;
          EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], 1e-4)) << "lse, " << what;
          setenv("TESSERA_ATTENTION_PATH", "simt", 1);
          const std::vector<Tensor> simt = run_on_gpu_host<op::BlockAttention>({l, 0}, qkv);
          unsetenv("TESSERA_ATTENTION_PATH");
          EXPECT_EQ(flash_launches(), before + 1) << "TESSERA_ATTENTION_PATH=simt, " << what;
          EXPECT_TRUE(close_to(cast(simt[0], DType::f64), want[0], 2e-2)) << "o (scalar kernel), " << what;
        }
}

uint64_t sm90_launches() {
#ifdef TESSERA_WITH_CUDA
  return cuda::flash_forward_sm90_launches();
#else
  return 0;
#endif
}

uint64_t sm90_backward_launches() {
#ifdef TESSERA_WITH_CUDA
  return cuda::flash_backward_sm90_launches();
#else
  return 0;
#endif
}

TEST(CudaFlashAttention, HopperForwardMatchesTheCpuAndTheMmaSyncKernel) {
  REQUIRE_GPU();
  const uint64_t want90 = gpu_test::sm90_here() ? 1 : 0;
  uint64_t seed = 8500;
  auto check = [&](const op::BlockAttention::Attrs& a, const std::vector<Tensor>& qkv, const std::string& what) {
    std::vector<Tensor> in64;
    for (const Tensor& t : qkv) in64.push_back(cast(t, DType::f64));
    const std::vector<Tensor> want = call<op::BlockAttention>(a, in64);  // f64 reference
    const uint64_t before = sm90_launches();
    const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttention>(a, qkv);
    EXPECT_EQ(sm90_launches(), before + want90) << "the sm_90a kernel, " << what;
    EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], 2e-2)) << "o, " << what;
    EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], 1e-4)) << "lse, " << what;
    setenv("TESSERA_ATTENTION_PATH", "sm80", 1);
    const std::vector<Tensor> mma = run_on_gpu_host<op::BlockAttention>(a, qkv);
    unsetenv("TESSERA_ATTENTION_PATH");
    EXPECT_EQ(sm90_launches(), before + want90) << "TESSERA_ATTENTION_PATH=sm80, " << what;
    EXPECT_TRUE(close_to(cast(mma[0], DType::f64), want[0], 2e-2)) << "o (mma.sync), " << what;
    EXPECT_TRUE(close_to(cast(got[0], DType::f64), cast(mma[0], DType::f64), 2e-2)) << "o vs mma.sync, " << what;
  };
  for (int64_t bs : {64, 128})
    for (int64_t D : {64, 128})
      for (DType dt : {DType::bf16, DType::f16})
        for (const AttentionLayoutPtr& l : layouts(bs, 3)) {
          const Shape s{1, 3, l->seq_len(), D};  // batch·heads = 3
          check({l, 0}, {random(s, seed += 3, dt), random(s, seed + 1, dt), random(s, seed + 2, dt)},
                l->str() + " " + dtype_name(dt) + " D " + std::to_string(D));
        }
  // The backward at head dims 64 and 128 (the sm_90a kernels' ones): dq, dk, dv against the f64 CPU
  // and the mma.sync kernels, from the same inputs (the f64 CPU's o and lse rounded as the GPU
  // stores them).
  auto check_backward = [&](const AttentionLayoutPtr& l, const Shape& sq, const Shape& skv, DType dt,
                            const std::string& what) {
    const std::vector<Tensor> qkv{random(sq, seed += 4, dt), random(skv, seed + 1, dt), random(skv, seed + 2, dt)};
    const AttentionReference ref = attention_reference(l, qkv, random(sq, seed + 3, dt), dt);
    const std::vector<Tensor>& in = ref.backward_inputs;
    const std::vector<Tensor>& want = ref.grads;
    const uint64_t before = sm90_backward_launches();
    const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttentionBackward>({l, 0}, in);
    EXPECT_EQ(sm90_backward_launches(), before + want90) << "the sm_90a backward, " << what;
    setenv("TESSERA_ATTENTION_PATH", "sm80", 1);
    const std::vector<Tensor> mma = run_on_gpu_host<op::BlockAttentionBackward>({l, 0}, in);
    unsetenv("TESSERA_ATTENTION_PATH");
    EXPECT_EQ(sm90_backward_launches(), before + want90) << "TESSERA_ATTENTION_PATH=sm80, " << what;
    const char* names[] = {"dq", "dk", "dv"};
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(close_to(cast(got[k], DType::f64), want[k], 3e-2)) << names[k] << ", " << what;
      EXPECT_TRUE(close_to(cast(mma[k], DType::f64), want[k], 3e-2)) << names[k] << " (mma.sync), " << what;
    }
  };
  for (int64_t bs : {64, 128})
    for (int64_t D : {64, 128})
      for (DType dt : {DType::bf16, DType::f16})
        for (const AttentionLayoutPtr& l : layouts(bs, 3)) {
          const Shape s{1, 3, l->seq_len(), D};
          check_backward(l, s, s, dt, "backward " + l->str() + " " + dtype_name(dt) + " D " + std::to_string(D));
        }
  {
    const AttentionLayoutPtr l = layouts(64, 4).back();
    check_backward(l, Shape{2, 4, l->seq_len(), 128}, Shape{2, 2, l->seq_len(), 128}, DType::bf16,
                   "backward GQA Hkv 2, D 128");
  }
  for (int64_t Hkv : {1, 2}) {
    const AttentionLayoutPtr l = layouts(64, 4).back();
    check_backward(l, Shape{2, 4, l->seq_len(), 64}, Shape{2, Hkv, l->seq_len(), 64}, DType::bf16,
                   "backward GQA Hkv " + std::to_string(Hkv));
  }
  for (int64_t Hkv : {1, 2}) {  // grouped-query heads: 4 query heads, batch 2
    const AttentionLayoutPtr l = layouts(64, 4).back();
    const Shape sq{2, 4, l->seq_len(), 64}, skv{2, Hkv, l->seq_len(), 64};
    check({l, 0}, {random(sq, seed += 3, DType::bf16), random(skv, seed + 1, DType::bf16), random(skv, seed + 2, DType::bf16)},
          "GQA Hkv " + std::to_string(Hkv));
  }
}

// The backward op from the same inputs on both sides (q, k, v, dO, and the f64 CPU's o and lse
// rounded as the GPU's forward would store them): dq, dk, dv against the f64 reference.
TEST(CudaFlashAttention, BackwardMatchesTheCpuForEveryHeadDimBlockSizeDtypeAndLayout) {
  REQUIRE_GPU();
  uint64_t seed = 9000;
  for (int64_t bs : {32, 64, 128})
    for (int64_t D : {32, 64, 128})
      for (DType dt : {DType::bf16, DType::f16})
        for (const AttentionLayoutPtr& l : layouts(bs, 3)) {
          const Shape s{1, 3, l->seq_len(), D};
          const std::vector<Tensor> qkv{random(s, seed += 4, dt), random(s, seed + 1, dt), random(s, seed + 2, dt)};
          const AttentionReference ref = attention_reference(l, qkv, random(s, seed + 3, dt), dt);
          const std::vector<Tensor>& want = ref.grads;
          const std::string what = l->str() + " " + dtype_name(dt) + " D " + std::to_string(D);
          const uint64_t before = flash_backward_launches();
          const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttentionBackward>({l, 0}, ref.backward_inputs);
          EXPECT_EQ(flash_backward_launches(), before + 1) << "the tensor-core kernels, " << what;
          const char* names[] = {"dq", "dk", "dv"};
          for (int i = 0; i < 3; ++i)
            EXPECT_TRUE(close_to(cast(got[i], DType::f64), want[i], 3e-2)) << names[i] << ", " << what;
        }
}

// Grouped-query attention (k, v with Hkv < H heads), with and without dropout, on the tensor-core
// kernels and the scalar ones: forward and backward against the f64 CPU reference.
TEST(CudaFlashAttention, GroupedQueryHeadsMatchTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 9500;
  for (const char* path : {"", "simt"})
    for (int64_t bs : {32, 64})
      for (int64_t Hkv : {1, 2})
        for (double p : {0.0, 0.25}) {
          const AttentionLayoutPtr l = layouts(bs, 4).back();  // per-head masks
          const int64_t T = l->seq_len(), D = 64;
          const Shape sq{2, 4, T, D}, skv{2, Hkv, T, D};
          const DType dt = DType::bf16;
          const std::vector<Tensor> qkv{random(sq, seed += 4, dt), random(skv, seed + 1, dt), random(skv, seed + 2, dt)};
          const Tensor g = random(sq, seed + 3, dt);
          std::vector<Tensor> in64;
          for (const Tensor& t : qkv) in64.push_back(cast(t, DType::f64));
          const op::BlockAttention::Attrs fa{l, 0, p, 3, 100};
          const op::BlockAttentionBackward::Attrs ba{l, 0, p, 3, 100};
          const std::vector<Tensor> fwd = call<op::BlockAttention>(fa, in64);
          const std::vector<Tensor> want =
              call<op::BlockAttentionBackward>(ba, {cast(g, DType::f64), in64[0], in64[1], in64[2], fwd[0], fwd[1]});
          const std::string what = std::string(path) + " bs " + std::to_string(bs) + " Hkv " + std::to_string(Hkv) +
                                   " p " + std::to_string(p);
          if (*path) setenv("TESSERA_ATTENTION_PATH", path, 1);
          const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttention>(fa, qkv);
          const std::vector<Tensor> grads = run_on_gpu_host<op::BlockAttentionBackward>(
              ba, {g, qkv[0], qkv[1], qkv[2], cast(fwd[0], dt), cast(fwd[1], DType::f32)});
          unsetenv("TESSERA_ATTENTION_PATH");
          EXPECT_TRUE(close_to(cast(got[0], DType::f64), fwd[0], 2e-2)) << "o, " << what;
          ASSERT_EQ(grads[1].shape(), skv) << what;
          const char* names[] = {"dq", "dk", "dv"};
          for (int i = 0; i < 3; ++i)
            EXPECT_TRUE(close_to(cast(grads[i], DType::f64), want[i], 3e-2)) << names[i] << ", " << what;
        }
}

TEST(CudaFlashAttention, TwoRunsGiveTheSameBits) {
  REQUIRE_GPU();
  const AttentionLayoutPtr l = AttentionLayout::strided(8 * 64, 64, 2, 3);
  const Shape s{3, 2, l->seq_len(), 64};
  const Tensor q = random(s, 1, DType::bf16).to(kGpu), k = random(s, 2, DType::bf16).to(kGpu),
               v = random(s, 3, DType::bf16).to(kGpu);
  EXPECT_TRUE(gpu_test::same_bits(block_attention(q, k, v, l), block_attention(q, k, v, l)));
  const Tensor g = random(s, 4, DType::bf16).to(kGpu);
  const std::vector<Tensor> fwd = run_on_gpu<op::BlockAttention>({l, 0}, {q, k, v});
  const std::vector<Tensor> in{g, q, k, v, fwd[0], fwd[1]};
  const std::vector<Tensor> a = run_on_gpu<op::BlockAttentionBackward>({l, 0}, in), b = run_on_gpu<op::BlockAttentionBackward>({l, 0}, in);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(gpu_test::same_bits(a[i], b[i])) << "gradient " << i;
}

// Rows of many blocks and sharp scores, as in training at long context: T 2048 (32 blocks of 64,
// 16 of 128), q scaled by 4 (scores of standard deviation 4: a few keys take most of each row's
// weight), dense causal, fixed and strided with stride 8 blocks as train_transformer's runs use.
// Forward (o, lse) and backward (dq, dk, dv) of the default kernels (the sm_90a ones where the GPU
// has them) and of the mma.sync ones against the f64 CPU reference.
TEST(CudaFlashAttention, LongRowsWithSharpScoresMatchTheCpu) {
  REQUIRE_GPU();
  const int64_t T = 2048, H = 2, D = 64;
  uint64_t seed = 9700;
  for (int64_t bs : {64, 128})
    for (const AttentionLayoutPtr& l : {AttentionLayout::dense_causal(T, bs, H), AttentionLayout::fixed(T, bs, H, 8, 1),
                                        AttentionLayout::strided(T, bs, H, 8)}) {
      const Shape s{1, H, T, D};
      const DType dt = DType::bf16;
      const Tensor q = cast(mul(random(s, seed += 4, DType::f64), 4.0), dt);
      const std::vector<Tensor> qkv{q, random(s, seed + 1, dt), random(s, seed + 2, dt)};
      const AttentionReference ref = attention_reference(l, qkv, random(s, seed + 3, dt), dt);
      for (const char* path : {"default", "sm80"}) {
        if (std::string(path) == "sm80") setenv("TESSERA_ATTENTION_PATH", "sm80", 1);
        const std::string what = l->str() + " bs " + std::to_string(bs) + ", path " + path;
        const std::vector<Tensor> o = run_on_gpu_host<op::BlockAttention>({l, 0}, qkv);
        EXPECT_TRUE(close_to(cast(o[0], DType::f64), ref.fwd[0], 2e-2)) << "o, " << what;
        EXPECT_TRUE(close_to(cast(o[1], DType::f64), ref.fwd[1], 1e-4)) << "lse, " << what;
        const std::vector<Tensor> got = run_on_gpu_host<op::BlockAttentionBackward>({l, 0}, ref.backward_inputs);
        const char* names[] = {"dq", "dk", "dv"};
        for (int k = 0; k < 3; ++k)
          EXPECT_TRUE(close_to(cast(got[k], DType::f64), ref.grads[k], 3e-2)) << names[k] << ", " << what;
        unsetenv("TESSERA_ATTENTION_PATH");
      }
    }
}

// Rounding without a bias: at T 4096 with sharper scores (q scaled by 6) the outputs of both
// forward kernel families differ from the f64 reference by rounding that averages out. Over the
// [1, 4, 4096, 64] output, bias = Σ e·o_ref / Σ o_ref² (e = o − o_ref: a systematic rescaling of
// o shows here, bf16 rounding averages to ~1e-6) and the mean lse error; the sm_90a forward's rms
// error is within 1.25x the mma.sync one's. (The training runs of docs/results.md section 2
// diverge on the sm_90a forward and not on the mma.sync one; this is what a bias would show.)
TEST(CudaFlashAttention, ForwardRoundingHasNoBias) {
  REQUIRE_GPU();
  const int64_t T = 4096, H = 4, D = 64;
  const AttentionLayoutPtr l = AttentionLayout::dense_causal(T, 128, H);
  const Shape s{1, H, T, D};
  const DType dt = DType::bf16;
  const std::vector<Tensor> qkv{cast(mul(random(s, 9800, DType::f64), 6.0), dt), random(s, 9801, dt),
                                random(s, 9802, dt)};
  const AttentionReference ref = attention_reference(l, qkv, random(s, 9803, dt), dt);
  const std::vector<double> o_ref = ref.fwd[0].to_vector<double>(), lse_ref = ref.fwd[1].to_vector<double>();
  double rms[2] = {0, 0};
  const char* paths[] = {"default", "sm80"};
  for (int k = 0; k < 2; ++k) {
    if (k == 1) setenv("TESSERA_ATTENTION_PATH", "sm80", 1);
    const std::vector<Tensor> out = run_on_gpu_host<op::BlockAttention>({l, 0}, qkv);
    unsetenv("TESSERA_ATTENTION_PATH");
    const std::vector<double> o = cast(out[0], DType::f64).to_vector<double>();
    const std::vector<double> lse = cast(out[1], DType::f64).to_vector<double>();
    double num = 0, den = 0, sq = 0, lse_mean = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      num += (o[i] - o_ref[i]) * o_ref[i];
      den += o_ref[i] * o_ref[i];
      sq += (o[i] - o_ref[i]) * (o[i] - o_ref[i]);
    }
    for (size_t i = 0; i < lse.size(); ++i) lse_mean += (lse[i] - lse_ref[i]) / static_cast<double>(lse.size());
    rms[k] = std::sqrt(sq / static_cast<double>(o.size()));
    std::printf("  %s forward: bias %.3g, rms error %.3g, mean lse error %.3g\n", paths[k], num / den, rms[k],
                lse_mean);
    EXPECT_LT(std::fabs(num / den), 2e-4) << paths[k];
    EXPECT_LT(std::fabs(lse_mean), 1e-5) << paths[k];
  }
  EXPECT_LE(rms[0], 1.25 * rms[1]) << "the default (sm_90a on Hopper) forward against the mma.sync one";
}

TEST(CudaFlashAttention, GradientsThroughAutogradMatchTheCpu) {
  REQUIRE_GPU();
  const AttentionLayoutPtr l = AttentionLayout::fixed(4 * 32, 32, 2, 2, 1);
  const Shape s{2, 2, l->seq_len(), 64};
  std::vector<Tensor> c, g;
  for (uint64_t i = 0; i < 3; ++i) {
    const Tensor t = random(s, 90 + i, DType::bf16);
    c.push_back(cast(t, DType::f32).requires_grad_());
    g.push_back(t.to(kGpu).requires_grad_());
  }
  const Tensor seed = random(s, 99, DType::bf16);
  block_attention(c[0], c[1], c[2], l).backward(cast(seed, DType::f32));
  const uint64_t before = flash_launches();
  const uint64_t before_backward = flash_backward_launches();
  block_attention(g[0], g[1], g[2], l).backward(seed.to(kGpu));
  EXPECT_EQ(flash_launches(), before + 1);
  EXPECT_EQ(flash_backward_launches(), before_backward + 1);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(close_to(cast(g[i].grad(), DType::f64), cast(c[i].grad(), DType::f64), 3e-2)) << "input " << i;
}

}  // namespace
}  // namespace tessera
