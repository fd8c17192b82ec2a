// CUDA elementwise kernels against their CPU counterparts (label `gpu`; skipped visibly without
// a GPU): binary ops with broadcasting, unary and scalar ops, compare / where / masked_fill /
// clamp, cast between every pair of dtypes, dropout, and the backward of each family; gelu with
// a bf16/f16 output and gelu_backward with a bf16/f16 gradient (of f32 x), bitwise against the
// unfused GPU path (op, then cast), and a transformer block under autocast built on them.
//
// Each check runs the op's kernel through the op machinery on CPU inputs (the reference) and on
// GPU copies of them into outputs poisoned beforehand (NaN, or a value the op never writes), on
// random inputs (never zeros) of odd sizes and every dtype the op takes. Tolerances:
//   exact  : arithmetic and selection (+ - · /, neg, relu, scalars, clamp, compare, where,
//            masked_fill, cast, dropout): one IEEE rounding on both devices, bf16/f16 computed
//            in f32 and rounded once (round to nearest even) on both, so the bits agree;
//   math   : exp, log, sqrt, rsqrt, tanh, sigmoid, erf, pow (CUDA's libm vs Eigen/glibc, a few
//            ulp apart): f32 1e-5 relative, f64 1e-12 relative, bf16/f16 1e-2 relative, each with
//            a small absolute floor for results that come out of a cancellation (gelu's
//            1 + tanh(u) for very negative x);
//   math gradients: the math tolerance with the relative part scaled by |cpu| + RMS(cpu), since
//            derivatives such as gelu's (1 − tanh²) cancel: an element far below the output's
//            RMS carries rounding of the size of the terms it is the difference of.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/cuda/runtime.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using namespace gpu_test;

using testing::test_rand;
using testing::test_randn;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};
const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u8};
const std::vector<Shape> kOddShapes = {{1}, {7}, {1001}, {33, 65}};

// |got − want| <= atol + rtol·(|want| + (rms ? RMS(want) : 0)).
struct Tol {
  double rtol = 0, atol = 0;
  bool rms = false;  // scale the relative part by |want| + RMS(want) (results out of a cancellation)
};
constexpr Tol kExact{};

Tol math_tol(DType dt) {
  switch (dt) {
    case DType::f32: return {1e-5, 1e-6};
    case DType::f64: return {1e-12, 1e-14};
    default: return {1e-2, 1e-3};
  }
}

std::string describe(const std::vector<Tensor>& inputs) {
  std::string s;
  for (const Tensor& t : inputs) s += std::string(s.empty() ? "" : ", ") + dtype_name(t.dtype()) + t.shape().str();
  return s;
}

// got (any device) against want (CPU): same dtype and shape, and per element equal, both NaN
// (only where allowed), or |got - want| <= atol + rtol·(|want| + scale), scale = RMS(want) when
// tol.rms, else 0. The reference holding NaN where it is not allowed is a failure too: poisoned
// elements could then pass unseen.
::testing::AssertionResult same_values(const Tensor& got, const Tensor& want, Tol tol, bool allow_nan = false) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << "got " << got.meta() << ", expected " << want.meta();
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  const double scale = tol.rms ? rms(b) : 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      if (!allow_nan) return ::testing::AssertionFailure() << "the CPU reference has NaN at element " << i;
      if (std::isnan(a[i])) continue;
    }
    const bool ok = a[i] == b[i] || std::abs(a[i] - b[i]) <= tol.atol + tol.rtol * (std::abs(b[i]) + scale);
    if (!ok)
      return ::testing::AssertionFailure()
             << "element " << i << " of " << want.shape() << " " << dtype_name(want.dtype()) << " is " << a[i]
             << " on the GPU, " << b[i] << " on the CPU";
  }
  return ::testing::AssertionSuccess();
}

// A GPU output of `m` (moved to the GPU) filled with `poison` (NaN by default; integer outputs,
// which NaN would turn into 0, get 171 for u8 and -123456789 for i32).
Tensor poisoned(const TensorMeta& m, double poison) {
  double v = poison;
  if (!is_floating(m.dtype) && std::isnan(v)) v = m.dtype == DType::u8 ? 171 : -123456789;
  return full(m.shape, v, TensorOptions(m.dtype).device(kGpu));
}

