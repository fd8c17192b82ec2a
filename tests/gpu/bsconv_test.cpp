// The CUDA kernels of bsconv, bsconv_dx, bsconv_dw, edge_bias and edge_bias_grad against the CPU
// (in f64 on the same values), every dtype and block size, 1-D causal, 2-D strided and dilated
// geometries, outputs poisoned first; the same bits twice (TESSERA_BSMM_PATH=simt). The
// tensor-core kernels (the default) likewise on each path (sm_90a with halo boxes
// or per-tap copies, sm_80), at every block size and geometry they take, with the launch counts
// saying which kernel ran.
#include <gtest/gtest.h>

#include "core/sparse/generators.h"
#include "gpu_check.h"
#include "kernels/common/conv_index.h"
#ifdef TESSERA_WITH_CUDA
#include "kernels/common/cuda/blas.h"
#include "kernels/common/cuda/bsmm_tc.h"
#endif
#if defined(TESSERA_WITH_CUDA) && defined(TESSERA_HAVE_CUDNN)
#include "kernels/common/cuda/dnn_conv.h"
#endif
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

struct Geo {
  std::vector<int64_t> in;
  ConvGeometry g;
};

std::vector<Geo> geometries() {
  return {{{33}, conv_geometry({33}, {3}, {1}, {4}, ConvPadding::causal)},
          {{9, 7}, conv_geometry({9, 7}, {3, 3}, {2}, {1}, ConvPadding::same)},
          {{8, 6}, conv_geometry({8, 6}, {2, 3}, {1}, {2}, ConvPadding::valid)}};
}

Shape act(int64_t n, const std::vector<int64_t>& sp, int64_t ch) {
  std::vector<int64_t> s{n};
  s.insert(s.end(), sp.begin(), sp.end());
  s.push_back(ch);
  return Shape(s);
}

std::vector<Tensor> as_f64(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.dtype() == DType::i32 ? t : cast(t, DType::f64));
  return out;
}

// The scalar kernels (TESSERA_BSMM_PATH=simt) for one scope: the tensor-core ones take bf16/f16
// by default.
struct ScalarKernels {
  ScalarKernels() { setenv("TESSERA_BSMM_PATH", "simt", 1); }
  ~ScalarKernels() { unsetenv("TESSERA_BSMM_PATH"); }
};

TEST(CudaBsConv, EveryOpMatchesTheCpuForEveryDtypeAndBlockSize) {
  REQUIRE_GPU();
  const ScalarKernels scalar;
  uint64_t seed = 1;
  for (int64_t bs : {8, 16, 32, 64})
    for (const Geo& geo : geometries()) {
      const LayoutPtr l = random_layout(2 * bs, 3 * bs, bs, 0.5, static_cast<uint64_t>(bs));
      const ConvIndex ci = conv_index(geo.g, geo.in, "test");
      const std::vector<int64_t> out(ci.out, ci.out + geo.g.dims);
      const int64_t n = 3;
      for (DType dt : kFloatTypes) {
        const std::string what = l->str() + " " + geo.g.str() + " " + dtype_name(dt);
        const Tensor x = random(act(n, geo.in, l->in_features()), ++seed, dt);
        const Tensor w = random(detail::bsconv_weight_shape(*l, geo.g), ++seed, dt);
        const Tensor dy = random(act(n, out, l->out_features()), ++seed, dt);
        const op::BsConv::Attrs fa{l, geo.g, false};
        EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConv>(fa, {x, w})[0], call<op::BsConv>(fa, as_f64({x, w}))[0],
                             tol_of(dt)))
            << "bsconv " << what;
        const op::BsConvDx::Attrs da{l, geo.g, geo.in, false};
        EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConvDx>(da, {dy, w})[0],
                             call<op::BsConvDx>(da, as_f64({dy, w}))[0], tol_of(dt)))
            << "bsconv_dx " << what;
        const op::BsConvDw::Attrs wa{l, geo.g, false};
        EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConvDw>(wa, {x, dy})[0],
                             call<op::BsConvDw>(wa, as_f64({x, dy}))[0], tol_of(dt)))
            << "bsconv_dw " << what;
        if (is_half(dt)) {  // autocast's f32 outputs: the f32 sums of the same values
          const Tensor y32 = run_on_gpu_host<op::BsConv>({l, geo.g, true}, {x, w})[0];
          EXPECT_EQ(y32.dtype(), DType::f32);
          EXPECT_TRUE(close_to(y32, call<op::BsConv>(fa, as_f64({x, w}))[0], 1e-5)) << "bsconv f32 " << what;
          const Tensor dw32 = run_on_gpu_host<op::BsConvDw>({l, geo.g, true}, {x, dy})[0];
          EXPECT_TRUE(close_to(dw32, call<op::BsConvDw>(wa, as_f64({x, dy}))[0], 1e-5)) << "bsconv_dw f32 " << what;
        }
      }
    }
}

