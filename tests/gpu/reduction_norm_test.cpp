// CUDA kernels of the reductions (sum, max, min, max_backward), the softmax family
// (softmax, log_softmax, log_softmax_backward, cross_entropy, cross_entropy_backward) and the
// normalizations (layer_norm, sparse_layer_norm and their backward ops) against their CPU
// kernels (label `gpu`; skipped visibly without a GPU).
// Inputs are random, row lengths odd (1, 7, 33, 1000, 4097; for the normalizations also widths
// that take each of their kernel paths), every floating dtype; GPU outputs
// are poisoned (NaN; -1234567 for indices) before the kernel runs, so an element it leaves
// unwritten fails. Tolerance |gpu − cpu| <= tol·(|cpu| + scale), scale = the RMS of the CPU
// output (the size of the rounding of sums that cancel): tol 1e-5 for f32, 1e-9 for f64, 1e-2
// for bf16/f16. Reductions are also run twice and must agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

using testing::test_rand;
using testing::test_randn;

const int64_t kRowLengths[] = {1, 7, 33, 1000, 4097};

Tensor randn(const Shape& s, uint64_t seed, DType dt, double scale = 1.0) {
  return cast(mul(test_randn(s, seed, DType::f64), scale), dt);
}

// |got − want| <= tol·(|want| + scale) elementwise (scale < 0: the RMS of want); NaN only where
// want is NaN. Shapes and dtypes must match.
::testing::AssertionResult close(const Tensor& got, const Tensor& want, double tol, double scale = -1) {
  if (got.meta().shape != want.shape() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "got " << got.meta() << ", want " << want.meta();
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  if (scale < 0) scale = rms(w);
  for (size_t i = 0; i < w.size(); ++i) {
    const bool ok = std::isnan(w[i]) ? std::isnan(g[i]) : std::abs(g[i] - w[i]) <= tol * (std::abs(w[i]) + scale);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << " of " << want.meta() << ": gpu " << g[i] << ", cpu "
                                           << w[i] << " (tol " << tol << ", scale " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

std::string label(DType dt, const Shape& s, const std::string& more = "") {
  std::ostringstream os;
  os << dtype_name(dt) << " " << s << (more.empty() ? "" : " ") << more;
  return os.str();
}

// ---- sum ----

// Sums over `dim` of a random x: against the CPU (tolerance scaled by sqrt(n), the size of a
// sum of n N(0, 1) terms) and bitwise equal over two runs.
void expect_sum_matches(const Shape& s, int dim, bool keepdim, DType dt, uint64_t seed) {
  Tensor x = randn(s, seed, dt);
  const op::Sum::Attrs attrs{dim, keepdim};
  const std::vector<Tensor> want = call<op::Sum>(attrs, {x});
  const std::vector<Tensor> got = run_on_gpu_host<op::Sum>(attrs, {x});
  const double n = static_cast<double>(s[dim]);
  EXPECT_TRUE(close(got[0], want[0], tol_of(dt), std::sqrt(n))) << label(dt, s, "dim " + std::to_string(dim));
  EXPECT_TRUE(same_bits(got[0], run_on_gpu_host<op::Sum>(attrs, {x})[0])) << "sum is not reproducible: " << label(dt, s);
}

TEST(CudaReductions, SumOverRowsColumnsAndMiddleDims) {
  REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (int64_t c : kRowLengths) {
      expect_sum_matches({5, c}, 1, false, dt, 1);   // contiguous rows
      expect_sum_matches({5, c}, 0, true, dt, 2);    // columns (inner = c)
      expect_sum_matches({3, c, 2}, 1, false, dt, 3);  // a middle dim
      expect_sum_matches({c}, 0, false, dt, 4);      // everything: a 0-d result
    }
  }
}

TEST(CudaReductions, SumOfLongRowsAndLongColumnsTakesTwoPasses) {
  REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    expect_sum_matches({2, 40001}, 1, false, dt, 5);  // rows cut into chunks of 8192
    expect_sum_matches({100003}, 0, true, dt, 6);     // one long row
    expect_sum_matches({3001, 7}, 0, false, dt, 7);   // few long columns, chunks of 64 rows
    expect_sum_matches({4099, 1030}, 0, false, dt, 9);  // many columns: 65 chunks, the last of 3 rows
    expect_sum_matches({2, 1500, 3}, 1, true, dt, 8);
  }
}

// ---- max / min / max_backward ----

// x with many ties (integers in [-3, 3]) and, when `nans`, a few NaNs: the first extreme (the
// first NaN) must be found, as on the CPU, with exactly its index.
Tensor tied_input(const Shape& s, uint64_t seed, DType dt, bool nans) {
  std::vector<double> v = test_randn(s, seed, DType::f64).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i] * 1.5);
    if (nans && i % 97 == 13) v[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return cast(from_vector(v, s), dt);
}

