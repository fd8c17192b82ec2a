// A dense LSTM's training step, forward + backward of sum(output): tessera's own nn::LSTM (on the
// GPU its recurrence as one lstm_recurrence op, the persistent kernels; else per step one recurrent
// GEMM and the fused lstm_gates) against the cuDNN path (nn::LSTMOptions::cudnn:
// the whole sequence as one cudnn_lstm op, cuDNN's RNN API), eagerly and as compiled steps
// (graph::compile without an optimizer: forward + backward traced once, replayed as a CUDA graph).
//
//   lstm_step [--device cuda|cpu] [--hidden 1024,2048|0] [--batch 64] [--steps 256] [--dtypes f32,bf16]
//             [--sparse H:density:bs[:ba|:balanced],...] [--repeats N] [--warmup N] [--quick] [--profile] [--json FILE]
//
// Input size = hidden size, one layer, forget_bias 1, random inputs x [T, B, H] (time-major),
// zero initial state, parameters from one seed (both layers equal). Rows per (hidden, dtype):
//   cudnn eager     the cuDNN path run eagerly: the baseline
//   tessera eager   nn::LSTM (fused recurrence where the kernel takes the layer)
//   tessera graph   the same as a compiled step
//   cudnn graph     the cuDNN path as a compiled step
//   tessera step-wise graph   nn::LSTM with fuse(false): per step GEMM + lstm_gates, compiled
//   pytorch (ref)   PyTorch's nn.LSTM (cuDNN) on the same H200, measured separately (not in this run)
// Figures: the median step time in ms over --repeats steps after --warmup untimed ones, all ways
// timed in turn (one of each per round) so drift hits them alike; on the GPU with CUDA events on
// tessera's stream (start before the step is queued, stop after it: host overhead included).
// Block-sparse layers (--sparse H:density:bs, default: the recurrent parameter counts of dense
// H 1024 and 2048 at several widths, bs 32 and 64), tessera's nn::LSTM with random layouts on
// both weights (H:density:bs:ba: the Barabási–Albert layout train_lstm --layout ba trains at seed
// 1, m = round(density·H/bs / 2) edges per node, generator seed 1001; H:density:bs:balanced: every
// block row and column round(density·H/bs) blocks, seed 1001), eager and compiled (and compiled
// step-wise, fuse(false)): their ratio is to the cuDNN graph time of the dense layer with the same
// recurrent parameter count (H·√density) when this run measured it, else to their own eager time.
// Each sparse row notes one step's traffic (W_h [H, 4H]'s bytes, four gates of the per-gate
// layout's nnz blocks, plus the h strips [B, bs] they read, one an entry of the per-gate layout
// since the four gates of an entry read the same strip: nnz·bs·(4·bs + B) elements, forward; the
// backward moves about twice that again) and that traffic's time at L2's
// 8.4 TB/s (bsmm_gpu's stream figure on the H200), a memory roofline of the recurrence (not
// measured in this run).
// Ratio = time / the cuDNN path's time in the same run (lower is faster). Gradients are dropped
// after every step (zero_grad), as a trainer does. f32 runs without TF32 unless
// TESSERA_ALLOW_TF32=1. Before timing, the first step's loss and input gradient of every way are
// compared with the cuDNN path's; the program exits 1 when they disagree (f32 1e-4 relative, bf16 3e-2).
// --profile: each compiled way's time by op, from one more step run plainly, op by op
// (CompiledStep::profile; rows "profile WAY: OP"): for the sparse layers, where the step's time
// outside the recurrence goes.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/common/cuda/blas.h"  // cuda::allow_tf32
#include "kernels/common/cuda/lstm_persistent.h"  // cuda::launch_step_floor
#endif

#include "common/bench_report.h"
#include "common/step_profile.h"
#include "core/cuda/runtime.h"
#include "core/graph/compile.h"
#include "core/sparse/generators.h"
#include "kernels/ops.h"
#include "layers/lstm.h"

using namespace tessera;
using bench::BenchReport;
using Inputs = std::map<std::string, Tensor>;

