// cudnn_lstm / cudnn_lstm_backward through cuDNN against their CPU reference kernels, and the
// nn::LSTM cudnn(true) path on the GPU against tessera's own LSTM there (label `gpu`; skipped
// visibly without a GPU or without cuDNN). Inputs random, sizes odd (T 7, B 3, In 5, H 9) and a
// bigger problem; GPU outputs NaN-poisoned before the kernels run. Tolerance
// |gpu − cpu| <= tol·(|cpu| + RMS(cpu)): f64 1e-9, f32 1e-5 (TF32 off, the default; 1e-2 with it),
// f16 1e-2, bf16 1e-2·(1 + T/4). bf16 gets more than the usual 1e-2 because cuDNN carries the
// recurrent state between steps in bf16 (h_t feeds the next step's product as the stored y_t),
// while the CPU reference carries it in f32: with bf16's 8-bit significand the trajectories drift
// apart step by step, and BPTT adds the same again (seen on the H200: up to 1.3% at T 7 and 3.9%
// at T 24, varying run to run; f16 stays within 1e-2). Gate-order or packing bugs give O(1) errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/graph/compile.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/lstm.h"

#ifdef TESSERA_WITH_CUDA
#include "kernels/common/cuda/blas.h"
#endif

#ifdef TESSERA_HAVE_CUDNN
#define REQUIRE_CUDNN() REQUIRE_GPU()
#else
#define REQUIRE_CUDNN() GTEST_SKIP() << "tessera was built without cuDNN"
#endif

