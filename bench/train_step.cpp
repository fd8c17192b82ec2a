// One training step of the nanoGPT shakespeare-char model, eager against compiled (CUDA graph),
// and optionally the time to reach a validation loss with nanoGPT's recipe.
//
//   train_step [--device cuda|cpu] [--dtype bf16|f32] [--steps N] [--repeats N] [--warmup N]
//              [--attn-impl auto|dense] [--quick] [--profile] [--json FILE]
//   train_step --model gpt2 [--batch 64] [--steps N] ...        # GPT-2 small, random tokens
//   train_step --quality [--data FILE] [--target 1.47] [--max-steps 5000] [--time-limit S] ...
//
// The model (models::TransformerLM): 6 layers, 6 heads, width 384, context 256, vocab 65 (the
// characters of tinyshakespeare), learned positions, tied output, exact GELU, dropout 0.2 on the
// embeddings, residual branches and attention probabilities; dense causal attention. Batch 64.
// The step: loss, backward, AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices and
// embeddings), global-norm clipping at 1.0, all under bf16 autocast (--dtype bf16, the default)
// with f32 master weights. What differs from nanoGPT: its linear layers have no biases
// (bias=False in its train.py); tessera's have them (+0.04% parameters).
//
// Timing: each of --repeats rounds runs --steps steps of each way in turn (eager, graph, eager, ...,
// after --warmup untimed steps each), synchronizing the device at the round's ends; the figure is
// the median round time / steps. Batches are random windows of the text, fed from the host every
// step as a trainer does. Baseline: the eager step, measured in the same run. Printed beside them
// for reference, not measured here: PyTorch 2.11 on the same H200, 14.8 ms eager and 9.9 ms with
// torch.compile (bf16 autocast). Before timing, both ways take their first step on the same batch
// from the same parameters; the losses must agree within 1e-5 relative, or the program exits 1.
//
// --model gpt2: a GPT-2-small-shaped step as llm.c's train_gpt2cu times it: 12 layers, 12 heads,
// width 768, context 1024, vocabulary 50257 padded to 50304 (random tokens below 50257), tanh
// GELU, tied output, no dropout, 64 sequences per step (--batch), bf16 autocast, AdamW as above.
// Memory allows one model at a time there: the eager step is timed first (the baseline, fewer
// steps), freed, then the compiled one; the first losses are compared as above. Reference, not
// measured here: llm.c's train_gpt2cu (bf16, no cuDNN) on this H200, 330k tokens/s.
//
// --profile: after the timing, one more compiled step run plainly and timed op by op
// (CompiledStep::profile): rows "profile graph: OP" with each op's share of the profiled sum,
// and the sum against the replayed step.
//
// --quality: nanoGPT's shakespeare-char recipe through the compiled step: warm-up 100 steps,
// cosine from 1e-3 to 1e-4 over 5000 steps, evaluation every --eval-every (250) steps on
// --eval-batches (200) validation batches; the training time excludes evaluation. It reports the
// validation curve and the first step and training time at which val loss <= --target (1.47;
// PyTorch reached it after 2000 steps, 48 s). Data: the last 10% of the text is validation.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "common/bench_report.h"
#include "common/step_profile.h"
#include "core/autocast.h"
#include "core/cuda/runtime.h"
#include "core/graph/compile.h"
#include "core/philox.h"
#include "data/sampler.h"
#include "data/text_dataset.h"
#include "kernels/ops.h"
#include "models/transformer_lm.h"
#include "optim/optim.h"

using namespace tessera;
using bench::BenchReport;
using Inputs = std::map<std::string, Tensor>;