// Runs Op (with attrs) on the CPU inputs and on their GPU copies, the GPU into poisoned outputs,
// and compares every output.
template <class Op>
void expect_gpu_matches_cpu(typename Op::Attrs attrs, const std::vector<Tensor>& inputs, Tol tol,
                            const std::string& what, bool allow_nan = false, double poison = kNaN) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back(t.meta());
  std::vector<Tensor> want, got, gpu_inputs;
  for (const TensorMeta& m : output_metas<Op>(attrs, metas)) {
    want.push_back(empty(m.shape, TensorOptions(m.dtype)));
    got.push_back(poisoned(m, poison));
  }
  call_out<Op>(attrs, inputs, want);
  for (const Tensor& t : inputs) gpu_inputs.push_back(t.to(kGpu));
  call_out<Op>(attrs, gpu_inputs, got);
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].device(), kGpu);
    EXPECT_TRUE(same_values(got[k], want[k], tol, allow_nan))
        << Op::kName << " (" << what << ") on " << describe(inputs) << ", output " << k;
  }
}

// Random values of any dtype: N(0,1) for floating types, integers around 0 (i32) or in [0, 255].
Tensor random_of(const Shape& shape, DType dt, uint64_t seed) {
  if (dt == DType::i32) return cast(mul(test_randn(shape, seed), 1000.0), DType::i32);
  if (dt == DType::u8) return cast(test_rand(shape, 0, 256, seed), DType::u8);
  return cast(test_randn(shape, seed), dt);
}

// Small integers (-2 ... 2 as `dt`; u8 saturates the negatives to 0), so that comparisons meet
// many ties.
Tensor small_integers(const Shape& shape, DType dt, uint64_t seed) {
  return cast(cast(test_rand(shape, -3, 3, seed), DType::i32), dt);  // truncation toward zero
}

Tensor positive(const Shape& shape, DType dt, uint64_t seed) { return cast(test_rand(shape, 0.05, 4.0, seed), dt); }

// ---- binary ops with broadcasting ----

struct BinaryCase {
  Shape a, b;
};
const std::vector<BinaryCase> kBinaryCases = {
    {{33, 65}, {33, 65}},                        // same shapes (flat loop)
    {{1001}, {1001}},     {{7, 1, 33}, {5, 1}},  // both sides broadcast
    {{3, 129}, {129}},                           // a bias row
    {{}, {4, 3}},                                // a scalar
    {{1}, {7}},
};

TEST(CudaElementwise, SubMulDivMatchCpuExactlyWithBroadcasting) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloating)
    for (const BinaryCase& c : kBinaryCases) {
      const Tensor a = random_of(c.a, dt, ++seed), b = random_of(c.b, dt, ++seed);
      expect_gpu_matches_cpu<op::Sub>({}, {a, b}, kExact, "a - b");
      expect_gpu_matches_cpu<op::Mul>({}, {a, b}, kExact, "a * b");
      expect_gpu_matches_cpu<op::Div>({}, {a, b}, kExact, "a / b");
    }
}

// ---- unary and scalar ops ----

// Runs Op on each odd shape and floating dtype, inputs from make(shape, dtype, seed).
template <class Op>
void check_unary(typename Op::Attrs attrs, const std::function<Tensor(const Shape&, DType, uint64_t)>& make, bool exact,
                 const std::string& what) {
  uint64_t seed = 200;
  for (DType dt : kFloating)
    for (const Shape& s : kOddShapes)
      expect_gpu_matches_cpu<Op>(attrs, {make(s, dt, ++seed)}, exact ? kExact : math_tol(dt), what);
}

TEST(CudaElementwise, ArithmeticUnaryAndScalarOpsMatchCpuExactly) {
  REQUIRE_GPU();
  check_unary<op::Neg>({}, random_of, true, "-x");
  check_unary<op::Relu>({}, random_of, true, "max(x, 0)");
  for (double s : {0.1, -2.5, 1e-3}) {
    check_unary<op::AddScalar>({s}, random_of, true, "x + s");
    check_unary<op::MulScalar>({s}, random_of, true, "x * s");
  }
  check_unary<op::PowScalar>({2.0}, random_of, true, "x^2");
  check_unary<op::PowScalar>({1.0}, random_of, true, "x^1");
  check_unary<op::PowScalar>({-1.0}, random_of, true, "x^-1");
  check_unary<op::Clamp>({-0.5, 0.7}, random_of, true, "clamp(-0.5, 0.7)");
  check_unary<op::Clamp>({std::nullopt, 0.3}, random_of, true, "clamp(-, 0.3)");
  check_unary<op::Clamp>({-1.2, std::nullopt}, random_of, true, "clamp(-1.2, -)");
  check_unary<op::Clamp>({0.1, 0.1}, random_of, true, "clamp(0.1, 0.1)");
}

