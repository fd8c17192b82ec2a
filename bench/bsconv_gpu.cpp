// Block-sparse convolution on the GPU (CUDA builds with cuDNN only) against cuDNN's dense
// convolution of the same shape, measured in the same run.
//
//   bsconv_gpu [--shapes n64h56c256,n32h28c512] [--block-sizes 32,64] [--densities 0.1,0.25,0.5,1]
//              [--path tc|sm80|scalar] [--halo on|off] [--dw-wide on|off] [--halo-rows auto|256|512]
//              [--strip on|off] [--dw-strip on|off] [--dw-parts 0,1,2,...] [--repeats N]
//              [--quick] [--json FILE]
//
// Per shape (N × H × H × C → C channels, 3×3 filter, same padding, stride 1, bf16, channels
// last), cuDNN's forward, data gradient and filter gradient with the fastest algorithm that
// cudnnFind*AlgorithmEx reports (cuda::DnnConv2d: tensor-op math, f32 accumulation, workspaces
// from tessera's pool); then per block size and density a random layout (seed 1234) and tessera's bsconv,
// bsconv_dx and bsconv_dw. --path tc: the tensor-core kernels of bsmm_tc.h's run_conv (the
// default), sm80 sets TESSERA_BSMM_PATH=sm80 (the A100 kernels), scalar TESSERA_BSMM_PATH=simt
// (the scalar kernels); --halo-rows sets TESSERA_BSCONV_HALO_ROWS (the halo kernel's rows per tile
// at bs 16/32: tall_tiles); --halo off sets TESSERA_BSCONV_HALO=0 (the per-tap copies of the input
// instead of one halo box per block, in all three passes); --dw-wide off TESSERA_BSCONV_DW_WIDE=0
// (bsconv_dw at bs 64 on the per-tap dW kernel instead of the halo dW kernel); --strip off
// TESSERA_BSCONV_HALO_STRIP=0 (bsconv and bsconv_dx at bs 32 in the walk instead of the strip form);
// --dw-strip off TESSERA_BSCONV_DW_STRIP=0 (bsconv_dw at bs 32 in the halo dW kernel instead of its strip
// form); --dw-parts N,... times bsconv_dw once per count N of parts of the tiles (TESSERA_BSCONV_DW_PARTS,
// the halo dW kernels'; 0: their rule's choice, the default) in rows of their own.
// Figures: median ms over --repeats timings of 10 back-to-back calls each (then synchronized;
// divided by 10); useful TFLOP/s counting the stored blocks only (2·N·H·W·9·nnz·bs² flops); the
// ratio is useful-frac = cuDNN's time × density / tessera's time (1: the sparse convolution runs
// at cuDNN's dense speed per useful flop; the target is 0.5 at density ≥ 0.25).
// Exit codes: 0; 1 on an error; 2 on a bad flag or value. Without a CUDA device: one line, exit 1
// (exit 0 under --quick).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/bench_report.h"
#include "core/cuda/runtime.h"
#include "core/random.h"
#include "core/sparse/generators.h"
#include "kernels/common/cuda/dnn_conv.h"
#include "kernels/ops.h"

#if !defined(TESSERA_WITH_CUDA) || !defined(TESSERA_HAVE_CUDNN)
#error "bsconv_gpu needs tessera's CUDA backend with cuDNN (bench/CMakeLists.txt builds it only then)"
#endif

using namespace tessera;