namespace {

struct Options {
  std::string device = "cuda";
  std::vector<int64_t> hidden{1024, 2048};
  int64_t batch = 64, steps = 256;
  std::vector<std::string> dtypes{"f32", "bf16"};
  /// Block-sparse layers "H:density:bs[:ba|:balanced]" (random, Barabási–Albert or balanced random
  /// layouts; input and recurrent weights alike).
  std::vector<std::string> sparse{"2048:0.25:32",   "4096:0.0625:32", "4096:0.0625:32:ba", "8192:0.015625:32",
                                  "4096:0.25:32",   "8192:0.0625:32", "2048:0.25:64",      "4096:0.0625:64",
                                  "8192:0.0625:64"};
  int repeats = 20, warmup = 3;
  bool quick = false;
  bool profile = false;  ///< each compiled step's time by op (CompiledStep::profile)
  std::string json;
};

// PyTorch 2.11 nn.LSTM (cuDNN), forward + backward, B 64, T 256, input = hidden, same H200.
double pytorch_ms(int64_t hidden, DType dt) {
  if (hidden == 1024) return dt == DType::f32 ? 14.5 : dt == DType::bf16 ? 12.9 : 0;
  if (hidden == 2048) return dt == DType::f32 ? 30.1 : dt == DType::bf16 ? 13.4 : 0;
  return 0;
}

std::string fmt(double v, int precision = 4) {
  std::ostringstream os;
  os.precision(precision);
  os << v;
  return os.str();
}

// Times one call of fn in ms: CUDA events around it on the device's stream, or wall time on the CPU.
class Timer {
 public:
  explicit Timer(Device d) : dev_(d) {
#ifdef TESSERA_WITH_CUDA
    if (dev_.is_cuda()) {
      cudaEventCreate(&start_);
      cudaEventCreate(&stop_);
    }
#endif
  }
  ~Timer() {
#ifdef TESSERA_WITH_CUDA
    if (dev_.is_cuda()) cudaEventDestroy(start_), cudaEventDestroy(stop_);
#endif
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  double ms(const std::function<void()>& fn) {
#ifdef TESSERA_WITH_CUDA
    if (dev_.is_cuda()) {
      auto s = static_cast<cudaStream_t>(cuda::stream(dev_.index));
      check(cudaEventRecord(start_, s));
      fn();
      check(cudaEventRecord(stop_, s));
      check(cudaEventSynchronize(stop_));
      float t = 0;
      check(cudaEventElapsedTime(&t, start_, stop_));
      return t;
    }
#endif
    return bench::time_median_ms(fn, 0, 1);
  }

 private:
#ifdef TESSERA_WITH_CUDA
  static void check(cudaError_t e) {
    TS_CHECK(e == cudaSuccess, DeviceError, "lstm_step: CUDA event call failed: " << cudaGetErrorString(e));
  }
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
#endif
  Device dev_;
};

// Medians of fns timed in turn (after `warmup` untimed rounds).
std::vector<double> interleaved_ms(Timer& timer, const std::vector<std::function<void()>>& fns, int warmup,
                                   int repeats) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> ms(fns.size());
  for (int i = 0; i < repeats; ++i)
    for (size_t k = 0; k < fns.size(); ++k) ms[k].push_back(timer.ms(fns[k]));
  std::vector<double> out;
  for (auto& v : ms) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    out.push_back(v[v.size() / 2]);
  }
  return out;
}

// One way of running the step: a layer and, for compiled ways, its compiled step.
void bench_recurrence_ops(BenchReport& report, Timer& timer, const Options& o, Device dev, int64_t hidden,
                          const LayoutPtr& layout, DType dt, const std::string& shape, double step_ms);

struct Way {
  std::string name;
  std::unique_ptr<nn::LSTM> lstm;
  std::unique_ptr<CompiledStep> step;
  std::string failure;  // why the way could not run (e.g. capture failed); empty when fine
};