TEST(CudaElementwise, MathFunctionsMatchCpuWithinTolerance) {
  REQUIRE_GPU();
  check_unary<op::Exp>({}, random_of, false, "e^x");
  check_unary<op::Log>({}, positive, false, "ln x");
  check_unary<op::Sqrt>({}, positive, false, "sqrt x");
  check_unary<op::Rsqrt>({}, positive, false, "1/sqrt x");
  check_unary<op::Tanh>({}, random_of, false, "tanh x");
  check_unary<op::Sigmoid>({}, random_of, false, "sigmoid x");
  check_unary<op::Gelu>({GeluApprox::none}, random_of, false, "gelu erf");
  check_unary<op::Gelu>({GeluApprox::tanh}, random_of, false, "gelu tanh");
  check_unary<op::FastGelu>({}, random_of, false, "x sigmoid(1.702 x)");
  check_unary<op::PowScalar>({3.0}, random_of, false, "x^3");
  check_unary<op::PowScalar>({0.5}, positive, false, "x^0.5");
  check_unary<op::PowScalar>({-2.5}, positive, false, "x^-2.5");
  // Saturation far out in the tails (|x| up to ~100): no NaN from inf/inf, and the saturated
  // values agree. The absolute floor is scaled to the inputs: where 1 + tanh(u) cancels, CUDA's
  // tanh gives exactly -1 and Eigen's approximation may be an ulp away, times x.
  for (DType dt : kFloating) {
    const Tensor far = cast(mul(test_randn({257}, 300), 30.0), dt);
    const Tol tails{math_tol(dt).rtol, dt == DType::f64 ? 1e-12 : is_half(dt) ? 1e-2 : 1e-5};
    expect_gpu_matches_cpu<op::Sigmoid>({}, {far}, tails, "sigmoid, tails");
    expect_gpu_matches_cpu<op::FastGelu>({}, {far}, tails, "fast_gelu, tails");
    expect_gpu_matches_cpu<op::Gelu>({GeluApprox::tanh}, {far}, tails, "gelu tanh, tails");
    expect_gpu_matches_cpu<op::Gelu>({GeluApprox::none}, {far}, tails, "gelu erf, tails");
  }
}

TEST(CudaElementwise, GeluBackwardMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 300;
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh})
    for (DType dt : kFloating)
      for (const Shape& s : kOddShapes) {
        const Tensor g = random_of(s, dt, ++seed), x = random_of(s, dt, ++seed);
        expect_gpu_matches_cpu<op::GeluBackward>({approx}, {g, x}, math_tol(dt), gelu_approx_name(approx));
      }
}

// ---- gelu with a bf16/f16 output of f32 x, gelu_backward with its bf16/f16 gradient ----

// Op on GPU inputs (as they are: views stay views) into poisoned outputs.
template <class Op>
std::vector<Tensor> run_into_poisoned(const typename Op::Attrs& attrs, const std::vector<Tensor>& gpu_in) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : gpu_in) metas.push_back(t.meta());
  std::vector<Tensor> out;
  for (const TensorMeta& m : output_metas<Op>(attrs, metas)) out.push_back(poisoned(m, kNaN));
  call_out<Op>(attrs, gpu_in, out);
  return out;
}

// Odd sizes (numel not a multiple of the pack of 4), one larger than a grid-stride pass.
const std::vector<Shape> kNarrowShapes = {{1}, {7}, {1001}, {33, 65}, {3, 40001}};

