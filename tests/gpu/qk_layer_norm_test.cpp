// qk_layer_norm and qk_layer_norm_backward on the GPU (label `gpu`; skipped visibly without a
// GPU). Each output has the bits of the GPU's layer_norm / layer_norm_backward run on contiguous
// copies of q's and of k's columns (the same kernels, here reading rows W apart) and of v's
// columns cast, and is within the dtype's tolerance of the CPU (tol_of: relative to the result's
// RMS). Widths take the warp, block and generic kernels and the element-by-element loads (odd
// widths, where q's and k's rows start off 16-byte boundaries); every dtype pairing the op takes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_check.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

void expect_qk_matches(int64_t rows, int64_t cq, int64_t ck, DType dt, DType out, uint64_t seed) {
  const int64_t w = cq + 2 * ck;
  const std::string what = std::string(dtype_name(dt)) + " -> " + dtype_name(out) + " rows " + std::to_string(rows) +
                           " q " + std::to_string(cq) + " k " + std::to_string(ck);
  const Tensor y = random({rows, w}, seed, dt), gq = random({cq}, seed + 1, dt), bq = random({cq}, seed + 2, dt),
               gk = random({ck}, seed + 3, dt), bk = random({ck}, seed + 4, dt), g = random({rows, w}, seed + 5, out);
  const op::QkLayerNorm::Attrs attrs{cq, 1e-5, out};
  const std::vector<Tensor> in{y, gq, bq, gk, bk};
  const std::vector<Tensor> fwd = run_on_gpu_host<op::QkLayerNorm>(attrs, in);
  const std::vector<Tensor> cpu = call<op::QkLayerNorm>(attrs, in);
  // the reference: layer_norm on the GPU on q's and k's columns alone
  const std::vector<Tensor> p = split(y, {cq, ck, ck}, 1);
  const op::LayerNorm::Attrs ln{1e-5, true, true, out};
  const std::vector<Tensor> lq = run_on_gpu_host<op::LayerNorm>(ln, {p[0], gq, bq});
  const std::vector<Tensor> lk = run_on_gpu_host<op::LayerNorm>(ln, {p[1], gk, bk});
  const Tensor v = cast(p[2].to(kGpu), out).to(Device::cpu());
  EXPECT_TRUE(same_bits(fwd[0], concat({lq[0], lk[0], v}, 1))) << "out: " << what;
  EXPECT_TRUE(same_bits(fwd[1], lq[1])) << "mean_q: " << what;
  EXPECT_TRUE(same_bits(fwd[2], lq[2])) << "rstd_q: " << what;
  EXPECT_TRUE(same_bits(fwd[3], lk[1])) << "mean_k: " << what;
  EXPECT_TRUE(same_bits(fwd[4], lk[2])) << "rstd_k: " << what;
  EXPECT_TRUE(close_rms(fwd[0], cpu[0], tol_of(out))) << "out against the CPU: " << what;
  // backward, from the CPU forward's statistics
  const std::vector<Tensor> bin{g, y, cpu[1], cpu[2], cpu[3], cpu[4], gq, gk};
  const std::vector<Tensor> bwd = run_on_gpu_host<op::QkLayerNormBackward>({}, bin);
  const std::vector<Tensor> bcpu = call<op::QkLayerNormBackward>({}, bin);
  const std::vector<Tensor> gp = split(g, {cq, ck, ck}, 1);
  const std::vector<Tensor> dq = run_on_gpu_host<op::LayerNormBackward>({true}, {gp[0], p[0], cpu[1], cpu[2], gq});
  const std::vector<Tensor> dk = run_on_gpu_host<op::LayerNormBackward>({true}, {gp[1], p[1], cpu[3], cpu[4], gk});
  const Tensor dv = cast(gp[2].to(kGpu), dt).to(Device::cpu());
  const Tensor want[] = {concat({dq[0], dk[0], dv}, 1), dq[1], dq[2], dk[1], dk[2]};
  const char* names[] = {"dy", "dgq", "dbq", "dgk", "dbk"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(same_bits(bwd[i], want[i])) << names[i] << ": " << what;
    EXPECT_TRUE(close_rms(bwd[i], bcpu[i], tol_of(dt))) << names[i] << " against the CPU: " << what;
  }
}

TEST(CudaQkLayerNorm, EqualsLayerNormOnTheColumnsBitwise) {
  REQUIRE_GPU();
  uint64_t seed = 900;
  // the transformer's f32 projection to a bf16 operand: width 512 (and grouped heads: k, v 128),
  // many rows; f32 warp (up to 1024 columns), block (2048, 4097) and generic (20000) kernels
  expect_qk_matches(1000, 512, 512, DType::f32, DType::bf16, seed += 8);
  for (auto [cq, ck] : {std::pair<int64_t, int64_t>{512, 128}, {13, 5}, {2048, 2048}, {4097, 33}, {20000, 8}})
    expect_qk_matches(37, cq, ck, DType::f32, DType::bf16, seed += 8);
  for (auto [cq, ck] : {std::pair<int64_t, int64_t>{512, 512}, {13, 5}}) {
    expect_qk_matches(37, cq, ck, DType::f32, DType::f32, seed += 8);
    expect_qk_matches(37, cq, ck, DType::f32, DType::f16, seed += 8);
    expect_qk_matches(37, cq, ck, DType::bf16, DType::bf16, seed += 8);
    expect_qk_matches(37, cq, ck, DType::f16, DType::f16, seed += 8);
  }
  expect_qk_matches(37, 33, 7, DType::f64, DType::f64, seed += 8);
}

}  // namespace
}  // namespace tessera
