// Block-sparse matmul on the GPU (CUDA builds only) against tessera's dense matmul (cuBLAS) of
// the same shape and dtype, measured in the same run, with a roofline bound for every row.
//
//   bsmm_gpu [--shapes transformer,mlp,lstm] [--bs 8,16,32,64] [--density 0.05,0.1,0.25,0.5,1]
//            [--dtype bf16,f32] [--ops fwd,dx,dw] [--repeats N] [--warmup N] [--rotate N]
//            [--graph-calls N] [--quick] [--json FILE]
//
// Shapes (N x C -> K): transformer 8192 x 4096 -> 4096, mlp 8192 x 1024 -> 4096, lstm (one step
// of a 4096-wide LSTM's four gates) 64 x 4096 -> 16384. For every shape, dtype, block size bs and
// density, a layout random_layout(C, K, bs, density) (density 1: dense_layout, every block) and
// the three ops through the public API (kernels/ops.h):
//   fwd  Y = X·W      bsmm(x, w, layout)       vs  matmul(x [N, C], W [C, K])
//   dx   dX = dY·Wᵀ   bsmm_dx(dy, w, layout)   vs  matmul(dy [N, K], W [C, K], false, true)
//   dw   dW = Xᵀ·dY   bsmm_dw(x, dy, layout)   vs  matmul(x, dy, true, false)      (on the layout's blocks)
// dtypes: bf16, and f32 with TF32 tensor-core math (cuda::set_allow_tf32(true) around those rows,
// for tessera's bsmm kernels and cuBLAS alike; the previous setting is restored afterwards).
// Data: random normal (x, dy ~ N(0, 1), W ~ N(0, 0.02²)), drawn once per shape on the host; the
// sparse w [nnz, bs, bs] is the first nnz·bs² values of the dense W's buffer (a view).
//
// Timing: CUDA events on tessera's stream. --warmup untimed calls, then --repeats calls queued
// back to back with an event between consecutive calls (the host never waits in between) behind a
// short busy-wait kernel that holds the stream until they are all queued, so each interval is one
// call's device time even where a call is shorter than its host overhead; the figure is the
// median interval.
// Inputs are rotated between calls over --rotate sets (0, the default: enough sets that the
// inputs of the sets sum to over 3x the L2 cache, at least 2, at most 3 GB in all; sets are scaled
// copies of the first), so the L2 cache does not flatter the figures. The dense baseline of a
// (shape, dtype, op) is timed once, before its sparse rows, with 2x --repeats.
//
// The lstm shape is timed differently, as a recurrent step runs: its inputs fit in L2 on purpose
// (no rotation), and besides the eager calls (back to back without the busy-wait, as an eager loop
// runs: host overhead shows where it is longer than the kernel) its forward is captured
// --graph-calls times (20) into one CUDA graph (run_op_into preallocated outputs, after one eager
// call that uploads the layout's tables and creates the cuBLAS handle); the graph row is the
// graph's replay time / --graph-calls, and its baseline the dense forward captured the same way.
//
// Figures per row: median ms; achieved TFLOP/s counting useful flops only (2·N·nnz·bs² for every
// op); useful-frac = achieved / dense TFLOP/s = dense_ms · density / sparse_ms (density = the
// layout's actual density()); the roofline bound; reached = achieved / bound. The bound:
//   transformer, mlp: the lower of the tensor-core peak (the dense matmul's TFLOP/s in this run,
//     same shape, op and dtype) and L2 bandwidth (measured) x arithmetic intensity, where a tile
//     of M = 128 rows and one bs x bs block does 2·M·bs² flops on e·(M·bs + bs²) bytes of L2
//     traffic for fwd/dx (e = bytes per element: 2·M·bs / (e·(M + bs)) flops per byte, about bs
//     for bf16) and on e·2·M·bs bytes for dw (two strips per block: bs/e flops per byte, bs/2 for
//     bf16; a dW kernel that shares one X strip among several blocks of a block row can pass it);
//   lstm: memory: bytes through L2 per call = W (nnz·bs²·e) + the strips each block reads
//     (nnz·N·bs·e; dw two of them) + the output, over the measured L2 bandwidth; when the call's
//     distinct bytes exceed 80% of the L2 cache, also at least those bytes over the HBM bandwidth.
// The bound is printed in TFLOP/s and as a useful-frac (bound / dense TFLOP/s). The bandwidths
// come from bench/bsmm_gpu_stream.cu, run first: all SMs reading 16 bytes per load with
// ld.global.cg, a 4 GB buffer once (HBM) and its first 24 MB 50 times in one launch (L2), with a
// device-to-device copy of 2 GB as the HBM row's baseline.
//
// Reference rows (not measured here): PyTorch 2.11 on the same H200, bf16, N 8192 x 4096 x 4096:
// bsr_dense_mm (Triton BSR) at 10% blocks, bs 32 0.969 ms and bs 64 0.597 ms; dense cuBLAS 0.390 ms.
// Their ratio column is PyTorch's time / tessera's (the speedup). After the table, the issue's
// targets with the measured values, met or not.
//
// Correctness (cheap, once per shape, dtype, bs and op at density 1): the sparse result against
// the dense matmul of the same blocks laid out as W; relative Frobenius error over 2e-2 (bf16) or
// 1e-2 (TF32) is a mismatch: the program still times everything, then exits 1.
//
// Defaults: 20 timed calls after 3 warm-up ones (the full sweep, 360 configurations, takes about
// half a minute on an H200, data and checks included: 14 s with --repeats 10).
//
// Exit codes: 0; 1 on an error, a failed configuration or a mismatch; 2 on a bad flag (one line
// on stderr). Without a CUDA device: "bsmm_gpu: no CUDA device" on stderr, exit 0 under --quick,
// else 1. --quick: bs 32 and 64, densities 0.1 and 1, 3 repeats after 1 warm-up, a 1 GB HBM
// probe (the flags given explicitly still apply). Progress goes to stderr.
#include <CLI/CLI.hpp>
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
#include "kernels/ops.h"