// The narrowed gelu writes the bits of the unfused GPU path (f32 gelu, then a cast kernel), and
// agrees with the CPU within bf16/f16 tolerance; aligned (packed) and misaligned inputs alike.
TEST(CudaElementwise, GeluWithNarrowedOutputEqualsGeluThenCastBitwise) {
  REQUIRE_GPU();
  uint64_t seed = 1300;
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh})
    for (DType out : {DType::bf16, DType::f16})
      for (const Shape& s : kNarrowShapes) {
        const std::string what = std::string(gelu_approx_name(approx)) + " -> " + dtype_name(out) + " " + s.str();
        const Tensor x = mul(test_randn(s, ++seed, DType::f32), 3.0);
        expect_gpu_matches_cpu<op::Gelu>({approx, out}, {x}, math_tol(out), what);
        const Tensor xg = x.to(kGpu);
        const Tensor unfused = cast(gelu(xg, approx), out);
        EXPECT_TRUE(same_bits(run_into_poisoned<op::Gelu>({approx, out}, {xg})[0], unfused)) << what;
        EXPECT_TRUE(same_bits(run_into_poisoned<op::Gelu>({approx, out}, {misaligned_on_gpu(x)})[0], unfused))
            << what << ", misaligned x";
      }
}

// gelu_backward of f32 x with a bf16/f16 g: the bits of gelu_backward(cast(g, f32), x) on the
// GPU, and the CPU's within f32 tolerance; aligned and misaligned g.
TEST(CudaElementwise, GeluBackwardOfAHalfGradientEqualsTheWidenedGradientBitwise) {
  REQUIRE_GPU();
  uint64_t seed = 1400;
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh})
    for (DType gt : {DType::bf16, DType::f16})
      for (const Shape& s : kNarrowShapes) {
        const std::string what = std::string(gelu_approx_name(approx)) + ", g " + dtype_name(gt) + " " + s.str();
        const Tensor x = mul(test_randn(s, ++seed, DType::f32), 3.0), g = cast(test_randn(s, ++seed, DType::f32), gt);
        Tol tol = math_tol(DType::f32);
        tol.rms = true;
        // tanh: x spans ±12 here, where tanh saturates and 1 − t² cancels; the CPU's and the
        // GPU's f32 tanh differ by an ulp there, amplified up to x·k·(1 + 3c·x²) ≈ 100 times.
        if (approx == GeluApprox::tanh) tol.rtol = 1e-4;
        expect_gpu_matches_cpu<op::GeluBackward>({approx}, {g, x}, tol, what);
        const Tensor xg = x.to(kGpu), gg = g.to(kGpu);
        const Tensor unfused = gelu_backward(cast(gg, DType::f32), xg, approx);
        EXPECT_TRUE(same_bits(run_into_poisoned<op::GeluBackward>({approx}, {gg, xg})[0], unfused)) << what;
        EXPECT_TRUE(same_bits(run_into_poisoned<op::GeluBackward>({approx}, {misaligned_on_gpu(g), xg})[0], unfused))
            << what << ", misaligned g";
      }
}

// A transformer block under bf16 autocast on the GPU, eager forward and backward: its narrowed
// layer norms and fc's bf16 output give the bits of the block with explicit casts (fc's f32
// output cast before the activation).
TEST(CudaElementwise, TransformerBlockUnderAutocastEqualsExplicitCastsBitwise) {
  REQUIRE_GPU();
  const int64_t B = 2, T = 64, C = 48;
  for (nn::Activation act : {nn::Activation::gelu, nn::Activation::gelu_tanh}) {
    SCOPED_TRACE(nn::activation_name(act));
    const nn::TransformerBlockOptions o =
        nn::TransformerBlockOptions(nn::AttentionOptions(C, 3, T).block_size(16)).mlp_ratio(4).activation(act);
    Generator g1(21), g2(21);
    nn::TransformerBlock now(o, g1), before(o, g2);
    now.to(kGpu);
    before.to(kGpu);
    std::shared_ptr<nn::LayerNorm> ln1, ln2;
    for (const auto& c : before.named_children()) {
      if (c.first == "ln1") ln1 = std::dynamic_pointer_cast<nn::LayerNorm>(c.second);
      if (c.first == "ln2") ln2 = std::dynamic_pointer_cast<nn::LayerNorm>(c.second);
    }
    ASSERT_TRUE(ln1 && ln2);
    const Tensor x0 = test_randn({B * T, C}, 22, DType::f32).to(kGpu),
                 w = test_randn({B * T, C}, 23, DType::f32).to(kGpu);
    Tensor x1 = x0.detach().clone().requires_grad_(), x2 = x0.detach().clone().requires_grad_();
    Tensor y1, y2;
    {
      autocast::Guard amp(DType::bf16);
      y1 = now.forward(x1, B);
    }
    {
      autocast::Guard amp(DType::bf16);
      Tensor h = add(x2, before.attention().forward(ln1->forward(x2), B));
      const Tensor u = cast(before.fc().forward(ln2->forward(h)), DType::bf16);  // fc's f32 output rounded
      y2 = add(h, before.fc2().forward(nn::apply_activation(act, u)));
    }
    EXPECT_TRUE(same_bits(y1, y2));
    sum(mul(y1, w)).backward();
    sum(mul(y2, w)).backward();
    EXPECT_TRUE(same_bits(x1.grad(), x2.grad())) << "dx";
    const std::vector<nn::NamedParam> p1 = now.named_parameters(), p2 = before.named_parameters();
    for (size_t i = 0; i < p1.size(); ++i)
      EXPECT_TRUE(same_bits(p1[i].tensor.grad(), p2[i].tensor.grad())) << p1[i].name;
  }
}

