// The clipping/optimizer tail on the GPU (label `gpu`; skipped visibly without a GPU):
// sum_squares against its CPU kernel on 40 tensors of odd sizes (tiny to > 1M elements, one
// empty) in every floating dtype, |gpu − cpu| <= 1e-12·cpu (the squares round identically, only
// the f64 order differs); more than 48 tensors (several launches, one of them all empty); the
// same bits on every run; adam_update (both decay modes) with grad_scale against the CPU (f32 1e-5,
// f64 1e-9, bf16/f16 1e-2 of the result's scale) and bitwise against the unfused GPU path
// (scale_grad, then the update), in place too; AdamW with set_clip_norm on GPU parameters
// bitwise equal to the unfused formulation on the GPU and close to the CPU. GPU outputs are
// NaN-poisoned before the kernels run. (CudaCompiledStep.ReplaysACudaGraph... runs both ops
// inside a captured CUDA graph.) adam_multi_update over 100 parameters (3 launches) bitwise
// equal to the single-tensor kernels, close to the CPU, in place too.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using namespace gpu_test;
using testing::all_close;
using testing::test_rand;

Tensor scalar(double v) { return full({}, v, DType::f64); }

std::vector<Tensor> to_gpu(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.to(kGpu));
  return out;
}

// 40 shapes: tiny, around the 16384-element chunk, > 1M elements, one empty.
std::vector<Shape> mixed_shapes() {
  const int64_t sizes[] = {1,     3,     7,      31,     33,     255,     257,   1000, 4097, 16383,
                           16384, 16385, 32769,  65537,  100003, 1048577, 2,     5,    9,    129,
                           0,     1153,  384,    50000,  16,     17,      3001,  7,    1,    1500007,
                           11,    4093,  262147, 99,     8191,   8193,    12345, 3,    77,   1000003};
  std::vector<Shape> shapes;
  for (int64_t n : sizes) shapes.push_back(n == 1153 ? Shape{7, 1153} : n == 384 ? Shape{384, 3, 5} : Shape{n});
  return shapes;
}

std::vector<Tensor> random_tensors(const std::vector<Shape>& shapes, DType dt, uint64_t seed) {
  std::vector<Tensor> xs;
  for (const Shape& s : shapes) xs.push_back(random(s, ++seed, dt));
  return xs;
}

