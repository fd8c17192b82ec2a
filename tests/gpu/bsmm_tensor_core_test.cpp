// The tensor-core kernels of bsmm, bsmm_dx and bsmm_dw (kernels/common/cuda/bsmm_tc.h) and their
// dense route (kernels/common/cuda/bsmm_dense.h) against an f64 CPU reference computed from the
// same (rounded) inputs: every block size × {bf16, f16, f32, f32 with TF32} × {gated, ungated} ×
// N ∈ {1, 17, 64, 100, 300, 4096} × layouts with empty block rows and columns and with lists long
// enough to wrap the copy pipeline, outputs poisoned with NaN. Each case runs on every path the
// GPU has (the block-sparse kernels by default, which takes the sm_90a kernels where they apply;
// TESSERA_BSMM_PATH=sm80; and the dense route, TESSERA_BSMM_DENSE=1), and checks which ran;
// bsmm_dw also with the gate epilogue (dw = gate·P and dgate). Also: the f32-output and
// accumulate epilogues, C = K = 32768 (the dense route in chunks), misaligned operands, the dense
// route's rule, two runs give the same bits, and a compiled training step of a block-sparse MLP
// replayed as a CUDA graph equals its eager steps bit for bit. Label `gpu`.
#include <gtest/gtest.h>

#include <cstdlib>

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif
#include <map>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "core/sparse/generators.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/lstm.h"
#include "optim/optim.h"
#include "scoped_env.h"

#ifdef TESSERA_WITH_CUDA
#include "kernels/common/cuda/blas.h"
#include "kernels/common/cuda/bsmm_dense.h"
#include "kernels/common/cuda/bsmm_tc.h"
#endif

