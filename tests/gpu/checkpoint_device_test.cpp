// Models on the GPU: Module::to moves parameters in place, eager training runs there, and
// checkpoints move between devices: saved from the GPU, restored on the CPU, and back.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "models/model_checkpoint.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "models/char_lstm_lm.h"
#include "optim/optim.h"

namespace tessera {
namespace {

models::CharLSTMLMConfig small_config() {
  models::CharLSTMLMConfig c;
  c.vocab = 13;
  c.embed = 16;
  c.hidden = 32;
  c.block_size = 16;
  c.density = 0.5;
  c.layout = "random";
  return c;
}

void train(models::CharLSTMLM& m, optim::Optimizer& opt, Device dev, int steps) {
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> ids(5 * 3), targets(5 * 3);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 5 + s) % 13, targets[i] = (i * 3 + 2 * s) % 13;
    Tensor loss = m.loss(from_vector(ids, {5, 3}).to(dev), from_vector(targets, {15}).to(dev)).loss;
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
}

TEST(CudaModels, ToMovesParametersInPlaceAndCheckpointsCrossDevices) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  const std::string path = ::testing::TempDir() + "tessera_gpu_ckpt.h5";
  models::CharLSTMLM on_gpu(small_config()), on_cpu(small_config()), back(small_config());
  const Tensor first = on_gpu.parameters()[0];
  on_gpu.to(gpu);
  EXPECT_EQ(first.device(), gpu) << "the same tensor object now lives on the GPU";
  optim::AdamW opt_gpu(on_gpu.parameters(), optim::AdamWOptions(1e-2));
  optim::AdamW opt_cpu(on_cpu.parameters(), optim::AdamWOptions(1e-2));
  train(on_gpu, opt_gpu, gpu, 3);

  // GPU -> file -> CPU: parameters and optimizer state arrive exactly.
  io::save_checkpoint(path, io::capture(on_gpu, &opt_gpu));
  io::restore(path, on_cpu, &opt_cpu);
  for (size_t i = 0; i < on_cpu.parameters().size(); ++i)
    EXPECT_TRUE(testing::all_close(on_cpu.parameters()[i], on_gpu.parameters()[i].to(Device::cpu()), 0, 0)) << i;
  EXPECT_EQ(opt_cpu.step_count(), 3);

  // CPU -> file -> GPU, after the CPU trained on: the GPU model resumes from the CPU's numbers.
  train(on_cpu, opt_cpu, Device::cpu(), 2);
  io::save_checkpoint(path, io::capture(on_cpu, &opt_cpu));
  back.to(gpu);
  optim::AdamW opt_back(back.parameters(), optim::AdamWOptions(1e-2));
  io::restore(path, back, &opt_back);
  for (size_t i = 0; i < back.parameters().size(); ++i) {
    EXPECT_EQ(back.parameters()[i].device(), gpu);
    EXPECT_TRUE(testing::all_close(back.parameters()[i].to(Device::cpu()), on_cpu.parameters()[i], 0, 0)) << i;
  }
  // One more step on each device from the same state: f32 results agree closely.
  train(back, opt_back, gpu, 1);
  train(on_cpu, opt_cpu, Device::cpu(), 1);
  for (size_t i = 0; i < back.parameters().size(); ++i)
    EXPECT_TRUE(testing::all_close(back.parameters()[i].to(Device::cpu()), on_cpu.parameters()[i], 1e-4, 1e-5)) << i;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera
