// Eager against compiled training steps on CPU f32: step time and step memory, for the library's
// models (models/): a one-layer dense models::CharLSTMLM and a 2-layer models::TransformerLM.
//
//   executor [--steps N] [--warmup N] [--quick] [--json FILE] [--dump-dot FILE]
//
// A step is forward + backward + AdamW update. Every model is built several times from the
// same seed: one copy trains eagerly, the others through compile(). Their first steps run the
// same kernels in the same order, so the losses (and the updated parameters) must agree
// bitwise; the program checks that and fails when they differ beyond rounding.
// - time: median of --steps steps after --warmup, all ways timed in turn (eager, graph, ...),
//   in tokens/s. Baseline: the eager step (for recompute: the graph step without it).
// - memory, in MiB: the eager step's high-water mark of tensor memory above what was in use
//   before it (memory_stats().peak - current: activations, gradients, optimizer temporaries;
//   parameters and optimizer state excluded), against the compiled step's planned arena (every
//   intermediate of the step: executor().plan().arena_bytes) and the naive total (every
//   intermediate in a buffer of its own). Baseline: the eager high-water mark (the target is
//   a planned arena <= 60% of it). Scratch memory that kernels take from malloc directly (Eigen's GEMM
//   packing) is not tensor memory and is counted in neither.
// - each model once more with recompute regions (graph::recompute): the transformer's blocks
//   (config "recompute"), the LSTM's time steps in 8 chunks (config "recompute_chunk"). Their
//   activations are recomputed during backward instead of kept: a smaller arena for extra
//   forward work.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <omp.h>
#include <sstream>
#include <thread>

#include "common/bench_report.h"
#include "common/random_tokens.h"
#include "core/graph/compile.h"
#include "kernels/ops.h"
#include "models/char_lstm_lm.h"
#include "models/transformer_lm.h"
#include "optim/optim.h"

using namespace tessera;
using bench::BenchReport;
using Inputs = std::map<std::string, Tensor>;

namespace {

constexpr int64_t kSeed = 1234;  // the models' config seed: parameters and layouts

struct Options {
  int steps = 20;
  int warmup = 3;
  bool quick = false;
  std::string json, dump_dot;
};

// One copy of a model with its own AdamW. Copies made from the same config start from the
// same parameters (the config's seed; the recompute settings do not change them).
template <class Model>
struct Trainee {
  template <class Config>
  explicit Trainee(const Config& cfg)
      : model(cfg), opt(model.parameters(), optim::AdamWOptions(1e-3).weight_decay(0.01)) {}
  Model model;
  optim::AdamW opt;
};

// The LSTM benchmark: a dense one-layer CharLSTMLM (embedding width = hidden) and its batch.
struct LstmBench {
  int64_t batch = 32, seq = 64;
  models::CharLSTMLMConfig model;
};

// The transformer benchmark: a TransformerLM (untied output) and its batch.
struct TransformerBench {
  int64_t batch = 16;
  models::TransformerLMConfig model;
};

// A compiled way of running the step, and what its figures are compared with.
struct Variant {
  std::string name;           // "graph", "graph+recompute"
  CompiledStep* step;
  std::vector<Tensor> params;  // its copy's parameters, for the first-step check
  int baseline = 0;            // 0: eager; k: variants[k - 1]
};

// Bytes of tensor memory `fn` had allocated at its high-water mark, above what was in use before.
size_t high_water_bytes(const std::function<void()>& fn) {
  const size_t before = memory_stats(Device::cpu()).current;
  reset_peak_memory(Device::cpu());
  fn();
  return memory_stats(Device::cpu()).peak - before;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<float> x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    for (size_t j = 0; j < x.size(); ++j) d = std::max(d, std::abs(static_cast<double>(x[j]) - y[j]));
  }
  return d;
}

std::string fmt(double v, int precision = 6) {
  std::ostringstream os;
  os.precision(precision);
  os << v;
  return os.str();
}