namespace tessera {
namespace {

using namespace gpu_test;

// Operand dtype and whether f32 runs on TF32 tensor cores.
struct Precision {
  DType dt;
  bool tf32;
  double tol;  // relative to the result's largest magnitude
  const char* name;
};

const Precision kPrecisions[] = {
    {DType::bf16, false, 1e-2, "bf16"},
    {DType::f16, false, 1e-2, "f16"},
    {DType::f32, false, 1e-5, "f32"},
    {DType::f32, true, 2e-3, "f32-tf32"},
};

const int64_t kRowCounts[] = {1, 17, 64, 100, 300, 4096};  // 100: the 128-row sm_90a tiles

// Launches of the sm_80 and sm_90a tensor-core kernels, and calls of the dense route, so far
// ({0, 0, 0} without CUDA).
struct Launches {
  uint64_t sm80 = 0, sm90 = 0, dense = 0;
};
Launches launches() {
#ifdef TESSERA_WITH_CUDA
  return {cuda::bsmm_launches(cuda::BsmmKernel::sm80), cuda::bsmm_launches(cuda::BsmmKernel::sm90),
          cuda::dense_route_calls()};
#else
  return {};
#endif
}

// Whether a call in precision p must have run on tensor cores.
bool on_tensor_cores(const Precision& p) { return p.dt != DType::f32 || p.tf32; }

// A path to check: TESSERA_BSMM_PATH (nullptr: unset) and TESSERA_BSMM_DENSE.
struct Path {
  const char* kernels;
  const char* dense;
  bool dense_route() const { return std::string(dense) == "1"; }
};

// Checks that the call between `before` and now took the path: the dense route when forced,
// else the kernel bsmm_tc.h's rule picks: sm_90a for 16-bit operands where it is `sm90_case`
// (and not forced off by TESSERA_BSMM_PATH=sm80), else sm_80 for tensor-core precisions, else none.
::testing::AssertionResult took_the_rule(const Launches& before, const Precision& p, bool sm90_case, const Path& path) {
  const Launches now = launches();
  const uint64_t d80 = now.sm80 - before.sm80, d90 = now.sm90 - before.sm90, dd = now.dense - before.dense;
  const bool want_dense = path.dense_route();
  const bool want90 = !want_dense && p.dt != DType::f32 && sm90_case && gpu_test::sm90_here() && path.kernels == nullptr;
  const bool want80 = !want_dense && on_tensor_cores(p) && !want90;
  if (d90 == (want90 ? 1u : 0u) && d80 == (want80 ? 1u : 0u) && dd == (want_dense ? 1u : 0u))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "launched sm80 " << d80 << ", sm90 " << d90 << ", dense route " << dd
                                       << "; want sm80 " << want80 << ", sm90 " << want90 << ", dense route "
                                       << want_dense;
}

// Sets TESSERA_BSMM_PATH, TESSERA_BSMM_DENSE (and TF32) for one scope.
class PathGuard {
 public:
  PathGuard(const Path& path, bool tf32) {
    if (path.kernels) setenv("TESSERA_BSMM_PATH", path.kernels, 1);
    setenv("TESSERA_BSMM_DENSE", path.dense, 1);
#ifdef TESSERA_WITH_CUDA
    cuda::set_allow_tf32(tf32);
#else
    (void)tf32;
#endif
  }
  ~PathGuard() {
    unsetenv("TESSERA_BSMM_PATH");
    unsetenv("TESSERA_BSMM_DENSE");
#ifdef TESSERA_WITH_CUDA
    cuda::set_allow_tf32(false);
#endif
  }
};

// The paths to check: the block-sparse kernels (the default, and sm80 forced: the A100 path,
// also on sm_90), and the dense route.
std::vector<Path> paths() { return {{nullptr, "0"}, {"sm80", "0"}, {nullptr, "1"}}; }

// Per block size: a tall layout whose block columns hold long lists (beyond the pipeline's
// depth), a wide one, and a mask with an empty block row and empty block columns.
std::vector<LayoutPtr> layouts(int64_t bs) {
  std::vector<uint8_t> mask(4 * 5, 0);
  for (int c : {0, 2, 3}) mask[0 * 5 + c] = 1;       // row 0
  for (int c : {0, 3}) mask[1 * 5 + c] = 1;          // row 1; row 2 empty
  for (int c : {0, 2, 3}) mask[3 * 5 + c] = 1;       // row 3; columns 1 and 4 empty
  const int64_t tall_rows = bs == 64 ? 24 : 40;
  return {random_layout(tall_rows * bs, 3 * bs, bs, 0.7, static_cast<uint64_t>(bs) * 7),
          random_layout(2 * bs, 9 * bs, bs, 0.4, static_cast<uint64_t>(bs) * 7 + 1),
          BlockLayout::from_mask(4 * bs, 5 * bs, bs, mask)};
}

std::string describe(const BlockLayout& l, const Precision& p, int64_t n, bool gated, const Path& path) {
  return l.str() + " " + p.name + " n " + std::to_string(n) + (gated ? " gated" : "") + " path " +
         (path.kernels ? path.kernels : "default") + (path.dense_route() ? " (dense route)" : "");
}

// The f64 CPU result of Op on f64 copies of `in`, cast to the operand dtype's precision only
// through the inputs (the reference keeps f64 sums).
template <class Op>
Tensor reference(const typename Op::Attrs& attrs, const std::vector<Tensor>& in) {
  std::vector<Tensor> in64;
  for (const Tensor& t : in) in64.push_back(cast(t, DType::f64));
  return call<Op>(attrs, in64)[0];
}

// reference() with every output.
template <class Op>
std::vector<Tensor> reference_all(const typename Op::Attrs& attrs, const std::vector<Tensor>& in) {
  std::vector<Tensor> in64;
  for (const Tensor& t : in) in64.push_back(cast(t, DType::f64));
  return call<Op>(attrs, in64);
}

template <class Op>
void check_op(const char* what, int64_t features_of(const BlockLayout&), bool with_gate) {
  uint64_t seed = 7000;
  for (int64_t bs : {8, 16, 32, 64})
    for (const LayoutPtr& l : layouts(bs))
      for (const Precision& p : kPrecisions)
        for (bool gated : {false, true}) {
          if (gated && !with_gate) continue;
          for (int64_t n : kRowCounts) {
            const int64_t nnz = l->nnz();
            std::vector<Tensor> in{random({n, features_of(*l)}, seed += 3, p.dt), random({nnz, bs, bs}, seed + 1, p.dt)};
            if (gated) in.push_back(cast(testing::test_rand({nnz}, 0.5, 1.5, seed + 2), p.dt));
            typename Op::Attrs attrs{l, gated};
            const Tensor want = reference<Op>(attrs, in);
            for (const Path& path : paths()) {
              PathGuard guard(path, p.tf32);
              const Launches before = launches();
              const Tensor got = cast(run_on_gpu_host<Op>(attrs, in)[0], DType::f64);
              EXPECT_TRUE(close_to(got, want, p.tol)) << what << " " << describe(*l, p, n, gated, path);
              EXPECT_TRUE(took_the_rule(before, p, bs >= 16, path))
                  << what << " " << describe(*l, p, n, gated, path);
            }
          }
        }
}

int64_t in_features(const BlockLayout& l) { return l.in_features(); }
int64_t out_features(const BlockLayout& l) { return l.out_features(); }

TEST(CudaBsmmTensorCores, ForwardMatchesTheCpuForEveryBlockSizeDtypeGateAndRowCount) {
  REQUIRE_GPU();
  check_op<op::Bsmm>("bsmm", in_features, true);
}

TEST(CudaBsmmTensorCores, InputGradientMatchesTheCpuForEveryBlockSizeDtypeGateAndRowCount) {
  REQUIRE_GPU();
  check_op<op::BsmmDx>("bsmm_dx", out_features, true);
}

// bsmm's bias [K] (added in every kernel's epilogue; after the GEMMs on the dense route), with and
// without a gate, in every precision and on every path, and with an f32 output of bf16/f16
// operands (autocast's form, the bias f32): against the CPU, and through the path the rule picks;
// with bf16/f16 y and the f32 bias (f32_bias), bitwise the f32 output rounded, on every path.
TEST(CudaBsmmTensorCores, ForwardWithBiasMatchesTheCpuOnEveryPath) {
  REQUIRE_GPU();
  uint64_t seed = 13000;
  for (int64_t bs : {8, 16, 32, 64})
    for (const LayoutPtr& l : layouts(bs))
      for (const Precision& p : kPrecisions)
        for (bool gated : {false, true})
          for (int64_t n : {int64_t{17}, int64_t{300}, int64_t{4096}}) {
            const int64_t nnz = l->nnz();
            std::vector<Tensor> in{random({n, l->in_features()}, seed += 4, p.dt),
                                   random({nnz, bs, bs}, seed + 1, p.dt)};
            if (gated) in.push_back(cast(testing::test_rand({nnz}, 0.5, 1.5, seed + 2), p.dt));
            in.push_back(random({l->out_features()}, seed + 3, p.dt));
            const op::Bsmm::Attrs attrs{l, gated, false, true};
            const Tensor want = reference<op::Bsmm>(attrs, in);
            for (const Path& path : paths()) {
              PathGuard guard(path, p.tf32);
              const Launches before = launches();
              const Tensor got = cast(run_on_gpu_host<op::Bsmm>(attrs, in)[0], DType::f64);
              EXPECT_TRUE(close_to(got, want, p.tol)) << "bsmm + bias " << describe(*l, p, n, gated, path);
              EXPECT_TRUE(took_the_rule(before, p, bs >= 16, path))
                  << "bsmm + bias " << describe(*l, p, n, gated, path);
            }
            if (p.dt == DType::f32) continue;
            // f32 output, f32 bias
            std::vector<Tensor> in32 = in;
            in32.back() = cast(in.back(), DType::f32);
            const op::Bsmm::Attrs wide{l, gated, true, true}, narrow{l, gated, false, true, true};
            for (const Path& path : paths()) {
              PathGuard guard(path, false);
              const Tensor sums = run_on_gpu_host<op::Bsmm>(wide, in32)[0];
              EXPECT_TRUE(close_to(sums, call<op::Bsmm>(wide, in32)[0], 1e-2))
                  << "bsmm f32 output + bias " << describe(*l, p, n, gated, path);
              // the low output with the f32 bias (f32_bias): the same sums and bias, rounded once
              const Tensor low = run_on_gpu_host<op::Bsmm>(narrow, in32)[0];
              ASSERT_EQ(low.dtype(), p.dt);
              EXPECT_TRUE(testing::all_close(low, cast(sums, p.dt), 0, 0))
                  << "bsmm low output + f32 bias " << describe(*l, p, n, gated, path);
            }
          }
}

// dgate sums bs² products of mixed sign: its error is that of P times |w| over the block, a few
// times the result's scale at most in these inputs.
constexpr double kGateSumSlack = 4;

TEST(CudaBsmmTensorCores, WeightGradientMatchesTheCpuForEveryBlockSizeDtypeGateAndRowCount) {
  REQUIRE_GPU();
  uint64_t seed = 9000;
  for (int64_t bs : {8, 16, 32, 64})
    for (const LayoutPtr& l : layouts(bs))
      for (const Precision& p : kPrecisions)
        for (bool gated : {false, true})
          for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{64}, int64_t{100}, int64_t{300}, int64_t{4096}}) {
            std::vector<Tensor> in{random({n, l->in_features()}, seed += 4, p.dt),
                                   random({n, l->out_features()}, seed + 1, p.dt)};
            if (gated) {
              in.push_back(random({l->nnz(), bs, bs}, seed + 2, p.dt));
              in.push_back(cast(testing::test_rand({l->nnz()}, 0.5, 1.5, seed + 3), p.dt));
            }
            const op::BsmmDw::Attrs attrs{l, false, false, gated};
            const std::vector<Tensor> want = reference_all<op::BsmmDw>(attrs, in);
            for (const Path& path : paths()) {
              PathGuard guard(path, p.tf32);
              const Launches before = launches();
              const std::vector<Tensor> got = run_on_gpu_host<op::BsmmDw>(attrs, in);
              const std::string what = "bsmm_dw " + describe(*l, p, n, gated, path);
              EXPECT_TRUE(took_the_rule(before, p, n > 0, path)) << what;
              // n = 0: an exact zero result, where a relative tolerance is no test
              if (n == 0) {
                for (const Tensor& t : got) EXPECT_EQ(cast(t, DType::f64).to_vector<double>(),
                                                      std::vector<double>(t.numel(), 0.0)) << what;
                continue;
              }
              EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], p.tol)) << what;
              if (gated) EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], kGateSumSlack * p.tol)) << what << " dgate";
            }
          }
}