template <class Op>
void expect_extreme_matches(const Tensor& x, int dim, bool keepdim) {
  const typename Op::Attrs attrs{dim, keepdim};
  const std::vector<Tensor> want = call<Op>(attrs, {x});
  const std::vector<Tensor> got = run_on_gpu_host<Op>(attrs, {x});
  const std::string what = std::string(Op::kName) + " " + label(x.dtype(), x.shape(), "dim " + std::to_string(dim));
  EXPECT_EQ(got[1].to_vector<int32_t>(), want[1].to_vector<int32_t>()) << what;
  EXPECT_TRUE(close(got[0], want[0], 0.0)) << what;  // values are elements of x: exact
  const std::vector<Tensor> again = run_on_gpu_host<Op>(attrs, {x});
  EXPECT_TRUE(same_bits(got[0], again[0]) && same_bits(got[1], again[1])) << what;
}

TEST(CudaReductions, MaxAndMinFindTheFirstExtremeLikeTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 10;
  for (DType dt : kFloatTypes) {
    for (int64_t c : kRowLengths) {
      for (bool nans : {false, true}) {
        for (const Shape& s : {Shape{5, c}, Shape{3, c, 2}}) {
          Tensor r = randn(s, ++seed, dt), t = tied_input(s, ++seed, dt, nans);
          for (const Tensor& x : {r, t}) {
            expect_extreme_matches<op::Max>(x, 1, false);
            expect_extreme_matches<op::Min>(x, 1, true);
            expect_extreme_matches<op::Max>(x, 0, true);
            expect_extreme_matches<op::Min>(x, -1, false);
          }
        }
      }
    }
  }
}

TEST(CudaReductions, MaxAndMinOfLongRowsAndColumns) {
  REQUIRE_GPU();
  for (DType dt : kFloatTypes) {
    for (bool nans : {false, true}) {
      Tensor rows = tied_input({2, 40001}, 20, dt, nans), cols = tied_input({3001, 7}, 21, dt, nans);
      expect_extreme_matches<op::Max>(rows, 1, false);
      expect_extreme_matches<op::Min>(rows, 1, false);
      expect_extreme_matches<op::Max>(cols, 0, false);
      expect_extreme_matches<op::Min>(cols, 0, true);
    }
  }
}

TEST(CudaReductions, MaxBackwardPutsTheGradientAtTheIndices) {
  REQUIRE_GPU();
  uint64_t seed = 30;
  for (DType dt : kFloatTypes) {
    for (int64_t c : kRowLengths) {
      for (int dim : {0, 1, 2}) {
        for (bool keepdim : {false, true}) {
          const Shape s{4, c, 3};
          const std::vector<Tensor> mx = call<op::Max>({dim, keepdim}, {randn(s, ++seed, dt)});
          Tensor g = randn(mx[0].shape(), ++seed, dt);
          const op::MaxBackward::Attrs attrs{s, dim};
          const std::vector<Tensor> want = call<op::MaxBackward>(attrs, {g, mx[1]});
          EXPECT_TRUE(close(run_on_gpu_host<op::MaxBackward>(attrs, {g, mx[1]})[0], want[0], 0.0)) << label(dt, s);
        }
      }
    }
  }
}