namespace {

struct ConvShape {
  std::string name;
  int64_t n, h, c;
};

// "n64h56c256": N 64, 56 × 56, 256 channels.
ConvShape parse_shape(const std::string& s) {
  long long n = 0, h = 0, c = 0;
  char tail = 0;
  TS_CHECK(std::sscanf(s.c_str(), "n%lldh%lldc%lld%c", &n, &h, &c, &tail) == 3 && n > 0 && h > 0 && c > 0, ValueError,
           "bsconv_gpu: bad shape '" << s << "' (want e.g. n64h56c256)");
  return {s, n, h, c};
}

constexpr int kInner = 10;  // calls per timing

// Median ms of one call of fn over `repeats` timings of kInner back-to-back calls.
double time_ms(const std::function<void()>& fn, int repeats) {
  return bench::time_median_ms(
             [&] {
               for (int i = 0; i < kInner; ++i) fn();
               cuda::synchronize(0);
             },
             1, repeats) /
         kInner;
}

void bench_shape(bench::BenchReport& report, const ConvShape& s, const std::vector<int64_t>& block_sizes,
                 const std::vector<double>& densities, const std::vector<int>& dw_parts, int repeats) {
  const Device dev = Device::cuda(0);
  const ConvGeometry g = conv_geometry({s.h, s.h}, {3, 3}, {1}, {1}, ConvPadding::same);
  const std::vector<int64_t> spatial{s.h, s.h};
  Generator gen(7);
  auto on_gpu = [&](const Shape& shape, double stdev) {
    return cast(normal(shape, 0, stdev, gen), DType::bf16).to(dev);
  };
  const Tensor x = on_gpu({s.n, s.h, s.h, s.c}, 1), dy = on_gpu({s.n, s.h, s.h, s.c}, 1);
  // cuDNN: the dense convolution of the same shape
  const Tensor wd = on_gpu({s.c, 3, 3, s.c}, 0.02);
  const TensorOptions bf16 = TensorOptions(DType::bf16).device(dev);
  Tensor y = empty(x.shape(), bf16), dx = empty(x.shape(), bf16), dwd = empty(wd.shape(), bf16);
  cuda::DnnConv2d dnn({s.n, s.h, s.h, s.c, s.c, 3, 3, 1, 1}, DType::bf16, 0);
  const double dense_ms[3] = {time_ms([&] { dnn.forward(x, wd, y); }, repeats),
                              time_ms([&] { dnn.data_gradient(wd, dy, dx); }, repeats),
                              time_ms([&] { dnn.filter_gradient(x, dy, dwd); }, repeats)};
  const double positions = static_cast<double>(s.n * s.h * s.h);
  const char* passes[3] = {"fwd (bsconv)", "dgrad (bsconv_dx)", "wgrad (bsconv_dw)"};
  for (int p = 0; p < 3; ++p) {
    char base[64];
    std::snprintf(base, sizeof base, "cuDNN dense %.3f ms", dense_ms[p]);
    report.add({passes[p], s.name + " cuDNN dense", dense_ms[p], 2.0 * positions * 9 * s.c * s.c / dense_ms[p] * 1e-9,
                "TFLOP/s", 0, base});
  }
  for (int64_t bs : block_sizes)
    for (double d : densities) {
      const LayoutPtr l = d < 1 ? random_layout(s.c, s.c, bs, d, 1234) : dense_layout(s.c, s.c, bs);
      const Tensor w = on_gpu(detail::bsconv_weight_shape(*l, g), 0.02);
      Tensor dw = empty(w.shape(), bf16);
      const std::function<void()> calls[3] = {
          [&] { call_out<op::BsConv>({l, g, false}, {x, w}, {y}); },
          [&] { call_out<op::BsConvDx>({l, g, spatial, false}, {dy, w}, {dx}); },
          [&] { call_out<op::BsConvDw>({l, g, false}, {x, dy}, {dw}); }};
      const double useful = 2.0 * positions * 9 * static_cast<double>(l->nnz()) * bs * bs;
      char shape[96];
      std::snprintf(shape, sizeof shape, "%s bs%lld d=%.3f", s.name.c_str(), static_cast<long long>(bs), l->density());
      auto add = [&](int p, const std::string& what) {
        const double ms = time_ms(calls[p], repeats);
        char base[64];
        std::snprintf(base, sizeof base, "useful-frac vs cuDNN %.3f ms", dense_ms[p]);
        // value: useful TFLOP/s; baseline chosen so that value / baseline = useful-frac
        const double tflops = useful / ms * 1e-9, frac = dense_ms[p] * l->density() / ms;
        report.add({passes[p], what, ms, tflops, "TFLOP/s", tflops / frac, base});
      };
      add(0, shape);
      add(1, shape);
      for (int parts : dw_parts) {  // the dW once per count of parts (0: the rule's)
        if (parts > 0)
          setenv("TESSERA_BSCONV_DW_PARTS", std::to_string(parts).c_str(), 1);
        else
          unsetenv("TESSERA_BSCONV_DW_PARTS");
        add(2, parts > 0 ? std::string(shape) + " parts " + std::to_string(parts) : std::string(shape));
      }
      unsetenv("TESSERA_BSCONV_DW_PARTS");
    }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera block-sparse convolution GPU benchmark (against cuDNN)"};
  std::vector<std::string> shapes{"n64h56c256", "n32h28c512"};
  std::vector<int64_t> block_sizes{32, 64};
  std::vector<double> densities{0.1, 0.25, 0.5, 1.0};
  std::string path = "tc", halo = "on", dw_wide = "on", halo_rows = "auto", strip = "on", dw_strip = "on", json;
  std::vector<int> dw_parts{0};
  int repeats = 10;
  bool quick = false;
  app.add_option("--shapes", shapes, "nNhHcC: N × H × H × C → C")->delimiter(',');
  app.add_option("--block-sizes", block_sizes, "block sizes")->delimiter(',')->check(CLI::IsMember({8, 16, 32, 64}));
  app.add_option("--densities", densities, "layout densities")->delimiter(',')->check(CLI::Range(0.0, 1.0));
  app.add_option("--path", path,
                 "tc: the tensor-core kernels; sm80: their sm_80 form; scalar: the scalar ones")
      ->check(CLI::IsMember({"tc", "sm80", "scalar"}));
  app.add_option("--halo", halo, "on: the kernels copy one halo box per block where it fits; off: one box per tap")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--dw-wide", dw_wide, "on: bsconv_dw at bs 64 in halo mode; off: on the per-tap dW kernel")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--halo-rows", halo_rows,
                 "rows per tile of the halo kernel at bs 16/32: auto (its choice), 256, 512")
      ->check(CLI::IsMember({"auto", "256", "512"}));
  app.add_option("--strip", strip, "on: bsconv and bsconv_dx at bs 32 in the strip form where it fits; off: the walk")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--dw-strip", dw_strip,
                 "on: bsconv_dw at bs 32 in the strip form where it fits; off: on the halo dW kernel")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--dw-parts", dw_parts, "bsconv_dw's parts of the tiles, a row per count (0: the rule's choice)")
      ->delimiter(',')
      ->check(CLI::Range(0, 64));
  app.add_option("--repeats", repeats, "timings per figure (median reported)")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "one small shape (a smoke run)");
  app.add_option("--json", json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (!cuda_available()) {
    std::cerr << "bsconv_gpu: no CUDA device\n";
    return quick ? 0 : 1;
  }
  try {
    // Each flag's switch: set where the flag asks for other than the library's default, else unset.
    auto set_switch = [](const char* name, bool set, const char* value) {
      if (set)
        setenv(name, value, 1);
      else
        unsetenv(name);
    };
    set_switch("TESSERA_BSMM_PATH", path != "tc", path == "sm80" ? "sm80" : "simt");
    set_switch("TESSERA_BSCONV_HALO", halo == "off", "0");
    set_switch("TESSERA_BSCONV_DW_WIDE", dw_wide == "off", "0");
    set_switch("TESSERA_BSCONV_HALO_STRIP", strip == "off", "0");
    set_switch("TESSERA_BSCONV_DW_STRIP", dw_strip == "off", "0");
    set_switch("TESSERA_BSCONV_HALO_ROWS", halo_rows != "auto", halo_rows.c_str());
    if (quick) {
      shapes = {"n4h14c64"};
      block_sizes = {32};
      densities = {0.5};
      repeats = 2;
    }
    bench::BenchReport report("bsconv_gpu");
    report.note("dtype", "bf16, f32 accumulation");
    report.note("path", path);
    report.note("halo", halo);
    report.note("dW wide (bs 64 halo)", dw_wide);
    report.note("halo rows", halo_rows);
    report.note("strip (bs 32 fwd, dgrad)", strip);
    report.note("dW strip (bs 32)", dw_strip);
    report.note("filter", "3x3, same padding, stride 1");
    for (const std::string& s : shapes) bench_shape(report, parse_shape(s), block_sizes, densities, dw_parts, repeats);
    report.print(std::cout);
    if (!json.empty()) report.write_json(json);
  } catch (const std::exception& e) {
    std::cerr << "bsconv_gpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