// The epilogues on every kernel: bsmm's f32 output (autocast's form) and bsmm_dw's f32 output
// and accumulate mode (acc + Xᵀ·dY), against the CPU.
TEST(CudaBsmmTensorCores, F32OutputAndAccumulateEpilogues) {
  REQUIRE_GPU();
  uint64_t seed = 11000;
  for (int64_t bs : {8, 16, 32, 64})
    for (const LayoutPtr& l : layouts(bs))
      for (DType dt : {DType::bf16, DType::f16})
        for (int64_t n : {int64_t{17}, int64_t{300}})
          for (const Path& path : paths()) {
            PathGuard guard(path, false);
            const std::vector<Tensor> in{random({n, l->in_features()}, seed += 4, dt),
                                         random({l->nnz(), bs, bs}, seed + 1, dt),
                                         cast(testing::test_rand({l->nnz()}, 0.5, 1.5, seed + 2), dt)};
            const std::string what = l->str() + " " + dtype_name(dt) + " n " + std::to_string(n) +
                                     (path.kernels ? " sm80" : "") + (path.dense_route() ? " dense route" : "");
            // 1e-2: the kernels round gate·w to the operand dtype (one rounding of 2^-9 in bf16)
            EXPECT_TRUE(close_to(run_on_gpu_host<op::Bsmm>({l, true, true}, in)[0], call<op::Bsmm>({l, true, true}, in)[0],
                                 1e-2))
                << "bsmm f32 output " << what;
            const Tensor dy = random({n, l->out_features()}, seed + 3, dt);
            const Tensor acc = random({l->nnz(), bs, bs}, seed + 5, DType::f32);
            const std::vector<Tensor> dw_in{in[0], dy, acc};
            EXPECT_TRUE(close_to(run_on_gpu_host<op::BsmmDw>({l, true, true}, dw_in)[0],
                                 call<op::BsmmDw>({l, true, true}, dw_in)[0], 1e-3))
                << "bsmm_dw f32 accumulate " << what;
            const std::vector<Tensor> dw_in16{in[0], dy, cast(acc, dt)};
            EXPECT_TRUE(close_to(run_on_gpu_host<op::BsmmDw>({l, false, true}, dw_in16)[0],
                                 call<op::BsmmDw>({l, false, true}, dw_in16)[0], 1e-2))
                << "bsmm_dw accumulate " << what;
            // gated, f32 outputs, accumulating into dw: both outputs against the CPU
            const std::vector<Tensor> gated_in{in[0], dy, in[1], in[2], acc};
            const std::vector<Tensor> got = run_on_gpu_host<op::BsmmDw>({l, true, true, true}, gated_in);
            const std::vector<Tensor> want = call<op::BsmmDw>({l, true, true, true}, gated_in);
            EXPECT_EQ(got[1].dtype(), DType::f32);
            EXPECT_TRUE(close_to(got[0], want[0], 1e-3)) << "bsmm_dw gated f32 accumulate " << what;
            EXPECT_TRUE(close_to(got[1], want[1], 1e-3)) << "bsmm_dw gated f32 dgate " << what;
          }
}

// The sm_90a dW kernel's split of N into parts added in a fixed order (forced with
// TESSERA_BSMM_DW_PARTS; the rule picks it for few long runs): against the CPU, with the f32 and
// accumulate epilogues applied after the sum, the same bits twice. Every path runs it (sm_80 and
// CPUs without sm_90a ignore the variable).
TEST(CudaBsmmTensorCores, WeightGradientSplitOverRowsMatchesTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 12000;
  for (int64_t bs : {8, 16, 32, 64})
    for (const char* parts : {"2", "3", "7"}) {
      setenv("TESSERA_BSMM_DW_PARTS", parts, 1);
      const LayoutPtr l = layouts(bs)[0];
      const std::vector<Tensor> in{random({1000, l->in_features()}, seed += 3, DType::bf16),
                                   random({1000, l->out_features()}, seed + 1, DType::bf16)};
      const std::string what = l->str() + " parts " + parts;
      const Tensor got = run_on_gpu_host<op::BsmmDw>({l}, in)[0];
      EXPECT_TRUE(close_to(cast(got, DType::f64), reference<op::BsmmDw>({l}, in), 1e-2)) << what;
      EXPECT_TRUE(same_bits(got, run_on_gpu_host<op::BsmmDw>({l}, in)[0])) << what;
      const std::vector<Tensor> acc_in{in[0], in[1], random({l->nnz(), bs, bs}, seed + 2, DType::f32)};
      EXPECT_TRUE(close_to(run_on_gpu_host<op::BsmmDw>({l, true, true}, acc_in)[0], call<op::BsmmDw>({l, true, true}, acc_in)[0],
                           1e-3))
          << "f32 accumulate " << what;
      // gated: the gate epilogue after the parts' sum, bf16 and f32 outputs
      const std::vector<Tensor> gated_in{in[0], in[1], random({l->nnz(), bs, bs}, seed + 4, DType::bf16),
                                         cast(testing::test_rand({l->nnz()}, 0.5, 1.5, seed + 5), DType::bf16)};
      for (bool f32 : {false, true}) {
        const op::BsmmDw::Attrs attrs{l, f32, false, true};
        const std::vector<Tensor> got = run_on_gpu_host<op::BsmmDw>(attrs, gated_in);
        const std::vector<Tensor> want = reference_all<op::BsmmDw>({l, false, false, true}, gated_in);
        EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], f32 ? 1e-4 : 1e-2)) << "gated " << what;
        EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], f32 ? 1e-4 : 1e-2)) << "gated dgate " << what;
        const std::vector<Tensor> again = run_on_gpu_host<op::BsmmDw>(attrs, gated_in);
        EXPECT_TRUE(same_bits(got[0], again[0]) && same_bits(got[1], again[1])) << "gated " << what;
      }
      unsetenv("TESSERA_BSMM_DW_PARTS");
    }
}