::testing::AssertionResult sum_matches_cpu(const std::vector<Tensor>& xs) {
  const double want = call<op::SumSquares>({}, xs)[0].item<double>();
  const double got = run_on_gpu_host<op::SumSquares>({}, xs)[0].item<double>();  // output NaN-poisoned
  if (std::abs(got - want) <= 1e-12 * std::abs(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gpu " << got << " cpu " << want << " rel "
                                       << std::abs(got - want) / std::abs(want);
}

TEST(CudaSumSquares, MatchesTheCpuOnFortyOddTensors) {
  REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    EXPECT_TRUE(sum_matches_cpu(random_tensors(mixed_shapes(), dt, 100))) << dtype_name(dt);
}

TEST(CudaSumSquares, MoreThanFortyEightTensorsTakeSeveralLaunches) {
  REQUIRE_GPU();
  // 150 tensors: launch 1 (tensors 0..47) odd sizes, launch 2 (48..95) only empty tensors,
  // launches 3 and 4 odd sizes with one > 1M elements and empties at the launch edges.
  std::vector<Shape> shapes;
  for (int i = 0; i < 150; ++i) {
    const bool empty = (i >= 48 && i < 96) || i == 143 || i == 144;
    shapes.push_back(Shape{empty ? 0 : i == 120 ? 1048583 : (i * 37) % 5003 + 1});
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::vector<Tensor> xs = random_tensors(shapes, dt, 300);
    EXPECT_TRUE(sum_matches_cpu(xs)) << dtype_name(dt);
    // A tensor list of exactly 48 and of 49.
    EXPECT_TRUE(sum_matches_cpu(std::vector<Tensor>(xs.begin() + 96, xs.begin() + 144))) << dtype_name(dt);
    EXPECT_TRUE(sum_matches_cpu(std::vector<Tensor>(xs.begin() + 96, xs.begin() + 145))) << dtype_name(dt);
  }
}

TEST(CudaSumSquares, SameBitsEveryRunAndZeroForEmptyTensors) {
  REQUIRE_GPU();
  const std::vector<Tensor> xs = to_gpu(random_tensors(mixed_shapes(), DType::f32, 500));
  const double first = sum_squares(xs).item<double>();
  for (int r = 0; r < 5; ++r) EXPECT_EQ(sum_squares(xs).item<double>(), first) << "run " << r;
  EXPECT_GT(first, 0.0);
  EXPECT_EQ(run_on_gpu_host<op::SumSquares>({}, {zeros({0}), zeros({3, 0})})[0].item<double>(), 0.0);
}

// ---- adam_update (both decay modes) with grad_scale ----

void expect_grad_scale_matches(AdamDecay decay) {
  using Op = op::AdamUpdate;
  const Op::Attrs variants[] = {{0.9, 0.999, 1e-8, decay, 0.0}, {0.8, 0.99, 1e-6, decay, 0.1}};
  uint64_t seed = 700;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{33}, Shape{4097}, Shape{7, 33}, Shape{100003}}) {
      for (const Op::Attrs& a : variants) {
        for (double scale : {0.3141592653589793, 1.0 / 3.0, 1.0}) {
          const Tensor p = random(s, ++seed, dt), g = random(s, ++seed, dt);
          const Tensor m = cast(mul(testing::test_randn(s, ++seed), 0.1), dt);
          const Tensor v = cast(test_rand(s, 0.0, 0.5, ++seed), dt);
          const std::vector<Tensor> in{p, g, m, v, scalar(1e-2), scalar(10), scalar(scale)};
          const std::string what = std::string(decay == AdamDecay::coupled ? "adam " : "adamw ") + dtype_name(dt) +
                                   s.str() + " wd " +
                                   std::to_string(a.weight_decay) + " scale " + std::to_string(scale);
          const std::vector<Tensor> got = run_on_gpu_host<Op>(a, in);
          const std::vector<Tensor> cpu = call<Op>(a, in);
          // The unfused GPU path: g·s by scale_grad on the GPU, then the update without the scale.
          const Tensor gs = optim::scale_grad(g.to(kGpu), scalar(scale).to(kGpu)).to(Device::cpu());
          const std::vector<Tensor> unfused = run_on_gpu_host<Op>(a, {p, gs, m, v, scalar(1e-2), scalar(10)});
          // In place on the GPU: p', m', v' into the buffers of p, m, v.
          std::vector<Tensor> gin = to_gpu(in);
          call_out<Op>(a, gin, {gin[0], gin[2], gin[3]});
          const Tensor in_place[] = {gin[0], gin[2], gin[3]};
          for (int k = 0; k < 3; ++k) {
            EXPECT_TRUE(close_to(got[k], cpu[k], tol_of(dt))) << what << " output " << k;
            EXPECT_TRUE(all_close(got[k], unfused[k], 0, 0)) << what << " output " << k << " vs unfused";
            EXPECT_TRUE(all_close(in_place[k].to(Device::cpu()), got[k], 0, 0)) << what << " output " << k
                                                                                << " in place";
          }
        }
      }
    }
  }
}

TEST(CudaGradScale, AdamUpdateCoupledMatchesTheCpuAndTheUnfusedPath) {
  REQUIRE_GPU();
  expect_grad_scale_matches(AdamDecay::coupled);
}

TEST(CudaGradScale, AdamUpdateDecoupledMatchesTheCpuAndTheUnfusedPath) {
  REQUIRE_GPU();
  expect_grad_scale_matches(AdamDecay::decoupled);
}

// ---- adam_multi_update: many parameters per launch ----