TEST(CudaBsConv, TwoRunsGiveTheSameBits) {
  REQUIRE_GPU();
  const ScalarKernels scalar;
  const LayoutPtr l = random_layout(64, 64, 32, 0.5, 3);
  const Geo geo = geometries()[0];
  const Tensor x = random(act(4, geo.in, 64), 1, DType::bf16).to(kGpu);
  const Tensor w = random(detail::bsconv_weight_shape(*l, geo.g), 2, DType::bf16).to(kGpu);
  const Tensor dy = random(act(4, geo.in, 64), 3, DType::bf16).to(kGpu);
  EXPECT_TRUE(same_bits(bsconv(x, w, l, geo.g), bsconv(x, w, l, geo.g)));
  EXPECT_TRUE(same_bits(bsconv_dx(dy, w, l, geo.g, geo.in), bsconv_dx(dy, w, l, geo.g, geo.in)));
  EXPECT_TRUE(same_bits(bsconv_dw(x, dy, l, geo.g), bsconv_dw(x, dy, l, geo.g)));
}

// One path of the tensor-core convolution kernels (bsmm_tc.h's run_conv) for one scope.
struct ConvPath {
  const char* name;
  const char* bsmm_path;  // TESSERA_BSMM_PATH (nullptr: unset)
  const char* halo;       // TESSERA_BSCONV_HALO
  const char* halo_rows;  // TESSERA_BSCONV_HALO_ROWS: its rows per tile at bs 16/32 (nullptr: its choice)
  const char* entry;      // TESSERA_BSCONV_HALO_ENTRY: a list entry's taps under one barrier (nullptr: its choice)
  const char* dw_wide = nullptr;  // TESSERA_BSCONV_DW_WIDE: the dW at bs 64 in halo mode (nullptr: the default, on)
  const char* strip = nullptr;     // TESSERA_BSCONV_HALO_STRIP: the strip form at bs 32 (nullptr: the default, on)
  const char* dw_strip = nullptr;  // TESSERA_BSCONV_DW_STRIP: the dW's strip form at bs 32 (nullptr: the default, on)
};
class ConvPathGuard {
 public:
  explicit ConvPathGuard(const ConvPath& p) {
    if (p.bsmm_path) setenv("TESSERA_BSMM_PATH", p.bsmm_path, 1);
    setenv("TESSERA_BSCONV_HALO", p.halo, 1);
    if (p.halo_rows) setenv("TESSERA_BSCONV_HALO_ROWS", p.halo_rows, 1);
    if (p.entry) setenv("TESSERA_BSCONV_HALO_ENTRY", p.entry, 1);
    if (p.dw_wide) setenv("TESSERA_BSCONV_DW_WIDE", p.dw_wide, 1);
    if (p.strip) setenv("TESSERA_BSCONV_HALO_STRIP", p.strip, 1);
    if (p.dw_strip) setenv("TESSERA_BSCONV_DW_STRIP", p.dw_strip, 1);
  }
  ~ConvPathGuard() {
    unsetenv("TESSERA_BSMM_PATH");
    unsetenv("TESSERA_BSCONV_HALO");
    unsetenv("TESSERA_BSCONV_HALO_ROWS");
    unsetenv("TESSERA_BSCONV_HALO_ENTRY");
    unsetenv("TESSERA_BSCONV_DW_WIDE");
    unsetenv("TESSERA_BSCONV_HALO_STRIP");
    unsetenv("TESSERA_BSCONV_DW_STRIP");
  }
};
// sm_90a in halo mode where it fits (tall 512-row tiles at bs 16/32 forced, since these small calls
// take 256; per-tap weight stages forced, or entry mode, the default where it fits; the dW at bs 64
// in halo mode, the default, or on the per-tap dW kernel; at bs 32 with 3x3 filters the strip form, the
// default with tall tiles in entry mode, off in "tall entry" so that the walk runs those too, and the halo
// dW's strip form, the default, off there too so that the halo dW kernel runs bs 32's 3x3 filters), sm_90a
// with per-tap copies, and sm_80 (the A100 path, forced).
const ConvPath kConvPaths[] = {{"sm90 halo", nullptr, "1", "256", "0"},
                               {"sm90 halo tall", nullptr, "1", "512", "0"},
                               {"sm90 halo entry", nullptr, "1", "256", "1"},
                               {"sm90 halo tall entry", nullptr, "1", "512", "1", "0", "0", "0"},
                               {"sm90 halo strip", nullptr, "1", "512", "1", nullptr, "1", "1"},
                               {"sm90 per-tap", nullptr, "0", nullptr, nullptr},
                               {"sm80", "sm80", "1", nullptr, nullptr}};