// nn::LSTM's gate layouts (four gates of one mask, lstm_gate_layout) at bs 32: bsmm_dw runs the
// sm_90a kernel whose work items take a run of a gate-0 column's entries in all four gates
// (bsmm_sm90_gate_gradient.cu), under TESSERA_BSMM_DW_GATE_RUNS=1 (the default; asked for here so
// that the test does not depend on it). Against the CPU for bf16 and f16, bf16 and f32 outputs and
// the accumulate mode, over row counts that end mid-stage, columns longer than one run (8 entries),
// an empty column and an empty block row; the same bits twice; with the variable at 0 the general kernel runs (no
// gate-run launch counted), and so it does for a layout whose four quarters differ.
TEST(CudaBsmmTensorCores, GateLayoutWeightGradientMatchesTheCpu) {
  REQUIRE_GPU();
  if (!sm90_here()) GTEST_SKIP() << "the gate-run dW kernel needs an sm_90a build on a GPU of compute 9.0";
  auto gate_runs = [] { return cuda::bsmm_launches(cuda::BsmmKernel::sm90_gate_runs); };
  const testing::ScopedEnv on("TESSERA_BSMM_DW_GATE_RUNS", "1");
  const testing::ScopedEnv kernels("TESSERA_BSMM_DENSE", "0");  // the block-sparse kernels, whatever the density
  // a gate's mask of 12 block rows × 4 block columns: column 0 holds 11 blocks (two runs), column
  // 2 none, block row 5 none
  std::vector<uint8_t> mask(12 * 4, 0);
  for (int r = 0; r < 12; ++r) mask[r * 4 + 0] = r != 5;
  for (int r : {0, 3, 7}) mask[r * 4 + 1] = 1;
  for (int r = 1; r < 12; r += 2) mask[r * 4 + 3] = r != 5;
  const std::vector<LayoutPtr> gate_layouts = {
      nn::lstm_gate_layout(*BlockLayout::from_mask(12 * 32, 4 * 32, 32, mask)),
      nn::lstm_gate_layout(*random_layout(256, 256, 32, 0.25, 41)),
      nn::lstm_gate_layout(*random_layout(1024, 1024, 32, 0.0625, 42))};
  uint64_t seed = 13000;
  for (const LayoutPtr& l : gate_layouts)
    for (DType dt : {DType::bf16, DType::f16})
      for (int64_t n : {int64_t{1}, int64_t{100}, int64_t{1000}}) {
        const std::vector<Tensor> in{random({n, l->in_features()}, seed += 3, dt),
                                     random({n, l->out_features()}, seed + 1, dt)};
        const std::string what = "gate layout " + l->str() + " " + dtype_name(dt) + " n " + std::to_string(n);
        const uint64_t before = gate_runs();
        const Tensor got = run_on_gpu_host<op::BsmmDw>({l}, in)[0];
        EXPECT_GT(gate_runs(), before) << what;
        EXPECT_TRUE(close_to(cast(got, DType::f64), reference<op::BsmmDw>({l}, in), 1e-2)) << what;
        EXPECT_TRUE(same_bits(got, run_on_gpu_host<op::BsmmDw>({l}, in)[0])) << what;
        const std::vector<Tensor> acc_in{in[0], in[1], random({l->nnz(), 32, 32}, seed + 2, DType::f32)};
        EXPECT_TRUE(close_to(run_on_gpu_host<op::BsmmDw>({l, true, true}, acc_in)[0],
                             call<op::BsmmDw>({l, true, true}, acc_in)[0], 1e-3))
            << "f32 accumulate " << what;
        {
          const testing::ScopedEnv off("TESSERA_BSMM_DW_GATE_RUNS", "0");
          const uint64_t off_before = gate_runs();
          const Tensor general = run_on_gpu_host<op::BsmmDw>({l}, in)[0];
          EXPECT_EQ(gate_runs(), off_before) << what;
          EXPECT_TRUE(close_to(cast(got, DType::f64), cast(general, DType::f64), 1e-2))
              << what << " against the general kernel";
        }
      }
  {  // pacing (TESSERA_BSMM_DW_PACE, 2 steps by default) holds blocks back, never changes a sum: off,
     // at 8 and at 64 steps the same bits as the default, over 4000 rows (63 stages, several ticks a run) and
     // every gate layout; a bad value is one clear error
    for (const LayoutPtr& l : gate_layouts) {
      const std::vector<Tensor> in{random({4000, l->in_features()}, 13710, DType::bf16),
                                   random({4000, l->out_features()}, 13711, DType::bf16)};
      const Tensor paced = run_on_gpu_host<op::BsmmDw>({l}, in)[0];
      EXPECT_TRUE(close_to(cast(paced, DType::f64), reference<op::BsmmDw>({l}, in), 1e-2)) << l->str();
      for (const char* pace : {"0", "8", "64"}) {
        const testing::ScopedEnv set("TESSERA_BSMM_DW_PACE", pace);
        EXPECT_TRUE(same_bits(paced, run_on_gpu_host<op::BsmmDw>({l}, in)[0])) << l->str() << ", pace " << pace;
      }
    }
    const std::vector<Tensor> in{random({1000, 384}, 13712, DType::bf16), random({1000, 512}, 13713, DType::bf16)};
    const testing::ScopedEnv bad("TESSERA_BSMM_DW_PACE", "-8");
    testing::expect_error<ValueError>([&] { run_on_gpu_host<op::BsmmDw>({gate_layouts[0]}, in); },
                                      {"TESSERA_BSMM_DW_PACE", "'-8'"});
  }
  {  // the lab switch of dY's L2 policy: off, the same sums; a bad value is one clear error
    const testing::ScopedEnv off("TESSERA_BSMM_DW_EVICT_FIRST", "0");
    const std::vector<Tensor> in{random({1000, 384}, 13700, DType::bf16), random({1000, 512}, 13701, DType::bf16)};
    const uint64_t before = gate_runs();
    const Tensor plain = run_on_gpu_host<op::BsmmDw>({gate_layouts[0]}, in)[0];
    EXPECT_GT(gate_runs(), before);
    EXPECT_TRUE(close_to(cast(plain, DType::f64), reference<op::BsmmDw>({gate_layouts[0]}, in), 1e-2));
    const testing::ScopedEnv bad("TESSERA_BSMM_DW_EVICT_FIRST", "yes");
    testing::expect_error<ValueError>([&] { run_on_gpu_host<op::BsmmDw>({gate_layouts[0]}, in); },
                                      {"TESSERA_BSMM_DW_EVICT_FIRST", "'yes'"});
  }
  {  // a bad value is one clear error, naming the variable and the value
    const testing::ScopedEnv bad("TESSERA_BSMM_DW_GATE_RUNS", "yes");
    const std::vector<Tensor> in{random({100, 384}, 13800, DType::bf16), random({100, 512}, 13801, DType::bf16)};
    testing::expect_error<ValueError>([&] { run_on_gpu_host<op::BsmmDw>({gate_layouts[0]}, in); },
                                      {"TESSERA_BSMM_DW_GATE_RUNS", "'yes'"});
  }
  // a layout of four block-column quarters that differ: the general kernel
  const LayoutPtr other = random_layout(256, 1024, 32, 0.25, 43);
  const std::vector<Tensor> in{random({100, 256}, 13900, DType::bf16), random({100, 1024}, 13901, DType::bf16)};
  const uint64_t before = gate_runs();
  const Tensor got = run_on_gpu_host<op::BsmmDw>({other}, in)[0];
  EXPECT_TRUE(close_to(cast(got, DType::f64), reference<op::BsmmDw>({other}, in), 1e-2));
  EXPECT_EQ(gate_runs(), before);
}