TEST(CudaReductions, MaxBackwardDropsOutOfRangeIndices) {
  REQUIRE_GPU();  // the CPU throws ValueError; the GPU cannot without waiting for the indices
  Tensor g = tensor({1, 2, 3});
  Tensor idx = from_vector(std::vector<int32_t>{0, 4, -1}, {3});
  const std::vector<float> dx = run_on_gpu_host<op::MaxBackward>({Shape{3, 4}, 1}, {g, idx})[0].to_vector<float>();
  EXPECT_EQ(dx, (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

// ---- softmax family ----

template <class Op>
void expect_rowwise_matches(const std::vector<Tensor>& in, const std::string& what) {
  const std::vector<Tensor> want = call<Op>({}, in);
  const std::vector<Tensor> got = run_on_gpu_host<Op>({}, in);
  EXPECT_TRUE(close(got[0], want[0], tol_of(in[0].dtype()))) << Op::kName << " " << what;
  EXPECT_TRUE(same_bits(got[0], run_on_gpu_host<Op>({}, in)[0])) << Op::kName << " is not reproducible: " << what;
}

TEST(CudaSoftmax, SoftmaxLogSoftmaxAndItsBackwardMatchTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 40;
  for (DType dt : kFloatTypes) {
    for (int64_t c : kRowLengths) {
      for (const Shape& s : {Shape{5, c}, Shape{2, 3, c}, Shape{c}}) {
        Tensor x = randn(s, ++seed, dt, 3.0);
        expect_rowwise_matches<op::Softmax>({x}, label(dt, s));
        expect_rowwise_matches<op::LogSoftmax>({x}, label(dt, s));
        Tensor y = call<op::LogSoftmax>({}, {x})[0];
        expect_rowwise_matches<op::LogSoftmaxBackward>({randn(s, ++seed, dt), y}, label(dt, s));
      }
    }
  }
}

TEST(CudaSoftmax, LargeLogitsStayFinite) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = add(randn({4, 33}, 50, dt), 1000.0);  // exp(1000) overflows without the max shift
    expect_rowwise_matches<op::Softmax>({x}, "logits around 1e3");
    expect_rowwise_matches<op::LogSoftmax>({x}, "logits around 1e3");
  }
}

Tensor targets(int64_t n, int64_t v, uint64_t seed, int32_t ignore, int every_ignored = 4) {
  std::vector<double> u = test_rand({n}, 0.0, static_cast<double>(v), seed).to_vector<double>();
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[i] = (every_ignored > 0 && i % every_ignored == 1) ? ignore : static_cast<int32_t>(std::floor(u[i]));
  return from_vector(t, {n});
}

TEST(CudaSoftmax, CrossEntropyAndItsBackwardForEveryReduction) {
  REQUIRE_GPU();
  uint64_t seed = 60;
  for (DType dt : kFloatTypes) {
    for (int64_t v : kRowLengths) {
      for (int32_t ignore : {-100, 0}) {
        const int64_t n = 9;
        Tensor x = randn({n, v}, ++seed, dt, 2.0), t = targets(n, v, ++seed, ignore);
        for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
          const op::CrossEntropy::Attrs attrs{ignore, r};
          const std::string what = label(dt, x.shape(), "reduction " + std::to_string(static_cast<int>(r)));
          const std::vector<Tensor> want = call<op::CrossEntropy>(attrs, {x, t});
          const std::vector<Tensor> got = run_on_gpu_host<op::CrossEntropy>(attrs, {x, t});
          EXPECT_TRUE(close(got[0], want[0], tol_of(dt))) << "cross_entropy " << what;
          EXPECT_TRUE(same_bits(got[0], run_on_gpu_host<op::CrossEntropy>(attrs, {x, t})[0])) << what;
          Tensor g = randn(want[0].shape(), ++seed, dt);
          const std::vector<Tensor> dwant = call<op::CrossEntropyBackward>(attrs, {x, t, g});
          EXPECT_TRUE(close(run_on_gpu_host<op::CrossEntropyBackward>(attrs, {x, t, g})[0], dwant[0], tol_of(dt)))
              << "cross_entropy_backward " << what;
        }
      }
    }
  }
}