// ---- compare, where, masked_fill ----

TEST(CudaElementwise, CompareMatchesCpuForEveryDtypeModeAndBroadcast) {
  REQUIRE_GPU();
  uint64_t seed = 400;
  const std::vector<BinaryCase> cases = {{{33, 65}, {33, 65}}, {{7, 1, 33}, {5, 1}}, {{3, 129}, {129}}, {{}, {4, 3}}};
  for (DType dt : kAllDtypes)
    for (CompareMode mode :
         {CompareMode::eq, CompareMode::ne, CompareMode::lt, CompareMode::le, CompareMode::gt, CompareMode::ge}) {
      const std::string name = compare_mode_name(mode);
      for (const BinaryCase& c : cases) {
        // Small integers: many ties, so eq/le/ge see both answers.
        const Tensor a = small_integers(c.a, dt, ++seed), b = small_integers(c.b, dt, ++seed);
        expect_gpu_matches_cpu<op::Compare>({mode, std::nullopt}, {a, b}, kExact, name);
      }
      const Tensor x = small_integers({1001}, dt, ++seed);
      for (double s : {2.0, 2.5, -1.0, 0.1}) expect_gpu_matches_cpu<op::Compare>({mode, s}, {x}, kExact, name + " scalar");
      if (is_floating(dt)) {  // continuous values against a scalar rounded to the dtype
        const Tensor r = random_of({33, 65}, dt, ++seed);
        expect_gpu_matches_cpu<op::Compare>({mode, 0.1}, {r}, kExact, name + " scalar 0.1");
      }
    }
}

TEST(CudaElementwise, WhereMatchesCpuForEveryDtypeAndBroadcast) {
  REQUIRE_GPU();
  uint64_t seed = 500;
  struct Case {
    Shape c, a, b;
  };
  const std::vector<Case> cases = {
      {{33, 65}, {33, 65}, {33, 65}}, {{7, 1, 33}, {5, 33}, {1}}, {{129}, {3, 129}, {3, 1}}, {{}, {1001}, {1001}}};
  for (DType dt : kAllDtypes)
    for (const Case& k : cases) {
      const Tensor cond = gt(test_randn(k.c, ++seed), 0.0);
      const Tensor a = random_of(k.a, dt, ++seed), b = random_of(k.b, dt, ++seed);
      expect_gpu_matches_cpu<op::Where>({}, {cond, a, b}, kExact, "cond ? a : b");
    }
}

TEST(CudaElementwise, MaskedFillMatchesCpuForEveryDtypeAndBroadcast) {
  REQUIRE_GPU();
  uint64_t seed = 600;
  const std::vector<BinaryCase> cases = {{{33, 65}, {33, 65}}, {{7, 33}, {33}}, {{5, 3, 7}, {3, 1}}, {{1001}, {}}};
  for (DType dt : kAllDtypes)
    for (const BinaryCase& c : cases) {
      const Tensor x = random_of(c.a, dt, ++seed), mask = gt(test_randn(c.b, ++seed), 0.3);
      if (is_floating(dt)) {
        for (double v : {-kInf, 0.1, -3.25, 1e30})  // 1e30 overflows f16 to inf, as on the CPU
          expect_gpu_matches_cpu<op::MaskedFill>({v}, {x, mask}, kExact, "value " + std::to_string(v));
      } else {
        expect_gpu_matches_cpu<op::MaskedFill>({7.0}, {x, mask}, kExact, "value 7");
      }
    }
}