// bsmm_dw_pair (nn::LSTM's W_x and W_h gradients from one dpre) on the gate-run kernel: both gate
// layouts' blocks of a gate-0 column in one run, X_b's rows `shift` up (the first rows the copy's
// zero fill). Against the CPU for bf16 and f16, layouts of different in_features and densities
// (a column of 11 + 2 entries: two runs), shifts 0, 7 and 64, rows that end mid-stage; the same
// bits twice; bf16 and f32 outputs; one launch where two bsmm_dw take two; dY's column sums in the
// kernel and by col_sum after it, and a column of neither layout (no run to sum it);
// TESSERA_BSMM_DW_PAIR=0 and a layout that is no gate layout take two bsmm_dw, with the same sums.
TEST(CudaBsmmTensorCores, GatePairWeightGradientsMatchTheCpu) {
  REQUIRE_GPU();
  if (!sm90_here()) GTEST_SKIP() << "the gate-run dW kernel needs an sm_90a build on a GPU of compute 9.0";
  auto gate_runs = [] { return cuda::bsmm_launches(cuda::BsmmKernel::sm90_gate_runs); };
  const testing::ScopedEnv on("TESSERA_BSMM_DW_GATE_RUNS", "1");
  const testing::ScopedEnv pair_on("TESSERA_BSMM_DW_PAIR", "1");
  const testing::ScopedEnv kernels("TESSERA_BSMM_DENSE", "0");
  std::vector<uint8_t> mask(12 * 4, 0);  // as above: column 0 holds 11 blocks, column 2 none
  for (int r = 0; r < 12; ++r) mask[r * 4 + 0] = r != 5;
  for (int r : {0, 3, 7}) mask[r * 4 + 1] = 1;
  for (int r = 1; r < 12; r += 2) mask[r * 4 + 3] = r != 5;
  struct Pair {
    LayoutPtr a, b;
  };
  const std::vector<Pair> pairs = {
      {nn::lstm_gate_layout(*BlockLayout::from_mask(12 * 32, 4 * 32, 32, mask)),
       nn::lstm_gate_layout(*random_layout(128, 128, 32, 0.5, 44))},
      {nn::lstm_gate_layout(*random_layout(1024, 1024, 32, 0.0625, 45)),
       nn::lstm_gate_layout(*random_layout(1024, 1024, 32, 0.0625, 46))}};
  auto check = [&](const Pair& p, DType dt, int64_t n, int64_t shift, int launches, const std::string& what,
                   bool f32 = false, bool sums = false) {
    const BlockLayout &a = *p.a, &b = *p.b;
    const std::vector<Tensor> in{random({n, a.in_features()}, 14000 + n + shift, dt),
                                 random({n - shift, b.in_features()}, 14001 + n, dt),
                                 random({n, a.out_features()}, 14002 + shift, dt)};
    const op::BsmmDwPair::Attrs attrs{p.a, p.b, shift, f32, sums};
    const uint64_t before = gate_runs();
    const std::vector<Tensor> got = run_on_gpu_host<op::BsmmDwPair>(attrs, in);
    EXPECT_EQ(gate_runs(), before + launches) << what;
    // the reference in f64 (the f32 output is a form of half inputs only)
    const std::vector<Tensor> want = reference_all<op::BsmmDwPair>({p.a, p.b, shift, false, sums}, in);
    const DType out_dtype = f32 ? DType::f32 : dt;
    EXPECT_TRUE(got[0].dtype() == out_dtype && got[1].dtype() == out_dtype) << what;
    EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], 1e-2)) << what << ", dW_a";
    EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], 1e-2)) << what << ", dW_b";
    const std::vector<Tensor> again = run_on_gpu_host<op::BsmmDwPair>(attrs, in);
    EXPECT_TRUE(same_bits(got[0], again[0]) && same_bits(got[1], again[1])) << what;
    if (sums) {  // dY's column sums [K] in f32
      ASSERT_EQ(got.size(), 3u) << what;
      EXPECT_TRUE(got[2].dtype() == DType::f32) << what;
      EXPECT_TRUE(close_to(cast(got[2], DType::f64), want[2], 1e-2)) << what << ", column sums";
      EXPECT_TRUE(same_bits(got[2], again[2])) << what << ", column sums";
    }
  };
  for (const Pair& p : pairs)
    for (DType dt : {DType::bf16, DType::f16})
      for (int64_t shift : {0, 7, 64})
        for (int64_t n : {100, 1000}) {
          const std::string what = "pair " + p.a->str() + " / " + p.b->str() + " " + dtype_name(dt) + " n " +
                                   std::to_string(n) + " shift " + std::to_string(shift);
          EXPECT_TRUE(bsmm_dw_pair_fused(TensorMeta{Shape({n, p.a->in_features()}), dt, kGpu},
                                         TensorMeta{Shape({n - shift, p.b->in_features()}), dt, kGpu},
                                         TensorMeta{Shape({n, p.a->out_features()}), dt, kGpu}, p.a, p.b, shift))
              << what;
          check(p, dt, n, shift, 1, what);
          if (n == 1000) check(p, dt, n, shift, 1, what + ", f32 output", true);
          // dY's column sums: in the kernel (each column's first run) where every column has a run
          // (TESSERA_BSMM_DW_PAIR_SUMS=1), else col_sum's kernel after the launch
          for (const char* in_kernel : {"1", "0"}) {
            const testing::ScopedEnv set("TESSERA_BSMM_DW_PAIR_SUMS", in_kernel);
            check(p, dt, n, shift, 1, what + ", column sums " + in_kernel, n == 1000, true);
          }
        }
  {  // a gate-0 column with no entry in either layout: no run to sum it, so col_sum's kernel does
    std::vector<uint8_t> mask_b(4 * 4, 0);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) mask_b[r * 4 + c] = c != 2 && (r + c) % 2 == 0;
    const Pair gap{pairs[0].a, nn::lstm_gate_layout(*BlockLayout::from_mask(4 * 32, 4 * 32, 32, mask_b))};
    const testing::ScopedEnv set("TESSERA_BSMM_DW_PAIR_SUMS", "1");
    check(gap, DType::bf16, 1000, 64, 1, "a column of neither layout, column sums", false, true);
  }
  {
    const testing::ScopedEnv off("TESSERA_BSMM_DW_PAIR", "0");
    EXPECT_FALSE(bsmm_dw_pair_fused(TensorMeta{Shape({1000, 1024}), DType::bf16, kGpu},
                                    TensorMeta{Shape({936, 1024}), DType::bf16, kGpu},
                                    TensorMeta{Shape({1000, 4096}), DType::bf16, kGpu}, pairs[1].a, pairs[1].b, 64));
    check(pairs[1], DType::bf16, 1000, 64, 2, "TESSERA_BSMM_DW_PAIR=0");
  }
  {  // layouts whose every column fills a run of 8 alone: pairing saves no run, so two bsmm_dw
    const Pair full{nn::lstm_gate_layout(*BlockLayout::from_mask(8 * 32, 2 * 32, 32, std::vector<uint8_t>(16, 1))),
                    nn::lstm_gate_layout(*BlockLayout::from_mask(8 * 32, 2 * 32, 32, std::vector<uint8_t>(16, 1)))};
    EXPECT_FALSE(bsmm_dw_pair_fused(TensorMeta{Shape({1000, 256}), DType::bf16, kGpu},
                                    TensorMeta{Shape({936, 256}), DType::bf16, kGpu},
                                    TensorMeta{Shape({1000, 256}), DType::bf16, kGpu}, full.a, full.b, 64));
    check(full, DType::bf16, 1000, 64, 2, "8 + 8 entries a column");
  }
  {  // a bad value is one clear error, naming the variable and the value
    const testing::ScopedEnv bad("TESSERA_BSMM_DW_PAIR", "yes");
    testing::expect_error<ValueError>(
        [&] {
          bsmm_dw_pair_fused(TensorMeta{Shape({1000, 1024}), DType::bf16, kGpu},
                             TensorMeta{Shape({936, 1024}), DType::bf16, kGpu},
                             TensorMeta{Shape({1000, 4096}), DType::bf16, kGpu}, pairs[1].a, pairs[1].b, 64);
        },
        {"TESSERA_BSMM_DW_PAIR", "'yes'"});
    const testing::ScopedEnv bad_sums("TESSERA_BSMM_DW_PAIR_SUMS", "on");
    const std::vector<Tensor> in{random({1000, 1024}, 14100, DType::bf16), random({936, 1024}, 14101, DType::bf16),
                                 random({1000, 4096}, 14102, DType::bf16)};
    const testing::ScopedEnv pair_default("TESSERA_BSMM_DW_PAIR", "1");
    testing::expect_error<ValueError>(
        [&] { run_on_gpu_host<op::BsmmDwPair>({pairs[1].a, pairs[1].b, 64, false, true}, in); },
        {"TESSERA_BSMM_DW_PAIR_SUMS", "'on'"});
  }
  // b no gate layout: bsmm_dw on each, the gate-run kernel for a only
  const Pair mixed{pairs[1].a, random_layout(1024, 4096, 32, 0.0625, 47)};
  EXPECT_FALSE(bsmm_dw_pair_fused(TensorMeta{Shape({1000, 1024}), DType::bf16, kGpu},
                                  TensorMeta{Shape({936, 1024}), DType::bf16, kGpu},
                                  TensorMeta{Shape({1000, 4096}), DType::bf16, kGpu}, mixed.a, mixed.b, 64));
  check(mixed, DType::bf16, 1000, 64, 1, "b no gate layout");
}

// Large block counts per list and a feature count past 2^15/bs blocks: C = K = 32768 at bs 64
// with few rows (the kernels' 64-bit offsets), on the block-sparse kernels and on the dense
// route, whose dense W (2 GB) and P (4 GB) go in chunks of block columns or rows.
TEST(CudaBsmmTensorCores, WideLayoutsUpTo32768Features) {
  REQUIRE_GPU();
  LayoutPtr l = random_layout(32768, 32768, 64, 0.002, 11);
  const std::vector<Tensor> in{random({5, 32768}, 1, DType::bf16), random({l->nnz(), 64, 64}, 2, DType::bf16),
                               cast(testing::test_rand({l->nnz()}, 0.5, 1.5, 4), DType::bf16)};
  const std::vector<Tensor> ungated{in[0], in[1]};
  const std::vector<Tensor> dw_in{in[0], random({5, 32768}, 3, DType::bf16)};
  const std::vector<Tensor> dwg_in{dw_in[0], dw_in[1], in[1], in[2]};
  for (const char* dense : {"0", "1"}) {
    PathGuard guard({nullptr, dense}, false);
    const Launches before = launches();
    EXPECT_TRUE(close_to(cast(run_on_gpu_host<op::Bsmm>({l, false}, ungated)[0], DType::f64),
                         reference<op::Bsmm>({l, false}, ungated), 1e-2)) << "dense " << dense;
    EXPECT_TRUE(close_to(cast(run_on_gpu_host<op::BsmmDx>({l, true}, in)[0], DType::f64),
                         reference<op::BsmmDx>({l, true}, in), 1e-2)) << "dense " << dense;
    EXPECT_TRUE(close_to(cast(run_on_gpu_host<op::BsmmDw>({l}, dw_in)[0], DType::f64),
                         reference<op::BsmmDw>({l}, dw_in), 1e-2)) << "dense " << dense;
    const op::BsmmDw::Attrs gated{l, true, false, true};
    const std::vector<Tensor> got = run_on_gpu_host<op::BsmmDw>(gated, dwg_in);
    const std::vector<Tensor> want = reference_all<op::BsmmDw>({l, false, false, true}, dwg_in);
    EXPECT_TRUE(close_to(cast(got[0], DType::f64), want[0], 1e-3)) << "gated, dense " << dense;
    EXPECT_TRUE(close_to(cast(got[1], DType::f64), want[1], 1e-3)) << "dgate, dense " << dense;
    EXPECT_EQ(launches().dense - before.dense, std::string(dense) == "1" ? 4u : 0u);
  }
}