namespace {

struct Options {
  std::string device = "cuda", dtype = "bf16", data = TESSERA_BENCH_DATA, json, attn_impl = "auto";
  int steps = 20, repeats = 5, warmup = 5;
  bool quick = false, quality = false;
  bool profile = false;  ///< the compiled step's time by op (CompiledStep::profile)
  std::string model = "nanogpt";
  double target = 1.47, time_limit = 120;
  int64_t max_steps = 5000, eval_every = 250, eval_batches = 200;
  int64_t batch = 64, seq = 256;
};

models::TransformerLMConfig gpt2_config(const Options& o) {
  models::TransformerLMConfig c;
  c.vocab = 50304;  // 50257 padded to a multiple of 128, as llm.c does
  c.seq_len = o.seq;
  c.width = o.quick ? 64 : 768;
  c.layers = o.quick ? 2 : 12;
  c.heads = o.quick ? 2 : 12;
  c.attn_block = o.quick ? 16 : 64;
  c.activation = "gelu_tanh";
  c.attn_impl = o.attn_impl;
  c.seed = 1;
  return c;
}

// Random tokens below GPT-2's 50257 (the padded ids are never inputs or targets): token i is
// word i % 4 of Philox block i / 4 of stream 3, modulo 50257.
data::TokenArray random_tokens(int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[i] = static_cast<int32_t>(philox::block(3, static_cast<uint64_t>(i) / 4).w[i % 4] % 50257);
  return data::make_tokens(std::move(ids));
}

models::TransformerLMConfig nanogpt_config(const Options& o, int64_t vocab) {
  models::TransformerLMConfig c;
  c.vocab = vocab;
  c.seq_len = o.seq;
  c.width = o.quick ? 48 : 384;
  c.layers = o.quick ? 2 : 6;
  c.heads = o.quick ? 2 : 6;
  c.attn_block = o.quick ? 16 : 64;
  c.dropout = 0.2;
  c.attention_dropout = 0.2;
  c.attn_impl = o.attn_impl;
  c.seed = 1;
  return c;
}

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// A model, its optimizer and one way of stepping it.
struct Trainer {
  Trainer(const Options& o, const models::TransformerLMConfig& cfg, Device dev, DType amp, bool compiled,
          const data::Batch& example)
      : o_(o), model_(cfg), dev_(dev), amp_(amp), dropout_gen_(11) {
    model_.to(dev);
    opt_ = std::make_unique<optim::AdamW>(optim::param_groups_default(model_.named_parameters(), 0.1),
                                          optim::AdamWOptions(1e-3).betas(0.9, 0.99));
    opt_->set_clip_norm(1.0);
    if (!compiled) return;
    auto loss_fn = [this](const Inputs& in) {
      autocast::Guard g(amp_);
      return model_.loss(in.at("x"), in.at("y"), o_.batch, dropout_gen_);
    };
    step_.emplace(compile(loss_fn, model_.named_parameters(), opt_.get(),
                          {{"x", example.inputs}, {"y", example.targets}}, &dropout_gen_));
  }

  // One step, queued without waiting for it (as a trainer that logs every few steps runs);
  // returns the loss tensor (read it to wait).
  Tensor step(const data::Batch& b) {
    if (step_) {
      step_->launch({{"x", b.inputs}, {"y", b.targets}});
      return step_->fetch("loss");
    }
    Tensor loss;
    {
      autocast::Guard g(amp_);
      loss = model_.loss(b.inputs.to(dev_), b.targets.to(dev_), o_.batch, dropout_gen_);
    }
    loss.backward();
    opt_->step();
    opt_->zero_grad();
    return loss;
  }

  double evaluate(const data::TokenArray& val, int64_t batches) {
    data::RandomWindowSampler s(val, o_.batch, o_.seq, /*seed=*/12345, data::Layout::batch_major);
    model_.eval();
    NoGradGuard ng;
    autocast::Guard g(amp_);
    double sum = 0;
    for (int64_t i = 0; i < batches; ++i) {
      data::Batch b = s.next();
      sum += model_.loss(b.inputs.to(dev_), b.targets.to(dev_), o_.batch).item<float>();
    }
    model_.train();
    return sum / static_cast<double>(batches);
  }

