// Block-sparse CUDA kernels against their CPU kernels (label `gpu`; skipped visibly without a
// GPU): bsmm, bsmm_dx, bsmm_dw (gated and not) and block_attention, block_attention_backward
// for every layout kind, every block size and every float dtype, odd row counts and head sizes,
// random inputs, outputs poisoned with NaN before the run. Tolerances relative to the result's
// largest magnitude: f64 1e-10, f32 1e-5, bf16/f16 1e-2. Also: gradients through autograd on
// the GPU, the layout-table cache, and CUDA graph capture of these ops and of matmul.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <vector>

#include "core/op.h"
#include "core/sparse/generators.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/common/cuda/layout_tables.h"
#endif

namespace tessera {
namespace {

using namespace gpu_test;

using testing::all_close;
using testing::test_rand;
using testing::test_randn;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

double tolerance(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-5;
    default: return 1e-2;  // bf16, f16
  }
}

// ---- bsmm, bsmm_dx, bsmm_dw ----

// Per block size: random layouts of density 0.3 (tall and wide), and a 3x4-block mask whose
// block column 1 and block row 2 are empty (zeros in y and in dx there).
std::vector<LayoutPtr> bsmm_layouts() {
  std::vector<LayoutPtr> ls;
  for (int64_t bs : {8, 16, 32, 64}) {
    ls.push_back(random_layout(5 * bs, 3 * bs, bs, 0.3, static_cast<uint64_t>(bs)));
    ls.push_back(random_layout(2 * bs, 7 * bs, bs, 0.3, static_cast<uint64_t>(bs) + 1));
    ls.push_back(BlockLayout::from_mask(3 * bs, 4 * bs, bs, {1, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0}));
  }
  return ls;
}

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f64, DType::f16};

// Inputs {a [n, features], w [nnz, bs, bs], gate [nnz] (when gated)}.
std::vector<Tensor> bsmm_inputs(const BlockLayout& l, int64_t n, int64_t features, bool gated, DType dt,
                                uint64_t seed) {
  const int64_t bs = l.block_size();
  std::vector<Tensor> in{random({n, features}, seed, dt), random({l.nnz(), bs, bs}, seed + 1, dt)};
  if (gated) in.push_back(cast(test_rand({l.nnz()}, 0.5, 1.5, seed + 2), dt));
  return in;
}

TEST(CudaBlockSparse, BsmmMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 1000;
  for (const LayoutPtr& l : bsmm_layouts())
    for (DType dt : kFloatTypes)
      for (int64_t n : {37, 1})
        for (bool gated : {false, true}) {
          const std::vector<Tensor> in = bsmm_inputs(*l, n, l->in_features(), gated, dt, seed += 3);
          Tensor want = call<op::Bsmm>({l, gated}, in)[0];
          EXPECT_TRUE(close_to(run_on_gpu_host<op::Bsmm>({l, gated}, in)[0], want, tolerance(dt)))
              << l->str() << " " << dtype_name(dt) << " n " << n << " gated " << gated;
        }
}

TEST(CudaBlockSparse, BsmmDxMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 2000;
  for (const LayoutPtr& l : bsmm_layouts())
    for (DType dt : kFloatTypes)
      for (int64_t n : {37, 1})
        for (bool gated : {false, true}) {
          const std::vector<Tensor> in = bsmm_inputs(*l, n, l->out_features(), gated, dt, seed += 3);
          Tensor want = call<op::BsmmDx>({l, gated}, in)[0];
          EXPECT_TRUE(close_to(run_on_gpu_host<op::BsmmDx>({l, gated}, in)[0], want, tolerance(dt)))
              << l->str() << " " << dtype_name(dt) << " n " << n << " gated " << gated;
        }
}

TEST(CudaBlockSparse, BsmmDwMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 3000;
  for (const LayoutPtr& l : bsmm_layouts())
    for (DType dt : kFloatTypes)
      for (int64_t n : {37, 1, 300}) {
        const std::vector<Tensor> in{random({n, l->in_features()}, seed += 2, dt),
                                     random({n, l->out_features()}, seed + 1, dt)};
        Tensor want = call<op::BsmmDw>({l}, in)[0];
        EXPECT_TRUE(close_to(run_on_gpu_host<op::BsmmDw>({l}, in)[0], want, tolerance(dt)))
            << l->str() << " " << dtype_name(dt) << " n " << n;
      }
}