// 100 parameters (the 40 mixed shapes, then 60 more; 3 launches of at most 48, empties among
// them): the multi-tensor kernel bitwise equal to one single-tensor GPU update per parameter
// and close to the CPU, fresh (NaN-poisoned) and in place, with and without grad_scale.
TEST(CudaAdamMultiUpdate, EqualsTheSingleTensorKernelBitwise) {
  REQUIRE_GPU();
  std::vector<Shape> shapes = mixed_shapes();
  for (int i = 0; i < 60; ++i) shapes.push_back(Shape{i % 17 == 3 ? 0 : (i * 53) % 9001 + 1});
  const size_t n = shapes.size();
  for (DType dt : kFloatTypes) {
    uint64_t seed = 4000;
    std::vector<Tensor> in;
    for (int list = 0; list < 4; ++list) {
      for (const Shape& s : shapes) {
        in.push_back(list == 3 ? cast(test_rand(s, 0.0, 0.5, ++seed), dt) : random(s, ++seed, dt));
      }
    }
    std::vector<double> wd;
    for (size_t i = 0; i < n; ++i) wd.push_back(i % 3 == 0 ? 0.0 : 0.01 * double(i % 7));
    for (AdamDecay decay : {AdamDecay::coupled, AdamDecay::decoupled}) {
      for (bool scaled : {false, true}) {
        std::vector<Tensor> args = in;
        args.push_back(scalar(1e-2));
        args.push_back(scalar(10));
        if (scaled) args.push_back(scalar(1.0 / 3.0));
        const op::AdamMultiUpdate::Attrs a{0.8, 0.99, 1e-6, decay, wd};
        const std::string what = std::string(dtype_name(dt)) +
                                 (decay == AdamDecay::coupled ? " adam" : " adamw") + (scaled ? " scaled" : "");
        const std::vector<Tensor> got = run_on_gpu_host<op::AdamMultiUpdate>(a, args);
        const std::vector<Tensor> cpu = call<op::AdamMultiUpdate>(a, args);
        std::vector<Tensor> gin = to_gpu(args);  // in place: p'_i, m'_i, v'_i into p_i, m_i, v_i
        std::vector<Tensor> targets;
        for (size_t k : {size_t{0}, size_t{2}, size_t{3}})
          for (size_t i = 0; i < n; ++i) targets.push_back(gin[k * n + i]);
        call_out<op::AdamMultiUpdate>(a, gin, targets);
        for (size_t i = 0; i < n; ++i) {
          std::vector<Tensor> one{args[i], args[n + i], args[2 * n + i], args[3 * n + i], args[4 * n], args[4 * n + 1]};
          if (scaled) one.push_back(args[4 * n + 2]);
          const std::vector<Tensor> single =
              decay == AdamDecay::coupled
                  ? run_on_gpu_host<op::AdamUpdate>({0.8, 0.99, 1e-6, AdamDecay::coupled, wd[i]}, one)
                  : run_on_gpu_host<op::AdamUpdate>({0.8, 0.99, 1e-6, AdamDecay::decoupled, wd[i]}, one);
          for (size_t k = 0; k < 3; ++k) {
            const std::string at = what + " parameter " + std::to_string(i) + " output " + std::to_string(k);
            EXPECT_TRUE(all_close(got[k * n + i], single[k], 0, 0)) << at;
            EXPECT_TRUE(close_to(got[k * n + i], cpu[k * n + i], tol_of(dt))) << at << " vs cpu";
            EXPECT_TRUE(all_close(targets[k * n + i].to(Device::cpu()), single[k], 0, 0)) << at << " in place";
          }
        }
      }
    }
  }
}

// ---- AdamW with clipping on GPU parameters ----

TEST(CudaClipInTheUpdate, AdamWEqualsTheUnfusedStepAndTracksTheCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{384, 1153}, {7}, {33}};
  const DType dtypes[] = {DType::f32, DType::f32, DType::f64};
  std::vector<Tensor> fused, plain, cpu, m, v;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor p0 = random(shapes[i], 900 + i, dtypes[i]);
    fused.push_back(p0.to(kGpu).detach().requires_grad_());
    plain.push_back(p0.to(kGpu));
    cpu.push_back(p0.clone().requires_grad_());
    m.push_back(zeros(shapes[i], TensorOptions(dtypes[i]).device(kGpu)));
    v.push_back(zeros(shapes[i], TensorOptions(dtypes[i]).device(kGpu)));
  }
  const auto o = optim::AdamWOptions(1e-2).weight_decay(0.1);
  optim::AdamW opt(fused, o), opt_cpu(cpu, o);
  opt.set_clip_norm(1.0);
  opt_cpu.set_clip_norm(1.0);
  for (int64_t s = 1; s <= 3; ++s) {
    std::vector<Tensor> grads, gpu_grads;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back(random(shapes[i], 950 + 10 * s + i, dtypes[i]));
      gpu_grads.push_back(grads.back().to(kGpu));
      fused[i].set_grad(gpu_grads.back());
      cpu[i].set_grad(grads.back());
    }
    opt.step();
    opt_cpu.step();
    // The unfused step: the factor, scale_grad, the update without grad_scale, copies.
    NoGradGuard no_grad;
    const Tensor factor = optim::clip_factor(optim::global_grad_norm(gpu_grads), 1.0);
    EXPECT_LT(factor.item<double>(), 1.0) << "clipping engages";
    const Tensor lr = scalar(1e-2).to(kGpu), t = scalar(double(s)).to(kGpu);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::vector<Tensor> out =
          adam_update(plain[i], optim::scale_grad(gpu_grads[i], factor), m[i], v[i], lr, t, AdamDecay::decoupled,
                      o.beta1(), o.beta2(), o.eps(), o.weight_decay());
      copy_into(out[0], plain[i]);
      copy_into(out[1], m[i]);
      copy_into(out[2], v[i]);
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(all_close(fused[i].to(Device::cpu()), plain[i].to(Device::cpu()), 0, 0)) << "param " << i;
    EXPECT_TRUE(close_to(fused[i], cpu[i], 1e-5)) << "param " << i << " vs cpu";
  }
}

}  // namespace
}  // namespace tessera