// ---- cast ----

// f64 values that probe the conversion rules: rounding ties of bf16/f16, f16 and f32 subnormals
// and overflow, integer truncation and saturation, signed zeros, infinities, NaN.
Tensor awkward_values() {
  std::vector<double> v = {0.0,           -0.0,         1.0,     -1.0,    0.5,          -5.5,         1.00390625,
                           1.01171875,    1.0009765625, 65504.0, 65519.0, 65520.0,      -70000,       1e-5,
                           3e-8,          2.9e-8,       1e-40,   -1e-45,  3e38,         3.5e38,       -1e300,
                           255.0,         255.5,        256.0,   -0.7,    2147483647.0, 2147483648.0, -2147483648.0,
                           -2147483649.0, 1e10,         0.1,     1.0 / 3, kInf,         -kInf,        kNaN};
  std::vector<double> r = test_randn({1001}, 700).to_vector<double>();
  for (size_t i = 0; i < r.size(); ++i) v.push_back(r[i] * (i % 3 == 0 ? 1.0 : i % 3 == 1 ? 300.0 : 1e-3));
  return from_vector(v, Shape{static_cast<int64_t>(v.size())}, TensorOptions(DType::f64));
}

TEST(CudaElementwise, CastMatchesCpuBitForBitForEveryPairOfDtypes) {
  REQUIRE_GPU();
  const Tensor values = awkward_values();
  for (DType from : kAllDtypes) {
    const Tensor x = cast(values, from);  // on the CPU: the source values of each dtype
    for (DType to : kAllDtypes) {
      const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      // Two poisons, so that an unwritten element shows whatever the expected value is.
      expect_gpu_matches_cpu<op::Cast>({to}, {x}, kExact, what, /*allow_nan=*/true, kNaN);
      expect_gpu_matches_cpu<op::Cast>({to}, {x}, kExact, what, /*allow_nan=*/true, -77.0);
      // Bitwise, for the non-NaN elements: the same rounding, signed zeros included.
      const Tensor want = cast(x, to), got = cast(x.to(kGpu), to).to(Device::cpu());
      const size_t es = dtype_size(to);
      const std::vector<double> wv = want.to_vector<double>();
      const auto* pw = static_cast<const unsigned char*>(want.data_ptr());
      const auto* pg = static_cast<const unsigned char*>(got.data_ptr());
      for (int64_t i = 0; i < want.numel(); ++i)
        if (!std::isnan(wv[i]))
          ASSERT_EQ(std::memcmp(pw + i * es, pg + i * es, es), 0) << what << ": element " << i << " = " << wv[i];
    }
  }
}

// ---- dropout ----

TEST(CudaElementwise, DropoutDrawsTheCpuMaskForTheSameSeedAndStart) {
  REQUIRE_GPU();
  uint64_t seed = 800;
  for (DType dt : kFloating)
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{1001}, Shape{33, 65}, Shape{4099}})
      for (double p : {0.1, 0.5, 0.9}) {
        const Tensor x = random_of(s, dt, ++seed);
        expect_gpu_matches_cpu<op::Dropout>({p, 1234567 + seed, 17 + seed}, {x}, kExact, "p " + std::to_string(p));
      }
  // Through the public function: one generator state, either device, the same result.
  Generator cpu_gen(42, 1000), gpu_gen(42, 1000);
  const Tensor x = random_of({33, 65}, DType::f32, 801);
  const Tensor want = dropout(x, 0.25, cpu_gen), got = dropout(x.to(kGpu), 0.25, gpu_gen);
  EXPECT_TRUE(same_values(got, want, kExact));
  EXPECT_EQ(cpu_gen.offset(), gpu_gen.offset());
  const std::vector<float> kept = got.to_vector<float>();
  int zeros = 0;
  for (float v : kept) zeros += v == 0.0f;
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, static_cast<int>(kept.size()));
}