struct ConvLaunches {
  uint64_t sm90 = 0, halo = 0, sm80 = 0, tall = 0, entry = 0, strip = 0, dw_strip = 0;
};
ConvLaunches conv_launches() {
#ifdef TESSERA_WITH_CUDA
  return {cuda::bsmm_launches(cuda::BsmmKernel::sm90_conv), cuda::bsmm_launches(cuda::BsmmKernel::sm90_halo),
          cuda::bsmm_launches(cuda::BsmmKernel::sm80_conv), cuda::bsmm_launches(cuda::BsmmKernel::sm90_halo_tall),
          cuda::bsmm_launches(cuda::BsmmKernel::sm90_halo_entry),
          cuda::bsmm_launches(cuda::BsmmKernel::sm90_halo_strip),
          cuda::bsmm_launches(cuda::BsmmKernel::sm90_dw_strip)};
#else
  return {};
#endif
}

// Geometries of the tensor-core kernels: odd sizes, each padding mode, dilation, 1-3 dimensions
// (stride 1: sm_90a and sm_80), and strided ones (sm_80 only; the sm_90a paths hand them to it).
std::vector<Geo> tensor_core_geometries() {
  return {{{33}, conv_geometry({33}, {3}, {1}, {4}, ConvPadding::causal)},
          {{128}, conv_geometry({128}, {3}, {1}, {8}, ConvPadding::causal)},
          {{9, 7}, conv_geometry({9, 7}, {3, 3}, {1}, {1}, ConvPadding::same)},
          {{21, 19}, conv_geometry({21, 19}, {3, 3}, {1}, {2}, ConvPadding::same)},
          {{5, 70}, conv_geometry({5, 70}, {3, 3}, {1}, {1}, ConvPadding::same)},  // tile rows of 64+
          {{8, 6}, conv_geometry({8, 6}, {2, 3}, {1}, {2}, ConvPadding::valid)},
          {{7, 10}, conv_geometry({7, 10}, {3, 2}, {1}, {1}, ConvPadding::explicit_pads, {2, 0}, {0, 3})},
          {{5, 4, 6}, conv_geometry({5, 4, 6}, {3, 3, 3}, {1}, {1}, ConvPadding::same)},
          {{9, 7}, conv_geometry({9, 7}, {3, 3}, {2}, {1}, ConvPadding::same)},
          {{17}, conv_geometry({17}, {4}, {3}, {2}, ConvPadding::valid)}};
}

bool strided(const ConvGeometry& g) {
  for (int d = 0; d < g.dims; ++d)
    if (g.stride[d] != 1) return true;
  return false;
}

// Checks that the call between `before` and now launched one convolution kernel of the path's
// family: sm_90a for stride 1 (16-64 for bsconv / bsconv_dx: `sm90_bs`) unless the path forces
// sm_80; sm_80 otherwise.
::testing::AssertionResult took(const ConvLaunches& before, const ConvPath& path, bool sm90_case) {
  const ConvLaunches now = conv_launches();
  const bool want90 = sm90_case && path.bsmm_path == nullptr;
  const uint64_t d90 = now.sm90 - before.sm90, d80 = now.sm80 - before.sm80, dh = now.halo - before.halo;
  const bool no_tall = path.halo_rows == nullptr || std::string(path.halo_rows) != "512";
  const bool no_entry = path.entry != nullptr && std::string(path.entry) == "0";
  const bool ok = d90 == (want90 ? 1u : 0u) && d80 == (want90 ? 0u : 1u) &&
                  (std::string(path.halo) == "1" || dh == 0) && (!no_tall || now.tall == before.tall) &&
                  (!no_entry || now.entry == before.entry) && now.entry - before.entry <= dh;
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "launched sm90 " << d90 << " (halo " << dh << ", tall "
                                       << now.tall - before.tall << ", entry " << now.entry - before.entry
                                       << "), sm80 " << d80
                                       << "; want sm90 " << want90;
}