TEST(CudaSoftmax, CrossEntropyWithEveryRowIgnoredIsZero) {
  REQUIRE_GPU();
  Tensor x = randn({6, 33}, 70, DType::f32);
  Tensor t = from_vector(std::vector<int32_t>(6, -100), {6});
  for (Reduction r : {Reduction::mean, Reduction::sum}) {
    const op::CrossEntropy::Attrs attrs{-100, r};
    EXPECT_EQ(run_on_gpu_host<op::CrossEntropy>(attrs, {x, t})[0].item<float>(), 0.0f);
    Tensor g = full({}, 1.5);
    EXPECT_TRUE(close(run_on_gpu_host<op::CrossEntropyBackward>(attrs, {x, t, g})[0], zeros({6, 33}), 0.0));
  }
}

TEST(CudaSoftmax, CrossEntropyOverManyRowsIsReproducible) {
  REQUIRE_GPU();
  Tensor x = randn({3001, 7}, 80, DType::f32), t = targets(3001, 7, 81, -100);
  const op::CrossEntropy::Attrs attrs{-100, Reduction::mean};
  const std::vector<Tensor> got = run_on_gpu_host<op::CrossEntropy>(attrs, {x, t});
  EXPECT_TRUE(close(got[0], call<op::CrossEntropy>(attrs, {x, t})[0], 1e-5));
  EXPECT_TRUE(same_bits(got[0], run_on_gpu_host<op::CrossEntropy>(attrs, {x, t})[0]));
}

// The GPU kernels cannot throw the CPU's ValueError without waiting for the targets on the
// host: a bad target poisons its row instead, so the loss (and its gradient) is NaN.
// Out-of-range targets (7 and -1 with 7 classes, ignore_index -100): NaN rows, and the kernel's
// record makes the next host wait throw the CPU's ValueError once (index_errors.cuh).
TEST(CudaSoftmax, CrossEntropyOutOfRangeTargetGivesNaNRowsAndAnError) {
  REQUIRE_GPU();
  Tensor x = randn({3, 7}, 90, DType::f32);
  Tensor t = from_vector(std::vector<int32_t>{2, 7, -1}, {3});
  const std::vector<std::string> words = {"cross_entropy", "out of range [0, 7)"};
  if (cuda::sync_each_op()) {  // TESSERA_CUDA_SYNC=1: the op itself reports it
    testing::expect_error<ValueError>([&] { run_on_gpu<op::CrossEntropy>({-100, Reduction::none}, {x, t}); }, words);
    return;
  }
  Tensor loss_none = run_on_gpu<op::CrossEntropy>({-100, Reduction::none}, {x, t})[0];
  testing::expect_error<ValueError>([&] { loss_none.to_vector<float>(); }, words);
  const std::vector<float> loss = loss_none.to_vector<float>();  // reported once: the record is clear
  EXPECT_TRUE(std::isfinite(loss[0]) && std::isnan(loss[1]) && std::isnan(loss[2]));
  Tensor loss_mean = run_on_gpu<op::CrossEntropy>({-100, Reduction::mean}, {x, t})[0];
  testing::expect_error<ValueError>([&] { loss_mean.item<float>(); }, words);
  EXPECT_TRUE(std::isnan(loss_mean.item<float>()));
  Tensor dx_gpu = run_on_gpu<op::CrossEntropyBackward>({-100, Reduction::sum}, {x, t, full({}, 1.0)})[0];
  testing::expect_error<ValueError>([&] { dx_gpu.to_vector<float>(); }, words);
  const std::vector<float> dx = dx_gpu.to_vector<float>();
  for (int j = 0; j < 7; ++j) EXPECT_TRUE(std::isfinite(dx[j]) && std::isnan(dx[7 + j]) && std::isnan(dx[14 + j]));
}

// ---- layer norms ----

std::vector<Tensor> with_params(const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  std::vector<Tensor> in{x};
  if (gamma.defined()) in.push_back(gamma);
  if (beta.defined()) in.push_back(beta);
  return in;
}