// Packs of four +0 inputs are written without drawing their Philox block (causal attention
// probabilities are +0 above the diagonal): the output must still be the CPU's, bit for bit,
// including −0 inputs (kept: −0, dropped: +0) in packs of zeros.
TEST(CudaElementwise, DropoutOfZeroBlocksIsTheCpuBitForBit) {
  REQUIRE_GPU();
  uint64_t seed = 850;
  for (DType dt : kFloating) {
    // [64, 64] lower-triangular values, +0 above the diagonal, −0 at every 5th zero.
    std::vector<double> v = random_of({64, 64}, DType::f64, ++seed).to_vector<double>();
    for (int r = 0; r < 64; ++r)
      for (int c = r + 1; c < 64; ++c) v[r * 64 + c] = (r * 64 + c) % 5 == 0 ? -0.0 : 0.0;
    const Tensor x = cast(from_vector(v, Shape{64, 64}), dt);
    for (double p : {0.2, 0.5}) {
      const std::vector<Tensor> got = run_on_gpu_host<op::Dropout>({p, 777 + seed, 5 + seed}, {x});
      const Tensor want = call<op::Dropout>({p, 777 + seed, 5 + seed}, {x})[0];
      EXPECT_TRUE(same_bits(got[0], want)) << dtype_name(dt) << " p " << p;
    }
  }
}

// ---- backward: eager autograd on GPU tensors against the CPU ----

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on CPU leaves and on GPU copies of them (floating inputs require grad), then backward with
// one random seed on both devices; compares the values (within tol) and every input gradient
// (within grad_tol, tol when not given).
void expect_backward_matches_cpu(const Fn& f, const std::vector<Tensor>& inputs, Tol tol, const std::string& what,
                                 std::optional<Tol> grad_tol = std::nullopt) {
  std::vector<Tensor> xc, xg;
  for (const Tensor& x : inputs) {
    Tensor c = x.detach().clone(), g = x.detach().to(kGpu);
    if (is_floating(x.dtype())) {
      c.requires_grad_();
      g.requires_grad_();
    }
    xc.push_back(c);
    xg.push_back(g);
  }
  const Tensor yc = f(xc), yg = f(xg);
  ASSERT_EQ(yg.device(), kGpu) << what;
  EXPECT_TRUE(same_values(yg, yc, tol)) << what << ": forward";
  const Tensor seed = test_randn(yc.shape(), 900, yc.dtype());
  yc.backward(seed);
  yg.backward(seed.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!xc[i].requires_grad()) continue;
    ASSERT_TRUE(xc[i].grad().defined()) << what << ": input " << i;
    ASSERT_TRUE(xg[i].grad().defined()) << what << ": input " << i << " got no gradient on the GPU";
    EXPECT_EQ(xg[i].grad().device(), kGpu);
    EXPECT_TRUE(same_values(xg[i].grad(), xc[i].grad(), grad_tol.value_or(tol))) << what << ": gradient of input " << i;
  }
}

TEST(CudaElementwiseBackward, BinaryOpsOfOneShape) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = random_of({33, 65}, dt, 1000), b = cast(test_rand({33, 65}, 0.5, 2.0, 1001), dt);
    // sub, mul, div and their rules (neg, mul, div): exact on both devices.
    expect_backward_matches_cpu([](const std::vector<Tensor>& x) { return div(mul(sub(x[0], x[1]), x[0]), x[1]); },
                                {a, b}, kExact, "(a - b)·a / b");
  }
}

TEST(CudaElementwiseBackward, BinaryOpsWithBroadcasting) {
  REQUIRE_GPU();
  const Tensor a = random_of({7, 33}, DType::f32, 1010), b = cast(test_rand({33}, 0.5, 2.0, 1011), DType::f32);
  try {
    // The broadcast input's gradient is summed over rows (sum_to): 1e-5 relative for f32.
    expect_backward_matches_cpu([](const std::vector<Tensor>& x) { return div(mul(sub(x[0], x[1]), x[1]), x[1]); },
                                {a, b}, {1e-5, 1e-6}, "(a - b)·b / b, b a row");
  } catch (const NotImplementedError& e) {
    if (std::string(e.what()).find("sum") == std::string::npos) throw;
    GTEST_SKIP() << "needs the CUDA kernel of sum: " << e.what();
  }
}