TEST(CudaBsConv, TensorCoreKernelsMatchTheCpu) {
  REQUIRE_GPU();
  if (!sm90_here()) GTEST_SKIP() << "the sm_90a convolution kernels need an sm_90a build on a GPU of compute 9.0";
  uint64_t seed = 100;
  const ConvLaunches start = conv_launches();
  for (const ConvPath& path : kConvPaths)
    for (int64_t bs : {8, 16, 32, 64})
      for (const Geo& geo : tensor_core_geometries())
        for (int64_t n : {1, 6}) {
          const LayoutPtr l = random_layout(3 * bs, 2 * bs, bs, 0.6, static_cast<uint64_t>(bs + n));
          const ConvIndex ci = conv_index(geo.g, geo.in, "test");
          const std::vector<int64_t> out(ci.out, ci.out + geo.g.dims);
          for (DType dt : {DType::bf16, DType::f16}) {
            const std::string what = std::string(path.name) + " " + l->str() + " " + geo.g.str() + " n " +
                                     std::to_string(n) + " " + dtype_name(dt);
            const Tensor x = random(act(n, geo.in, l->in_features()), ++seed, dt);
            const Tensor w = random(detail::bsconv_weight_shape(*l, geo.g), ++seed, dt);
            const Tensor dy = random(act(n, out, l->out_features()), ++seed, dt);
            const op::BsConv::Attrs fa{l, geo.g, false};
            const op::BsConvDx::Attrs da{l, geo.g, geo.in, false};
            const op::BsConvDw::Attrs wa{l, geo.g, false};
            const bool sm90_geometry = !strided(geo.g);
            for (bool f32_out : {false, true}) {
              ConvPathGuard guard(path);
              const std::string how = what + (f32_out ? " f32 output" : "");
              // f32 outputs: the tensor cores' f32 sums in their own order, over up to 27·192 products
              const double tol = f32_out ? 1e-4 : tol_of(dt);
              ConvLaunches before = conv_launches();
              EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConv>({l, geo.g, f32_out}, {x, w})[0],
                                   call<op::BsConv>(fa, as_f64({x, w}))[0], tol))
                  << "bsconv " << how;
              EXPECT_TRUE(took(before, path, sm90_geometry && bs >= 16)) << "bsconv " << how;
              before = conv_launches();
              EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConvDx>({l, geo.g, geo.in, f32_out}, {dy, w})[0],
                                   call<op::BsConvDx>(da, as_f64({dy, w}))[0], tol))
                  << "bsconv_dx " << how;
              EXPECT_TRUE(took(before, path, sm90_geometry && bs >= 16)) << "bsconv_dx " << how;
              before = conv_launches();
              EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConvDw>({l, geo.g, f32_out}, {x, dy})[0],
                                   call<op::BsConvDw>(wa, as_f64({x, dy}))[0], tol))
                  << "bsconv_dw " << how;
              EXPECT_TRUE(took(before, path, sm90_geometry)) << "bsconv_dw " << how;
            }
          }
        }
  EXPECT_GT(conv_launches().halo, start.halo) << "no call took the halo kernel";
  EXPECT_GT(conv_launches().tall, start.tall) << "no call took the halo kernel's tall tiles";
  EXPECT_GT(conv_launches().entry, start.entry) << "no call took the halo kernel's entry mode";
  EXPECT_GT(conv_launches().strip, start.strip) << "no call took the halo kernel's strip form";
  EXPECT_GT(conv_launches().dw_strip, start.dw_strip) << "no call took the halo dW kernel's strip form";
}