// Runs and reports one model: `eager` is its eager step (returns the loss), `variants` its
// compiled steps, all fed `feeds`. Returns false when a compiled first step disagrees with eager.
bool measure(BenchReport& report, const std::string& model, const std::string& shape, int64_t tokens,
             const std::function<double()>& eager, const std::vector<Tensor>& eager_params,
             const std::vector<Variant>& variants, const Inputs& feeds, const Options& o) {
  bool ok = true;
  // First step of every copy: same parameters, same data, same kernels -> same loss and update.
  const double eager_loss = eager();
  for (const Variant& v : variants) {
    const double loss = v.step->run(feeds);
    const double loss_diff = std::abs(loss - eager_loss), param_diff = max_abs_diff(v.params, eager_params);
    const bool bitwise = loss_diff == 0 && param_diff == 0;
    const bool close = loss_diff <= 1e-5 * std::max(1.0, std::abs(eager_loss)) && param_diff <= 1e-6;
    ok = ok && close;
    report.note(model + " step 1, " + v.name + " vs eager",
                "loss " + fmt(loss, 9) + " vs " + fmt(eager_loss, 9) + ", max |diff| " + fmt(loss_diff) +
                    "; updated parameters max |diff| " + fmt(param_diff) +
                    (bitwise ? " (bitwise equal)" : close ? " (NOT bitwise equal)" : " (MISMATCH)"));
  }

  // Memory: the eager step's high-water mark; the compiled steps' plans (and, as a check,
  // what their run allocates beyond the arena made at compile time).
  const size_t eager_peak = high_water_bytes([&] { eager(); });
  std::vector<size_t> run_alloc;
  for (const Variant& v : variants) run_alloc.push_back(high_water_bytes([&] { v.step->run(feeds); }));

  std::vector<std::function<void()>> ways = {[&] { eager(); }};
  for (const Variant& v : variants) ways.push_back([&] { v.step->run(feeds); });
  const std::vector<double> ms = bench::time_interleaved_median_ms(ways, o.warmup, o.steps);

  auto tok_s = [&](double t) { return static_cast<double>(tokens) / (t * 1e-3); };
  report.add({model + " step eager", shape, ms[0], tok_s(ms[0]), "tok/s", tok_s(ms[0]), "eager step (itself)"});
  for (size_t k = 0; k < variants.size(); ++k) {
    const Variant& v = variants[k];
    const double base = ms[v.baseline];
    const std::string base_name = v.baseline == 0 ? "eager step" : variants[v.baseline - 1].name + " step";
    report.add({model + " step " + v.name, shape, ms[k + 1], tok_s(ms[k + 1]), "tok/s", tok_s(base), base_name});
  }
  report.add({model + " peak eager", shape, 0, mib(eager_peak), "MiB", mib(eager_peak), "eager peak (itself)"});
  for (size_t k = 0; k < variants.size(); ++k) {
    const Variant& v = variants[k];
    const graph::MemoryPlan& plan = v.step->executor().plan();
    const double base = mib(eager_peak);  // every arena against eager's high-water mark (the target)
    const std::string base_name = "eager peak";
    report.add({model + " arena " + v.name, shape, 0, mib(plan.arena_bytes), "MiB", base, base_name});
    if (v.baseline == 0) report.add({model + " naive " + v.name, shape, 0, mib(plan.naive_bytes), "MiB", base, base_name});
    report.note(model + " " + v.name + " run: tensor memory allocated besides the arena",
                std::to_string(run_alloc[k]) + " bytes (the lr and step feeds, the fetched loss)");
  }
  for (const Variant& v : variants)
    std::cout << "== " << model << " " << v.name << ": CompiledStep::summary()\n" << v.step->summary() << "\n";
  return ok;
}

std::string lstm_shape(const LstmBench& b) {
  return "B" + std::to_string(b.batch) + " T" + std::to_string(b.seq) + " H" + std::to_string(b.model.hidden) +
         " V" + std::to_string(b.model.vocab);
}

std::string transformer_shape(const TransformerBench& b) {
  const models::TransformerLMConfig& c = b.model;
  return "B" + std::to_string(b.batch) + " T" + std::to_string(c.seq_len) + " C" + std::to_string(c.width) + " h" +
         std::to_string(c.heads) + " L" + std::to_string(c.layers);
}

bool bench_lstm(BenchReport& report, const LstmBench& b, const Options& o) {
  const models::CharLSTMLMConfig& cfg = b.model;
  const int64_t n = b.batch * b.seq;
  const Inputs feeds = {{"ids", reshape(bench::random_tokens(n, cfg.vocab, 11), {b.seq, b.batch})},  // [T, B]
                        {"targets", bench::random_tokens(n, cfg.vocab, 12)}};
  models::CharLSTMLMConfig rc_cfg = cfg;
  rc_cfg.recompute_chunk = std::max<int64_t>(1, b.seq / 8);  // 8 recompute regions over time
  Trainee<models::CharLSTMLM> eager(cfg), graph(cfg), rc(rc_cfg);
  auto loss_of = [](const models::CharLSTMLM& m, const Inputs& in) {
    return m.loss(in.at("ids"), in.at("targets")).loss;
  };
  CompiledStep step = compile([&](const Inputs& in) { return loss_of(graph.model, in); },
                              graph.model.named_parameters(), &graph.opt, feeds);
  CompiledStep rc_step = compile([&](const Inputs& in) { return loss_of(rc.model, in); },
                                 rc.model.named_parameters(), &rc.opt, feeds);
  if (!o.dump_dot.empty()) {
    std::ofstream f(o.dump_dot);
    f << step.to_dot();
    f.close();
    TS_CHECK(f.good(), IOError, "cannot write '" << o.dump_dot << "'");
    std::cout << "wrote the LSTM step's graph to " << o.dump_dot << "\n";
  }
  auto eager_step = [&] {
    Tensor loss = loss_of(eager.model, feeds);
    loss.backward();
    eager.opt.step();
    eager.opt.zero_grad();
    return loss.item<double>();
  };
  return measure(report, "lstm", lstm_shape(b), n, eager_step, eager.model.parameters(),
                 {{"graph", &step, graph.model.parameters(), 0},
                  {"graph+recompute", &rc_step, rc.model.parameters(), /*baseline: graph*/ 1}},
                 feeds, o);
}