#ifndef TESSERA_WITH_CUDA
#error "bsmm_gpu needs tessera's CUDA backend (bench/CMakeLists.txt builds it only when TESSERA_WITH_CUDA is on)"
#endif

namespace tessera {
namespace bench {
// bench/bsmm_gpu_stream.cu
int stream_blocks_per_sm();
cudaError_t stream_fill(void* p, size_t bytes, uint32_t seed, cudaStream_t stream);
cudaError_t stream_read(const void* p, size_t bytes, int passes, uint32_t* out, int blocks, cudaStream_t stream);
cudaError_t stream_spin(double microseconds, cudaStream_t stream);
}  // namespace bench
}  // namespace tessera

using namespace tessera;
using bench::BenchReport;
using json = nlohmann::json;

namespace {

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

const std::vector<ShapeSpec>& all_shapes() {
  static const std::vector<ShapeSpec> s{{"transformer", "tfm", 8192, 4096, 4096, false},
                                        {"mlp", "mlp", 8192, 1024, 4096, false},
                                        {"lstm", "lstm", 64, 4096, 16384, true}};
  return s;
}

const std::vector<std::string>& all_ops() {
  static const std::vector<std::string> ops{"fwd", "dx", "dw"};
  return ops;
}

struct Options {
  std::vector<std::string> shapes{"transformer", "mlp", "lstm"};
  std::vector<int64_t> bs{8, 16, 32, 64};
  std::vector<double> density{0.05, 0.1, 0.25, 0.5, 1.0};
  std::vector<std::string> dtypes{"bf16", "f32"};
  std::vector<std::string> ops{"fwd", "dx", "dw"};
  int repeats = 20, warmup = 3, rotate = 0, graph_calls = 20;
  bool quick = false;
  std::string json;
  size_t hbm_probe_bytes = size_t{4} << 30;
};

template <class T>
bool has(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

void check_cuda(cudaError_t e, const char* what) {
  TS_CHECK(e == cudaSuccess, DeviceError, what << ": " << cudaGetErrorString(e));
}

std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1e", v);
  return b;
}

double median(std::vector<double> v) {
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

Bandwidth probe_bandwidth(EventTimer& timer, const Options& o, int sms) {
  Bandwidth b;
  b.hbm_bytes = o.hbm_probe_bytes;
  b.l2_bytes = kL2ProbeBytes;
  const Device dev = Device::cuda(kDevice);
  const int blocks = sms * bench::stream_blocks_per_sm();
  Tensor buf = empty({static_cast<int64_t>(b.hbm_bytes / 4)}, TensorOptions(DType::i32).device(dev));
  Tensor sums = empty({blocks}, TensorOptions(DType::i32).device(dev));
  auto* out = static_cast<uint32_t*>(sums.data_ptr());
  const cudaStream_t s = timer.stream();
  check_cuda(bench::stream_fill(buf.data_ptr(), b.hbm_bytes, 0x9e3779b9u, s), "stream_fill");
  const int reps = std::max(5, o.repeats);
  b.hbm_ms = timer.median_ms(
      [&](int) { check_cuda(bench::stream_read(buf.data_ptr(), b.hbm_bytes, 1, out, blocks, s), "stream_read"); }, 2,
      reps);
  b.l2_ms = timer.median_ms(
      [&](int) {
        check_cuda(bench::stream_read(buf.data_ptr(), b.l2_bytes, kL2ProbePasses, out, blocks, s), "stream_read");
      },
      2, reps);
  const size_t half = b.hbm_bytes / 2;
  char* base = static_cast<char*>(buf.data_ptr());
  b.copy_ms = timer.median_ms(
      [&](int) {
        check_cuda(cudaMemcpyAsync(base + half, base, half, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      },
      2, reps);
  b.hbm_tbs = b.hbm_bytes / (b.hbm_ms * 1e9);
  b.l2_tbs = static_cast<double>(b.l2_bytes) * kL2ProbePasses / (b.l2_ms * 1e9);
  b.copy_tbs = 2.0 * half / (b.copy_ms * 1e9);
  return b;
}

// ---- data ----

// The f32 data of a shape on the GPU, drawn once on the host.
struct Bases {
  Tensor x, dy, wd;  // [N, C], [N, K], [C, K]
};

Bases make_bases(const ShapeSpec& s) {
  const Device dev = Device::cuda(kDevice);
  Generator gen(20261201 + static_cast<uint64_t>(s.n + s.c + s.k));
  Bases b;
  b.x = normal({s.n, s.c}, 0.0, 1.0, gen).to(dev);
  b.dy = normal({s.n, s.k}, 0.0, 1.0, gen).to(dev);
  b.wd = normal({s.c, s.k}, 0.0, 0.02, gen).to(dev);
  return b;
}

// The rotated input sets of one (shape, dtype): set i is set 0 scaled by 1 + i/8.
struct Sets {
  std::vector<Tensor> x, dy, wd;
  int count() const { return static_cast<int>(x.size()); }
};

Sets make_sets(const Bases& b, DType dt, int count) {
  Sets s;
  for (int i = 0; i < count; ++i) {
    auto scaled = [&](const Tensor& base, std::vector<Tensor>& into) {
      if (i == 0) {
        into.push_back(dt == DType::f32 ? base : cast(base, dt));
      } else {
        into.push_back(mul(into[0], 1.0 + i / 8.0));
      }
    };
    scaled(b.x, s.x);
    scaled(b.dy, s.dy);
    scaled(b.wd, s.wd);
  }
  return s;
}

// How many input sets to rotate over (see the header); `why` says how it was chosen.
int rotation_sets(const Options& o, const ShapeSpec& s, DType dt, size_t l2, std::string& why) {
  if (s.step) {
    why = "none (the step's inputs fit in L2 on purpose)";
    return 1;
  }
  const size_t e = dtype_size(dt);
  const size_t x = s.n * s.c * e, dy = s.n * s.k * e, wd = s.c * s.k * e, per_set = x + dy + wd;
  // The smallest inputs a row reads per call: fwd x + w, dx dy + w, dw x + dy (w >= 0).
  const size_t smallest = std::min(x, dy);
  int sets = o.rotate > 0 ? o.rotate : std::max<int>(2, static_cast<int>((3 * l2 + smallest - 1) / smallest));
  const int cap = std::max<int>(1, static_cast<int>(kRotateBudget / per_set));
  why = o.rotate > 0 ? "--rotate" : "3x L2 / " + fixed(smallest / 1048576.0, 0) + " MB";
  if (sets > cap) {
    sets = cap;
    why += ", capped at 3 GB";
  }
  return sets;
}

// w [nnz, bs, bs] of `layout`: the first nnz·bs² values of the dense W (a view).
Tensor sparse_weight(const Tensor& wd, const BlockLayout& l) {
  const int64_t bs = l.block_size();
  return reshape(slice(reshape(wd, {-1}), 0, 0, l.nnz() * bs * bs), {l.nnz(), bs, bs});
}

// The blocks [R·Q, bs, bs] of an all-blocks layout (row-major block order) as the dense [C, K].
Tensor blocks_as_dense(const Tensor& w, const BlockLayout& l) {
  const int64_t bs = l.block_size(), r = l.block_rows(), q = l.block_cols();
  return reshape(permute(reshape(w, {r, q, bs, bs}), {0, 2, 1, 3}), {r * bs, q * bs});
}

// ||a - ref|| / ||ref|| (Frobenius, in f32 on the GPU).
double relative_error(const Tensor& a, const Tensor& ref) {
  const Tensor af = cast(a, DType::f32), rf = cast(ref, DType::f32);
  const double num = sum_squares({sub(af, rf)}).item<double>(), den = sum_squares({rf}).item<double>();
  return std::sqrt(num / std::max(den, 1e-300));
}

Tensor dense_op(const std::string& op, const Tensor& x, const Tensor& dy, const Tensor& wd) {
  if (op == "fwd") return matmul(x, wd);
  if (op == "dx") return matmul(dy, wd, false, true);
  return matmul(x, dy, true, false);
}

Tensor sparse_op(const std::string& op, const Tensor& x, const Tensor& dy, const Tensor& w, const LayoutPtr& l) {
  if (op == "fwd") return bsmm(x, w, l);
  if (op == "dx") return bsmm_dx(dy, w, l);
  return bsmm_dw(x, dy, l);
}

// ---- results ----

struct Result {
  const ShapeSpec* shape = nullptr;
  std::string op, dtype, mode;  // mode: eager | graph
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

Bound roofline(const ShapeSpec& s, const std::string& op, int64_t bs, int64_t nnz, size_t e, double dense_tflops,
               const Bandwidth& bw, size_t l2) {
  const double b = static_cast<double>(bs), flops = 2.0 * s.n * nnz * b * b;
  if (!s.step) {
    const double m = kTileRows;
    const double ai = op == "dw" ? b / e : 2.0 * m * b * b / (e * (m * b + b * b));  // flops per byte
    const double mem = bw.l2_tbs * ai;                                               // TB/s x flop/B = TFLOP/s
    return mem < dense_tflops ? Bound{mem, "L2"} : Bound{dense_tflops, "dense"};
  }
  const double w = nnz * b * b * e, strips = nnz * s.n * b * e;
  const double x = s.n * s.c * e, y = s.n * s.k * e;  // y: [N, K] (fwd's output, dx's and dw's input)
  // Through L2: fwd W, X strips, Y; dx W, dY strips, dX; dw X and dY strips, dW. Distinct: W, X, Y.
  const double traffic = op == "dw" ? 2 * strips + w : w + strips + (op == "fwd" ? y : x);
  const double distinct = w + x + y;
  double sec = bw.l2_tbs > 0 ? traffic / (bw.l2_tbs * 1e12) : 0;
  std::string kind = "L2";
  if (distinct > kL2ResidentFraction * l2 && bw.hbm_tbs > 0 && distinct / (bw.hbm_tbs * 1e12) > sec) {
    sec = distinct / (bw.hbm_tbs * 1e12);
    kind = "HBM";
  }
  return {sec > 0 ? flops / sec * 1e-12 : 0, kind};
}

std::string row_name(const Result& r) {
  return r.op + (r.mode == "graph" ? "/graph " : " ") + r.dtype + " bs" + std::to_string(r.bs) + " d" +
         fixed(r.density, 3);
}

std::string shape_label(const ShapeSpec& s) { return s.tag + " " + s.dims(); }

void add_row(BenchReport& report, const Result& r) {
  const std::string base = "dense " + fixed(r.dense_ms, 3) + " ms | bound " + fixed(r.bound_tflops, 1) + " (" +
                           fixed(r.bound_frac, 3) + ", " + r.bound_kind + ") | reached " + fixed(r.reached, 3) +
                           (std::isnan(r.check_err) ? "" : " | err " + sci(r.check_err));
  report.add({row_name(r), shape_label(*r.shape), r.ms, r.tflops, "TFLOP/s", r.dense_tflops, base});
}

json result_json(const Result& r) {
  json j{{"shape", r.shape->name},
         {"dims", r.shape->dims()},
         {"op", r.op},
         {"dtype", r.dtype},
         {"mode", r.mode},
         {"bs", r.bs},
         {"density_requested", r.density_req},
         {"density", r.density},
         {"nnz", r.nnz},
         {"median_ms", r.ms},
         {"tflops", r.tflops},
         {"dense_ms", r.dense_ms},
         {"dense_tflops", r.dense_tflops},
         {"useful_frac", r.useful},
         {"bound_tflops", r.bound_tflops},
         {"bound_useful_frac", r.bound_frac},
         {"bound_kind", r.bound_kind},
         {"reached", r.reached},
         {"rotate_sets", r.sets}};
  j["check_rel_err"] = std::isnan(r.check_err) ? json(nullptr) : json(r.check_err);
  return j;
}

// ---- the sweep ----

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

// Per-call ms of `calls` copies of queue_one() captured into one CUDA graph (one eager call
// first: layout tables, cuBLAS handle); 0 and `failure` set when capture failed.
double graph_ms(Run& run, const std::function<void()>& queue_one, std::string& failure) {
  queue_one();
  cuda::synchronize(kDevice);
  std::shared_ptr<void> graph;
  try {
    cuda::begin_capture(kDevice);
    for (int i = 0; i < run.o.graph_calls; ++i) queue_one();
    graph = cuda::end_capture(kDevice);
  } catch (const std::exception& e) {
    failure = e.what();
    if (cuda::is_capturing(kDevice)) {
      try {
        cuda::end_capture(kDevice);
      } catch (const std::exception&) {
      }
    }
    cudaGetLastError();
    return 0;
  }
  return run.timer.median_ms([&](int) { cuda::launch_graph(graph, kDevice); }, run.o.warmup, run.o.repeats,
                             run.o.graph_calls);
}

struct Dense {
  double ms = 0, tflops = 0, graph_ms = 0, graph_tflops = 0;
};

void bench_shape_dtype(Run& run, const ShapeSpec& s, const Bases& bases, const std::string& dtype_name_) {
  const Options& o = run.o;
  const DType dt = dtype_name_ == "bf16" ? DType::bf16 : DType::f32;
  const Tf32Scope tf32(dt == DType::f32 ? true : cuda::allow_tf32());
  std::string why;
  const int nsets = rotation_sets(o, s, dt, run.l2, why);
  std::cerr << "bsmm_gpu: " << s.name << " " << dtype_name_ << ": " << nsets << " input set(s) (" << why << ")"
            << std::endl;
  const Sets sets = make_sets(bases, dt, nsets);
  run.report.note("rotation " + s.name + " " + dtype_name_, std::to_string(nsets) + " input set(s): " + why);
  const size_t e = dtype_size(dt);
  const double dense_flops = 2.0 * s.n * s.c * s.k;
  const Device dev = Device::cuda(kDevice);

  // Dense baselines.
  std::map<std::string, Dense> dense;
  for (const std::string& op : all_ops()) {
    if (!has(o.ops, op)) continue;
    Dense& d = dense[op];
    d.ms = run.timer.median_ms(
        [&](int i) {
          const int k = i % nsets;
          dense_op(op, sets.x[k], sets.dy[k], sets.wd[k]);
        },
        o.warmup, 2 * o.repeats, 1, /*hide_host=*/!s.step);
    d.tflops = dense_flops / (d.ms * 1e9);
    run.report.add({"dense " + op + " " + dtype_name_, shape_label(s), d.ms, d.tflops, "TFLOP/s", d.tflops,
                    "itself: tessera matmul (cuBLAS)"});
    std::cerr << "bsmm_gpu: dense " << s.name << " " << op << " " << dtype_name_ << ": " << fixed(d.ms, 4) << " ms, "
              << fixed(d.tflops, 1) << " TFLOP/s" << std::endl;
    if (s.step && op == "fwd") {
      const detail::OpInstanceT<Matmul> mm({false, false, false});
      const Tensor y = empty({s.n, s.k}, TensorOptions(dt).device(dev));
      std::string failure;
      d.graph_ms = graph_ms(
          run,
          [&] {
            detail::run_op_into(mm, {sets.x[0], sets.wd[0]}, {y});
          },
          failure);
      if (!failure.empty()) {
        run.failures.push_back("dense fwd graph " + s.name + " " + dtype_name_ + ": " + failure);
      } else {
        d.graph_tflops = dense_flops / (d.graph_ms * 1e9);
        run.report.add({"dense fwd/graph " + dtype_name_, shape_label(s), d.graph_ms, d.graph_tflops, "TFLOP/s",
                        d.graph_tflops,
                        "itself: tessera matmul (cuBLAS), " + std::to_string(o.graph_calls) + " calls per CUDA graph"});
      }
    }
  }

  for (int64_t bs : o.bs) {
    for (double dreq : o.density) {
      const bool all_blocks = dreq >= 1.0;
      // random_layout(.., 1.0, ..) stores every block too (nnz = min(R·Q, round(R·Q))); dense_layout says so.
      const LayoutPtr l = all_blocks ? dense_layout(s.c, s.k, bs) : random_layout(s.c, s.k, bs, dreq, 1234);
      TS_CHECK(!all_blocks || l->nnz() == l->block_rows() * l->block_cols(), ValueError,
               "density 1 layout is missing blocks: " << l->str());
      std::vector<Tensor> ws;
      for (int i = 0; i < nsets; ++i) ws.push_back(sparse_weight(sets.wd[i], *l));
      const double flops = 2.0 * s.n * l->nnz() * static_cast<double>(bs) * bs;
      for (const std::string& op : all_ops()) {
        if (!has(o.ops, op)) continue;
        ++run.done;
        Result r;
        r.shape = &s;
        r.op = op;
        r.dtype = dtype_name_;
        r.mode = "eager";
        r.bs = bs;
        r.nnz = l->nnz();
        r.density_req = dreq;
        r.density = l->density();
        r.sets = nsets;
        const std::string what =
            s.name + " " + op + " " + dtype_name_ + " bs" + std::to_string(bs) + " d" + fixed(r.density, 3);
        try {
          if (all_blocks) {
            // The sparse result against the dense matmul of the same blocks as W.
            const Tensor wfull = blocks_as_dense(ws[0], *l);
            const Tensor got = sparse_op(op, sets.x[0], sets.dy[0], ws[0], l);
            const Tensor ref = dense_op(op, sets.x[0], sets.dy[0], wfull);
            r.check_err = relative_error(op == "dw" ? blocks_as_dense(got, *l) : got, ref);
            const double tol = dt == DType::bf16 ? 2e-2 : 1e-2;
            if (!(r.check_err <= tol))
              run.mismatches.push_back(what + ": relative error " + sci(r.check_err) + " against the dense " +
                                       "matmul (over " + fixed(tol, 3) + ")");
          }
          r.ms = run.timer.median_ms(
              [&](int i) {
                const int k = i % nsets;
                sparse_op(op, sets.x[k], sets.dy[k], ws[k], l);
              },
              o.warmup, o.repeats, 1, /*hide_host=*/!s.step);
          const Dense& d = dense.at(op);
          r.tflops = flops / (r.ms * 1e9);
          r.dense_ms = d.ms;
          r.dense_tflops = d.tflops;
          r.useful = r.tflops / d.tflops;  // = dense_ms · density / ms
          const Bound b = roofline(s, op, bs, l->nnz(), e, d.tflops, run.bw, run.l2);
          r.bound_tflops = b.tflops;
          r.bound_kind = b.kind;
          r.bound_frac = b.tflops / d.tflops;
          r.reached = b.tflops > 0 ? r.tflops / b.tflops : 0;
          run.results.push_back(r);
          add_row(run.report, r);
          std::cerr << "bsmm_gpu: [" << run.done << "/" << run.total << "] " << what << ": " << fixed(r.ms, 4)
                    << " ms, useful-frac " << fixed(r.useful, 3) << ", reached " << fixed(r.reached, 3) << " of "
                    << r.bound_kind << " bound" << std::endl;

          if (s.step && op == "fwd" && d.graph_ms > 0) {
            const detail::OpInstanceT<Bsmm> fwd({l, false});
            const Tensor y = empty({s.n, s.k}, TensorOptions(dt).device(dev));
            std::string failure;
            Result g = r;
            g.mode = "graph";
            g.check_err = std::numeric_limits<double>::quiet_NaN();
            g.ms = graph_ms(
                run,
                [&] {
                  detail::run_op_into(fwd, {sets.x[0], ws[0]}, {y});
                },
                failure);
            if (!failure.empty()) {
              run.failures.push_back(what + " graph: " + failure);
            } else {
              g.tflops = flops / (g.ms * 1e9);
              g.dense_ms = d.graph_ms;
              g.dense_tflops = d.graph_tflops;
              g.useful = g.tflops / g.dense_tflops;
              g.bound_frac = g.bound_tflops / g.dense_tflops;
              g.reached = g.bound_tflops > 0 ? g.tflops / g.bound_tflops : 0;
              run.results.push_back(g);
              add_row(run.report, g);
              std::cerr << "bsmm_gpu:   graph: " << fixed(g.ms * 1e3, 2) << " us per call, reached "
                        << fixed(g.reached, 3) << " of " << g.bound_kind << " bound" << std::endl;
            }
          }
        } catch (const std::exception& ex) {
          run.failures.push_back(what + ": " + ex.what());
          std::cerr << "bsmm_gpu: [" << run.done << "/" << run.total << "] " << what << ": failed: " << ex.what()
                    << std::endl;
          cudaGetLastError();
        }
      }
    }
  }
}

// ---- reference rows and targets ----

const Result* find_row(const std::vector<Result>& rs, const std::string& shape, const std::string& op, int64_t bs,
                       double dreq, const std::string& mode = "eager") {
  for (const Result& r : rs)
    if (r.shape->name == shape && r.op == op && r.bs == bs && r.dtype == "bf16" && r.mode == mode &&
        std::abs(r.density_req - dreq) < 1e-9)
      return &r;
  return nullptr;
}

// The row of the lowest `field` among bf16 rows of (shape, op, bs, mode) at densities >= 0.1.
const Result* lowest(const std::vector<Result>& rs, const std::string& shape, const std::string& op, int64_t bs,
                     const std::string& mode, double Result::*field) {
  const Result* best = nullptr;
  for (const Result& r : rs)
    if (r.shape->name == shape && r.op == op && r.bs == bs && r.dtype == "bf16" && r.mode == mode &&
        r.density_req >= kMinDensityForTargets && (!best || r.*field < best->*field))
      best = &r;
  return best;
}

struct PytorchRef {
  int64_t bs;
  double ms;
  double target;  // speedup
};
const PytorchRef kPytorchBsr[] = {{32, 0.969, 6.0}, {64, 0.597, 8.0}};
constexpr double kPytorchDenseMs = 0.390;

void add_reference_rows(BenchReport& report, const std::vector<Result>& rs) {
  const ShapeSpec& t = all_shapes()[0];
  for (const PytorchRef& p : kPytorchBsr) {
    const Result* r = find_row(rs, "transformer", "fwd", p.bs, 0.1);
    report.add({"pytorch bsr (ref) bs" + std::to_string(p.bs), shape_label(t), p.ms, p.ms, "ms", r ? r->ms : 0,
                r ? "tessera fwd bf16 bs" + std::to_string(p.bs) + " d0.1 (this run); ratio = speedup"
                  : "tessera fwd bf16 bs" + std::to_string(p.bs) + " d0.1 not measured in this run"});
  }
  const Result* any = nullptr;
  for (const Result& r : rs)
    if (r.shape->name == "transformer" && r.op == "fwd" && r.dtype == "bf16" && r.mode == "eager") any = &r;
  report.add({"pytorch cuBLAS (ref)", shape_label(t), kPytorchDenseMs, kPytorchDenseMs, "ms", any ? any->dense_ms : 0,
              any ? "tessera dense fwd bf16 (this run); ratio = speedup" : "tessera dense fwd bf16 not measured"});
}

json print_targets(const std::vector<Result>& rs, std::ostream& os) {
  json out = json::array();
  int met = 0, missing = 0, count = 0;
  char line[256];
  auto print = [&](const std::string& what, const std::string& need, const Result* r, double value,
                   const std::string& unit, bool ok) {
    ++count;
    std::string got = "not measured", verdict = "-";
    if (r) {
      got = fixed(value, 3) + unit + " (d" + fixed(r->density, 3) + ", " + fixed(r->ms, 4) + " ms)";
      verdict = ok ? "met" : "NOT MET";
      met += ok;
    } else {
      ++missing;
    }
    std::snprintf(line, sizeof line, "  %-44s %-9s %-34s %s\n", what.c_str(), need.c_str(), got.c_str(),
                  verdict.c_str());
    os << line;
    json j{{"target", what}, {"need", need}, {"met", r ? json(ok) : json(nullptr)}};
    j["value"] = r ? json(value) : json(nullptr);
    out.push_back(j);
  };
  os << "\ntargets (the issue's): bf16, transformer 8192x4096x4096 unless named; useful-frac targets take the\n"
     << "lowest row over densities >= 0.1\n";
  const std::pair<int64_t, double> fwd_dx[] = {{64, 0.5}, {32, 0.27}, {16, 0.13}, {8, 0.065}};
  const std::pair<int64_t, double> dw[] = {{64, 0.35}, {32, 0.2}, {16, 0.1}, {8, 0.05}};
  for (const char* op : {"fwd", "dx"})
    for (const auto& [bs, need] : fwd_dx) {
      const Result* r = lowest(rs, "transformer", op, bs, "eager", &Result::useful);
      print(std::string(op) + " useful-frac bs" + std::to_string(bs), ">= " + fixed(need, 3), r, r ? r->useful : 0, "",
            r && r->useful >= need);
    }
  for (const auto& [bs, need] : dw) {
    const Result* r = lowest(rs, "transformer", "dw", bs, "eager", &Result::useful);
    print("dw useful-frac bs" + std::to_string(bs), ">= " + fixed(need, 3), r, r ? r->useful : 0, "",
          r && r->useful >= need);
  }
  for (const char* op : {"fwd", "dx"}) {
    const Result* r = find_row(rs, "transformer", op, 64, 1.0);
    print(std::string(op) + " density 1 bs64, of cuBLAS", ">= 0.800", r, r ? r->useful : 0, "", r && r->useful >= 0.8);
  }
  for (int64_t bs : {8, 16, 32, 64}) {
    const Result* r = lowest(rs, "lstm", "fwd", bs, "graph", &Result::reached);
    print("lstm step fwd (graph) bs" + std::to_string(bs) + ", of its roofline", ">= 0.700", r, r ? r->reached : 0, "",
          r && r->reached >= 0.7);
  }
  for (const PytorchRef& p : kPytorchBsr) {
    const Result* r = find_row(rs, "transformer", "fwd", p.bs, 0.1);
    const double speedup = r ? p.ms / r->ms : 0;
    print("vs PyTorch bsr_dense_mm bs" + std::to_string(p.bs) + " d0.1 (" + fixed(p.ms, 3) + " ms)",
          ">= " + fixed(p.target, 1) + "x", r, speedup, "x", r && speedup >= p.target);
  }
  os << "  met " << met << " of " << count - missing << " measured (" << missing << " not measured)\n";
  return out;
}

// Adds the structured figures to the file BenchReport::write_json wrote.
void extend_json(const std::string& path, const std::vector<Result>& rs, const Bandwidth& bw, const json& targets) {
  json j;
  {
    std::ifstream in(path);
    TS_CHECK(in.good(), IOError, "cannot read back '" << path << "'");
    in >> j;
  }
  j["configs"] = json::array();
  for (const Result& r : rs) j["configs"].push_back(result_json(r));
  j["bandwidth"] = {{"hbm_read_tbs", bw.hbm_tbs}, {"l2_read_tbs", bw.l2_tbs}, {"copy_tbs", bw.copy_tbs},
                    {"hbm_bytes", bw.hbm_bytes},  {"l2_bytes", bw.l2_bytes},  {"l2_passes", kL2ProbePasses}};
  j["targets"] = targets;
  std::ofstream f(path);
  TS_CHECK(f.good(), IOError, "cannot open '" << path << "' for writing");
  f << std::setw(2) << j << "\n";
  f.close();
  TS_CHECK(f.good(), IOError, "failed writing '" << path << "'");
}

template <class T>
std::string join(const std::vector<T>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera block-sparse matmul GPU benchmark: bsmm, bsmm_dx, bsmm_dw against cuBLAS and a roofline"};
  Options o;
  const CLI::Validator density_check(
      [](std::string& s) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(s, &used);
          if (used != s.size()) return "density '" + s + "' is not a number";
        } catch (const std::exception&) {
          return "density '" + s + "' is not a number";
        }
        return v > 0 && v <= 1 ? std::string() : "density " + s + " is outside (0, 1]";
      },
      "in (0, 1]");
  app.add_option("--shapes", o.shapes, "transformer, mlp, lstm (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"transformer", "mlp", "lstm"}));
  app.add_option("--bs", o.bs, "block sizes: 8, 16, 32, 64 (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({8, 16, 32, 64}));
  app.add_option("--density", o.density, "layout densities in (0, 1] (comma-separated)")
      ->delimiter(',')
      ->check(density_check);
  app.add_option("--dtype", o.dtypes, "bf16, f32 (f32 runs with TF32; comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--ops", o.ops, "fwd, dx, dw (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "dx", "dw"}));
  app.add_option("--repeats", o.repeats, "timed calls per figure (median reported)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed calls first")->check(CLI::Range(0, 100000));
  app.add_option("--rotate", o.rotate, "input sets rotated between calls (0: enough to exceed 3x L2; lstm: 1)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--graph-calls", o.graph_calls, "lstm shape: forward calls per CUDA graph")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--quick", o.quick, "bs 32/64, densities 0.1/1, 3 repeats (a smoke run)");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--bs")) o.bs = {32, 64};
    if (!app.count("--density")) o.density = {0.1, 1.0};
    if (!app.count("--repeats")) o.repeats = 3;
    if (!app.count("--warmup")) o.warmup = 1;
    o.hbm_probe_bytes = size_t{1} << 30;
  }
  std::sort(o.bs.begin(), o.bs.end());
  o.bs.erase(std::unique(o.bs.begin(), o.bs.end()), o.bs.end());
  std::sort(o.density.begin(), o.density.end());
  o.density.erase(std::unique(o.density.begin(), o.density.end()), o.density.end());

  if (!cuda_available()) {
    std::cerr << "bsmm_gpu: no CUDA device\n";
    return o.quick ? 0 : 1;
  }

  const auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  try {
    NoGradGuard no_grad;
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, kDevice), "cudaGetDeviceProperties");
    BenchReport report("bsmm_gpu");
    EventTimer timer;
    Run run(o, report, timer);
    run.l2 = prop.l2CacheSize > 0 ? static_cast<size_t>(prop.l2CacheSize) : size_t{60} << 20;
    report.note("device", std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, L2 " +
                              std::to_string(run.l2 >> 20) + " MB, " + std::to_string(prop.totalGlobalMem >> 30) +
                              " GB");
    const char* path = std::getenv("TESSERA_BSMM_PATH");
    report.note("bsmm kernels", std::string("TESSERA_BSMM_PATH=") + (path ? path : "(unset: the default path)"));
    report.note("dtypes", "bf16; f32 = f32 operands with TF32 tensor-core math (set_allow_tf32(true), restored after)");
    report.note("timing", std::to_string(o.repeats) + " calls after " + std::to_string(o.warmup) +
                              " warm-up, back to back, CUDA events between calls on tessera's stream; median " +
                              "(dense baselines: " + std::to_string(2 * o.repeats) +
                              " calls, once per shape/dtype/op)");
    report.note("value / ratio", "useful TFLOP/s (2*N*nnz*bs^2) / dense matmul TFLOP/s = useful-frac");
    report.note("bound",
                "TFLOP/s (as useful-frac, limit) : transformer/mlp min(dense TFLOP/s, L2 TB/s x intensity: "
                "fwd/dx 2*M*bs^2 / (e*(M*bs+bs^2)), dw bs/e, M=128); lstm bytes (W + strips + output) / L2 "
                "TB/s, or HBM when over 80% of L2; reached = achieved / bound");
    report.note("lstm shape",
                "eager: back-to-back calls (host overhead included); graph: " + std::to_string(o.graph_calls) +
                    " forward calls per CUDA graph, replay time / " + std::to_string(o.graph_calls));
    report.note("references (not measured here)",
                "PyTorch 2.11, same H200, bf16 8192x4096x4096: bsr_dense_mm (Triton) 10% blocks bs32 0.969 ms, "
                "bs64 0.597 ms; dense cuBLAS 0.390 ms");

    std::cerr << "bsmm_gpu: bandwidth probe (" << (o.hbm_probe_bytes >> 20) << " MB HBM, " << (kL2ProbeBytes >> 20)
              << " MB L2)" << std::endl;
    run.bw = probe_bandwidth(timer, o, prop.multiProcessorCount);
    report.add({"HBM read (16B ld.cg)", std::to_string(run.bw.hbm_bytes >> 20) + " MB", run.bw.hbm_ms, run.bw.hbm_tbs,
                "TB/s", run.bw.copy_tbs, "device-to-device copy (read + write), this run"});
    report.add({"L2 read (16B ld.cg)", std::to_string(run.bw.l2_bytes >> 20) + " MB x" + std::to_string(kL2ProbePasses),
                run.bw.l2_ms, run.bw.l2_tbs, "TB/s", run.bw.hbm_tbs, "HBM read, this run"});
    report.add({"D2D copy (read + write)", std::to_string(run.bw.hbm_bytes >> 21) + " MB", run.bw.copy_ms,
                run.bw.copy_tbs, "TB/s", run.bw.copy_tbs, "itself"});
    std::cerr << "bsmm_gpu: HBM read " << fixed(run.bw.hbm_tbs, 2) << " TB/s, L2 read " << fixed(run.bw.l2_tbs, 2)
              << " TB/s, copy " << fixed(run.bw.copy_tbs, 2) << " TB/s" << std::endl;

    std::vector<const ShapeSpec*> shapes;
    for (const ShapeSpec& s : all_shapes())
      if (has(o.shapes, s.name)) shapes.push_back(&s);
    int nops = 0;
    for (const std::string& op : all_ops()) nops += has(o.ops, op);
    int ndtypes = 0;
    for (const char* dt : {"bf16", "f32"}) ndtypes += has(o.dtypes, std::string(dt));
    run.total = static_cast<int>(shapes.size()) * ndtypes * static_cast<int>(o.bs.size() * o.density.size()) * nops;
    report.note("sweep", "shapes " + join(o.shapes) + "; bs " + join(o.bs) + "; densities " + join(o.density) +
                             "; dtypes " + join(o.dtypes) + "; ops " + join(o.ops));

    for (const ShapeSpec* s : shapes) {
      std::cerr << "bsmm_gpu: " << s->name << " " << s->dims() << ": drawing the data" << std::endl;
      const Bases bases = make_bases(*s);
      for (const char* dt : {"bf16", "f32"})
        if (has(o.dtypes, std::string(dt))) bench_shape_dtype(run, *s, bases, dt);
    }

    add_reference_rows(report, run.results);
    report.note("peak GPU memory (tessera)", fixed(cuda::peak_bytes(kDevice) / 1073741824.0, 2) + " GB");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.note("run time", fixed(secs, 1) + " s");
    for (const std::string& f : run.failures) report.note("failed", f);
    for (const std::string& m : run.mismatches) report.note("MISMATCH", m);
    report.print(std::cout);
    const json targets = print_targets(run.results, std::cout);
    if (!o.json.empty()) {
      report.write_json(o.json);
      extend_json(o.json, run.results, run.bw, targets);
    }
    for (const std::string& f : run.failures) std::cerr << "bsmm_gpu: failed: " << f << "\n";
    for (const std::string& m : run.mismatches) std::cerr << "bsmm_gpu: MISMATCH: " << m << "\n";
    ok = run.failures.empty() && run.mismatches.empty();
  } catch (const std::exception& e) {
    std::cerr << "bsmm_gpu: " << e.what() << "\n";
    return 1;
  }
  return ok ? 0 : 1;
}