namespace tessera {
namespace {

using namespace gpu_test;
using nn::LSTM;
using nn::LSTMOptions;
using nn::LSTMOutput;
using testing::test_randn;

double tol_of(DType dt, int64_t T) {
  return dt == DType::f64 ? 1e-9 : dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1e-2 * (1.0 + T / 4.0) : 1e-2;
}

Tensor randn(const Shape& s, uint64_t seed, DType dt, double scale = 1.0) {
  return cast(mul(test_randn(s, seed), scale), dt);
}

struct Problem {
  int64_t steps, batch, in, hidden;
};

std::string label(DType dt, const Problem& p) {
  std::ostringstream os;
  os << dtype_name(dt) << " T " << p.steps << " B " << p.batch << " In " << p.in << " H " << p.hidden;
  return os.str();
}

// Random inputs x, h0, c0, wx, wh, bias of a problem (weights ~ 1/sqrt(H), pre-activations O(1)).
std::vector<Tensor> lstm_inputs(const Problem& p, DType dt, uint64_t seed) {
  const int64_t g = 4 * p.hidden;
  const double w = 1.0 / std::sqrt(static_cast<double>(p.hidden));
  return {randn({p.steps, p.batch, p.in}, seed, dt),      randn({p.batch, p.hidden}, seed + 1, dt),
          randn({p.batch, p.hidden}, seed + 2, dt),       randn({p.in, g}, seed + 3, dt, w),
          randn({p.hidden, g}, seed + 4, dt, w),          randn({g}, seed + 5, dt, 0.5)};
}

const Problem kProblems[] = {{7, 3, 5, 9}, {1, 1, 1, 1}, {24, 16, 40, 72}};
constexpr double kForgetBias = 1.0;

// Forward (y, hT, cT) and backward (all six gradients) of the cuDNN op against the CPU op.
void expect_matches_cpu(const Problem& p, DType dt, uint64_t seed, double tol) {
  const std::string what = label(dt, p);
  const std::vector<Tensor> in = lstm_inputs(p, dt, seed);
  const std::vector<Tensor> want = call<op::CudnnLstm>({kForgetBias}, in);
  const std::vector<Tensor> got = run_on_gpu<op::CudnnLstm>({kForgetBias}, in);
  const char* names[] = {"y", "hT", "cT"};
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(close_rms(got[k], want[k], tol)) << names[k] << ", " << what;

  // Backward: each device from its own forward (y, reserve), the same output gradients.
  const Tensor dy = randn(want[0].shape(), seed + 10, dt), dh = randn(want[1].shape(), seed + 11, dt),
               dc = randn(want[2].shape(), seed + 12, dt);
  std::vector<Tensor> bin = in;
  for (const Tensor& t : {want[0], want[3], dy, dh, dc}) bin.push_back(t);
  const std::vector<Tensor> dwant = call<op::CudnnLstmBackward>({kForgetBias}, bin);
  const std::vector<Tensor> dgot =
      run_on_gpu<op::CudnnLstmBackward>({kForgetBias}, {in[0], in[1], in[2], in[3], in[4], in[5], got[0], got[3], dy, dh, dc});
  const char* dnames[] = {"dx", "dh0", "dc0", "dwx", "dwh", "dbias"};
  for (int k = 0; k < 6; ++k) EXPECT_TRUE(close_rms(dgot[k], dwant[k], tol)) << dnames[k] << ", " << what;
}

TEST(CudnnLstmGpu, ForwardAndBackwardMatchTheCpu) {
  REQUIRE_CUDNN();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes)
    for (const Problem& p : kProblems) expect_matches_cpu(p, dt, seed += 20, tol_of(dt, p.steps));
}

TEST(CudnnLstmGpu, Tf32ModeMatchesTheCpuLoosely) {
  REQUIRE_CUDNN();
#ifdef TESSERA_WITH_CUDA
  cuda::set_allow_tf32(true);
  expect_matches_cpu(kProblems[2], DType::f32, 500, 1e-2);
  cuda::set_allow_tf32(false);
#endif
}

// The layer with cudnn(true) on the GPU against the same layer without it (tessera's own ops) on
// the GPU: output, final state and every gradient. bf16 on the short sequence only: tessera's own
// LSTM rounds every op to bf16 and sums the weight gradients step by step in bf16, so its error
// grows with T where cuDNN's (one f32-accumulated GEMM over all steps) does not.
TEST(CudnnLstmGpu, LayerMatchesTesserasLstmOnTheGpu) {
  REQUIRE_CUDNN();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const Problem& p : {kProblems[0], kProblems[2]}) {
      if (dt == DType::bf16 && p.steps > 8) continue;
      const std::string what = label(dt, p);
      const LSTMOptions o = LSTMOptions(p.in, p.hidden).forget_bias(kForgetBias).dtype(dt);
      Generator g1(9), g2(9);
      LSTM ref(o, g1), fast(LSTMOptions(o).cudnn(true), g2);
      ref.to(kGpu);
      fast.to(kGpu);
      const Tensor x = randn({p.steps, p.batch, p.in}, 70, dt).to(kGpu);
      const Tensor ry = randn({p.steps * p.batch, p.hidden}, 71, dt).to(kGpu);
      const Tensor rc = randn({p.batch, p.hidden}, 72, dt).to(kGpu);
      std::map<std::string, Tensor> grads[2];
      LSTMOutput outs[2];
      const LSTM* layers[2] = {&ref, &fast};
      for (int k = 0; k < 2; ++k) {
        Tensor xl = x.clone().requires_grad_();
        outs[k] = layers[k]->forward(xl);
        add(sum(mul(outs[k].output, ry)), sum(mul(outs[k].state.c, rc))).backward();
        grads[k]["x"] = xl.grad();
        for (const auto& np : layers[k]->named_parameters()) grads[k][np.name] = np.tensor.grad();
      }
      const Tensor want_y = outs[0].output.to(Device::cpu()), want_h = outs[0].state.h.to(Device::cpu());
      EXPECT_TRUE(close_rms(outs[1].output, want_y, tol_of(dt, p.steps))) << "output, " << what;
      EXPECT_TRUE(close_rms(outs[1].state.h, want_h, tol_of(dt, p.steps))) << "hT, " << what;
      for (const auto& [name, g] : grads[0])
        EXPECT_TRUE(close_rms(grads[1][name], g.to(Device::cpu()), tol_of(dt, p.steps)))
            << "gradient of " << name << ", " << what;
    }
  }
}

// A compiled step (CUDA graph capture and replay) of the cudnn(true) layer gives the eager gradients.
TEST(CudnnLstmGpu, LayerCompilesLikeEager) {
  REQUIRE_CUDNN();
  const Problem p = kProblems[0];
  Generator gen(12);
  LSTM lstm(LSTMOptions(p.in, p.hidden).cudnn(true), gen);
  lstm.to(kGpu);
  const Tensor x = randn({p.steps, p.batch, p.in}, 80, DType::f32);
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return mean(lstm.forward(in.at("x")).output); };
  lstm.zero_grad();
  Tensor eager = loss_fn({{"x", x.to(kGpu)}});
  eager.backward();
  CompiledStep step = compile(loss_fn, lstm.named_parameters(), nullptr, {{"x", x}});
  for (int run = 0; run < 2; ++run) {  // the capture, then a replay
    EXPECT_NEAR(step.run({{"x", x}}), eager.item<double>(), 1e-6) << "run " << run;
    for (const auto& np : lstm.named_parameters())
      EXPECT_TRUE(close_rms(step.fetch("grad/" + np.name), np.tensor.grad().to(Device::cpu()), 1e-5))
          << np.name << ", run " << run;
  }
}

}  // namespace
}  // namespace tessera