// Benchmarks one (hidden, dtype); returns false when a way's first step disagrees with the cuDNN path.
bool bench_case(BenchReport& report, Timer& timer, const Options& o, Device dev, int64_t hidden, DType dt,
                std::map<std::pair<int64_t, DType>, double>& cudnn_graph_ms) {
  const int64_t b = o.batch, t = o.steps;
  const std::string shape = "B" + std::to_string(b) + " T" + std::to_string(t) + " H" + std::to_string(hidden);
  const std::string tag = std::string(" ") + dtype_name(dt);
  const nn::LSTMOptions opts = nn::LSTMOptions(hidden, hidden).forget_bias(1.0).dtype(dt);
  const Tensor x = cast(normal({t, b, hidden}, 0.0, 1.0, DType::f32), dt).to(dev);

  constexpr int kWays = 5;
  std::vector<Way> ways(kWays);
  const char* names[] = {"cudnn eager", "tessera eager", "tessera graph", "cudnn graph", "tessera step-wise graph"};
  for (int k = 0; k < kWays; ++k) {
    Generator gen(7);  // the same parameters in every way
    ways[k].name = names[k];
    ways[k].lstm = std::make_unique<nn::LSTM>(nn::LSTMOptions(opts).cudnn(k == 0 || k == 3).fuse(k != 4), gen);
    ways[k].lstm->to(dev);
  }
  auto loss_of = [](const nn::LSTM& m, const Tensor& in) { return sum(m.forward(in).output); };
  for (int k : {2, 3, 4}) {
    const nn::LSTM& m = *ways[k].lstm;
    try {
      ways[k].step = std::make_unique<CompiledStep>(
          compile([&m, loss_of](const Inputs& in) { return loss_of(m, in.at("x")); }, m.named_parameters(), nullptr,
                  {{"x", x}}));
      ways[k].step->run({{"x", x}});  // the first run captures the graph
    } catch (const std::exception& e) {
      ways[k].failure = e.what();
      ways[k].step.reset();
    }
  }

  // First step of every way: loss and d loss / d wx.weight against the cuDNN path's.
  std::vector<double> loss(kWays);
  std::vector<Tensor> dwx(kWays);
  for (int k = 0; k < kWays; ++k) {
    Way& w = ways[k];
    if (w.step) {
      loss[k] = w.step->run({{"x", x}});
      dwx[k] = w.step->fetch("grad/wx.weight");
    } else if (w.failure.empty()) {
      w.lstm->zero_grad();
      Tensor l = loss_of(*w.lstm, x);
      l.backward();
      loss[k] = l.item<double>();
      for (const auto& p : w.lstm->named_parameters())
        if (p.name == "wx.weight") dwx[k] = p.tensor.grad();
    }
  }
  const double tol = dt == DType::f32 ? 1e-4 : 3e-2;
  const std::vector<float> g0 = dwx[0].to_vector<float>();
  double g_scale = 0;
  for (float v : g0) g_scale = std::max(g_scale, static_cast<double>(std::abs(v)));
  bool ok = true;
  for (int k = 1; k < kWays; ++k) {
    if (!ways[k].failure.empty()) {
      report.note(ways[k].name + tag + " " + shape, "not run: " + ways[k].failure);
      std::cout << ways[k].name << tag << " " << shape << ": not run: " << ways[k].failure << std::endl;
      continue;
    }
    const std::vector<float> g = dwx[k].to_vector<float>();
    double g_diff = 0;
    for (size_t i = 0; i < g.size(); ++i) g_diff = std::max(g_diff, std::abs(static_cast<double>(g[i]) - g0[i]));
    const double rel = std::abs(loss[k] - loss[0]) / std::max(std::abs(loss[0]), 1e-30);
    const double grel = g_diff / std::max(g_scale, 1e-30);
    const bool good = rel <= tol && grel <= tol;
    ok = ok && good;
    const std::string check = "loss " + fmt(loss[k], 9) + " vs " + fmt(loss[0], 9) + " (relative diff " +
                              fmt(rel, 3) + "), d/d wx max |diff| / max |grad| " + fmt(grel, 3) +
                              (good ? "" : " MISMATCH (over " + fmt(tol) + ")");
    report.note(ways[k].name + tag + " " + shape + " step 1 vs cudnn eager", check);
    std::cout << ways[k].name << tag << " " << shape << ": " << check << std::endl;
  }

  std::vector<std::function<void()>> fns;
  std::vector<int> timed;
  for (int k = 0; k < kWays; ++k) {
    Way& w = ways[k];
    if (!w.failure.empty()) continue;
    timed.push_back(k);
    if (w.step) {
      fns.push_back([&w, &x] { w.step->run({{"x", x}}); });
    } else {
      fns.push_back([&w, &x, loss_of] {
        w.lstm->zero_grad();
        loss_of(*w.lstm, x).backward();
      });
    }
  }
  const std::vector<double> ms = interleaved_ms(timer, fns, o.warmup, o.repeats);
  const double base = ms[0];  // cudnn eager is always timed (way 0 never fails)
  for (size_t i = 0; i < timed.size(); ++i) {
    report.add({ways[timed[i]].name + tag, shape, ms[i], ms[i], "ms", base,
                timed[i] == 0 ? "cudnn eager (itself)" : "cudnn eager"});
    if (timed[i] == 3) cudnn_graph_ms[{hidden, dt}] = ms[i];
  }
  if (o.profile)
    for (size_t i = 0; i < timed.size(); ++i)
      if (Way& w = ways[timed[i]]; w.step)
        bench::add_profile(report, "profile " + w.name + tag, shape,
                           bench::profile_printing_shapes(*w.step, {{"x", x}}, "profile " + w.name + tag, shape,
                                                          std::cout),
                           ms[i]);
  if (ways[2].lstm->fused_recurrence(x, t, b) && ways[2].step) {
    const auto at = std::find(timed.begin(), timed.end(), 2);
    bench_recurrence_ops(report, timer, o, dev, hidden, nullptr, dt, shape, ms[at - timed.begin()]);
  }
  const double ref = dev.is_cuda() && b == 64 && t == 256 ? pytorch_ms(hidden, dt) : 0;
  if (ref > 0) report.add({"pytorch (ref)" + tag, shape, ref, ref, "ms", base, "cudnn eager (this run)"});
  return ok;
}


