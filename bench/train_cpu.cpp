// Training throughput of the example trainers' models on the CPU: one training step run eagerly
// and compiled (core/graph/compile.h), in the same run, in tokens/s.
//
//   train_cpu [--repeats N] [--warmup N] [--quick] [--profile] [--json FILE]
//
// A step is what the trainers run: loss, backward, AdamW update with global-norm clipping at 1.0
// (lr 3e-3, no weight decay: examples/common/trainer.cpp make_optimizer with the default flags),
// zero_grad. Data: random token ids of a 65-token vocabulary (tinyshakespeare's character count)
// from fixed seeds; no files. Models, two rows each (eager, graph):
//   lstm sparse  models::CharLSTMLM as train_lstm builds it by default: embed 64, hidden 256, one
//                layer, blocks of 32 at density 0.25, random layout; batch 32, seq 64 (ids [T, B])
//   lstm dense   the same with dense weights and the hidden width whose parameter count is nearest
//   tfm dense    models::TransformerLM: width 128, 4 layers, 4 heads, seq 128, batch 16, dense causal
//                attention, dense weights
//   tfm strided  the same with the Sparse Transformer "strided" attention layout (stride 3 blocks)
//   tfm bsw      the same with block-sparse weights (qkv/proj/fc/fc2 in blocks of 32, density 0.25)
// The transformers use attention blocks of 16: 8 blocks over the 128 tokens, so the strided layout
// (stride 3 ~ sqrt(8), as the paper suggests) skips blocks; with blocks of 32 it would keep all 4.
//
// Each model is built twice from one config (same seed, so equal parameters): one copy trains
// eagerly, the other through compile(). Before timing, their first steps on the same batch must
// give the same loss within 1e-5 relative: the difference (and that of the updated parameters) is
// printed, and the program exits 1 when a loss disagrees.
// Figures:
// - tok/s = batch·seq / (median step time over --repeats steps after --warmup untimed ones); the
//   two ways are timed in turn (eager, graph, eager, ...) so machine drift hits both alike.
//   Baseline: the eager step of the same model, so the graph row's ratio is its speed-up.
// - memory, MiB: the eager step's high-water mark of tensor memory above what was in use before it
//   (activations, gradients, optimizer temporaries) against the compiled step's planned arena
//   (executor().plan().arena_bytes: every intermediate of the step). Baseline: the eager mark.
//   Parameters and optimizer state, the same in both ways, are in neither figure.
// - --profile: each compiled step's time by op (CompiledStep::profile, one more step timed op by
//   op), as shares of the profiled sum, and the sum against the compiled step's median time.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <omp.h>
#include <sstream>
#include <thread>

#include "common/bench_report.h"
#include "common/random_tokens.h"
#include "common/step_profile.h"
#include "core/graph/compile.h"
#include "kernels/ops.h"
#include "models/char_lstm_lm.h"
#include "models/transformer_lm.h"
#include "optim/optim.h"

using namespace tessera;
using bench::BenchReport;
using Inputs = std::map<std::string, Tensor>;