#ifdef TESSERA_WITH_CUDA
// The dense route's rule (bsmm_dense.h): small blocks at high density and many rows take it, and
// the all-blocks layout at bs 64; bs 64 at half density on the sm_90a kernels, few rows, a sparse
// layout, f64 and TESSERA_BSMM_PATH=simt do not;
// TESSERA_BSMM_DENSE=0 / 1 force it off / on; another value is one ValueError naming the variable.
TEST(CudaBsmmTensorCores, DenseRouteRule) {
  REQUIRE_GPU();
  const LayoutPtr half8 = random_layout(1024, 1024, 8, 0.5, 1), half64 = random_layout(1024, 1024, 64, 0.5, 2);
  const LayoutPtr sparse16 = random_layout(1024, 1024, 16, 0.02, 3);
  auto takes = [](const LayoutPtr& l, int64_t n, DType dt) {
    return cuda::dense_route_takes(cuda::BsmmOp::fwd, dt, *l, n, {}, 0);
  };
  EXPECT_TRUE(takes(half8, 4096, DType::bf16));
  EXPECT_TRUE(cuda::dense_route_takes(cuda::BsmmOp::dw, DType::f16, *half8, 4096, {}, 0));
  EXPECT_FALSE(takes(half8, 64, DType::bf16)) << "a recurrent step's rows";
  EXPECT_FALSE(takes(sparse16, 4096, DType::bf16)) << "2% of the blocks";
  EXPECT_FALSE(takes(half8, 4096, DType::f64));
  if (sm90_here() && cuda::have_sm90_kernels()) {
    EXPECT_FALSE(takes(half64, 8192, DType::bf16)) << "bs 64 at half density keeps its kernels";
    EXPECT_TRUE(takes(dense_layout(1024, 1024, 64), 8192, DType::bf16)) << "all blocks: cuBLAS is faster";
  }
  alignas(16) static char buffer[32];
  EXPECT_FALSE(cuda::dense_route_takes(cuda::BsmmOp::fwd, DType::bf16, *half8, 4096, {buffer + 8}, 0))
      << "a misaligned operand";
  {
    PathGuard simt({"simt", "1"}, false);
    EXPECT_FALSE(takes(half8, 4096, DType::bf16)) << "TESSERA_BSMM_PATH=simt";
  }
  {
    PathGuard never({nullptr, "0"}, false);
    EXPECT_FALSE(takes(half8, 4096, DType::bf16));
  }
  {
    PathGuard always({nullptr, "1"}, false);
    EXPECT_TRUE(takes(sparse16, 1, DType::bf16));
    EXPECT_FALSE(takes(sparse16, 1, DType::f64));
  }
  {
    PathGuard bad({nullptr, "yes"}, false);
    try {
      takes(half8, 4096, DType::bf16);
      ADD_FAILURE() << "no error for TESSERA_BSMM_DENSE=yes";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("TESSERA_BSMM_DENSE='yes'"), std::string::npos) << e.what();
    }
  }
  // through the op: the call counts
  const Tensor x = random({4096, 1024}, 5, DType::bf16), w = random({half8->nnz(), 8, 8}, 6, DType::bf16);
  const uint64_t before = cuda::dense_route_calls();
  const Tensor y = run_on_gpu_host<op::Bsmm>({half8, false}, {x, w})[0];
  EXPECT_EQ(cuda::dense_route_calls() - before, 1u);
  EXPECT_TRUE(close_to(cast(y, DType::f64), reference<op::Bsmm>({half8, false}, {x, w}), 1e-2));
}
#endif

// Operands that do not start on a 16-byte boundary take the scalar kernels: still correct.
TEST(CudaBsmmTensorCores, MisalignedOperandsAreStillCorrect) {
  REQUIRE_GPU();
  LayoutPtr l = random_layout(128, 96, 16, 0.5, 3);
  const Tensor x = random({33, 128}, 4, DType::bf16), w = random({l->nnz(), 16, 16}, 5, DType::bf16);
  const Launches before = launches();
  const Tensor y = bsmm(misaligned_on_gpu(x), w.to(kGpu), l);
  EXPECT_EQ(launches().sm80, before.sm80) << "the scalar kernel";
  EXPECT_EQ(launches().sm90, before.sm90) << "the scalar kernel";
  EXPECT_TRUE(close_to(cast(y, DType::f64), reference<op::Bsmm>({l, false}, {x, w}), 1e-2));
}

TEST(CudaBsmmTensorCores, TwoRunsGiveTheSameBits) {
  REQUIRE_GPU();
  for (const char* dense : {"0", "1"})
    for (int64_t bs : {8, 32, 64}) {
      PathGuard guard({nullptr, dense}, false);
      LayoutPtr l = random_layout(64 * bs, 32 * bs, bs, 0.3, static_cast<uint64_t>(bs));
      const Tensor x = random({1000, l->in_features()}, 1, DType::bf16).to(kGpu);
      const Tensor dy = random({1000, l->out_features()}, 2, DType::bf16).to(kGpu);
      const Tensor w = random({l->nnz(), bs, bs}, 3, DType::bf16).to(kGpu);
      const Tensor gate = cast(testing::test_rand({l->nnz()}, 0.5, 1.5, 4), DType::bf16).to(kGpu);
      EXPECT_TRUE(same_bits(bsmm(x, w, l, gate), bsmm(x, w, l, gate))) << l->str();
      EXPECT_TRUE(same_bits(bsmm(x, w, l), bsmm(x, w, l))) << l->str();
      EXPECT_TRUE(same_bits(bsmm_dx(dy, w, l), bsmm_dx(dy, w, l))) << l->str();
      EXPECT_TRUE(same_bits(bsmm_dx(dy, w, l, gate), bsmm_dx(dy, w, l, gate))) << l->str();
      EXPECT_TRUE(same_bits(bsmm_dw(x, dy, l), bsmm_dw(x, dy, l))) << l->str();
      const auto [dw1, dgate1] = bsmm_dw_gated(x, dy, w, gate, l, false);
      const auto [dw2, dgate2] = bsmm_dw_gated(x, dy, w, gate, l, false);
      EXPECT_TRUE(same_bits(dw1, dw2) && same_bits(dgate1, dgate2)) << "gated " << l->str() << " dense " << dense;
    }
}

#ifdef TESSERA_WITH_CUDA
// Sets TESSERA_BSMM_PAIRS (the sm_90a gather kernel's column pairs: "0" off, "1" wherever they
// apply, nullptr the rule) for one scope.
class PairsGuard {
 public:
  explicit PairsGuard(const char* v) {
    if (v) setenv("TESSERA_BSMM_PAIRS", v, 1);
  }
  ~PairsGuard() { unsetenv("TESSERA_BSMM_PAIRS"); }
};