// The recurrence alone (fused layers on the GPU): lstm_recurrence forward and
// lstm_recurrence_backward on random operands of the layer's shape, each timed by itself, in µs
// per time step: "recurrence fwd / bwd" on the production kernels (TESSERA_LSTM_WGMMA=0), with
// their variants, and where this GPU and build have them the wgmma kernels (=1; the layer rows
// above run the default choice, lstm_persistent.h's wgmma_wanted). Ratio: to the layer's compiled
// fwd+bwd step time per time step (`step_ms` / T), the share of the whole step.
void bench_recurrence_ops(BenchReport& report, Timer& timer, const Options& o, Device dev, int64_t hidden,
                          const LayoutPtr& layout, DType dt, const std::string& shape, double step_ms) {
  const int64_t b = o.batch, t = o.steps;
  const Tensor gx = cast(normal({t, b, 4 * hidden}, 0.0, 1.0, DType::f32), dt).to(dev);
  const Tensor h0 = zeros({b, hidden}, TensorOptions(dt).device(dev));
  const Shape ws = layout ? Shape({layout->nnz(), layout->block_size(), layout->block_size()}) : Shape({hidden, 4 * hidden});
  const Tensor wh = cast(normal(ws, 0.0, 0.03, DType::f32), dt).to(dev);
  std::vector<Tensor> fwd = call<op::LstmRecurrence>({layout, 1.0, nullptr}, {gx, h0, h0, wh});
  const Tensor dy = cast(normal({t, b, hidden}, 0.0, 1.0, DType::f32), dt).to(dev);
  auto forward = [&] { call<op::LstmRecurrence>({layout, 1.0, nullptr}, {gx, h0, h0, wh}); };
  auto backward = [&] { call<op::LstmRecurrenceBackward>({layout}, {dy, h0, h0, fwd[3], fwd[4], h0, wh}); };
  // fn's value with the environment variable `name` set to `value`, restored afterwards; with_env:
  // fn as a function that does that each time it runs
  auto with_env_value = [](const char* name, const char* value, const auto& fn) {
    const char* before = std::getenv(name);
    const std::string saved = before ? before : "";
    setenv(name, value, 1);
    const auto restore = [&] {
      if (before) {
        setenv(name, saved.c_str(), 1);
      } else {
        unsetenv(name);
      }
    };
    try {
      auto v = fn();
      restore();
      return v;
    } catch (...) {
      restore();
      throw;
    }
  };
  auto with_env = [with_env_value](const char* name, const char* value, const std::function<void()>& fn) {
    return std::function<void()>([=] { with_env_value(name, value, [&] { fn(); return 0; }); });
  };
  // rows "recurrence fwd / bwd": the production kernels (TESSERA_LSTM_WGMMA=0)
  const std::function<void()> production_forward = with_env("TESSERA_LSTM_WGMMA", "0", forward);
  const std::function<void()> production_backward = with_env("TESSERA_LSTM_WGMMA", "0", backward);
  std::vector<std::function<void()>> fns{production_forward, production_backward};
  std::vector<std::string> names{"recurrence fwd", "recurrence bwd"};
#ifdef TESSERA_WITH_CUDA
  if (dev.is_cuda())  // how each direction's kernel holds W_h (resident, split over blocks, or streamed)
    for (bool bwd : {false, true}) {
      const cuda::RecurrencePlan p = cuda::plan_recurrence(dev.index, dt, b, hidden, layout, bwd);
      std::ostringstream os;
      os << p.grid << " blocks of " << p.units << "-unit groups, clusters of " << p.cluster << ", ring " << p.ring
         << " x " << p.stage_k << " K, " << p.smem << " B shared; "
         << (p.stream_rows > 0 ? "W streamed: " + std::to_string(p.resident_stages) + " resident stages, " +
                                     std::to_string(p.stream_rows) + " rows from L2 per step"
             : p.packing      ? "W resident, groups split over blocks"
                              : "W resident");
      report.note(std::string(bwd ? "plan bwd " : "plan fwd ") + shape, os.str());
    }
  // the block-sparse recurrence on wgmma (TESSERA_LSTM_WGMMA=1), where this GPU and build have it
  if (layout && dev.is_cuda() && cuda::wgmma_sparse_forward_unfit(dev.index, dt, b, hidden, layout).empty()) {
    fns.push_back(with_env("TESSERA_LSTM_WGMMA", "1", forward));
    names.push_back("recurrence fwd, wgmma");
  }
  if (layout && dev.is_cuda() && cuda::wgmma_sparse_backward_unfit(dev.index, dt, b, hidden, layout).empty()) {
    fns.push_back(with_env("TESSERA_LSTM_WGMMA", "1", backward));
    names.push_back("recurrence bwd, wgmma");
  }
#endif
  if (!layout && dev.is_cuda()) {
    // the dense layers' K split over clusters forced to each size (TESSERA_LSTM_CLUSTER), same run
    for (const char* c : {"1", "2"}) {
      const std::string how = std::string(c) == "1" ? ", no cluster split" : std::string(", clusters of ") + c;
      for (int dir = 0; dir < 2; ++dir) {
        fns.push_back(with_env("TESSERA_LSTM_CLUSTER", c, dir == 0 ? production_forward : production_backward));
        names.push_back(std::string(dir == 0 ? "recurrence fwd" : "recurrence bwd") + how);
      }
    }
#ifdef TESSERA_WITH_CUDA
    // the dense recurrence on wgmma (TESSERA_LSTM_WGMMA=1), where this GPU and build have it: each
    // direction with its operand multicast over clusters of 1, 2 and 4 blocks
    if (cuda::wgmma_forward_unfit(dev.index, dt, b, hidden, nullptr).empty())
      for (int dir = 0; dir < 2; ++dir)
        for (const char* c : {"1", "2", "4"}) {
          const bool fits = with_env_value("TESSERA_LSTM_WGMMA_CLUSTER", c, [&] {
            return cuda::wgmma_cluster(dev.index, dt, b, hidden, nullptr, dir == 1) > 0;
          });
          if (!fits) continue;
          const std::function<void()> run = dir == 0 ? std::function<void()>(forward) : std::function<void()>(backward);
          fns.push_back(with_env("TESSERA_LSTM_WGMMA", "1", with_env("TESSERA_LSTM_WGMMA_CLUSTER", c, run)));
          names.push_back(std::string(dir == 0 ? "recurrence fwd" : "recurrence bwd") + ", wgmma, clusters of " + c);
        }
#endif
  }
  const std::vector<double> ms = interleaved_ms(timer, fns, o.warmup, o.repeats);
  for (size_t k = 0; k < fns.size(); ++k) {
    const double us = ms[k] * 1e3 / t;
    report.add({names[k] + " " + dtype_name(dt), shape, ms[k], us, "us/step", step_ms * 1e3 / t,
                "compiled layer step / T"});
  }
}