// Forward (y, mean, rstd) and backward (dx, dgamma, dbeta) of sparse_layer_norm (segments,
// relu) or, with segments == 0, layer_norm; the backward gets the CPU forward's saved tensors.
void expect_norm_matches(const Shape& s, int64_t segments, bool relu, bool affine, DType dt, uint64_t seed,
                         double offset = 0.0) {
  const int64_t c = s[-1];
  Tensor x = add(randn(s, seed, dt), offset);
  Tensor gamma = affine ? randn({c}, seed + 1, dt) : Tensor();
  Tensor beta = affine ? randn({c}, seed + 2, dt) : Tensor();
  Tensor g = randn(s, seed + 3, dt);
  const std::string what =
      label(dt, s, "segments " + std::to_string(segments) + (relu ? " relu" : "") + (affine ? " affine" : ""));
  const std::vector<Tensor> in = with_params(x, gamma, beta);
  std::vector<Tensor> fwd, fwd_gpu, bwd, bwd_gpu;
  if (segments == 0) {
    const op::LayerNorm::Attrs attrs{1e-5, affine, affine};
    fwd = call<op::LayerNorm>(attrs, in);
    fwd_gpu = run_on_gpu_host<op::LayerNorm>(attrs, in);
    std::vector<Tensor> bin{g, x, fwd[1], fwd[2]};
    if (affine) bin.push_back(gamma);
    const op::LayerNormBackward::Attrs battrs{affine};
    bwd = call<op::LayerNormBackward>(battrs, bin);
    bwd_gpu = run_on_gpu_host<op::LayerNormBackward>(battrs, bin);
    EXPECT_TRUE(same_bits(bwd_gpu[1], run_on_gpu_host<op::LayerNormBackward>(battrs, bin)[1])) << "dgamma: " << what;
  } else {
    const op::SparseLayerNorm::Attrs attrs{segments, 1e-5, relu, affine, affine};
    fwd = call<op::SparseLayerNorm>(attrs, in);
    fwd_gpu = run_on_gpu_host<op::SparseLayerNorm>(attrs, in);
    std::vector<Tensor> bin{g, x, fwd[1], fwd[2]};
    if (relu) bin.push_back(fwd[0]);
    if (affine) bin.push_back(gamma);
    const op::SparseLayerNormBackward::Attrs battrs{segments, relu, affine};
    bwd = call<op::SparseLayerNormBackward>(battrs, bin);
    bwd_gpu = run_on_gpu_host<op::SparseLayerNormBackward>(battrs, bin);
    EXPECT_TRUE(same_bits(bwd_gpu[1], run_on_gpu_host<op::SparseLayerNormBackward>(battrs, bin)[1])) << "dgamma: " << what;
  }
  const double tol = tol_of(dt), stats_tol = dt == DType::f64 ? 1e-9 : 1e-5;  // statistics are f32 for bf16/f16
  const char* names[] = {"y", "mean", "rstd", "dx", "dgamma", "dbeta"};
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(close(fwd_gpu[k], fwd[k], k == 0 ? tol : stats_tol, k == 1 ? std::abs(offset) + 1.0 : -1.0))
        << names[k] << ": " << what;
  // dx = rstd·(gγ − mean(gγ) − x̂·mean(gγ·x̂)) is a difference of terms of size
  // S = RMS(rstd)·RMS(g)·RMS(γ): its scale is RMS(dx), but at least 1e-3·S. The floor matters
  // only where dx cancels exactly (rows of length 1: dx = 0, which the CPU's f64 kernel gives
  // as ±1e-15 rounding noise, the GPU as 0); elsewhere RMS(dx) is of the order of S. Absolute
  // floor: tol·1e-3·S (f64: 1e-12·S, f32: 1e-8·S).
  const double s_terms = rms(fwd[2].to_vector<double>()) * rms(g.to_vector<double>()) *
                         (affine ? rms(gamma.to_vector<double>()) : 1.0);
  const double dx_scale = std::max(rms(bwd[0].to_vector<double>()), 1e-3 * s_terms);
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(close(bwd_gpu[k], bwd[k], tol, k == 0 ? dx_scale : -1.0)) << names[3 + k] << ": " << what;
}

