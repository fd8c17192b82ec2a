// Autocast on the GPU (label `gpu`; skipped visibly without a GPU): the f32-output matmul of
// bf16/f16 operands (cuBLAS, f32 sums) against the CPU's, plain, transposed and batched, into a
// NaN-poisoned output; and an autocast forward + backward through matmul, bsmm and attention
// against the same on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/autocast.h"
#include "core/op.h"
#include "core/sparse/generators.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/attention.h"

namespace tessera {
namespace {

using namespace gpu_test;
using testing::all_close;
using testing::test_randn;

TEST(GpuAutocast, F32OutputMatmulMatchesCpu) {
  REQUIRE_GPU();
  for (DType low : {DType::bf16, DType::f16}) {
    for (int batch : {0, 3}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const int64_t m = 37, k = 53, n = 29;
          Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n};
          if (batch) sa = Shape{batch, sa[0], sa[1]}, sb = Shape{batch, sb[0], sb[1]};
          Tensor a = cast(test_randn(sa, 1, DType::f32), low), b = cast(test_randn(sb, 2, DType::f32), low);
          const op::Matmul::Attrs mm{ta, tb, true};
          const std::vector<Tensor> in{a.to(kGpu), b.to(kGpu)};
          Tensor c = poisoned(output_metas<op::Matmul>(mm, {in[0].meta(), in[1].meta()})[0]);
          ASSERT_EQ(c.dtype(), DType::f32);
          call_out<op::Matmul>(mm, in, {c});
          // Products of bf16/f16 numbers are exact in f32: only the order of the sums differs.
          EXPECT_TRUE(close_to(c, call<op::Matmul>({ta, tb, true}, {a, b})[0], 1e-5))
              << dtype_name(low) << " batch " << batch << " ta " << ta << " tb " << tb;
        }
      }
    }
  }
}

// y = attention(bsmm(x·W1)) summed against r, under bf16 autocast, on both devices: outputs and
// the f32 gradients of W1, W2 and x agree within bf16 tolerance.
TEST(GpuAutocast, ForwardBackwardMatchesCpu) {
  REQUIRE_GPU();
  const int64_t B = 2, H = 2, T = 32, D = 8, C = H * D;
  LayoutPtr l = random_layout(C, C, 8, 0.5, 4);
  auto layout = AttentionLayout::dense_causal(T, 16, H);
  auto run = [&](Device dev, Tensor* grads) {
    Tensor x = test_randn({B * T, C}, 1, DType::f32).to(dev).requires_grad_();
    Tensor w1 = test_randn({C, 3 * C}, 2, DType::f32).to(dev).requires_grad_();
    Tensor w2 = test_randn({l->nnz(), 8, 8}, 3, DType::f32).to(dev).requires_grad_();
    Tensor r = test_randn({B * T, C}, 4, DType::f32).to(dev);
    Tensor y;
    {
      autocast::Guard amp(DType::bf16);
      Tensor qkv = permute(reshape(matmul(x, w1), {B, T, 3, H, D}), {2, 0, 3, 1, 4});
      std::vector<Tensor> p = split(qkv, {1, 1, 1}, 0);
      Tensor o = block_attention(reshape(p[0], {B, H, T, D}), reshape(p[1], {B, H, T, D}),
                                 reshape(p[2], {B, H, T, D}), layout);
      y = bsmm(reshape(permute(o, {0, 2, 1, 3}), {B * T, C}), w2, l);
    }
    sum(mul(y, r)).backward();
    grads[0] = x.grad().to(Device::cpu());
    grads[1] = w1.grad().to(Device::cpu());
    grads[2] = w2.grad().to(Device::cpu());
    return y.to(Device::cpu());
  };
  Tensor gc[3], gg[3];
  Tensor yc = run(Device::cpu(), gc), yg = run(kGpu, gg);
  EXPECT_EQ(yg.dtype(), DType::f32);
  EXPECT_TRUE(close_to(yg, yc, 1e-2));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(gg[i].dtype(), DType::f32);
    EXPECT_TRUE(close_to(gg[i], gc[i], 2e-2)) << "gradient " << i;
  }
}

// MultiHeadAttention under bf16 autocast: on the GPU block_attention (blocks of 16 and 32: the
// scalar and the tensor-core kernels) and the dense path (bf16 scores and probabilities), on the
// CPU block_attention; outputs and input gradients agree.
TEST(GpuAutocast, AttentionLayerMatchesCpu) {
  REQUIRE_GPU();
  for (int64_t bs : {16, 32})
  for (const char* impl : {"auto", "dense"}) {
  SCOPED_TRACE(std::string(impl) + " bs " + std::to_string(bs));
  const int64_t B = 3, T = 64, C = 96;
  auto run = [&](Device dev, Tensor* dx) {
    Generator gen(5);
    nn::MultiHeadAttention attn(
        nn::AttentionOptions(C, 3, T).block_size(bs).impl(nn::attention_impl_from_string(dev.is_cuda() ? impl : "auto")),
        gen);
    attn.to(dev);
    EXPECT_EQ(attn.uses_dense_path(dev), dev.is_cuda() && std::string(impl) == "dense");
    Tensor x = test_randn({B * T, C}, 6, DType::f32).to(dev).requires_grad_();
    Tensor y;
    {
      autocast::Guard amp(DType::bf16);
      y = attn.forward(x, B);
    }
    sum(mul(y, test_randn({B * T, C}, 7, DType::f32).to(dev))).backward();
    *dx = x.grad().to(Device::cpu());
    return y.to(Device::cpu());
  };
  Tensor dxc, dxg;
  Tensor yc = run(Device::cpu(), &dxc), yg = run(kGpu, &dxg);
  EXPECT_EQ(yg.dtype(), DType::f32);
  EXPECT_TRUE(close_to(yg, yc, 2e-2));
  EXPECT_TRUE(close_to(dxg, dxc, 3e-2));
  }
}

}  // namespace
}  // namespace tessera