// The halo dW kernels (the strip form at bs 32, the halo dW kernel with the strip form off and at bs 64)
// with their tiles in any count of parts (TESSERA_BSCONV_DW_PARTS, the lab's: the bench's sweeps), one part
// writing dw directly, several summed in f32; a count past the tiles' (8 × 21 × 19 positions: 13 tiles of 256
// positions at the least) gives a part per tile. A count outside 1 .. 64 is an error.
TEST(CudaBsConv, TheDwKernelsMatchTheCpuForAnyCountOfParts) {
  REQUIRE_GPU();
  if (!sm90_here()) GTEST_SKIP() << "the halo dW kernels need an sm_90a build on a GPU of compute 9.0";
  const ConvGeometry g = conv_geometry({21, 19}, {3, 3}, {1}, {1}, ConvPadding::same);
  uint64_t seed = 500;
  for (int64_t bs : {32, 64})
    for (const char* dw_strip : {"1", "0"}) {
      if (bs == 64 && std::string(dw_strip) == "0") continue;  // the strip form is bs 32's only
      const LayoutPtr l = random_layout(6 * bs, 4 * bs, bs, 0.4, static_cast<uint64_t>(bs));
      const Tensor x = random(act(8, {21, 19}, l->in_features()), ++seed, DType::bf16);
      const Tensor dy = random(act(8, {21, 19}, l->out_features()), ++seed, DType::bf16);
      const op::BsConvDw::Attrs wa{l, g, false};
      const Tensor want = call<op::BsConvDw>(wa, as_f64({x, dy}))[0];
      setenv("TESSERA_BSCONV_DW_STRIP", dw_strip, 1);
      for (const char* parts : {"1", "2", "3", "5", "13", "64"}) {
        setenv("TESSERA_BSCONV_DW_PARTS", parts, 1);
        const std::string what = l->str() + " dw strip " + dw_strip + ", parts " + parts;
        const ConvLaunches before = conv_launches();
        EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConvDw>(wa, {x, dy})[0], want, tol_of(DType::bf16))) << what;
        EXPECT_EQ(conv_launches().halo - before.halo, 1u) << what;
        const bool strip = bs == 32 && std::string(dw_strip) == "1";
        EXPECT_EQ(conv_launches().dw_strip - before.dw_strip, strip ? 1u : 0u) << what;
      }
      for (const char* bad : {"0", "65", "x", "2x"}) {
        setenv("TESSERA_BSCONV_DW_PARTS", bad, 1);
        EXPECT_THROW(run_on_gpu_host<op::BsConvDw>(wa, {x, dy}), ValueError) << "TESSERA_BSCONV_DW_PARTS=" << bad;
      }
      unsetenv("TESSERA_BSCONV_DW_PARTS");
      unsetenv("TESSERA_BSCONV_DW_STRIP");
    }
}

// f32 operands on the sm_80 kernels with TF32 allowed (within 2e-3 of the CPU's f64 sums, relative
// to the largest), and on the scalar kernels without.
TEST(CudaBsConv, TensorCoreKernelsTakeF32AsTf32WhenAllowed) {
  REQUIRE_GPU();
#ifdef TESSERA_WITH_CUDA
  ConvPathGuard guard(kConvPaths[0]);
  const LayoutPtr l = random_layout(96, 64, 32, 0.5, 9);
  uint64_t seed = 400;
  for (const Geo& geo : {tensor_core_geometries()[3], tensor_core_geometries()[8]}) {
    const Tensor x = random(act(4, geo.in, 96), ++seed, DType::f32);
    const Tensor w = random(detail::bsconv_weight_shape(*l, geo.g), ++seed, DType::f32);
    const op::BsConv::Attrs fa{l, geo.g, false};
    for (bool tf32 : {true, false}) {
      cuda::set_allow_tf32(tf32);
      const ConvLaunches before = conv_launches();
      EXPECT_TRUE(close_to(run_on_gpu_host<op::BsConv>(fa, {x, w})[0], call<op::BsConv>(fa, as_f64({x, w}))[0],
                           tf32 ? 2e-3 : 1e-5))
          << geo.g.str() << (tf32 ? " tf32" : " exact");
      EXPECT_EQ(conv_launches().sm80 - before.sm80, tf32 ? 1u : 0u) << geo.g.str();
      cuda::set_allow_tf32(false);
    }
  }
#endif
}