uint64_t pair_launches() { return cuda::bsmm_launches(cuda::BsmmKernel::sm90_pairs); }
#endif

// The sm_90a gather kernel's column pairs (two output block columns per work item, their lists
// merged) give the same bits as single columns, fwd and dx, gated or not, on layouts with odd
// block counts, empty rows and columns and the all-blocks layout, and match the CPU; the rule
// takes them for the all-blocks layout and not for a 10% random one.
TEST(CudaBsmmTensorCores, ColumnPairsGiveTheBitsOfSingleColumns) {
  REQUIRE_GPU();
#ifdef TESSERA_WITH_CUDA
  if (!sm90_here()) GTEST_SKIP() << "column pairs are a kernel of sm_90a";
  PathGuard kernels({nullptr, "0"}, false);  // the block-sparse kernels, never the dense route
  uint64_t seed = 300;
  for (int64_t bs : {32, 64}) {
    std::vector<LayoutPtr> ls = layouts(bs);
    ls.push_back(random_layout(5 * bs, 7 * bs, bs, 1.0, 1));  // all blocks, odd block counts
    for (const LayoutPtr& l : ls)
      for (DType dt : {DType::bf16, DType::f16})
        for (bool gated : {false, true})
          for (int64_t n : {300, 4096}) {
            const std::vector<Tensor> x{random({n, l->in_features()}, seed += 4, dt),
                                        random({n, l->out_features()}, seed + 1, dt),
                                        random({l->nnz(), bs, bs}, seed + 2, dt),
                                        cast(testing::test_rand({l->nnz()}, 0.5, 1.5, seed + 3), dt)};
            const std::string what = l->str() + (dt == DType::bf16 ? " bf16" : " f16") + " n " + std::to_string(n) +
                                     (gated ? " gated" : "");
            auto in_of = [&](const Tensor& a) {
              std::vector<Tensor> in{a, x[2]};
              if (gated) in.push_back(x[3]);
              return in;
            };
            auto both = [&](auto op, const Tensor& a, const char* name) {
              using Op = decltype(op);
              const typename Op::Attrs attrs{l, gated};
              Tensor single, paired;
              {
                PairsGuard off("0");
                const uint64_t before = pair_launches();
                single = run_on_gpu_host<Op>(attrs, in_of(a))[0];
                EXPECT_EQ(pair_launches(), before) << name << " " << what;
              }
              {
                PairsGuard on("1");
                const uint64_t before = pair_launches();
                paired = run_on_gpu_host<Op>(attrs, in_of(a))[0];
                EXPECT_EQ(pair_launches(), before + 1) << name << " " << what;
              }
              EXPECT_TRUE(same_bits(paired, single)) << name << " " << what;
              EXPECT_TRUE(close_to(cast(paired, DType::f64), reference<Op>(attrs, in_of(a)), 1e-2))
                  << name << " " << what;
            };
            both(op::Bsmm{}, x[0], "bsmm");
            both(op::BsmmDx{}, x[1], "bsmm_dx");
          }
  }
  // The rule: the all-blocks layout takes pairs, a 10% random layout does not.
  for (const auto& [l, want] : {std::pair{random_layout(1024, 1024, 64, 1.0, 2), true},
                                std::pair{random_layout(2048, 2048, 64, 0.1, 3), false}}) {
    const Tensor x = random({512, l->in_features()}, 5, DType::bf16), w = random({l->nnz(), 64, 64}, 6, DType::bf16);
    const uint64_t before = pair_launches();
    run_on_gpu_host<op::Bsmm>({l, false}, {x, w});
    EXPECT_EQ(pair_launches() - before, want ? 1u : 0u) << l->str();
  }
#endif
}

// nn::LSTM's gate layouts pair each forward column with its twin in the next gate (c, c + q:
// PairLists::stride q), whose list is the same, so the rule takes pairs at any density: against
// the CPU and the bits of single columns, bs 32 and 64, bf16 and f16, gated or not, with a bias
// (bf16, and f32 under autocast's form), on a layout with an empty column and an empty block row;
// a gate layout at 1/16 takes pairs by the rule. Column quads (the default where they apply, the
// next test) off.
TEST(CudaBsmmTensorCores, GateLayoutForwardPairsTwinColumns) {
  REQUIRE_GPU();
#ifdef TESSERA_WITH_CUDA
  if (!sm90_here()) GTEST_SKIP() << "column pairs are a kernel of sm_90a";
  PathGuard kernels({nullptr, "0"}, false);  // the block-sparse kernels, never the dense route
  const testing::ScopedEnv no_quads("TESSERA_BSMM_QUADS", "0");
  uint64_t seed = 700;
  for (int64_t bs : {32, 64}) {
    std::vector<uint8_t> mask(6 * 5, 0);  // a gate's mask: column 2 and block row 4 empty
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 5; ++c) mask[r * 5 + c] = c != 2 && r != 4 && (r + c) % 3 != 1;
    for (const LayoutPtr& l : {nn::lstm_gate_layout(*BlockLayout::from_mask(6 * bs, 5 * bs, bs, mask)),
                               nn::lstm_gate_layout(*random_layout(8 * bs, 8 * bs, bs, 0.25, 45))})
      for (DType dt : {DType::bf16, DType::f16})
        for (bool gated : {false, true})
          for (bool f32_bias : {false, true}) {
            const int64_t n = 1000;
            const Tensor x = random({n, l->in_features()}, seed += 4, dt);
            const Tensor w = random({l->nnz(), bs, bs}, seed + 1, dt);
            const Tensor gate = cast(testing::test_rand({l->nnz()}, 0.5, 1.5, seed + 2), dt);
            const Tensor bias = random({l->out_features()}, seed + 3, f32_bias ? DType::f32 : dt);
            std::vector<Tensor> in{x, w};
            if (gated) in.push_back(gate);
            in.push_back(bias);
            op::Bsmm::Attrs attrs{l, gated};
            attrs.biased = true;
            attrs.f32_bias = f32_bias;
            const std::string what = l->str() + " " + dtype_name(dt) + (gated ? " gated" : "") +
                                     (f32_bias ? " f32 bias" : " bias");
            Tensor single, paired;
            {
              PairsGuard off("0");
              single = run_on_gpu_host<op::Bsmm>(attrs, in)[0];
            }
            {
              PairsGuard rule(nullptr);
              const uint64_t before = pair_launches();
              paired = run_on_gpu_host<op::Bsmm>(attrs, in)[0];
              EXPECT_EQ(pair_launches(), before + 1) << what;
            }
            EXPECT_TRUE(same_bits(paired, single)) << what;
            // the f64 reference takes no f32 bias beside f64 inputs: the CPU op in the inputs' dtype then
            const Tensor want =
                f32_bias ? cast(call<op::Bsmm>(attrs, in)[0], DType::f64) : reference<op::Bsmm>(attrs, in);
            EXPECT_TRUE(close_to(cast(paired, DType::f64), want, 1e-2)) << what;
          }
  }
  const LayoutPtr sparse = nn::lstm_gate_layout(*random_layout(1024, 1024, 32, 0.0625, 46));
  const Tensor x = random({512, 1024}, 9, DType::bf16), w = random({sparse->nnz(), 32, 32}, 10, DType::bf16);
  const uint64_t before = pair_launches();
  const Tensor y = run_on_gpu_host<op::Bsmm>({sparse, false}, {x, w})[0];
  EXPECT_EQ(pair_launches() - before, 1u) << sparse->str();
  EXPECT_TRUE(close_to(cast(y, DType::f64), reference<op::Bsmm>({sparse, false}, {x, w}), 1e-2)) << sparse->str();
#endif
}