namespace {

constexpr int64_t kVocab = 65;
constexpr double kLr = 3e-3, kClip = 1.0;     // the trainers' defaults
constexpr double kLossTolerance = 1e-5;       // relative, graph vs eager first-step loss

struct Options {
  int repeats = 10;
  int warmup = 2;
  bool quick = false;
  bool profile = false;
  std::string json;
};

// One copy of a model with the trainers' optimizer. Copies built from one config are equal.
template <class Model>
struct Trainee {
  template <class Config>
  explicit Trainee(const Config& cfg)
      : model(cfg), opt(model.parameters(), optim::AdamWOptions(kLr).weight_decay(0)) {
    opt.set_clip_norm(kClip);
  }
  Model model;
  optim::AdamW opt;
};

// One benchmarked model: how to build it and what one step trains on.
template <class Model, class Config>
struct Case {
  std::string label;        // "lstm sparse"
  std::string shape;        // "B32 T64 H256"
  std::string description;  // the config in words, for the notes
  Config config;
  int64_t tokens = 0;       // batch·seq per step
  Inputs feeds;             // "ids", "targets"
  std::function<Tensor(const Model&, const Inputs&)> loss;  // the same for the eager and traced step
};

std::string fmt(double v, int precision = 6) {
  std::ostringstream os;
  os.precision(precision);
  os << v;
  return os.str();
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

// Bytes of tensor memory `fn` had allocated at its high-water mark, above what was in use before.
size_t high_water_bytes(const std::function<void()>& fn) {
  const size_t before = memory_stats(Device::cpu()).current;
  reset_peak_memory(Device::cpu());
  fn();
  return memory_stats(Device::cpu()).peak - before;
}

// Checks, times and reports one model. Returns false when the compiled first step's loss
// disagrees with the eager one.
template <class Model, class Config>
bool bench_model(BenchReport& report, const Case<Model, Config>& c, const Options& o) {
  Trainee<Model> eager(c.config), graph(c.config);
  CompiledStep step = compile([&](const Inputs& in) { return c.loss(graph.model, in); },
                              graph.model.named_parameters(), &graph.opt, c.feeds);
  auto eager_step = [&] {
    Tensor loss = c.loss(eager.model, c.feeds);
    loss.backward();
    eager.opt.step();
    eager.opt.zero_grad();
    return loss.item<double>();
  };
  report.note(c.label + " model",
              c.description + "; " + std::to_string(eager.model.num_parameters()) + " parameters");

  // First step of both copies: equal parameters, same batch -> the same loss and update.
  const double eager_loss = eager_step(), graph_loss = step.run(c.feeds);
  const double rel = std::abs(graph_loss - eager_loss) / std::max(std::abs(eager_loss), 1e-30);
  const double param_diff = max_abs_diff(graph.model.parameters(), eager.model.parameters());
  const bool ok = rel <= kLossTolerance;
  const std::string check = "loss " + fmt(graph_loss, 9) + " vs " + fmt(eager_loss, 9) + ", relative diff " +
                            fmt(rel, 3) + (ok ? "" : " (MISMATCH: over " + fmt(kLossTolerance) + ")") +
                            "; updated parameters max |diff| " + fmt(param_diff, 3);
  report.note(c.label + " step 1, graph vs eager", check);
  std::cout << c.label << ": step 1 " << check << std::endl;

  const size_t eager_peak = high_water_bytes([&] { eager_step(); });
  const std::vector<double> ms =
      bench::time_interleaved_median_ms({[&] { eager_step(); }, [&] { step.run(c.feeds); }}, o.warmup, o.repeats);

  auto tok_s = [&](double t) { return static_cast<double>(c.tokens) / (t * 1e-3); };
  report.add({c.label + " eager", c.shape, ms[0], tok_s(ms[0]), "tok/s", tok_s(ms[0]), "eager step (itself)"});
  report.add({c.label + " graph", c.shape, ms[1], tok_s(ms[1]), "tok/s", tok_s(ms[0]), "eager step"});
  const double peak = mib(eager_peak);
  report.add({c.label + " eager peak", c.shape, 0, peak, "MiB", peak, "eager peak (itself)"});
  report.add({c.label + " graph arena", c.shape, 0, mib(step.executor().plan().arena_bytes), "MiB", peak,
              "eager peak"});
  if (o.profile) bench::add_profile(report, "profile " + c.label, c.shape, step.profile(c.feeds), ms[1], 8);
  return ok;
}

// ---- the LSTMs -----------------------------------------------------------------------------------

using LstmCase = Case<models::CharLSTMLM, models::CharLSTMLMConfig>;

struct LstmShape {
  int64_t batch, seq;
};

LstmCase lstm_case(const std::string& label, const models::CharLSTMLMConfig& cfg, LstmShape s) {
  const int64_t n = s.batch * s.seq;
  LstmCase c;
  c.label = label;
  c.shape = "B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + " H" + std::to_string(cfg.hidden);
  c.description = "CharLSTMLM embed " + std::to_string(cfg.embed) + ", hidden " + std::to_string(cfg.hidden) +
                  ", layers " + std::to_string(cfg.layers) +
                  (cfg.block_size == 0 ? std::string(", dense weights")
                                       : ", blocks of " + std::to_string(cfg.block_size) + " at density " +
                                             fmt(cfg.density) + ", " + cfg.layout + " layout");
  c.config = cfg;
  c.tokens = n;
  c.feeds = {{"ids", reshape(bench::random_tokens(n, cfg.vocab, 11), {s.seq, s.batch})},  // time-major [T, B]
             {"targets", bench::random_tokens(n, cfg.vocab, 12)}};
  c.loss = [](const models::CharLSTMLM& m, const Inputs& in) {
    return m.loss(in.at("ids"), in.at("targets")).loss;
  };
  return c;
}

// The dense hidden width H whose one-layer CharLSTMLM has the parameter count nearest `target`:
// embedding V·E + LSTM weights 4H·(E + H) + gate bias 4H + output H·V + V.
int64_t dense_hidden_matching(int64_t target, int64_t vocab, int64_t embed) {
  auto count = [&](int64_t h) { return vocab * embed + 4 * h * (embed + h) + 4 * h + h * vocab + vocab; };
  int64_t best = 1;
  for (int64_t h = 1; count(h - 1) <= target; ++h)
    if (std::abs(count(h) - target) < std::abs(count(best) - target)) best = h;
  return best;
}

// ---- the transformers ----------------------------------------------------------------------------

using TransformerCase = Case<models::TransformerLM, models::TransformerLMConfig>;

TransformerCase transformer_case(const std::string& label, const models::TransformerLMConfig& cfg, int64_t batch) {
  const int64_t n = batch * cfg.seq_len;
  TransformerCase c;
  c.label = label;
  c.shape = "B" + std::to_string(batch) + " T" + std::to_string(cfg.seq_len) + " C" + std::to_string(cfg.width) +
            " L" + std::to_string(cfg.layers);
  models::TransformerLM probe(cfg);  // for the attention layout's description
  c.description = "TransformerLM width " + std::to_string(cfg.width) + ", " + std::to_string(cfg.layers) +
                  " layers, " + std::to_string(cfg.heads) + " heads, attention " +
                  probe.attention_layout()->str() +
                  (cfg.linear_block == 0 ? std::string(", dense weights")
                                         : ", weights in blocks of " + std::to_string(cfg.linear_block) +
                                               " at density " + fmt(cfg.density));
  c.config = cfg;
  c.tokens = n;
  c.feeds = {{"ids", bench::random_tokens(n, cfg.vocab, 21)}, {"targets", bench::random_tokens(n, cfg.vocab, 22)}};
  c.loss = [batch](const models::TransformerLM& m, const Inputs& in) {
    return m.loss(in.at("ids"), in.at("targets"), batch);
  };
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera training step tokens/s on the CPU: the trainers' models, eager vs compiled"};
  Options o;
  app.add_option("--repeats", o.repeats, "timed steps per way (median reported)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed steps per way first")->check(CLI::Range(0, 100000));
  app.add_flag("--quick", o.quick, "tiny models and few steps (a smoke run)");
  app.add_flag("--profile", o.profile, "each compiled step's time by op, from one more step timed op by op");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--repeats")) o.repeats = 2;
    if (!app.count("--warmup")) o.warmup = 1;
  }

  try {
    // train_lstm's default model (examples/train_lstm/train_lstm.cpp default_model()).
    models::CharLSTMLMConfig lstm;
    lstm.vocab = kVocab, lstm.embed = 64, lstm.hidden = 256, lstm.layers = 1;
    lstm.block_size = 32, lstm.density = 0.25, lstm.layout = "random";
    LstmShape lstm_shape{32, 64};
    models::TransformerLMConfig tfm;
    tfm.vocab = kVocab, tfm.seq_len = 128, tfm.width = 128, tfm.layers = 4, tfm.heads = 4, tfm.attn_block = 16;
    int64_t tfm_batch = 16, tfm_stride = 3, linear_block = 32;
    double linear_density = 0.25;
    if (o.quick) {
      lstm.embed = 16, lstm.hidden = 32, lstm.block_size = 16, lstm.density = 0.5;
      lstm_shape = {4, 8};
      tfm.seq_len = 32, tfm.width = 32, tfm.layers = 2, tfm.heads = 2, tfm.attn_block = 8;
      tfm_batch = 2, tfm_stride = 2, linear_block = 8, linear_density = 0.5;
    }
    models::CharLSTMLMConfig lstm_dense = lstm;
    lstm_dense.block_size = 0, lstm_dense.density = 1.0, lstm_dense.layout = "dense";
    lstm_dense.hidden =
        dense_hidden_matching(models::CharLSTMLM(lstm).num_parameters(), lstm.vocab, lstm.embed);
    models::TransformerLMConfig tfm_strided = tfm, tfm_bsw = tfm;
    tfm_strided.attn_layout = "strided", tfm_strided.stride = tfm_stride;
    tfm_bsw.linear_block = linear_block, tfm_bsw.density = linear_density;

    BenchReport report("train_cpu");
    report.note("hardware threads", std::to_string(std::thread::hardware_concurrency()));
    report.note("openmp threads", std::to_string(omp_get_max_threads()));
    double load[1] = {0};
    if (getloadavg(load, 1) == 1) report.note("load average (1 min) at start", fmt(load[0], 3));
    report.note("step", "loss, backward, AdamW (lr " + fmt(kLr) + ", clip " + fmt(kClip) + "), zero_grad; f32");
    report.note("steps", std::to_string(o.repeats) + " timed after " + std::to_string(o.warmup) +
                             " warm-up, per way, in turn");
    bool ok = bench_model(report, lstm_case("lstm sparse", lstm, lstm_shape), o);
    LstmCase dense = lstm_case("lstm dense", lstm_dense, lstm_shape);
    dense.description += " (the width whose parameter count is nearest lstm sparse's)";
    ok = bench_model(report, dense, o) && ok;
    ok = bench_model(report, transformer_case("tfm dense", tfm, tfm_batch), o) && ok;
    ok = bench_model(report, transformer_case("tfm strided", tfm_strided, tfm_batch), o) && ok;
    ok = bench_model(report, transformer_case("tfm bsw", tfm_bsw, tfm_batch), o) && ok;
    report.print(std::cout);
    if (!o.json.empty()) report.write_json(o.json);
    if (!ok) {
      std::cerr << "train_cpu: a compiled step's first loss disagrees with the eager step's (see the notes)\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "train_cpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