TEST(CudaNorms, LayerNormForwardAndBackward) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (int64_t c : kRowLengths) {
      for (bool affine : {false, true}) {
        expect_norm_matches({5, c}, 0, false, affine, dt, seed += 4);
        expect_norm_matches({2, 3, c}, 0, false, affine, dt, seed += 4);
      }
    }
    expect_norm_matches({700, 33}, 0, false, true, dt, seed += 4);  // more rows than row blocks (512)
  }
  for (DType dt : {DType::f32, DType::f64}) expect_norm_matches({4, 1000}, 0, false, true, dt, 150, 1e4);
}

TEST(CudaNorms, SparseLayerNormSegmentsAndReluForwardAndBackward) {
  REQUIRE_GPU();
  uint64_t seed = 200;
  for (DType dt : kFloatTypes) {
    for (int64_t gs : {1, 7, 33, 1000}) {
      for (int64_t segments : {1, 3, 4}) {
        for (bool relu : {false, true}) {
          expect_norm_matches({5, segments * gs}, segments, relu, true, dt, seed += 4);
          expect_norm_matches({2, 3, segments * gs}, segments, relu, false, dt, seed += 4);
        }
      }
    }
    expect_norm_matches({3, 4097}, 17, true, true, dt, seed += 4);  // 17 segments of 241
    expect_norm_matches({600, 21}, 3, true, true, dt, seed += 4);
  }
}

// Widths that take every path of kernels/common/cuda/normalize.cuh in every dtype: warp teams
// with 1, 2, 4 and 8 packs of 16 bytes per lane, block teams, the generic kernels (forward
// beyond 4096 packs: f32 16384 elements; backward beyond 8192 elements, f64 4096), 128-bit and
// element-by-element loads (odd widths). 37 rows: three row blocks of 16 rows backward.
const int64_t kNormWidths[] = {1, 7, 33, 64, 128, 256, 384, 1000, 1001, 2048, 4096, 4097, 8192, 20000, 40001};

TEST(CudaNorms, LayerNormEveryKernelPath) {
  REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : kFloatTypes) {
    for (int64_t c : kNormWidths) {
      const int64_t rows = std::clamp<int64_t>(200000 / c, 3, 37);
      for (bool affine : {false, true}) expect_norm_matches({rows, c}, 0, false, affine, dt, seed += 4);
    }
  }
}

TEST(CudaNorms, SparseLayerNormEveryKernelPath) {
  REQUIRE_GPU();
  uint64_t seed = 400;
  for (DType dt : kFloatTypes) {
    for (int64_t gs : {24, 96, 241, 384, 2048}) {
      for (bool relu : {false, true}) {
        expect_norm_matches({37, 4 * gs}, 4, relu, true, dt, seed += 4);
        expect_norm_matches({3, 3, 3 * gs}, 3, relu, false, dt, seed += 4);
      }
    }
  }
}

// Many rows: row blocks of more than 16 rows backward (the warps of a block take several rows
// each), about 1000 partial sums per column of dgamma, dbeta.
TEST(CudaNorms, NormsOfManyRows) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    expect_norm_matches({16500, 16}, 0, false, true, dt, 500);
    expect_norm_matches({17000, 96}, 4, true, true, dt, 504);  // 4 segments of 24
    expect_norm_matches({2000, 1024}, 0, false, true, dt, 508);
  }
}

// The layer norm of a nanoGPT-sized training step (x [16384, 384]); also the shape to time with
// ncu -k regex:normalize_ ./tests/gpu_tests --gtest_filter=CudaNorms.LayerNormOfATrainingStep.
TEST(CudaNorms, LayerNormOfATrainingStep) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) expect_norm_matches({16384, 384}, 0, false, true, dt, 520);
}