// Column quads (TESSERA_BSMM_QUADS, on by default): the four gates of a gate layout's column in one
// work item of the sm_90a kernel, fwd at bs 32. The same bits as column pairs (each output element
// summed over the same list in the same order), against the CPU, with a bias in the output's dtype
// and in f32, on an empty gate-0 column, rows that end mid-tile (1000) and over several tiles; one
// quad launch each. Not where they do not apply: gated (pairs), 128 rows or fewer, bs 64, an f32
// output. A bad value is one clear error.
TEST(CudaBsmmTensorCores, GateLayoutForwardQuadsGiveThePairsBits) {
  REQUIRE_GPU();
#ifdef TESSERA_WITH_CUDA
  if (!sm90_here()) GTEST_SKIP() << "column quads are a kernel of sm_90a";
  PathGuard kernels({nullptr, "0"}, false);  // the block-sparse kernels, never the dense route
  auto quad_launches = [] { return cuda::bsmm_launches(cuda::BsmmKernel::sm90_quads); };
  std::vector<uint8_t> mask(6 * 5, 0);  // a gate's mask: column 2 and block row 4 empty
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 5; ++c) mask[r * 5 + c] = c != 2 && r != 4 && (r + c) % 3 != 1;
  uint64_t seed = 900;
  for (const LayoutPtr& l : {nn::lstm_gate_layout(*BlockLayout::from_mask(6 * 32, 5 * 32, 32, mask)),
                             nn::lstm_gate_layout(*random_layout(1024, 1024, 32, 0.0625, 47))})
    for (DType dt : {DType::bf16, DType::f16})
      for (int bias : {0, 1, 2})  // none, in the output's dtype, f32
        for (int64_t n : {1000, 2048}) {
          const Tensor x = random({n, l->in_features()}, seed += 4, dt);
          const Tensor w = random({l->nnz(), 32, 32}, seed + 1, dt);
          std::vector<Tensor> in{x, w};
          op::Bsmm::Attrs attrs{l, false};
          if (bias > 0) {
            in.push_back(random({l->out_features()}, seed + 2, bias == 2 ? DType::f32 : dt));
            attrs.biased = true;
            attrs.f32_bias = bias == 2;
          }
          const std::string what =
              l->str() + " " + dtype_name(dt) + " bias " + std::to_string(bias) + " n " + std::to_string(n);
          Tensor paired, quads;
          {
            const testing::ScopedEnv off("TESSERA_BSMM_QUADS", "0");
            paired = run_on_gpu_host<op::Bsmm>(attrs, in)[0];
          }
          {
            const testing::ScopedEnv on("TESSERA_BSMM_QUADS", nullptr);  // the default
            const uint64_t before = quad_launches();
            quads = run_on_gpu_host<op::Bsmm>(attrs, in)[0];
            EXPECT_EQ(quad_launches(), before + 1) << what;
            EXPECT_TRUE(same_bits(quads, run_on_gpu_host<op::Bsmm>(attrs, in)[0])) << what << ", again";
          }
          EXPECT_TRUE(same_bits(quads, paired)) << what;
          const Tensor want =
              bias == 2 ? cast(call<op::Bsmm>(attrs, in)[0], DType::f64) : reference<op::Bsmm>(attrs, in);
          EXPECT_TRUE(close_to(cast(quads, DType::f64), want, 1e-2)) << what;
        }
  const testing::ScopedEnv on("TESSERA_BSMM_QUADS", nullptr);
  const LayoutPtr l = nn::lstm_gate_layout(*random_layout(256, 256, 32, 0.25, 48));
  const Tensor w = random({l->nnz(), 32, 32}, 11, DType::bf16), gate = random({l->nnz()}, 12, DType::bf16);
  const uint64_t before = quad_launches();
  run_on_gpu_host<op::Bsmm>({l, true}, {random({1000, 256}, 13, DType::bf16), w, gate});  // gated: pairs
  run_on_gpu_host<op::Bsmm>({l, false}, {random({128, 256}, 14, DType::bf16), w});        // 128 rows
  const LayoutPtr l64 = nn::lstm_gate_layout(*random_layout(256, 256, 64, 0.25, 49));
  run_on_gpu_host<op::Bsmm>({l64, false}, {random({1000, 256}, 15, DType::bf16),
                                           random({l64->nnz(), 64, 64}, 16, DType::bf16)});  // bs 64
  EXPECT_EQ(quad_launches(), before);
  const testing::ScopedEnv bad("TESSERA_BSMM_QUADS", "yes");
  const Tensor x = random({1000, 256}, 17, DType::bf16);
  testing::expect_error<ValueError>([&] { run_on_gpu_host<op::Bsmm>({l, false}, {x, w}); },
                                    {"TESSERA_BSMM_QUADS", "'yes'"});
#endif
}

// A block-sparse two-layer MLP trained under bf16 autocast.
struct SparseMlp {
  LayoutPtr l1, l2;
  Tensor w1, g1, w2;
  SparseMlp(Device dev) {
    l1 = random_layout(128, 256, 32, 0.4, 21);
    l2 = random_layout(256, 64, 16, 0.5, 22);
    w1 = mul(random({l1->nnz(), 32, 32}, 23, DType::f32), 0.2).to(dev).detach().requires_grad_();
    g1 = cast(testing::test_rand({l1->nnz()}, 0.5, 1.5, 24), DType::f32).to(dev).detach().requires_grad_();
    w2 = mul(random({l2->nnz(), 16, 16}, 25, DType::f32), 0.1).to(dev).detach().requires_grad_();
  }
  std::vector<graph::NamedParam> params() const { return {{"w1", w1}, {"g1", g1}, {"w2", w2}}; }
  std::vector<Tensor> tensors() const { return {w1, g1, w2}; }
  Tensor loss(const std::map<std::string, Tensor>& in) const {
    autocast::Guard amp(DType::bf16);
    Tensor h = relu(bsmm(in.at("x"), w1, l1, g1));
    return sum(mul(bsmm(h, w2, l2), in.at("t")));
  }
};

std::map<std::string, Tensor> mlp_batch(int step) {
  return {{"x", random({300, 128}, 100 + step, DType::f32)}, {"t", random({300, 64}, 200 + step, DType::f32)}};
}

// A compiled step (a CUDA graph from its second run) and the eager steps give the same losses
// and weights.
void compiled_step_equals_eager_steps() {
  SparseMlp eager(kGpu), traced(kGpu);
  optim::SGD opt_e(eager.tensors(), optim::SGDOptions(1e-3)), opt_t(traced.tensors(), optim::SGDOptions(1e-3));
  CompiledStep step = compile([&](const std::map<std::string, Tensor>& in) { return traced.loss(in); },
                              traced.params(), &opt_t, mlp_batch(0));
  for (int s = 0; s < 5; ++s) {
    std::map<std::string, Tensor> b = mlp_batch(s), gb;
    for (const auto& [k, v] : b) gb[k] = v.to(kGpu);
    Tensor le = eager.loss(gb);
    le.backward();
    opt_e.step();
    opt_e.zero_grad();
    const double lt = step.run(b);
    EXPECT_EQ(lt, le.item<double>()) << "step " << s;  // the same kernels on the same bits
  }
  EXPECT_TRUE(same_bits(traced.w1, eager.w1));
  EXPECT_TRUE(same_bits(traced.g1, eager.g1));
  EXPECT_TRUE(same_bits(traced.w2, eager.w2));
}

// Both routes: the block-sparse kernels and the dense route (its pool temporaries and cuBLAS
// calls inside the captured graph).
TEST(CudaBsmmTensorCores, CompiledStepReplayedAsACudaGraphEqualsEagerSteps) {
  REQUIRE_GPU();
  for (const char* dense : {"0", "1"}) {
    PathGuard guard({nullptr, dense}, false);
    const Launches before = launches();
    compiled_step_equals_eager_steps();
    EXPECT_EQ(launches().dense > before.dense, std::string(dense) == "1") << "dense " << dense;
  }
}

}  // namespace
}  // namespace tessera
