// The parts of bench/bsmm_gpu (see main.cpp for what it measures and how): the options, the
// timer, the inputs, the rows and their rooflines, the sweep and the targets. Internal to it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench_report.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/random.h"
#include "core/sparse/generators.h"
#include "kernels/common/cuda/blas.h"  // cuda::set_allow_tf32
#include "kernels/common/cuda/bsmm_dense.h"  // cuda::dense_route_calls
#include "kernels/ops.h"

#ifndef TESSERA_WITH_CUDA
#error "bsmm_gpu needs tessera's CUDA backend (bench/CMakeLists.txt builds it only when TESSERA_WITH_CUDA is on)"
#endif

namespace tessera {
namespace bench {

// stream.cu: the bandwidth probe's kernels and the busy-wait that hides host time
int stream_blocks_per_sm();
cudaError_t stream_fill(void* p, size_t bytes, uint32_t seed, cudaStream_t stream);
cudaError_t stream_read(const void* p, size_t bytes, int passes, uint32_t* out, int blocks, cudaStream_t stream);
cudaError_t stream_spin(double microseconds, cudaStream_t stream);

using json = nlohmann::json;

constexpr int kDevice = 0;
constexpr double kTileRows = 128;                     // M of the fwd/dx/dw arithmetic intensity
constexpr double kL2ResidentFraction = 0.8;           // lstm: bytes above this part of L2 come from HBM
constexpr size_t kRotateBudget = size_t{3} << 30;     // rotated input sets, all of them
constexpr size_t kL2ProbeBytes = size_t{24} << 20;    // the L2 probe's buffer
constexpr int kL2ProbePasses = 50;                    // ... read this often per launch
constexpr double kMinDensityForTargets = 0.1 - 1e-9;  // the useful-frac targets' densities

struct ShapeSpec {
  std::string name, tag;  // flag name, short tag for the table
  int64_t n, c, k;
  bool step;  // the lstm-step mode: no rotation, CUDA-graph forward, memory roofline
  std::string dims() const { return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(k); }
};

inline const std::vector<ShapeSpec>& all_shapes() {
  static const std::vector<ShapeSpec> s{{"transformer", "tfm", 8192, 4096, 4096, false},
                                        {"mlp", "mlp", 8192, 1024, 4096, false},
                                        {"lstm", "lstm", 64, 4096, 16384, true}};
  return s;
}

inline const std::vector<std::string>& all_ops() {
  static const std::vector<std::string> ops{"fwd", "dx", "dw", "dwg", "dwg-ops"};
  return ops;
}

struct Options {
  std::vector<std::string> shapes{"transformer", "mlp", "lstm"};
  std::vector<int64_t> bs{8, 16, 32, 64};
  std::vector<double> density{0.05, 0.1, 0.25, 0.5, 1.0};
  std::vector<std::string> dtypes{"bf16", "f32"};
  std::vector<std::string> ops{"fwd", "dx", "dw"};
  /// auto: the library's rule (TESSERA_BSMM_DENSE unset); sparse: the block-sparse kernels
  /// (TESSERA_BSMM_DENSE=0); dense: the dense route (TESSERA_BSMM_DENSE=1)
  std::vector<std::string> routes{"auto", "sparse"};
  int repeats = 20, warmup = 3, rotate = 0, graph_calls = 20;
  bool quick = false;
  std::string json;
  size_t hbm_probe_bytes = size_t{4} << 30;
};

template <class T>
bool has(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

inline std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

inline void check_cuda(cudaError_t e, const char* what) {
  TS_CHECK(e == cudaSuccess, DeviceError, what << ": " << cudaGetErrorString(e));
}

inline std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1e", v);
  return b;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Per-call device times: events on tessera's stream between calls queued back to back.
class EventTimer {
 public:
  EventTimer() : stream_(static_cast<cudaStream_t>(cuda::stream(kDevice))) {}
  ~EventTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  /// Median ms per call of fn(warmup), ..., fn(warmup + repeats - 1), after fn(0 .. warmup - 1)
  /// untimed; the argument picks the input set. Each interval is divided by `per` (calls
  /// inside one fn, e.g. a graph's). hide_host: a busy-wait kernel holds the stream while the
  /// timed calls are queued (about twice the host time the warm-up calls took), so the figures
  /// are device time even for calls shorter than their host overhead; without it, back-to-back
  /// calls run as an eager loop does (host overhead shows when it is the longer).
  double median_ms(const std::function<void(int)>& fn, int warmup, int repeats, double per = 1, bool hide_host = true) {
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < warmup; ++i) fn(i);
    const double host_us =
        warmup > 0 ? std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / warmup
                   : 100.0;
    while (static_cast<int>(events_.size()) < repeats + 1) {
      cudaEvent_t e = nullptr;
      check_cuda(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    if (hide_host)
      check_cuda(bench::stream_spin(std::clamp(2.0 * host_us * repeats + 50.0, 100.0, 20000.0), stream_),
                 "stream_spin");
    check_cuda(cudaEventRecord(events_[0], stream_), "cudaEventRecord");
    for (int i = 0; i < repeats; ++i) {
      fn(warmup + i);
      check_cuda(cudaEventRecord(events_[i + 1], stream_), "cudaEventRecord");
    }
    check_cuda(cudaEventSynchronize(events_[repeats]), "cudaEventSynchronize");
    cuda::synchronize(kDevice);  // reports errors the kernels recorded
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      float t = 0;
      check_cuda(cudaEventElapsedTime(&t, events_[i], events_[i + 1]), "cudaEventElapsedTime");
      ms.push_back(t / per);
    }
    return median(std::move(ms));
  }

  cudaStream_t stream() const { return stream_; }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

// TESSERA_BSMM_DENSE for one route (Options::routes) while it lives; unset afterwards.
class RouteScope {
 public:
  explicit RouteScope(const std::string& route) {
    if (route == "sparse") setenv("TESSERA_BSMM_DENSE", "0", 1);
    if (route == "dense") setenv("TESSERA_BSMM_DENSE", "1", 1);
  }
  ~RouteScope() { unsetenv("TESSERA_BSMM_DENSE"); }
  RouteScope(const RouteScope&) = delete;
  RouteScope& operator=(const RouteScope&) = delete;
};

// TF32 on (or as it was) while it lives; the previous setting afterwards.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow) : prev_(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Scope() { cuda::set_allow_tf32(prev_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool prev_;
};

// ---- bandwidth probe ----

struct Bandwidth {
  double hbm_tbs = 0, l2_tbs = 0, copy_tbs = 0;  // TB/s (copy: bytes read + written)
  double hbm_ms = 0, l2_ms = 0, copy_ms = 0;
  size_t hbm_bytes = 0, l2_bytes = 0;
};

struct Bases {
  Tensor x, dy, wd;  // [N, C], [N, K], [C, K]
};

// The rotated input sets of one (shape, dtype): set i is set 0 scaled by 1 + i/8.
struct Sets {
  std::vector<Tensor> x, dy, wd;
  int count() const { return static_cast<int>(x.size()); }
};

struct Result {
  const ShapeSpec* shape = nullptr;
  std::string op, dtype, mode;  // mode: eager | graph
  std::string route = "auto";   // asked for: auto | sparse | dense (Options::routes)
  bool dense_route = false;     // what ran: the dense route (cuda::dense_route_calls moved)
  int64_t bs = 0, nnz = 0;
  double density_req = 0, density = 0;
  double ms = 0, tflops = 0, dense_ms = 0, dense_tflops = 0, useful = 0;
  double bound_tflops = 0, bound_frac = 0, reached = 0;
  std::string bound_kind;
  int sets = 1;
  double check_err = std::numeric_limits<double>::quiet_NaN();
};

struct Bound {
  double tflops = 0;
  std::string kind;
};

// The state of the sweep.
struct Run {
  Run(const Options& opts, BenchReport& rep, EventTimer& t) : o(opts), report(rep), timer(t) {}
  const Options& o;
  BenchReport& report;
  EventTimer& timer;
  Bandwidth bw;
  size_t l2 = 0;
  std::vector<Result> results;
  std::vector<std::string> failures, mismatches;
  int done = 0, total = 0;
};

struct Dense {
  double ms = 0, tflops = 0, graph_ms = 0, graph_tflops = 0;
};

// ---- inputs.cpp: the bandwidth probe and the inputs ----

Bandwidth probe_bandwidth(EventTimer& timer, const Options& o, int sms);
Bases make_bases(const ShapeSpec& s);
Sets make_sets(const Bases& b, DType dt, int count);
// How many input sets to rotate over (see main.cpp); `why` says how it was chosen.
int rotation_sets(const Options& o, const ShapeSpec& s, DType dt, size_t l2, std::string& why);
// w [nnz, bs, bs] of `layout`: the first nnz·bs² values of the dense W (a view).
Tensor sparse_weight(const Tensor& wd, const BlockLayout& l);
// The blocks [R·Q, bs, bs] of an all-blocks layout (row-major block order) as the dense [C, K].
Tensor blocks_as_dense(const Tensor& w, const BlockLayout& l);
// ||a - ref|| / ||ref|| (Frobenius, in f32 on the GPU).
double relative_error(const Tensor& a, const Tensor& ref);
Tensor dense_op(const std::string& op, const Tensor& x, const Tensor& dy, const Tensor& wd);
/// gate: [nnz], for dwg (the gated weight gradient, dW and dgate from bsmm_dw_gated) and dwg-ops
/// (the same from bsmm_dw and elementwise ops, the unfused baseline); both return dW.
Tensor sparse_op(const std::string& op, const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& gate,
                 const LayoutPtr& l);
/// dw, dwg, dwg-ops: the weight gradient's shape, baseline and roofline.
bool is_dw(const std::string& op);

// ---- sweep.cpp: rows, rooflines, the sweep ----

Bound roofline(const ShapeSpec& s, const std::string& op, int64_t bs, int64_t nnz, size_t e, double dense_tflops,
               const Bandwidth& bw, size_t l2);
std::string row_name(const Result& r);
std::string shape_label(const ShapeSpec& s);
void add_row(BenchReport& report, const Result& r);
json result_json(const Result& r);
// Per-call ms of `calls` copies of queue_one() captured into one CUDA graph (one eager call
// first: layout tables, cuBLAS handle); 0 and `failure` set when capture failed.
double graph_ms(Run& run, const std::function<void()>& queue_one, std::string& failure);
void bench_shape_dtype(Run& run, const ShapeSpec& s, const Bases& bases, const std::string& dtype_name_);

// ---- targets.cpp: PyTorch's reference rows, the targets, the JSON ----

void add_reference_rows(BenchReport& report, const std::vector<Result>& rs);
json print_targets(const std::vector<Result>& rs, std::ostream& os);
// The structured figures that --json adds to the table's rows: every configuration, the
// bandwidths, the targets.
json figures_json(const std::vector<Result>& rs, const Bandwidth& bw, const json& targets);

}  // namespace bench
}  // namespace tessera