// Element-by-element loads put every element in the same register as 128-bit loads: the
// results of a misaligned x (forward) or g (backward) are the same bits.
TEST(CudaNorms, MisalignedDataGivesTheSameBits) {
  REQUIRE_GPU();
  uint64_t seed = 600;
  for (DType dt : kFloatTypes) {
    for (int64_t c : {384, 4096}) {  // warp and block teams
      Tensor x = randn({9, c}, ++seed, dt), g = randn({9, c}, ++seed, dt);
      Tensor gamma = randn({c}, ++seed, dt), beta = randn({c}, ++seed, dt);
      Tensor x_off = misaligned_on_gpu(x), g_off = misaligned_on_gpu(g);
      const std::string what = label(dt, x.shape());
      const op::LayerNorm::Attrs attrs{1e-5, true, true};
      const std::vector<Tensor> fwd = run_on_gpu_host<op::LayerNorm>(attrs, {x, gamma, beta});
      const std::vector<Tensor> fwd_off = run_on_gpu_host<op::LayerNorm>(attrs, {x_off, gamma, beta});
      for (int k = 0; k < 3; ++k)
        EXPECT_TRUE(same_bits(fwd[k], fwd_off[k])) << "layer_norm output " << k << ": " << what;
      const std::vector<Tensor> bwd = run_on_gpu_host<op::LayerNormBackward>({true}, {g, x, fwd[1], fwd[2], gamma});
      const std::vector<Tensor> bwd_off = run_on_gpu_host<op::LayerNormBackward>({true}, {g_off, x, fwd[1], fwd[2], gamma});
      for (int k = 0; k < 3; ++k)
        EXPECT_TRUE(same_bits(bwd[k], bwd_off[k])) << "layer_norm_backward output " << k << ": " << what;
      const op::SparseLayerNorm::Attrs sattrs{4, 1e-5, true, true, true};
      const std::vector<Tensor> sfwd = run_on_gpu_host<op::SparseLayerNorm>(sattrs, {x, gamma, beta});
      const std::vector<Tensor> sfwd_off = run_on_gpu_host<op::SparseLayerNorm>(sattrs, {x_off, gamma, beta});
      for (int k = 0; k < 3; ++k)
        EXPECT_TRUE(same_bits(sfwd[k], sfwd_off[k])) << "sparse_layer_norm output " << k << ": " << what;
      const op::SparseLayerNormBackward::Attrs sbattrs{4, true, true};
      const std::vector<Tensor> sbwd =
          run_on_gpu_host<op::SparseLayerNormBackward>(sbattrs, {g, x, sfwd[1], sfwd[2], sfwd[0], gamma});
      const std::vector<Tensor> sbwd_off =
          run_on_gpu_host<op::SparseLayerNormBackward>(sbattrs, {g_off, x, sfwd[1], sfwd[2], sfwd[0], gamma});
      for (int k = 0; k < 3; ++k)
        EXPECT_TRUE(same_bits(sbwd[k], sbwd_off[k])) << "sparse_layer_norm_backward output " << k << ": " << what;
    }
  }
}

// ---- layer_norm with a bf16/f16 y of f32 x, layer_norm_backward with its bf16/f16 gradient ----