#ifdef TESSERA_WITH_CUDA
// The floor of a persistent recurrence's step on this GPU (cuda::launch_step_floor): the grid
// barrier alone, and one dependent exchange between blocks plus the barrier; a fused layer's
// fwd+bwd costs at least two such steps per time step. Then the exchange and barrier with a
// cluster barrier per round, in clusters of 2 and 4 (what splitting a step's K over a cluster
// would add), or a note with the driver's refusal. Ratio: to the cuDNN graph of the first dense
// hidden size per time step, when measured.
void bench_step_floor(BenchReport& report, Timer& timer, const Options& o,
                      const std::map<std::pair<int64_t, DType>, double>& cudnn_graph_ms) {
  constexpr int64_t kRounds = 4096;
  double base = 0;
  std::string base_name = "itself";
  if (!cudnn_graph_ms.empty()) {
    const auto& first = *cudnn_graph_ms.begin();
    base = first.second * 1e3 / static_cast<double>(o.steps);
    base_name = "cudnn graph H" + std::to_string(first.first.first) + " / T";
  }
  auto add = [&](const std::string& name, const std::string& grid, double ms) {
    const double v = ms * 1e3 / kRounds;
    report.add({name, grid, ms, v, "us/step", base > 0 ? base : v, base_name});
  };
  const std::vector<double> ms = interleaved_ms(
      timer, {[] { cuda::launch_step_floor(0, kRounds, false); }, [] { cuda::launch_step_floor(0, kRounds, true); }},
      std::max(1, o.warmup), o.repeats);
  add("step floor: grid barrier", "one block per SM", ms[0]);
  add("step floor: exchange + grid barrier", "one block per SM", ms[1]);
  // Lab (issue 16): dense H 1024 steps whose product runs on wgmma from shared memory fed by TMA
  // (cuda::wgmma_step_floor): forward over all of K and over half of it (what each block of a
  // pair reads), backward likewise (K 4H and 2H); then both over all of K with the operand
  // multicast in clusters of 2 and 4 (a variant the driver refuses gets a note). kWgmmaSteps steps
  // (a holds every step's output).
  constexpr int64_t kWgmmaSteps = 512;
  try {
    const Device gpu = Device::cuda(0);
    auto bf16 = [&](const Shape& s, double std) { return cast(normal(s, 0.0, std, DType::f32), DType::bf16).to(gpu); };
    const Tensor wt = bf16({4096, 1024}, 0.03), w = bf16({1024, 4096}, 0.03);
    const Tensor h = bf16({(kWgmmaSteps + 1) * 64, 1024}, 0.5), dpre = bf16({(kWgmmaSteps + 1) * 64, 4096}, 0.5);
    struct Variant {
      std::string name;
      std::function<void()> run;
    };
    std::vector<Variant> variants = {{"forward H1024, K 1024", [&] { cuda::wgmma_step_floor(h, wt, 1024); }},
                                     {"forward H1024, K 512", [&] { cuda::wgmma_step_floor(h, wt, 512); }},
                                     {"backward H1024, K 4096", [&] { cuda::wgmma_step_floor(dpre, w, 4096, true); }},
                                     {"backward H1024, K 2048", [&] { cuda::wgmma_step_floor(dpre, w, 2048, true); }}};
    for (int cluster : {2, 4}) {
      const std::string c = ", multicast in clusters of " + std::to_string(cluster);
      variants.push_back(
          {"forward H1024, K 1024" + c, [&, cluster] { cuda::wgmma_step_floor(h, wt, 1024, false, cluster); }});
      variants.push_back(
          {"backward H1024, K 4096" + c, [&, cluster] { cuda::wgmma_step_floor(dpre, w, 4096, true, cluster); }});
    }
    std::vector<Variant> runnable;
    for (Variant& v : variants) {
      try {
        v.run();  // refused here if at all
        runnable.push_back(v);
      } catch (const NotImplementedError& e) {
        report.note("step floor: wgmma " + v.name, std::string("not run: ") + e.what());
      }
    }
    std::vector<std::function<void()>> fns;
    for (const Variant& v : runnable) fns.push_back(v.run);
    const std::vector<double> ms_w = interleaved_ms(timer, fns, std::max(1, o.warmup), o.repeats);
    for (size_t i = 0; i < runnable.size(); ++i) {
      const double v = ms_w[i] * 1e3 / kWgmmaSteps;
      report.add({"step floor: wgmma " + runnable[i].name, "128 blocks of 8 units", ms_w[i], v, "us/step",
                  base > 0 ? base : v, base_name});
    }
  } catch (const std::exception& e) {
    report.note("step floor: wgmma", std::string("not run: ") + e.what());
  }
  for (int cluster : {2, 4}) {
    const std::string name = "step floor: exchange + cluster + grid barrier";
    try {
      const int grid = cuda::launch_step_floor(0, 1, true, cluster);  // refused here if at all
      const std::vector<double> c = interleaved_ms(
          timer, {[cluster] { cuda::launch_step_floor(0, kRounds, true, cluster); }}, std::max(1, o.warmup), o.repeats);
      add(name, std::to_string(grid) + " blocks, clusters of " + std::to_string(cluster), c[0]);
    } catch (const std::exception& e) {
      report.note(name + " (clusters of " + std::to_string(cluster) + ")", std::string("not run: ") + e.what());
    }
  }
}
#endif