  const Options& o_;
  models::TransformerLM model_;
  Device dev_;
  DType amp_;
  Generator dropout_gen_;
  std::unique_ptr<optim::AdamW> opt_;
  std::optional<CompiledStep> step_;
};

std::string fmt(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

// --model gpt2: eager then compiled, one model in memory at a time.
int run_gpt2(const Options& o) {
  const Device dev = o.device == "cuda" ? Device::cuda(0) : Device::cpu();
  const DType amp = o.dtype == "bf16" ? DType::bf16 : DType::f32;
  TS_CHECK(!dev.is_cuda() || cuda_available(), DeviceError, "--device cuda: no GPU is visible to this process");
  const models::TransformerLMConfig cfg = gpt2_config(o);
  data::RandomWindowSampler sampler(random_tokens(std::max<int64_t>(1 << 22, 2 * o.batch * (o.seq + 1))), o.batch,
                                    o.seq, /*seed=*/1, data::Layout::batch_major);
  const data::Batch first = sampler.next();
  BenchReport report("train_step");
  report.note("device", dev.str());
  report.note("dtype", o.dtype + (amp == DType::bf16 ? " autocast, f32 master weights" : ""));
  report.note("model", "GPT-2 small shape: " + std::to_string(cfg.layers) + " layers, " +
                           std::to_string(cfg.heads) + " heads, width " + std::to_string(cfg.width) +
                           ", context " + std::to_string(o.seq) + ", vocab 50304, batch " + std::to_string(o.batch) +
                           ", random tokens, no dropout");
  const std::string shape = std::to_string(o.batch) + "x" + std::to_string(o.seq);
  auto timed = [&](Trainer& t, int steps) {
    for (int i = 0; i < o.warmup; ++i) t.step(sampler.next());
    sync(dev);
    return bench::time_median_ms(
               [&] {
                 for (int i = 0; i < steps; ++i) t.step(sampler.next());
                 sync(dev);
               },
               0, o.repeats) /
           steps;
  };
  double le = 0, eager_ms = 0;
  {
    Trainer eager(o, cfg, dev, amp, false, first);
    report.note("parameters", std::to_string(eager.model_.num_parameters()));
    le = eager.step(first).item<double>();
    eager_ms = timed(eager, std::max(1, o.steps / 2));
  }
  Trainer graph(o, cfg, dev, amp, true, first);
  const double lg = graph.step(first).item<double>(), rel = std::abs(le - lg) / std::abs(le);
  std::cout << "first step: eager loss " << fmt(le, 6) << ", graph loss " << fmt(lg, 6) << " (rel. diff " << rel
            << ")\n";
  if (!(rel <= 1e-5)) {
    std::cerr << "train_step: the compiled step's first loss differs from the eager step's\n";
    return 1;
  }
  const double graph_ms = timed(graph, o.steps), tokens = static_cast<double>(o.batch * o.seq);
  report.add({"step eager", shape, eager_ms, eager_ms, "ms/step", eager_ms, "eager"});
  report.add({"step graph", shape, graph_ms, graph_ms, "ms/step", eager_ms, "eager"});
  report.add({"tokens/s graph", shape, graph_ms, tokens / graph_ms * 1e3, "tok/s", tokens / eager_ms * 1e3, "eager"});
  if (o.profile) {
    const data::Batch b = sampler.next();
    bench::add_profile(report, "profile graph", shape,
                       bench::profile_printing_shapes(*graph.step_, {{"x", b.inputs}, {"y", b.targets}},
                                                      "profile graph", shape, std::cout),
                       graph_ms);
  }
  report.note("reference (not measured here)", "llm.c train_gpt2cu (bf16, no cuDNN), same H200: 330k tokens/s");
  if (graph.step_->executor().replays_cuda_graph()) report.note("graph", "replayed as one CUDA graph");
  report.print(std::cout);
  if (!o.json.empty()) report.write_json(o.json);
  return 0;
}

int run(const Options& o) {
  if (o.model == "gpt2") return run_gpt2(o);
  const Device dev = o.device == "cuda" ? Device::cuda(0) : Device::cpu();
  const DType amp = o.dtype == "bf16" ? DType::bf16 : DType::f32;
  TS_CHECK(!dev.is_cuda() || cuda_available(), DeviceError, "--device cuda: no GPU is visible to this process");
  const data::TextDataset ds =
      data::TextDataset::load(o.data, data::TextDatasetOptions().level(data::Level::character));
  const models::TransformerLMConfig cfg = nanogpt_config(o, ds.vocab().size());
  data::RandomWindowSampler sampler(ds.tokens(data::Part::train), o.batch, o.seq, /*seed=*/1,
                                    data::Layout::batch_major);
  const data::Batch first = sampler.next();

  BenchReport report("train_step");
  report.note("device", dev.str());
  report.note("dtype", o.dtype + (amp == DType::bf16 ? " autocast, f32 master weights" : ""));
  report.note("model", std::to_string(cfg.layers) + " layers, " + std::to_string(cfg.heads) + " heads, width " +
                           std::to_string(cfg.width) + ", context " + std::to_string(o.seq) + ", batch " +
                           std::to_string(o.batch) + ", dropout 0.2");
  report.note("attention", o.attn_impl == "dense" ? "dense path: matmul, causal_softmax, dropout, matmul"
                                                  : "block_attention (fused, dropout inside)");

  Trainer eager(o, cfg, dev, amp, false, first), graph(o, cfg, dev, amp, true, first);
  report.note("parameters", std::to_string(eager.model_.num_parameters()));
  const double le = eager.step(first).item<double>(), lg = graph.step(first).item<double>();
  const double rel = std::abs(le - lg) / std::abs(le);
  std::cout << "first step: eager loss " << fmt(le, 6) << ", graph loss " << fmt(lg, 6) << " (rel. diff " << rel
            << ")\n";
  if (!(rel <= 1e-5)) {
    std::cerr << "train_step: the compiled step's first loss differs from the eager step's\n";
    return 1;
  }

  if (!o.quality) {
    auto block = [&](Trainer& t) {
      return [&] {
        for (int i = 0; i < o.steps; ++i) t.step(sampler.next());
        sync(dev);
      };
    };
    for (int i = 0; i < o.warmup; ++i) eager.step(sampler.next()), graph.step(sampler.next());
    sync(dev);
    const std::vector<double> ms = bench::time_interleaved_median_ms({block(eager), block(graph)}, 0, o.repeats);
    const double eager_ms = ms[0] / o.steps, graph_ms = ms[1] / o.steps;
    const std::string shape = std::to_string(o.batch) + "x" + std::to_string(o.seq);
    report.add({"step eager", shape, eager_ms, eager_ms, "ms/step", eager_ms, "eager"});
    report.add({"step graph", shape, graph_ms, graph_ms, "ms/step", eager_ms, "eager"});
    const double tokens = static_cast<double>(o.batch * o.seq);
    report.add({"tokens/s graph", shape, graph_ms, tokens / graph_ms * 1e3, "tok/s", tokens / eager_ms * 1e3, "eager"});
    if (o.profile) {
      const data::Batch b = sampler.next();
      bench::add_profile(report, "profile graph", shape,
                         bench::profile_printing_shapes(*graph.step_, {{"x", b.inputs}, {"y", b.targets}},
                                                        "profile graph", shape, std::cout),
                         graph_ms);
    }
    report.note("reference (not measured here)", "PyTorch 2.11, same H200, bf16 autocast: eager 14.8 ms, "
                                                 "torch.compile 9.9 ms per step");
    if (graph.step_->executor().replays_cuda_graph()) report.note("graph", "replayed as one CUDA graph");
  } else {
    const optim::WarmupCosine schedule(1e-3, 100, 5000, 1e-4);
    const data::TokenArray& val = ds.tokens(data::Part::val);
    double train_s = 0, reached_s = -1;
    int64_t reached_step = -1;
    int64_t s = 1;  // the first step was taken above
    std::cout << "step  train_s  val_loss\n";
    while (s < o.max_steps && train_s < o.time_limit) {
      sync(dev);
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t until = std::min(o.max_steps, (s / o.eval_every + 1) * o.eval_every);
      for (; s < until; ++s) {
        schedule.apply(*graph.opt_);
        graph.step(sampler.next());
      }
      sync(dev);
      train_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double v = graph.evaluate(val, o.eval_batches);
      std::cout << s << "  " << fmt(train_s, 1) << "  " << fmt(v, 4) << "\n" << std::flush;
      report.add({"val loss at step " + std::to_string(s), fmt(train_s, 1) + " s", 0, v, "nats", 0, ""});
      if (v <= o.target && reached_step < 0) {
        reached_step = s;
        reached_s = train_s;
        break;
      }
    }
    if (reached_step > 0) {
      report.add({"time to val <= " + fmt(o.target, 2), "step " + std::to_string(reached_step), reached_s * 1e3,
                  reached_s, "s", 48.0, "PyTorch 2.11 compiled (reference, not measured here)"});
    } else {
      std::cout << "val loss did not reach " << o.target << " within the limits\n";
    }
  }
  report.print(std::cout);
  if (!o.json.empty()) report.write_json(o.json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"nanoGPT shakespeare-char training step: eager vs compiled, and time to quality"};
  app.add_option("--device", o.device, "cuda | cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--dtype", o.dtype, "bf16 (autocast) | f32")->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--data", o.data, "training text (character level)");
  app.add_option("--steps", o.steps, "timed steps per round")->check(CLI::Range(1, 100000));
  app.add_option("--repeats", o.repeats, "timed rounds (median)")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", o.warmup, "untimed steps of each way first")->check(CLI::Range(0, 100000));
  app.add_flag("--quick", o.quick, "a tiny model, batch 4, context 32 (smoke run)");
  app.add_flag("--profile", o.profile, "the compiled step's time by op, from one more step run plainly, op by op");
  app.add_option("--model", o.model, "nanogpt (shakespeare-char) | gpt2 (GPT-2 small shape, random tokens)")
      ->check(CLI::IsMember({"nanogpt", "gpt2"}));
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::Range(1, 4096));
  app.add_option("--seq", o.seq, "context (tokens per sequence)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--attn-impl", o.attn_impl, "auto (block_attention, fused) | dense (matmul, causal_softmax, matmul)")
      ->check(CLI::IsMember({"auto", "dense"}));
  app.add_flag("--quality", o.quality, "time to --target validation loss with nanoGPT's recipe");
  app.add_option("--target", o.target, "validation loss to reach with --quality");
  app.add_option("--max-steps", o.max_steps, "step limit of --quality")->check(CLI::Range(1, 1000000));
  app.add_option("--time-limit", o.time_limit, "training-time limit of --quality, seconds");
  app.add_option("--eval-every", o.eval_every, "--quality evaluation interval")->check(CLI::Range(1, 1000000));
  app.add_option("--eval-batches", o.eval_batches, "--quality validation batches")->check(CLI::Range(1, 100000));
  app.add_option("--json", o.json, "write the figures to this file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.model == "gpt2") {
    if (o.quality) {
      std::cerr << "train_step: --quality runs the nanoGPT recipe only (not --model gpt2)\n";
      return 2;
    }
    if (!app.count("--seq")) o.seq = 1024;
    if (!app.count("--steps")) o.steps = 6;
    if (!app.count("--repeats")) o.repeats = 3;
    if (!app.count("--warmup")) o.warmup = 2;
  }
  if (o.quick) o.batch = 4, o.seq = 32, o.steps = std::min(o.steps, 2), o.repeats = std::min(o.repeats, 2),
               o.warmup = std::min(o.warmup, 1), o.eval_batches = std::min<int64_t>(o.eval_batches, 2);
  try {
    return run(o);
  } catch (const tessera::Error& e) {
    std::cerr << "train_step: " << e.what() << "\n";
    return 1;
  }
}