TEST(CudaBlockSparse, BsmmDwOfNoRowsIsZero) {
  REQUIRE_GPU();
  LayoutPtr l = random_layout(32, 48, 16, 0.3, 5);
  Tensor dw = run_on_gpu_host<op::BsmmDw>({l}, {empty({0, 32}), empty({0, 48})})[0];
  EXPECT_EQ(dw.to_vector<double>(), std::vector<double>(l->nnz() * 16 * 16, 0.0));
}

TEST(CudaBlockSparse, BsmmGradientsThroughAutogradMatchCpu) {
  REQUIRE_GPU();
  for (int64_t bs : {8, 64}) {
    LayoutPtr l = random_layout(3 * bs, 2 * bs, bs, 0.3, 40 + bs);
    Tensor x = random({29, l->in_features()}, 41, DType::f32), w = random({l->nnz(), bs, bs}, 42, DType::f32);
    Tensor seed = random({29, l->out_features()}, 43, DType::f32);
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
    bsmm(xc, wc, l).backward(seed);
    Tensor xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_();
    Tensor y = bsmm(xg.to(kGpu), wg.to(kGpu), l);
    ASSERT_EQ(y.device(), kGpu);
    y.backward(seed.to(kGpu));
    EXPECT_TRUE(close_to(xg.grad(), xc.grad(), 1e-5)) << "dx, " << l->str();
    EXPECT_TRUE(close_to(wg.grad(), wc.grad(), 1e-5)) << "dw, " << l->str();
  }
}

// ---- block_attention, block_attention_backward ----

// Per-head random block masks (the diagonal always, about half the other causal blocks).
AttentionLayoutPtr random_attention_layout(int64_t T, int64_t bs, int64_t H, uint64_t seed) {
  const int64_t nb = T / bs;
  std::vector<double> u = test_rand({H, nb, nb}, 0, 1, seed).to_vector<double>();
  std::vector<std::vector<uint8_t>> masks(H, std::vector<uint8_t>(nb * nb, 0));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j <= i; ++j) masks[h][i * nb + j] = i == j || u[(h * nb + i) * nb + j] < 0.5;
  return AttentionLayout::from_masks(T, bs, masks);
}

// Every layout kind at block size bs, T = 5 blocks, H = 2 heads.
std::vector<AttentionLayoutPtr> attention_layouts(int64_t bs) {
  const int64_t T = 5 * bs, H = 2;
  return {AttentionLayout::dense_causal(T, bs, H), AttentionLayout::local_window(T, bs, H, 2),
          AttentionLayout::strided(T, bs, H, 2), AttentionLayout::fixed(T, bs, H, 2, 1),
          random_attention_layout(T, bs, H, static_cast<uint64_t>(bs))};
}

// lse is f64 for f64 inputs, else f32.
double lse_tolerance(DType dt) { return dt == DType::f64 ? 1e-10 : 1e-5; }

// Forward and backward on the GPU against the CPU for one layout, dtype and head size D.
void expect_attention_matches_cpu(const AttentionLayoutPtr& l, DType dt, int64_t D, double scale, uint64_t seed) {
  const Shape s{2, l->heads(), l->seq_len(), D};
  const std::vector<Tensor> qkv{random(s, seed, dt), random(s, seed + 1, dt), random(s, seed + 2, dt)};
  const std::string what = l->str() + " " + dtype_name(dt) + " D " + std::to_string(D);
  std::vector<Tensor> want = call<op::BlockAttention>({l, scale}, qkv);  // o, lse
  std::vector<Tensor> got = run_on_gpu_host<op::BlockAttention>({l, scale}, qkv);
  EXPECT_TRUE(close_to(got[0], want[0], tolerance(dt))) << "o, " << what;
  EXPECT_TRUE(close_to(got[1], want[1], lse_tolerance(dt))) << "lse, " << what;
  // Backward from the CPU's o and lse, so both sides see the same inputs.
  const std::vector<Tensor> in{random(s, seed + 3, dt), qkv[0], qkv[1], qkv[2], want[0], want[1]};
  std::vector<Tensor> dwant = call<op::BlockAttentionBackward>({l, scale}, in);
  std::vector<Tensor> dgot = run_on_gpu_host<op::BlockAttentionBackward>({l, scale}, in);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(close_to(dgot[i], dwant[i], tolerance(dt))) << names[i] << ", " << what;
}