struct SparseSpec {
  int64_t hidden = 0, bs = 0;
  double density = 0;
  bool ba = false;        ///< the Barabási–Albert layout
  bool balanced = false;  ///< every block row and column the same count (balanced_random_layout)
};

// "H:density:bs", "H:density:bs:ba" or "H:density:bs:balanced" (ValueError naming the text
// otherwise; the layer checks H against bs).
SparseSpec parse_sparse(const std::string& spec) {
  SparseSpec p;
  char c1 = 0, c2 = 0;
  std::string head = spec, kind;
  const size_t third = spec.find(':', spec.find(':', spec.find(':') + 1) + 1);
  if (third != std::string::npos) {
    head = spec.substr(0, third);
    kind = spec.substr(third + 1);
  }
  std::istringstream in(head);
  in >> p.hidden >> c1 >> p.density >> c2 >> p.bs;
  p.ba = kind == "ba";
  p.balanced = kind == "balanced";
  TS_CHECK(in && in.eof() && c1 == ':' && c2 == ':' && p.hidden > 0 && p.density > 0 && p.density <= 1 &&
               BlockLayout::valid_block_size(p.bs) && (third == std::string::npos || p.ba || p.balanced),
           ValueError,
           "--sparse '" << spec
                        << "' must be H:density:bs[:ba|:balanced] with density in (0, 1] and bs 8/16/32/64, e.g. "
                           "4096:0.0625:32");
  return p;
}