TEST(CudaElementwiseBackward, UnaryAndScalarOps) {
  REQUIRE_GPU();
  struct Case {
    const char* name;
    Fn f;
    bool positive_input;
    bool exact;
  };
  const std::vector<Case> cases = {
      {"neg", [](const std::vector<Tensor>& x) { return neg(x[0]); }, false, true},
      {"relu", [](const std::vector<Tensor>& x) { return relu(x[0]); }, false, true},
      {"add_scalar", [](const std::vector<Tensor>& x) { return add(x[0], 0.75); }, false, true},
      {"rsub", [](const std::vector<Tensor>& x) { return sub(1.5, x[0]); }, false, true},
      {"mul_scalar", [](const std::vector<Tensor>& x) { return mul(x[0], -1.25); }, false, true},
      {"clamp", [](const std::vector<Tensor>& x) { return clamp(x[0], -0.5, 0.8); }, false, true},
      {"pow 2", [](const std::vector<Tensor>& x) { return pow(x[0], 2.0); }, false, true},
      {"exp", [](const std::vector<Tensor>& x) { return exp(x[0]); }, false, false},
      {"log", [](const std::vector<Tensor>& x) { return log(x[0]); }, true, false},
      {"sqrt", [](const std::vector<Tensor>& x) { return sqrt(x[0]); }, true, false},
      {"rsqrt", [](const std::vector<Tensor>& x) { return rsqrt(x[0]); }, true, false},
      {"tanh", [](const std::vector<Tensor>& x) { return tanh(x[0]); }, false, false},
      {"sigmoid", [](const std::vector<Tensor>& x) { return sigmoid(x[0]); }, false, false},
      {"gelu", [](const std::vector<Tensor>& x) { return gelu(x[0]); }, false, false},
      {"gelu tanh", [](const std::vector<Tensor>& x) { return gelu(x[0], GeluApprox::tanh); }, false, false},
      {"fast_gelu", [](const std::vector<Tensor>& x) { return fast_gelu(x[0]); }, false, false},
      {"pow 3", [](const std::vector<Tensor>& x) { return pow(x[0], 3.0); }, false, false},
      {"pow 0.5", [](const std::vector<Tensor>& x) { return pow(x[0], 0.5); }, true, false},
  };
  uint64_t seed = 1100;
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& c : cases) {
      const Tensor x = c.positive_input ? positive({33, 65}, dt, ++seed) : random_of({33, 65}, dt, ++seed);
      if (c.exact) {
        expect_backward_matches_cpu(c.f, {x}, kExact, c.name);
      } else {
        // Math gradients (gelu's 1 − tanh², sigmoid's s·(1 − s), ...) cancel: relative to
        // |cpu| + RMS(cpu) (f32 1e-5, f64 1e-12), not to the element alone.
        Tol grad_tol = math_tol(dt);
        grad_tol.rms = true;
        expect_backward_matches_cpu(c.f, {x}, math_tol(dt), c.name, grad_tol);
      }
    }
}

TEST(CudaElementwiseBackward, SelectionOpsCastAndDropout) {
  REQUIRE_GPU();
  const Tensor a = random_of({33, 65}, DType::f32, 1200), b = random_of({33, 65}, DType::f32, 1201);
  const Tensor cond = gt(test_randn({33, 65}, 1202), 0.0);
  expect_backward_matches_cpu([](const std::vector<Tensor>& x) { return where(x[2], x[0], x[1]); }, {a, b, cond},
                              kExact, "where");
  expect_backward_matches_cpu([](const std::vector<Tensor>& x) { return masked_fill(x[0], x[1], -2.0); }, {a, cond},
                              kExact, "masked_fill");
  expect_backward_matches_cpu(
      [](const std::vector<Tensor>& x) {
        const Tensor h = cast(x[0], DType::bf16);
        return cast(mul(h, h), DType::f32);
      },
      {a}, kExact, "cast to bf16 and back");
  expect_backward_matches_cpu(
      [](const std::vector<Tensor>& x) {
        return call<op::Dropout>({0.3, 77, 5}, {x[0]})[0];
      },
      {a}, kExact, "dropout (same mask both ways)");
}

}  // namespace
}  // namespace tessera
