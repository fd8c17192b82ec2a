// nn::LSTM on the GPU against the CPU layer, for every variant a user can build: dense and
// block-sparse weights (bs 8, 16, 32, 64), LSTM and mLSTM, layer norm on the gate
// pre-activations off and on, batch 1, 7 and 64 (label `gpu`; skipped visibly without a GPU).
// Plain LSTMs under bf16 autocast take the persistent recurrence kernels (asserted); mLSTM and
// layer norm run step by step (per step the recurrent product and the gate op). Checked: the
// loss, the output sequence, the final state and every parameter's gradient of
// L = mean(y²) + mean(c_T), and in f32 (no autocast: the exact f32 kernels) the same to 1e-4.
// The CPU layer runs under the same autocast (its products round their operands to bf16 too).
// Tolerance under bf16: |gpu − cpu| <= 3e-2·(|cpu| + RMS(cpu)) at T 4, 4e-2 for gradients (two
// of 120 gradients were at 1.05x of 3e-2 on the H200, 2026-12-03): the paths still round at
// different places (the fused kernel stores h_t and dpre_t in bf16, sums in another order; see
// lstm_recurrence_test), and layer norm divides those differences by the pre-activations' spread.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/autocast.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/lstm.h"
#include "scoped_env.h"

#ifdef TESSERA_WITH_CUDA
#include "kernels/common/cuda/bsmm_tc.h"
#endif

namespace tessera {
namespace {

using namespace gpu_test;
using nn::LSTM;
using nn::LSTMOptions;
using testing::test_randn;

struct Variant {
  int64_t bs;  // 0: dense
  bool mlstm, layer_norm;
  int64_t batch;
};

std::string label(const Variant& v, DType dt) {
  std::ostringstream os;
  os << dtype_name(dt) << (v.bs ? " bs " + std::to_string(v.bs) : std::string(" dense")) << (v.mlstm ? " mLSTM" : " LSTM")
     << (v.layer_norm ? " layer norm" : "") << " B " << v.batch;
  return os.str();
}

// The loss, output and final state of L = mean(y²) + mean(c_T); the gradients land in the
// layer's parameters.
std::vector<Tensor> run(const LSTM& m, const Tensor& x) {
  const nn::LSTMOutput out = m.forward(x);
  Tensor loss = add(mean(mul(out.output, out.output)), mean(out.state.c));
  loss.backward();
  return {loss, out.output, out.state.h, out.state.c};
}

void check_variant(const Variant& v, DType dt) {
  constexpr int64_t kT = 4, kIn = 64, kHidden = 128;  // In and H multiples of every block size
  LSTMOptions o = LSTMOptions(kIn, kHidden).forget_bias(1.0).multiplicative(v.mlstm).layer_norm(v.layer_norm);
  if (v.bs) o.block_size(v.bs).density(0.5, 11);
  Generator g1(3), g2(3);
  LSTM cpu(o, g1), gpu(o, g2);
  gpu.to(kGpu);
  const Tensor x = test_randn({kT, v.batch, kIn}, 5, DType::f32);
  const bool half = dt != DType::f32;
  const bool fused = [&] {
    autocast::Guard guard(half ? dt : DType::f32);
    return gpu.fused_recurrence(x.to(kGpu), kT, v.batch);
  }();
  EXPECT_EQ(fused, half && !v.mlstm && !v.layer_norm) << label(v, dt);
  std::vector<Tensor> want, got;
  {
    // the CPU under the same autocast: the products' operands are rounded to bf16 alike
    autocast::Guard guard(half ? dt : DType::f32);
    want = run(cpu, x);
    got = run(gpu, x.to(kGpu));
  }
  const double tol = half ? 3e-2 : 1e-4, grad_tol = half ? 4e-2 : 1e-4;
  const char* names[] = {"loss", "output", "h_T", "c_T"};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(close_rms(cast(got[i], DType::f32), want[i], tol)) << names[i] << ", " << label(v, dt);
  const auto pc = cpu.named_parameters(), pg = gpu.named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    ASSERT_TRUE(pg[i].tensor.grad().defined()) << pc[i].name << ", " << label(v, dt);
    EXPECT_TRUE(close_rms(pg[i].tensor.grad(), pc[i].tensor.grad(), grad_tol)) << pc[i].name << ", " << label(v, dt);
  }
}

TEST(LstmLayerGpu, EveryVariantMatchesTheCpuUnderBf16) {
  REQUIRE_GPU();
  for (int64_t bs : {0, 8, 16, 32, 64})
    for (bool mlstm : {false, true})
      for (bool ln : {false, true})
        for (int64_t batch : {1, 7, 64}) check_variant({bs, mlstm, ln, batch}, DType::bf16);
}

TEST(LstmLayerGpu, EveryVariantMatchesTheCpuInF32) {
  REQUIRE_GPU();
  for (int64_t bs : {0, 16, 64})
    for (bool mlstm : {false, true})
      for (bool ln : {false, true}) check_variant({bs, mlstm, ln, 7}, DType::f32);
}

// The fused sparse layer at bs 32 (gate layouts both): W_x's gradient comes from the recurrence's
// backward with W_h's in one bsmm_dw_pair launch (the gate-run kernel: the pair, then the h0 term;
// three launches with TESSERA_BSMM_DW_PAIR=0: x, y's steps, h0), the same gradients either way
// (batch 64: the same 64-row stages of dpre, so the same bits; batch 7 to bf16 rounding).
TEST(LstmLayerGpu, SparseWeightGradientsComeInOnePairedLaunch) {
  REQUIRE_GPU();
#ifdef TESSERA_WITH_CUDA
  if (!sm90_here()) GTEST_SKIP() << "the gate-run dW kernel needs an sm_90a build on a GPU of compute 9.0";
  const testing::ScopedEnv kernels("TESSERA_BSMM_DENSE", "0");
  auto gate_runs = [] { return cuda::bsmm_launches(cuda::BsmmKernel::sm90_gate_runs); };
  for (int64_t batch : {7, 64}) {
    const LSTMOptions o = LSTMOptions(64, 128).forget_bias(1.0).block_size(32).density(0.5, 11);
    const Tensor x = test_randn({5, batch, 64}, 5, DType::f32).to(kGpu);
    auto grads = [&](const char* pair, uint64_t launches) {
      const testing::ScopedEnv env("TESSERA_BSMM_DW_PAIR", pair);
      Generator g(3);
      LSTM m(o, g);
      m.to(kGpu);
      autocast::Guard guard(DType::bf16);
      EXPECT_TRUE(m.fused_recurrence(x, 5, batch));
      const uint64_t before = gate_runs();
      run(m, x);
      EXPECT_EQ(gate_runs() - before, launches) << "TESSERA_BSMM_DW_PAIR=" << pair << ", B " << batch;
      std::vector<Tensor> out;
      for (const auto& p : m.named_parameters()) out.push_back(p.tensor.grad());
      return out;
    };
    const std::vector<Tensor> paired = grads("1", 2), apart = grads("0", 3);
    for (size_t i = 0; i < paired.size(); ++i) {
      ASSERT_TRUE(paired[i].defined() && apart[i].defined());
      if (batch == 64) EXPECT_TRUE(same_bits(paired[i], apart[i])) << "parameter " << i;
      EXPECT_TRUE(close_rms(paired[i], apart[i], 1e-2)) << "parameter " << i << ", B " << batch;
    }
  }
#endif
}

}  // namespace
}  // namespace tessera