TEST(CudaBsConv, TensorCoreKernelsGiveTheSameBitsTwice) {
  REQUIRE_GPU();
  const LayoutPtr l = random_layout(128, 128, 32, 0.5, 3);
  for (const ConvPath& path : kConvPaths)
    for (const ConvGeometry& g : {conv_geometry({21, 19}, {3, 3}, {1}, {1}, ConvPadding::same),
                                  conv_geometry({21, 19}, {3, 3}, {2}, {1}, ConvPadding::same)}) {
      ConvPathGuard guard(path);
      const ConvIndex ci = conv_index(g, {21, 19}, "test");
      const Tensor x = random(act(8, {21, 19}, 128), 1, DType::bf16).to(kGpu);
      const Tensor w = random(detail::bsconv_weight_shape(*l, g), 2, DType::bf16).to(kGpu);
      const Tensor dy = random(act(8, {ci.out[0], ci.out[1]}, 128), 3, DType::bf16).to(kGpu);
      const std::string what = std::string(path.name) + " " + g.str();
      EXPECT_TRUE(same_bits(bsconv(x, w, l, g), bsconv(x, w, l, g))) << what;
      EXPECT_TRUE(same_bits(bsconv_dx(dy, w, l, g, {21, 19}), bsconv_dx(dy, w, l, g, {21, 19}))) << what;
      EXPECT_TRUE(same_bits(bsconv_dw(x, dy, l, g), bsconv_dw(x, dy, l, g))) << what;
    }
}

#if defined(TESSERA_WITH_CUDA) && defined(TESSERA_HAVE_CUDNN)
// The filter blocks w [nnz, R, S, bs, bs] of a 2-D convolution as cuDNN's dense filter [K, R, S, C]
// (zeros where the layout has no block), and back (the stored blocks of a dense [K, R, S, C]).
Tensor dense_filter(const Tensor& w, const BlockLayout& l) {
  const int64_t bs = l.block_size(), C = l.in_features(), K = l.out_features(), R = w.size(1), S = w.size(2);
  const std::vector<float> wv = cast(w.to(Device::cpu()), DType::f32).to_vector<float>();
  std::vector<float> d(static_cast<size_t>(K * R * S * C), 0.f);
  for (int64_t k = 0; k < l.nnz(); ++k)
    for (int64_t t = 0; t < R * S; ++t)
      for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < bs; ++j) {
          const int64_t ci = l.block_row()[k] * bs + i, kc = l.block_col()[k] * bs + j;
          const size_t block_at = static_cast<size_t>(((k * R * S + t) * bs + i) * bs + j);
          d[static_cast<size_t>((kc * R * S + t) * C + ci)] = wv[block_at];
        }
  return cast(from_vector(d, {K, R, S, C}), w.dtype()).to(kGpu);
}
Tensor blocks_of(const Tensor& dense, const BlockLayout& l) {
  const int64_t bs = l.block_size(), C = l.in_features(), R = dense.size(1), S = dense.size(2);
  const std::vector<float> dv = cast(dense.to(Device::cpu()), DType::f32).to_vector<float>();
  std::vector<float> w(static_cast<size_t>(l.nnz() * R * S * bs * bs));
  for (int64_t k = 0; k < l.nnz(); ++k)
    for (int64_t t = 0; t < R * S; ++t)
      for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < bs; ++j) {
          const int64_t ci = l.block_row()[k] * bs + i, kc = l.block_col()[k] * bs + j;
          const size_t dense_at = static_cast<size_t>((kc * R * S + t) * C + ci);
          w[static_cast<size_t>(((k * R * S + t) * bs + i) * bs + j)] = dv[dense_at];
        }
  return from_vector(w, {l.nnz(), R, S, bs, bs});
}
#endif