// layer_norm(x f32 [rows, c], ..., out) on the GPU: y has the bits of cast(y f32, out) of the GPU's
// f32 kernel, mean and rstd those of the f32 kernel, and y agrees with the CPU within bf16/f16
// tolerance. layer_norm_backward(g in out, x, ...): dx, dgamma, dbeta have the bits of the f32
// kernel on cast(g, f32), and agree with the CPU like the f32 results. Also for a misaligned x
// (forward) and g (backward): the element-by-element paths give the same bits.
void expect_narrowed_norm_matches(int64_t rows, int64_t c, bool affine, DType out, uint64_t seed) {
  const Shape s{rows, c};
  const Tensor x = randn(s, seed, DType::f32);
  const Tensor gamma = affine ? randn({c}, seed + 1, DType::f32) : Tensor();
  const Tensor beta = affine ? randn({c}, seed + 2, DType::f32) : Tensor();
  const Tensor g = randn(s, seed + 3, out);
  const std::string what = label(DType::f32, s, std::string("-> ") + dtype_name(out) + (affine ? " affine" : ""));
  const std::vector<Tensor> in = with_params(x, gamma, beta);
  const op::LayerNorm::Attrs plain{1e-5, affine, affine}, narrowed{1e-5, affine, affine, out};
  // Forward: fused against the f32 kernel followed by the GPU cast.
  const std::vector<Tensor> f32 = run_on_gpu<op::LayerNorm>(plain, in);
  const std::vector<Tensor> fwd = run_on_gpu_host<op::LayerNorm>(narrowed, in);
  ASSERT_EQ(fwd[0].dtype(), out) << what;
  EXPECT_TRUE(same_bits(fwd[0], cast(f32[0], out).to(Device::cpu()))) << "y: " << what;
  for (int k = 1; k < 3; ++k)
    EXPECT_TRUE(same_bits(fwd[k], f32[k].to(Device::cpu()))) << "stats " << k << ": " << what;
  const std::vector<Tensor> cpu = call<op::LayerNorm>(narrowed, in);
  EXPECT_TRUE(close(fwd[0], cpu[0], 1e-2)) << "y against the CPU: " << what;
  std::vector<Tensor> in_off = in;
  in_off[0] = misaligned_on_gpu(x);
  const std::vector<Tensor> fwd_off = run_on_gpu_host<op::LayerNorm>(narrowed, in_off);
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(same_bits(fwd_off[k], fwd[k])) << "misaligned x, output " << k << ": " << what;
  // Backward, from the CPU forward's statistics.
  std::vector<Tensor> bin{g, x, cpu[1], cpu[2]}, bin32{cast(g, DType::f32), x, cpu[1], cpu[2]};
  if (affine) {
    bin.push_back(gamma);
    bin32.push_back(gamma);
  }
  const op::LayerNormBackward::Attrs battrs{affine};
  const std::vector<Tensor> bwd = run_on_gpu_host<op::LayerNormBackward>(battrs, bin);
  const std::vector<Tensor> bwd32 = run_on_gpu_host<op::LayerNormBackward>(battrs, bin32);
  const std::vector<Tensor> bcpu = call<op::LayerNormBackward>(battrs, bin);
  std::vector<Tensor> bin_off = bin;
  bin_off[0] = misaligned_on_gpu(g);
  const std::vector<Tensor> bwd_off = run_on_gpu_host<op::LayerNormBackward>(battrs, bin_off);
  // dx's scale as in expect_norm_matches: RMS(dx), at least 1e-3·RMS(rstd)·RMS(g)·RMS(γ).
  const double s_terms = rms(cpu[2].to_vector<double>()) * rms(g.to_vector<double>()) *
                         (affine ? rms(gamma.to_vector<double>()) : 1.0);
  const double dx_scale = std::max(rms(bcpu[0].to_vector<double>()), 1e-3 * s_terms);
  const char* names[] = {"dx", "dgamma", "dbeta"};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(bwd[k].dtype(), DType::f32);
    EXPECT_TRUE(same_bits(bwd[k], bwd32[k])) << names[k] << " against f32 g: " << what;
    EXPECT_TRUE(same_bits(bwd_off[k], bwd[k])) << names[k] << ", misaligned g: " << what;
    EXPECT_TRUE(close(bwd[k], bcpu[k], 1e-5, k == 0 ? dx_scale : -1.0))
        << names[k] << " against the CPU: " << what;
  }
}

TEST(CudaNorms, LayerNormNarrowedOutputAndHalfGradientEqualTheCastsBitwise) {
  REQUIRE_GPU();
  uint64_t seed = 700;
  for (DType out : {DType::bf16, DType::f16})
    for (int64_t c : kNormWidths) {  // every kernel path, odd widths (element by element) included
      const int64_t rows = std::clamp<int64_t>(200000 / c, 3, 37);
      for (bool affine : {false, true}) expect_narrowed_norm_matches(rows, c, affine, out, seed += 4);
    }
  expect_narrowed_norm_matches(16384, 384, true, DType::bf16, 800);  // the nanoGPT step's shape
}

}  // namespace
}  // namespace tessera