TEST(CudaBlockAttention, MatchesCpuForEveryLayoutKindBlockSizeAndDtype) {
  REQUIRE_GPU();
  uint64_t seed = 5000;
  for (int64_t bs : {8, 16, 32, 64})
    for (const AttentionLayoutPtr& l : attention_layouts(bs))
      for (DType dt : kFloatTypes)
        for (int64_t D : {5, 37}) expect_attention_matches_cpu(l, dt, D, 0, seed += 4);
}

TEST(CudaBlockAttention, ExplicitScaleAndLongerSequences) {
  REQUIRE_GPU();
  expect_attention_matches_cpu(AttentionLayout::strided(16 * 16, 16, 3, 3), DType::f32, 64, 0.2, 6000);
  expect_attention_matches_cpu(AttentionLayout::fixed(12 * 32, 32, 2, 4, 2), DType::bf16, 16, 0.5, 6010);
  expect_attention_matches_cpu(AttentionLayout::local_window(9 * 8, 8, 1, 3), DType::f32, 1, 0, 6020);
}

TEST(CudaBlockAttention, GradientsThroughAutogradMatchCpu) {
  REQUIRE_GPU();
  auto l = AttentionLayout::strided(4 * 16, 16, 2, 2);
  const Shape s{2, 2, 64, 7};
  std::vector<Tensor> x{random(s, 70, DType::f32), random(s, 71, DType::f32), random(s, 72, DType::f32)};
  Tensor seed = random(s, 73, DType::f32);
  std::vector<Tensor> c, g;
  for (const Tensor& t : x) c.push_back(t.clone().requires_grad_()), g.push_back(t.clone().requires_grad_());
  block_attention(c[0], c[1], c[2], l).backward(seed);
  Tensor o = block_attention(g[0].to(kGpu), g[1].to(kGpu), g[2].to(kGpu), l);
  ASSERT_EQ(o.device(), kGpu);
  o.backward(seed.to(kGpu));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(close_to(g[i].grad(), c[i].grad(), 1e-5)) << "input " << i;
}

#ifdef TESSERA_WITH_CUDA

// ---- the layout-table cache ----

TEST(CudaBlockSparse, LayoutTablesAreUploadedOncePerLayoutAndFreedAfterIt) {
  REQUIRE_GPU();
  LayoutPtr keep = random_layout(64, 64, 16, 0.3, 80);
  auto run = [](const LayoutPtr& l, uint64_t seed) {
    const std::vector<Tensor> in = bsmm_inputs(*l, 13, l->in_features(), false, DType::f32, seed);
    EXPECT_TRUE(close_to(run_on_gpu_host<op::Bsmm>({l, false}, in)[0], call<op::Bsmm>({l, false}, in)[0], 1e-5)) << l->str();
  };
  run(keep, 81);  // frees the tables of layouts other tests let go of
  const size_t base = cuda::cached_layout_tables();
  LayoutPtr a = random_layout(48, 80, 16, 0.3, 82);
  run(a, 83);
  EXPECT_EQ(cuda::cached_layout_tables(), base + 1);
  run(a, 84);
  run(keep, 85);
  EXPECT_EQ(cuda::cached_layout_tables(), base + 1) << "a layout's tables are uploaded once";
  a.reset();
  run(keep, 86);
  EXPECT_EQ(cuda::cached_layout_tables(), base) << "a dead layout's tables are freed at the next look-up";
  // New layouts (possibly at the dead one's address) get their own tables.
  for (uint64_t s = 0; s < 4; ++s) run(random_layout(48, 80, 16, 0.3 + 0.1 * static_cast<double>(s), 90 + s), 95 + s);
}

