// CPU op throughput: tessera against the same work done directly in the same run.
//
//   ops_cpu [--repeats N] [--warmup N] [--quick] [--json FILE]
//
// - matmul f32 (M x N x K = 2048x1024x1024 and 4096x4096x4096) in GFLOP/s; baseline: the same
//   Eigen product called directly on preallocated buffers, timed alternately with tessera's.
//   Two tessera figures: eager (a new output tensor per call: includes the allocation and its
//   first-touch page faults) and planned (the kernel into an existing buffer, as the graph
//   executor runs it).
// - softmax and layer_norm over rows of 1024 f32, and an elementwise chain relu(x*1.5 + bias),
//   in GB/s of compulsory traffic (read x once, write y once); baseline: a copy of the same bytes
//   split over all threads (the machine's copy bandwidth).
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cstring>
#include <iostream>
#include <omp.h>
#include <thread>

#include "common/bench_report.h"
#include "core/random.h"
#include "kernels/ops.h"

using namespace tessera;
using bench::BenchReport;
using bench::Row;
using bench::time_median_ms;
using bench::time_pair_median_ms;

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void bench_matmul(BenchReport& report, int64_t m, int64_t n, int64_t k, int warmup, int repeats) {
  Generator gen(1);
  Tensor a = normal({m, k}, 0, 1, gen), b = normal({k, n}, 0, 1, gen);
  const double flop = 2.0 * m * n * k;
  Tensor c = empty({m, n});
  Eigen::Map<const RowMat> A(a.data<float>(), m, k), B(b.data<float>(), k, n);
  Eigen::Map<RowMat> C(c.data<float>(), m, n);
  std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  // Eager: matmul(a, b) allocates its output each call, as eager code does.
  auto [t_eager, t_eigen] = time_pair_median_ms([&] { matmul(a, b); }, [&] { C.noalias() = A * B; }, warmup, repeats);
  report.add({"matmul f32 eager", shape, t_eager, flop / t_eager * 1e-6, "GFLOP/s", flop / t_eigen * 1e-6, "Eigen direct"});
  // Planned: the op's kernel into an existing output, as the graph executor runs it.
  Tensor out = empty({m, n});
  auto [t_planned, t_eigen2] = time_pair_median_ms([&] { call_out<op::Matmul>({false, false}, {a, b}, {out}); },
                                                   [&] { C.noalias() = A * B; }, warmup, repeats);
  report.add({"matmul f32 planned", shape, t_planned, flop / t_planned * 1e-6, "GFLOP/s", flop / t_eigen2 * 1e-6, "Eigen direct"});
}

// GB/s of reading `in_bytes` and writing `out_bytes` in `ms`, against memcpy of the same bytes.
void add_bandwidth_row(BenchReport& report, const std::string& name, const std::string& shape, double ms,
                       double bytes, double memcpy_ms) {
  report.add({name, shape, ms, bytes / ms * 1e-6, "GB/s", bytes / memcpy_ms * 1e-6, "parallel copy"});
}

// dst = src, split in equal parts over the OpenMP threads (the copy-bandwidth baseline).
void parallel_copy(void* dst, const void* src, size_t bytes) {
#pragma omp parallel
  {
    const size_t parts = static_cast<size_t>(omp_get_num_threads()), i = static_cast<size_t>(omp_get_thread_num());
    const size_t begin = bytes * i / parts, end = bytes * (i + 1) / parts;
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera CPU op benchmark"};
  int repeats = 10, warmup = 2;
  bool quick = false;
  std::string json;
  app.add_option("--repeats", repeats, "timed runs per figure (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_flag("--quick", quick, "small sizes (a smoke run)");
  app.add_option("--json", json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;

  try {
    BenchReport report("ops_cpu");
    report.note("hardware threads", std::to_string(std::thread::hardware_concurrency()));
    report.note("eigen threads", std::to_string(Eigen::nbThreads()));
    if (quick) {
      bench_matmul(report, 128, 64, 64, 1, 3);
    } else {
      bench_matmul(report, 2048, 1024, 1024, warmup, repeats);
      bench_matmul(report, 4096, 4096, 4096, 1, std::min(repeats, 5));
    }

    const int64_t rows = quick ? 64 : 8192, cols = 1024;
    const double bytes = 2.0 * rows * cols * sizeof(float);  // read x, write y
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    Generator gen(2);
    Tensor x = normal({rows, cols}, 0, 1, gen);
    Tensor gamma = normal({cols}, 1, 0.1, gen), beta = normal({cols}, 0, 0.1, gen), bias = normal({cols}, 0, 1, gen);
    Tensor y = empty({rows, cols});
    double t_copy = time_median_ms([&] { parallel_copy(y.data_ptr(), x.data_ptr(), x.nbytes()); }, warmup, repeats);
    add_bandwidth_row(report, "softmax f32", shape, time_median_ms([&] { softmax(x); }, warmup, repeats), bytes, t_copy);
    add_bandwidth_row(report, "layer_norm f32", shape,
                      time_median_ms([&] { layer_norm(x, gamma, beta, 1e-5); }, warmup, repeats), bytes, t_copy);
    add_bandwidth_row(report, "relu(x*1.5+bias) f32", shape,
                      time_median_ms([&] { relu(add(mul(x, 1.5), bias)); }, warmup, repeats), bytes, t_copy);

    report.print(std::cout);
    if (!json.empty()) report.write_json(json);
  } catch (const std::exception& e) {
    std::cerr << "ops_cpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
