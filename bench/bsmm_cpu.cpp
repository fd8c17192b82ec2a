// Block-sparse matmul on the CPU against a dense Eigen GEMM of the same shape, same run.
//
//   bsmm_cpu [--repeats N] [--warmup N] [--quick] [--json FILE]
//
// For N x C x K = 1024 x 2048 x 2048 (f32), block sizes 32 and 64, and random layouts of density
// 5, 10, 25, 50 and 100%, times the three kernels as the graph executor runs them (into existing
// outputs) and, alternately with each, the dense product doing the same job on preallocated
// buffers:
//   fwd  Y = X·W       (bsmm)     vs  Y = X·W        [N, C]·[C, K]
//   dx   dX = dY·Wᵀ    (bsmm_dx)  vs  dX = dY·Wᵀ     [N, K]·[K, C]
//   dw   dW = Xᵀ·dY    (bsmm_dw)  vs  dW = Xᵀ·dY     [C, N]·[N, K]
// Each row's value is the dense-equivalent rate (2·N·C·K / sparse time), so its ratio column is
// the speedup dense time / sparse time; the effective rate, counting only the stored blocks
// (2·N·nnz·bs² / sparse time), is in the last column and in the summary table below it.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cstdio>
#include <iostream>
#include <omp.h>
#include <thread>

#include "common/bench_report.h"
#include "core/random.h"
#include "core/sparse/generators.h"
#include "kernels/ops.h"

using namespace tessera;
using bench::BenchReport;
using bench::Row;
using bench::time_pair_median_ms;

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

struct Summary {
  int64_t bs = 0, nnz = 0;
  double density = 0;
  double ms[3] = {0, 0, 0}, speedup[3] = {0, 0, 0}, eff[3] = {0, 0, 0};
};

Summary bench_layout(BenchReport& report, int64_t n, int64_t c, int64_t k, int64_t bs, double density, int warmup,
                     int repeats) {
  LayoutPtr l = random_layout(c, k, bs, density, /*seed=*/1234);
  Generator gen(7);
  Tensor x = normal({n, c}, 0, 1, gen), dy = normal({n, k}, 0, 1, gen);
  Tensor w = normal({l->nnz(), bs, bs}, 0, 0.02, gen), wd = normal({c, k}, 0, 0.02, gen);
  Tensor y = empty({n, k}), dx = empty({n, c}), dw = empty({l->nnz(), bs, bs}), dwd = empty({c, k});
  MapC X(x.data<float>(), n, c), DY(dy.data<float>(), n, k), WD(wd.data<float>(), c, k);
  Map Y(y.data<float>(), n, k), DX(dx.data<float>(), n, c), DWD(dwd.data<float>(), c, k);

  struct Case {
    const char* name;
    std::function<void()> sparse, dense;
  } cases[3] = {
      {"fwd", [&] { call_out<op::Bsmm>({l, false}, {x, w}, {y}); }, [&] { Y.noalias() = X * WD; }},
      {"dx", [&] { call_out<op::BsmmDx>({l, false}, {dy, w}, {dx}); }, [&] { DX.noalias() = DY * WD.transpose(); }},
      {"dw", [&] { call_out<op::BsmmDw>({l}, {x, dy}, {dw}); }, [&] { DWD.noalias() = X.transpose() * DY; }},
  };
  const double dense_flop = 2.0 * n * c * k, sparse_flop = 2.0 * n * l->nnz() * bs * bs;
  Summary s{bs, l->nnz(), l->density()};
  char shape[64], label[64], base[96];
  std::snprintf(shape, sizeof shape, "bs%lld d=%.3f", static_cast<long long>(bs), l->density());
  for (int i = 0; i < 3; ++i) {
    auto [t_sparse, t_dense] = time_pair_median_ms(cases[i].sparse, cases[i].dense, warmup, repeats);
    s.ms[i] = t_sparse;
    s.speedup[i] = t_dense / t_sparse;
    s.eff[i] = sparse_flop / t_sparse * 1e-6;
    std::snprintf(label, sizeof label, "%s (%s)", i == 0 ? "bsmm" : i == 1 ? "bsmm_dx" : "bsmm_dw", cases[i].name);
    std::snprintf(base, sizeof base, "Eigen dense %.1f ms; effective %.1f GFLOP/s", t_dense, s.eff[i]);
    report.add({label, shape, t_sparse, dense_flop / t_sparse * 1e-6, "GFLOP/s", dense_flop / t_dense * 1e-6, base});
  }
  return s;
}

void print_summary(const std::vector<Summary>& rows, std::ostream& os) {
  char line[256];
  std::snprintf(line, sizeof line, "%4s %8s %6s | %9s %9s %9s | %21s | %23s\n", "bs", "density", "nnz", "fwd ms",
                "dx ms", "dw ms", "speedup fwd/dx/dw", "effective GFLOP/s");
  os << "\nsummary (speedup = dense Eigen time / block-sparse time)\n" << line;
  for (const Summary& s : rows) {
    std::snprintf(line, sizeof line, "%4lld %8.3f %6lld | %9.3f %9.3f %9.3f | %6.2f %6.2f %6.2f | %7.1f %7.1f %7.1f\n",
                  static_cast<long long>(s.bs), s.density, static_cast<long long>(s.nnz), s.ms[0], s.ms[1], s.ms[2],
                  s.speedup[0], s.speedup[1], s.speedup[2], s.eff[0], s.eff[1], s.eff[2]);
    os << line;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera block-sparse matmul CPU benchmark"};
  int repeats = 10, warmup = 2;
  bool quick = false;
  std::string json;
  app.add_option("--repeats", repeats, "timed runs per figure (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_flag("--quick", quick, "small sizes (a smoke run)");
  app.add_option("--json", json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;

  try {
    BenchReport report("bsmm_cpu");
    report.note("hardware threads", std::to_string(std::thread::hardware_concurrency()));
    report.note("openmp threads", std::to_string(omp_get_max_threads()));
    report.note("eigen threads", std::to_string(Eigen::nbThreads()));
    report.note("dtype", "f32");
    const int64_t n = quick ? 64 : 1024, c = quick ? 256 : 2048, k = quick ? 256 : 2048;
    report.note("N x C x K", std::to_string(n) + " x " + std::to_string(c) + " x " + std::to_string(k));
    std::vector<Summary> rows;
    for (int64_t bs : quick ? std::vector<int64_t>{32} : std::vector<int64_t>{32, 64})
      for (double d : quick ? std::vector<double>{0.1, 1.0} : std::vector<double>{0.05, 0.1, 0.25, 0.5, 1.0})
        rows.push_back(bench_layout(report, n, c, k, bs, d, warmup, repeats));
    report.print(std::cout);
    print_summary(rows, std::cout);
    if (!json.empty()) report.write_json(json);
  } catch (const std::exception& e) {
    std::cerr << "bsmm_cpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