// One block-sparse layer: tessera's LSTM eager and compiled (see the header).
void bench_sparse_case(BenchReport& report, Timer& timer, const Options& o, Device dev, const SparseSpec& p, DType dt,
                       const std::map<std::pair<int64_t, DType>, double>& cudnn_graph_ms) {
  const int64_t hidden = p.hidden, bs = p.bs;
  const double density = p.density;
  const int64_t b = o.batch, t = o.steps;
  const std::string shape = "B" + std::to_string(b) + " T" + std::to_string(t) + " H" + std::to_string(hidden) +
                            " d" + fmt(density, 4) + " bs" + std::to_string(bs) +
                            (p.ba ? " ba" : p.balanced ? " balanced" : "");
  const std::string tag = std::string(" ") + dtype_name(dt);
  Generator gen(7);
  nn::LSTMOptions lo = nn::LSTMOptions(hidden, hidden).forget_bias(1.0).dtype(dt).block_size(bs).density(density);
  if (p.ba) {  // as CharLSTMLM builds it (models/char_lstm_lm.cpp) at seed 1
    const int64_t n = hidden / bs, m = std::clamp<int64_t>(std::llround(density * n / 2), 1, n - 1);
    const LayoutPtr l = barabasi_albert_layout(hidden, hidden, bs, m, 1001);
    lo.input_layout(l).recurrent_layout(l);
  } else if (p.balanced) {  // each block column (and row) density·H/bs blocks: no busiest group
    const int64_t n = hidden / bs, per_col = std::clamp<int64_t>(std::llround(density * n), 1, n);
    const LayoutPtr l = balanced_random_layout(hidden, hidden, bs, per_col, 1001);
    lo.input_layout(l).recurrent_layout(l);
  }
  nn::LSTM lstm(lo, gen);
  lstm.to(dev);
  Generator gen2(7);
  nn::LSTM stepwise(nn::LSTMOptions(lo).fuse(false), gen2);  // the same parameters, step by step
  stepwise.to(dev);
  const Tensor x = cast(normal({t, b, hidden}, 0.0, 1.0, DType::f32), dt).to(dev);
  auto loss_of = [](const nn::LSTM& m, const Tensor& v) { return sum(m.forward(v).output); };
  auto compiled = [&](const nn::LSTM& m, std::string& failure) {
    std::unique_ptr<CompiledStep> step;
    try {
      step = std::make_unique<CompiledStep>(compile([&m, loss_of](const Inputs& v) { return loss_of(m, v.at("x")); },
                                                    m.named_parameters(), nullptr, {{"x", x}}));
      step->run({{"x", x}});
    } catch (const std::exception& e) {
      failure = e.what();
      step.reset();
    }
    return step;
  };
  std::string failure, failure_sw;
  std::unique_ptr<CompiledStep> step = compiled(lstm, failure), step_sw = compiled(stepwise, failure_sw);
  const bool fused = lstm.fused_recurrence(x, t, b);
  if (step && step_sw) {  // the fused and the step-wise path agree on the first step's loss
    const double a = step->run({{"x", x}}), c = step_sw->run({{"x", x}});
    report.note("tessera sparse" + tag + " " + shape + " fused vs step-wise loss",
                fmt(a, 9) + " vs " + fmt(c, 9) + (fused ? "" : " (the fused kernel does not take this layer)"));
  }
  std::vector<std::function<void()>> fns{[&] {
    lstm.zero_grad();
    loss_of(lstm, x).backward();
  }};
  if (step) fns.push_back([&] { step->run({{"x", x}}); });
  if (step_sw) fns.push_back([&] { step_sw->run({{"x", x}}); });
  const std::vector<double> ms = interleaved_ms(timer, fns, o.warmup, o.repeats);
  // the baseline: the cuDNN graph of the dense layer with this recurrent parameter count, if measured
  const int64_t dense_h = std::llround(hidden * std::sqrt(density));
  const auto it = cudnn_graph_ms.find({dense_h, dt});
  const bool have = it != cudnn_graph_ms.end();
  const double base = have ? it->second : ms[0];
  const std::string base_name = have ? "cudnn graph H" + std::to_string(dense_h) : "tessera sparse eager (itself)";
  report.add({"tessera sparse eager" + tag, shape, ms[0], ms[0], "ms", base, base_name});
  if (step) report.add({"tessera sparse graph" + tag, shape, ms[1], ms[1], "ms", base, base_name});
  if (step_sw) {
    const double v = ms[step ? 2 : 1];
    report.add({"tessera sparse step-wise graph" + tag, shape, v, v, "ms", base, base_name});
  }
  if (!failure.empty()) report.note("tessera sparse graph" + tag + " " + shape, "not run: " + failure);
  if (!failure_sw.empty()) report.note("tessera sparse step-wise graph" + tag + " " + shape, "not run: " + failure_sw);
  if (!fused) report.note("tessera sparse" + tag + " " + shape, "step by step: the fused kernel does not take this layer");
  if (o.profile && step) {
    const std::string label = "profile tessera sparse graph" + tag;
    bench::add_profile(report, label, shape,
                       bench::profile_printing_shapes(*step, {{"x", x}}, label, shape, std::cout), ms[1]);
  }
  if (fused && step) bench_recurrence_ops(report, timer, o, dev, hidden, lstm.recurrent_weight_layout(), dt, shape, ms[1]);
  const LayoutPtr& l = lstm.recurrent_layout();  // [H, H], one gate's; W_h [H, 4H] tiles it four times
  if (l) {
    const double e = static_cast<double>(dtype_size(dt));
    const double w_bytes = 4.0 * static_cast<double>(l->nnz()) * bs * bs * e;
    const double bytes = w_bytes + static_cast<double>(l->nnz()) * bs * b * e;  // W_h + an h strip an entry
    report.note("traffic " + tag.substr(1) + " " + shape,
                fmt(bytes / 1e6, 4) + " MB per step forward (W_h " + fmt(w_bytes / 1e6, 4) +
                    " MB); x T and 3x for fwd+bwd at 8.4 TB/s: " + fmt(3.0 * t * bytes / 8.4e12 * 1e3, 4) + " ms");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera dense LSTM training step: its own LSTM against the cuDNN path, eager and compiled"};
  Options o;
  app.add_option("--device", o.device, "cuda (default) or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--hidden", o.hidden, "dense hidden sizes (input size = hidden; 0: no dense rows)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--batch", o.batch, "batch size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--steps", o.steps, "sequence length T")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--dtypes", o.dtypes, "f32, bf16, f16 (comma-separated)")->delimiter(',');
  app.add_option("--sparse", o.sparse,
                 "block-sparse layers H:density:bs[:ba|:balanced] (comma-separated; none: no sparse rows)")
      ->delimiter(',');
  app.add_option("--repeats", o.repeats, "timed steps per way (median reported)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed steps per way first")->check(CLI::Range(0, 100000));
  app.add_flag("--quick", o.quick, "tiny sizes and few steps (a smoke run)");
  app.add_flag("--profile", o.profile, "each compiled step's time by op, from one more step run plainly, op by op");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--hidden")) o.hidden = {32, 48};
    if (!app.count("--batch")) o.batch = 4;
    if (!app.count("--steps")) o.steps = 8;
    if (!app.count("--repeats")) o.repeats = 2;
    if (!app.count("--warmup")) o.warmup = 1;
    if (!app.count("--sparse")) o.sparse = {"64:0.5:16", "64:0.5:16:ba"};
  }
  if (o.sparse == std::vector<std::string>{"none"}) o.sparse.clear();
  if (o.hidden == std::vector<int64_t>{0}) o.hidden.clear();

  try {
    std::vector<SparseSpec> sparse;
    for (const std::string& spec : o.sparse) sparse.push_back(parse_sparse(spec));
    const Device dev = o.device == "cuda" ? Device::cuda(0) : Device::cpu();
    TS_CHECK(!dev.is_cuda() || cuda_available(), DeviceError, "--device cuda, but no GPU is usable (try --device cpu)");
    BenchReport report("lstm_step");
    report.note("device", o.device);
    report.note("step", "forward + backward of sum(output), zero_grad; one layer, input = hidden, forget_bias 1");
    report.note("timing", std::to_string(o.repeats) + " steps after " + std::to_string(o.warmup) +
                              " warm-up per way, in turn; median; " +
                              (dev.is_cuda() ? "CUDA events on tessera's stream" : "wall time"));
    report.note("ratio", "time / the cuDNN path's eager time in the same run (lower is faster)");
    report.note("pytorch (ref)", "PyTorch 2.11 nn.LSTM (cuDNN) forward + backward, same H200, measured separately");
    bool tf32 = false;
#ifdef TESSERA_WITH_CUDA
    tf32 = dev.is_cuda() && cuda::allow_tf32();
#endif
    report.note("f32 math", std::string(tf32 ? "TF32 tensor cores allowed (TESSERA_ALLOW_TF32=1)"
                                             : "full f32, no TF32 (set TESSERA_ALLOW_TF32=1 to allow it)") +
                                "; PyTorch's cuDNN RNNs allow TF32 by default (torch.backends.cudnn.allow_tf32)");
    if (const char* res = std::getenv("TESSERA_LSTM_RESIDENT_STAGES"))
      report.note("TESSERA_LSTM_RESIDENT_STAGES", std::string(res) + " (W_h streamed past that many resident stages)");
    if (const char* balance = std::getenv("TESSERA_LSTM_BALANCE"))
      report.note("TESSERA_LSTM_BALANCE", std::string(balance) + " (1: layouts that fit split where that balances the blocks)");
    // the block-sparse kernels' lab switches that this run sets (docs/bsmm_kernels.md), so that its
    // table says which forms it timed
    for (const char* name : {"TESSERA_BSMM_DW_PAIR", "TESSERA_BSMM_DW_PAIR_SUMS", "TESSERA_BSMM_DW_PACE",
                             "TESSERA_BSMM_QUADS", "TESSERA_BSMM_PAIRS"})
      if (const char* v = std::getenv(name)) report.note(name, std::string(v) + " (set in the environment)");
    Timer timer(dev);
    bool ok = true;
    std::map<std::pair<int64_t, DType>, double> cudnn_graph_ms;
    for (int64_t h : o.hidden)
      for (const std::string& name : o.dtypes) {
        const DType dt = dtype_from_name(name);
        ok = bench_case(report, timer, o, dev, h, dt, cudnn_graph_ms) && ok;
      }
    for (const SparseSpec& spec : sparse)
      for (const std::string& name : o.dtypes) bench_sparse_case(report, timer, o, dev, spec, dtype_from_name(name),
                                                                 cudnn_graph_ms);
#ifdef TESSERA_WITH_CUDA
    if (dev.is_cuda()) bench_step_floor(report, timer, o, cudnn_graph_ms);
#endif
    report.print(std::cout);
    if (!o.json.empty()) report.write_json(o.json);
    if (!ok) {
      std::cerr << "lstm_step: a way's first step disagrees with the cuDNN path's (see the notes)\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "lstm_step: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