// ---- CUDA graph capture ----

// Records what f queues on device 0's stream into a graph (global capture mode: unsafe calls
// from any thread fail it), replays it once and waits. Exceptions from f end the capture first.
void capture_and_replay(const std::function<void()>& f) {
  auto s = static_cast<cudaStream_t>(cuda::stream(0));
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::exception_ptr error;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (error) {
    if (graph) cudaGraphDestroy(graph);
    std::rethrow_exception(error);
  }
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Runs op on GPU inputs inside a captured graph, into NaN-poisoned outputs made beforehand.
template <class Op>
std::vector<Tensor> run_captured(typename Op::Attrs attrs, const std::vector<Tensor>& cpu_in) {
  std::vector<Tensor> in;
  std::vector<TensorMeta> metas;
  for (const Tensor& t : cpu_in) {
    in.push_back(t.to(kGpu));
    metas.push_back(in.back().meta());
  }
  std::vector<Tensor> out;
  for (const TensorMeta& m : output_metas<Op>(attrs, metas)) out.push_back(full(m.shape, kNaN, TensorOptions(m.dtype).device(kGpu)));
  capture_and_replay([&] { call_out<Op>(attrs, in, out); });
  for (Tensor& t : out) t = t.to(Device::cpu());
  return out;
}

TEST(CudaGraphCapture, BlockSparseOpsAndMatmulReplayCorrectlyOnceWarm) {
  REQUIRE_GPU();
  LayoutPtr l = random_layout(96, 64, 32, 0.3, 100);
  const std::vector<Tensor> in = bsmm_inputs(*l, 37, l->in_features(), true, DType::bf16, 101);
  Tensor want = call<op::Bsmm>({l, true}, in)[0];
  run_on_gpu_host<op::Bsmm>({l, true}, in);  // first use uploads the tables, outside capture
  EXPECT_TRUE(close_to(run_captured<op::Bsmm>({l, true}, in)[0], want, 1e-2));

  auto al = AttentionLayout::fixed(6 * 16, 16, 2, 3, 1);
  const Shape s{1, 2, 96, 9};
  const std::vector<Tensor> qkv{random(s, 102, DType::bf16), random(s, 103, DType::bf16), random(s, 104, DType::bf16)};
  std::vector<Tensor> awant = call<op::BlockAttention>({al, 0}, qkv);
  run_on_gpu_host<op::BlockAttention>({al, 0}, qkv);
  std::vector<Tensor> agot = run_captured<op::BlockAttention>({al, 0}, qkv);  // allocates scratch in the graph
  EXPECT_TRUE(close_to(agot[0], awant[0], 1e-2));
  EXPECT_TRUE(close_to(agot[1], awant[1], 1e-5));

  const std::vector<Tensor> ab{random({2, 37, 19}, 105, DType::f32), random({2, 23, 19}, 106, DType::f32)};
  Tensor mwant = call<op::Matmul>({false, true}, ab)[0];
  run_on_gpu_host<op::Matmul>({false, true}, ab);  // creates the cuBLAS handle and its workspace
  EXPECT_TRUE(close_to(run_captured<op::Matmul>({false, true}, ab)[0], mwant, 1e-5));
}

TEST(CudaGraphCapture, ALayoutFirstUsedDuringCaptureIsAClearError) {
  REQUIRE_GPU();
  LayoutPtr l = random_layout(48, 48, 16, 0.3, 110);
  const std::vector<Tensor> in = bsmm_inputs(*l, 5, l->in_features(), false, DType::f32, 111);
  testing::expect_error<DeviceError>([&] { run_captured<op::Bsmm>({l, false}, in); },
                                     {"look-up tables", "capture", "eagerly"});
  // Outside capture the same layout works.
  EXPECT_TRUE(close_to(run_on_gpu_host<op::Bsmm>({l, false}, in)[0], call<op::Bsmm>({l, false}, in)[0], 1e-5));
}

#endif  // TESSERA_WITH_CUDA

}  // namespace
}  // namespace tessera