bool bench_transformer(BenchReport& report, const TransformerBench& b, const Options& o) {
  const models::TransformerLMConfig& cfg = b.model;
  const int64_t n = b.batch * cfg.seq_len, batch = b.batch;
  const Inputs feeds = {{"ids", bench::random_tokens(n, cfg.vocab, 21)},  // [B*T], batch-major
                        {"targets", bench::random_tokens(n, cfg.vocab, 22)}};
  models::TransformerLMConfig rc_cfg = cfg;
  rc_cfg.recompute = true;  // each block a recompute region
  Trainee<models::TransformerLM> eager(cfg), graph(cfg), rc(rc_cfg);
  auto loss_of = [batch](const models::TransformerLM& m, const Inputs& in) {
    return m.loss(in.at("ids"), in.at("targets"), batch);
  };
  CompiledStep step = compile([&](const Inputs& in) { return loss_of(graph.model, in); },
                              graph.model.named_parameters(), &graph.opt, feeds);
  CompiledStep rc_step = compile([&](const Inputs& in) { return loss_of(rc.model, in); },
                                 rc.model.named_parameters(), &rc.opt, feeds);
  auto eager_step = [&] {
    Tensor loss = loss_of(eager.model, feeds);
    loss.backward();
    eager.opt.step();
    eager.opt.zero_grad();
    return loss.item<double>();
  };
  return measure(report, "tfm", transformer_shape(b), n, eager_step, eager.model.parameters(),
                 {{"graph", &step, graph.model.parameters(), 0},
                  {"graph+recompute", &rc_step, rc.model.parameters(), /*baseline: graph*/ 1}},
                 feeds, o);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera eager vs compiled training step benchmark (CPU f32)"};
  Options o;
  app.add_option("--steps", o.steps, "timed steps per way (median reported)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::Range(0, 100000));
  app.add_flag("--quick", o.quick, "tiny models and few steps (a smoke run)");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  app.add_option("--dump-dot", o.dump_dot, "write the LSTM step's graph (Graphviz) to this file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--steps")) o.steps = 2;
    if (!app.count("--warmup")) o.warmup = 1;
  }

  try {
    LstmBench lstm;  // batch 32, seq 64, hidden (= embedding width) 256, vocab 256
    lstm.model.vocab = 256, lstm.model.embed = 256, lstm.model.hidden = 256, lstm.model.seed = kSeed;
    TransformerBench tfm;  // batch 16, seq 64, width 256, 4 heads, 2 layers, vocab 256, untied output
    tfm.model.vocab = 256, tfm.model.seq_len = 64, tfm.model.width = 256, tfm.model.heads = 4;
    tfm.model.layers = 2, tfm.model.tied = false, tfm.model.seed = kSeed;
    if (o.quick) {
      lstm.batch = 4, lstm.seq = 8, lstm.model.embed = lstm.model.hidden = 32, lstm.model.vocab = 64;
      tfm.batch = 2, tfm.model.seq_len = 8, tfm.model.attn_block = 8, tfm.model.width = 32, tfm.model.vocab = 64;
    }
    BenchReport report("executor");
    report.note("hardware threads", std::to_string(std::thread::hardware_concurrency()));
    report.note("openmp threads", std::to_string(omp_get_max_threads()));
    report.note("steps", std::to_string(o.steps) + " timed after " + std::to_string(o.warmup) + " warm-up, per way");
    bool ok = bench_lstm(report, lstm, o);
    ok = bench_transformer(report, tfm, o) && ok;
    report.print(std::cout);
    if (!o.json.empty()) report.write_json(o.json);
    if (!ok) {
      std::cerr << "executor: a compiled step's first step disagrees with the eager step (see the notes above)\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "executor: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