// The all-blocks layout against cuDNN's dense convolution, forward and both gradients, on the
// scalar kernels and (sm_90a) the tensor-core ones; symmetric padding (cuDNN's), odd sizes,
// dilation.
TEST(CudaBsConv, AllBlocksLayoutEqualsCudnnConvolution) {
  REQUIRE_GPU();
#if !defined(TESSERA_WITH_CUDA) || !defined(TESSERA_HAVE_CUDNN)
  GTEST_SKIP() << "this build has no cuDNN";
#else
  const LayoutPtr l = dense_layout(64, 96, 32);
  struct Case {
    std::vector<int64_t> in;
    ConvGeometry g;
    int64_t pad_h, pad_w;
  };
  const std::vector<Case> cases = {{{9, 7}, conv_geometry({9, 7}, {3, 3}, {1}, {1}, ConvPadding::same), 1, 1},
                                   {{13, 11}, conv_geometry({13, 11}, {3, 3}, {1}, {2}, ConvPadding::same), 2, 2},
                                   {{8, 6}, conv_geometry({8, 6}, {2, 3}, {1}, {2}, ConvPadding::valid), 0, 0}};
  uint64_t seed = 300;
  for (const Case& c : cases)
    for (bool tc : {false, true}) {
      if (tc && !sm90_here()) continue;
      if (!tc) setenv("TESSERA_BSMM_PATH", "simt", 1);  // the scalar kernels
      const int64_t n = 5, R = c.g.kernel[0], S = c.g.kernel[1];
      const ConvIndex ci = conv_index(c.g, c.in, "test");
      const std::string what = c.g.str() + (tc ? " tensor cores" : " scalar");
      const Tensor x = random(act(n, c.in, 64), ++seed, DType::bf16).to(kGpu);
      const Tensor w = random(detail::bsconv_weight_shape(*l, c.g), ++seed, DType::bf16).to(kGpu);
      const Tensor dy = random(act(n, {ci.out[0], ci.out[1]}, 96), ++seed, DType::bf16).to(kGpu);
      cuda::DnnConv2d dnn({n, c.in[0], c.in[1], 64, 96, R, S, c.pad_h, c.pad_w, 1, 1, c.g.dilation[0], c.g.dilation[1]},
                          DType::bf16, 0);
      ASSERT_EQ(dnn.output_shape(), dy.shape()) << what;
      const Tensor wd = dense_filter(w, *l);
      const TensorOptions opts = TensorOptions(DType::bf16).device(kGpu);
      Tensor y = empty(dy.shape(), opts), dx = empty(x.shape(), opts), dwd = empty(wd.shape(), opts);
      dnn.forward(x, wd, y);
      dnn.data_gradient(wd, dy, dx);
      dnn.filter_gradient(x, dy, dwd);
      auto f64 = [](const Tensor& t) { return cast(t.to(Device::cpu()), DType::f64); };
      EXPECT_TRUE(close_to(f64(bsconv(x, w, l, c.g)), f64(y), 1e-2)) << "forward " << what;
      EXPECT_TRUE(close_to(f64(bsconv_dx(dy, w, l, c.g, c.in)), f64(dx), 1e-2)) << "data gradient " << what;
      EXPECT_TRUE(close_to(f64(bsconv_dw(x, dy, l, c.g)), f64(blocks_of(dwd, *l)), 1e-2)) << "filter gradient " << what;
      unsetenv("TESSERA_BSMM_PATH");
    }
#endif
}

TEST(CudaEdgeBias, MatchesTheCpuForEveryDtype) {
  REQUIRE_GPU();
  const ConvGeometry g = conv_geometry({9, 7}, {3, 3}, {1}, {1}, ConvPadding::same);
  const Tensor groups = edge_group_index(g, {9, 7});
  const int64_t E = edge_groups(g, {9, 7}).count, K = 40;
  uint64_t seed = 50;
  for (DType dt : kFloatTypes) {
    const Tensor x = random({5, 9, 7, K}, ++seed, dt), dy = random({5, 9, 7, K}, ++seed, dt);
    const Tensor gain = random({E, K}, ++seed, dt), bias = random({E, K}, ++seed, dt);
    for (bool with_bias : {true, false}) {
      std::vector<Tensor> in{x, groups, gain};
      if (with_bias) in.push_back(bias);
      EXPECT_TRUE(close_to(run_on_gpu_host<op::EdgeBias>({with_bias}, in)[0],
                           call<op::EdgeBias>({with_bias}, as_f64(in))[0], tol_of(dt)))
          << dtype_name(dt) << (with_bias ? " bias" : "");
    }
    const std::vector<Tensor> got = run_on_gpu_host<op::EdgeBiasGrad>({E}, {x, dy, groups});
    const std::vector<Tensor> want = call<op::EdgeBiasGrad>({E}, as_f64({x, dy, groups}));
    EXPECT_TRUE(close_to(got[0], want[0], tol_of(dt))) << "dgain " << dtype_name(dt);
    EXPECT_TRUE(close_to(got[1], want[1], tol_of(dt))) << "dbias " << dtype_name(dt);
  }
}

}  // namespace
}  // namespace tessera
