// End to end on the GPU, eagerly: the same small model trained on the CPU and on the GPU from
// the same initial parameters and batches; f32 losses agree within 1e-4 relative for 20 steps
// (TF32 off, the default).
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::test_randn;

// An embedding, a tanh layer with layer norm, and a softmax output over 11 tokens.
struct TinyLm {
  Tensor emb, w1, b1, gamma, beta, w2;
  explicit TinyLm(Device dev) {
    emb = test_randn({11, 16}, 1, DType::f32).to(dev).detach().requires_grad_();
    w1 = mul(test_randn({16, 32}, 2, DType::f32), 0.3).to(dev).detach().requires_grad_();
    b1 = test_randn({32}, 3, DType::f32).to(dev).detach().requires_grad_();
    gamma = ones({32}, TensorOptions().device(dev)).requires_grad_();
    beta = zeros({32}, TensorOptions().device(dev)).requires_grad_();
    w2 = mul(test_randn({32, 11}, 4, DType::f32), 0.3).to(dev).detach().requires_grad_();
  }
  std::vector<Tensor> params() const { return {emb, w1, b1, gamma, beta, w2}; }
  Tensor loss(const Tensor& ids, const Tensor& targets) const {
    Tensor h = tanh(add(matmul(index_select(emb, ids, 0), w1), b1));
    return cross_entropy(matmul(layer_norm(h, gamma, beta), w2), targets);
  }
};

TEST(CudaTraining, EagerAdamWWithClippingTracksTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  TinyLm cpu_model(Device::cpu()), gpu_model(gpu);
  optim::AdamW cpu_opt(cpu_model.params(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  optim::AdamW gpu_opt(gpu_model.params(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  cpu_opt.set_clip_norm(0.5);
  gpu_opt.set_clip_norm(0.5);
  for (int step = 0; step < 20; ++step) {
    std::vector<int32_t> ids(24), targets(24);
    for (int i = 0; i < 24; ++i) ids[i] = (i * 7 + step * 3) % 11, targets[i] = (i * 5 + step) % 11;
    const Tensor x = from_vector(ids, {24}), y = from_vector(targets, {24});
    Tensor lc = cpu_model.loss(x, y), lg = gpu_model.loss(x.to(gpu), y.to(gpu));
    EXPECT_EQ(lg.device(), gpu);
    lc.backward();
    lg.backward();
    cpu_opt.step();
    gpu_opt.step();
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    const double c = lc.item<double>(), g = lg.item<double>();
    ASSERT_NEAR(g, c, 1e-4 * std::abs(c)) << "step " << step;
  }
  EXPECT_TRUE(testing::all_close(gpu_model.w2.to(Device::cpu()), cpu_model.w2, 1e-4, 1e-5));
}

}  // namespace
}  // namespace tessera
