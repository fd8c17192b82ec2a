// Block-sparse convolution on the CPU against the dense GEMM that does the same job, same run.
//
//   bsconv_cpu [--repeats N] [--warmup N] [--quick] [--json FILE]
//
// Shapes: the causal 1-D convolutions of models::ConvLM (N 16 × T 128, kernel 3, dilation 4) at
// width 128 (dense) and 256 (density 0.25, the same filter parameters), and a 2-D same 3x3
// convolution (N 8 × 16 × 16, 128 → 128 channels, density 0.25). The baseline is the convolution
// as one Eigen GEMM on preallocated im2col rows (the taps' shifted inputs side by side, built
// outside the timing): [N·P, taps·C] · [taps·C, K], and its transposes for dx and dw, each timed
// alternately with the op (into existing outputs, as the graph executor runs it):
//   fwd  bsconv      vs  Y = A·W            dx  bsconv_dx  vs  dA = dY·Wᵀ     dw  bsconv_dw  vs  dW = Aᵀ·dY
// (the GEMM's dx stops at the im2col rows: it leaves out the scatter back to the input). Each
// row's value is the rate counting the stored blocks only (2·N·P·taps·nnz·bs² / time) and the
// baseline the dense GEMM's rate on all of its flops, so the ratio is the block-sparse kernel's
// rate per useful flop against the dense GEMM's.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cstdio>
#include <iostream>
#include <omp.h>
#include <thread>

#include "common/bench_report.h"
#include "core/random.h"
#include "core/sparse/generators.h"
#include "kernels/common/conv_index.h"
#include "kernels/ops.h"

using namespace tessera;
using bench::BenchReport;
using bench::time_pair_median_ms;

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

struct Shape_ {
  const char* name;
  int64_t n;
  std::vector<int64_t> in;
  int64_t channels, bs;
  double density;
  ConvGeometry g;
};

void bench_shape(BenchReport& report, const Shape_& s, int warmup, int repeats) {
  const int64_t C = s.channels, K = s.channels, bs = s.bs;
  LayoutPtr l = s.density < 1 ? random_layout(C, K, bs, s.density, 1234) : dense_layout(C, K, bs);
  const ConvIndex ci = conv_index(s.g, s.in, "bsconv_cpu");
  const std::vector<int64_t> out(ci.out, ci.out + s.g.dims);
  std::vector<int64_t> xs{s.n}, ys{s.n};
  xs.insert(xs.end(), s.in.begin(), s.in.end());
  ys.insert(ys.end(), out.begin(), out.end());
  xs.push_back(C);
  ys.push_back(K);
  Generator gen(7);
  Tensor x = normal(Shape(xs), 0, 1, gen), dy = normal(Shape(ys), 0, 1, gen);
  Tensor w = normal(detail::bsconv_weight_shape(*l, s.g), 0, 0.02, gen);
  Tensor y = empty(Shape(ys)), dx = empty(Shape(xs)), dw = empty(w.shape());
  // the baseline's operands: im2col rows A [N·P, taps·C] (zeros for padding) and a dense filter
  const int64_t rows = s.n * ci.out_positions, depth = ci.taps * C;
  RowMat A = RowMat::Zero(rows, depth), WD = RowMat::Random(depth, K), Y(rows, K), DA(rows, depth), DWD(depth, K);
  const float* xv = x.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < ci.taps; ++t) {
      const int64_t i = ci.input_of(r % ci.out_positions, t);
      if (i >= 0)
        for (int64_t c = 0; c < C; ++c) A(r, t * C + c) = xv[((r / ci.out_positions) * ci.in_positions + i) * C + c];
    }
  MapC DY(dy.data<float>(), rows, K);
  const ConvGeometry& g = s.g;
  const std::vector<int64_t> in = s.in;
  struct Case {
    const char* name;
    std::function<void()> sparse, dense;
  } cases[3] = {
      {"bsconv (fwd)", [&] { call_out<op::BsConv>({l, g, false}, {x, w}, {y}); }, [&] { Y.noalias() = A * WD; }},
      {"bsconv_dx (dx)", [&] { call_out<op::BsConvDx>({l, g, in, false}, {dy, w}, {dx}); },
       [&] { DA.noalias() = DY * WD.transpose(); }},
      {"bsconv_dw (dw)", [&] { call_out<op::BsConvDw>({l, g, false}, {x, dy}, {dw}); },
       [&] { DWD.noalias() = A.transpose() * DY; }},
  };
  const double useful = 2.0 * rows * ci.taps * l->nnz() * bs * bs, dense_flop = 2.0 * rows * depth * K;
  char shape[128], base[96];
  std::snprintf(shape, sizeof shape, "%s bs%lld d=%.2f", s.name, static_cast<long long>(bs), l->density());
  for (const Case& c : cases) {
    auto [t_sparse, t_dense] = time_pair_median_ms(c.sparse, c.dense, warmup, repeats);
    std::snprintf(base, sizeof base, "im2col GEMM %.2f ms", t_dense);
    report.add({c.name, shape, t_sparse, useful / t_sparse * 1e-6, "GFLOP/s", dense_flop / t_dense * 1e-6, base});
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera block-sparse convolution CPU benchmark"};
  int repeats = 10, warmup = 2;
  bool quick = false;
  std::string json;
  app.add_option("--repeats", repeats, "timed runs per figure (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_flag("--quick", quick, "small sizes (a smoke run)");
  app.add_option("--json", json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;

  try {
    BenchReport report("bsconv_cpu");
    report.note("hardware threads", std::to_string(std::thread::hardware_concurrency()));
    report.note("openmp threads", std::to_string(omp_get_max_threads()));
    report.note("dtype", "f32");
    const int64_t T = quick ? 32 : 128, n = quick ? 2 : 16;
    const ConvGeometry causal = conv_geometry({T}, {3}, {1}, {4}, ConvPadding::causal);
    const int64_t H = quick ? 8 : 16;
    const ConvGeometry same = conv_geometry({H, H}, {3, 3}, {1}, {1}, ConvPadding::same);
    const std::vector<Shape_> shapes = {{"1-D causal k3 d4", n, {T}, 128, 32, 1.0, causal},
                                        {"1-D causal k3 d4", n, {T}, 256, 32, 0.25, causal},
                                        {"2-D same 3x3", quick ? 2 : 8, {H, H}, 128, 32, 0.25, same}};
    for (const Shape_& s : shapes) bench_shape(report, s, warmup, repeats);
    report.print(std::cout);
    if (!json.empty()) report.write_json(json);
  } catch (const std::exception& e) {
    std::cerr << "bsconv_cpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
