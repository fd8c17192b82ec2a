// The convolution layers (nn::BlockSparseConv with weight norm, nn::EdgeBias) in a compiled step
// on the GPU under bf16 autocast: the step's values all live on the device (the edge groups'
// index included, made outside the trace), it replays as a CUDA graph, and it gives the eager
// steps' losses and weights bit for bit (the same kernels on the same bits).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "gpu_check.h"
#include "kernels/ops.h"
#include "layers/block_sparse_conv.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using namespace gpu_test;
using Inputs = std::map<std::string, Tensor>;

constexpr int64_t kBatch = 3, kT = 37, kC = 64;

// x [3, 37, 64] -> causal dilated block-sparse convolution -> edge bias -> Σ y ⊙ t
struct ConvBlock : nn::Module {
  std::shared_ptr<nn::BlockSparseConv> conv;
  std::shared_ptr<nn::EdgeBias> edge;
  ConvBlock() {
    Generator gen(11);
    conv = register_module("conv", std::make_shared<nn::BlockSparseConv>(
                                       nn::BlockSparseConvOptions(kC, kC, {3}, 16)
                                           .dilation({2})
                                           .padding(ConvPadding::causal)
                                           .density(0.5, 12)
                                           .weight_norm(true),
                                       gen));
    edge = register_module("edge", std::make_shared<nn::EdgeBias>(conv->geometry({kT}), std::vector<int64_t>{kT}, kC));
  }
  Tensor loss(const Inputs& in) const {
    autocast::Guard amp(DType::bf16);
    const Tensor y = edge->forward(conv->forward(in.at("x")), {kT});
    return sum(mul(cast(y, DType::f32), in.at("t")));
  }
};

Inputs conv_batch(int step) {
  return {{"x", random({kBatch, kT, kC}, 300 + step, DType::f32)},
          {"t", random({kBatch, kT, kC}, 400 + step, DType::f32)}};
}

TEST(CudaConvLayers, CompiledStepOnTheGpuEqualsEagerSteps) {
  REQUIRE_GPU();
  ConvBlock eager, traced;
  eager.to(kGpu);
  traced.to(kGpu);
  optim::SGD opt_e(eager.parameters(), optim::SGDOptions(1e-3));
  optim::SGD opt_t(traced.parameters(), optim::SGDOptions(1e-3));
  CompiledStep step = compile([&](const Inputs& in) { return traced.loss(in); }, traced.named_parameters(), &opt_t,
                              conv_batch(0));
  EXPECT_EQ(step.executor().device(), kGpu);
  for (int s = 0; s < 4; ++s) {
    Inputs gb;
    for (const auto& [k, v] : conv_batch(s)) gb[k] = v.to(kGpu);
    Tensor le = eager.loss(gb);
    le.backward();
    opt_e.step();
    opt_e.zero_grad();
    EXPECT_EQ(step.run(conv_batch(s)), le.item<double>()) << "step " << s;
  }
  const std::vector<Tensor> pe = eager.parameters(), pt = traced.parameters();
  ASSERT_EQ(pe.size(), pt.size());
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(same_bits(pt[i], pe[i])) << "parameter " << i;
}

}  // namespace
}  // namespace tessera
