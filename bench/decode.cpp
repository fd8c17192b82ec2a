// Generation speed of models::TransformerLM with its key/value cache (TransformerLM::decode)
// against the uncached way, a full pass over the window per token (TransformerLM::logits), both
// measured in the same run:
//
//   decode [--device cpu|cuda] [--batch 1,64] [--chars 4000] [--baseline-chars 400]
//          [--dtype f32|bf16] [--quick] [--json FILE]
//
// Model: train_transformer's default (vocab 65, seq_len 128, width 128, 4 layers, 4 heads, dense
// attention in blocks of 32), random weights (seed 0), eval mode; --dtype bf16 runs it under
// autocast. Per batch size B: B sequences generated greedily (argmax of each step's logits on the
// host, as `sample` draws its characters), one token per step, from a one-token prompt. The window
// moves on as in `sample`: when the next token would pass seq_len, the last seq_len/2 tokens are
// re-encoded from position 0 (decode: a fresh cache fed those tokens; uncached: the window simply
// holds them), so both ways compute the same contexts. Figures: generated tokens per second over
// all B sequences (the cached way over --chars steps, the baseline over --baseline-chars: it is
// slow), and their ratio. Wall time includes reading the logits back every step, as generation
// must. Exit codes: 0; 1 on an error; 2 on a bad flag.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "common/bench_report.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "kernels/ops.h"
#include "models/models.h"

using namespace tessera;

namespace {

struct Options {
  std::string device = "cpu", dtype = "f32", json;
  std::vector<int64_t> batch{1, 64};
  int64_t chars = 4000, baseline_chars = 400;
  bool quick = false;
};

models::TransformerLMConfig default_model() {
  models::TransformerLMConfig c;
  c.vocab = 65;
  c.seq_len = 128;
  c.width = 128;
  c.layers = 4;
  c.heads = 4;
  c.attn_block = 32;
  return c;
}

// argmax over each row of logits [B, V] (on the host).
std::vector<int32_t> greedy(const Tensor& logits, int64_t B) {
  const std::vector<float> l = cast(logits, DType::f32).to_vector<float>();
  const int64_t V = logits.size(1);
  std::vector<int32_t> ids(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const auto row = l.begin() + b * V;
    ids[static_cast<size_t>(b)] = static_cast<int32_t>(std::max_element(row, row + V) - row);
  }
  return ids;
}

// Seconds to generate `steps` tokens per sequence for B sequences; cached: TransformerLM::decode,
// else a full window per step. contexts[b] holds sequence b's window (at most seq_len tokens).
double generate(const models::TransformerLM& m, int64_t B, int64_t steps, bool cached, const Device& dev) {
  const int64_t T = m.config().seq_len;
  std::vector<std::vector<int32_t>> ctx(static_cast<size_t>(B), std::vector<int32_t>{0});
  models::TransformerLM::DecodeState state = m.start_decoding(B);
  std::vector<int32_t> fresh(static_cast<size_t>(B), 0);  // [B*k] tokens the cache has not seen
  int64_t k = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    Tensor last;  // [B, V]: the logits of each sequence's last position
    if (cached) {
      const Tensor l = m.decode(from_vector(fresh, {B * k}).to(dev), k, state);  // [B*k, V]
      last = k == 1 ? l : reshape(slice(reshape(l, {B, k, l.size(1)}), 1, k - 1, k), {B, l.size(1)});
    } else {
      const int64_t n = static_cast<int64_t>(ctx[0].size());
      std::vector<int32_t> padded(static_cast<size_t>(B * T), 0);
      for (int64_t b = 0; b < B; ++b) std::copy(ctx[b].begin(), ctx[b].end(), padded.begin() + b * T);
      const Tensor l = m.logits(from_vector(padded, {B * T}).to(dev), B);  // [B*T, V]
      last = reshape(slice(reshape(l, {B, T, l.size(1)}), 1, n - 1, n), {B, l.size(1)});
    }
    const std::vector<int32_t> next = greedy(last, B);
    for (int64_t b = 0; b < B; ++b) ctx[b].push_back(next[b]);
    k = 1;
    fresh = next;
    if (static_cast<int64_t>(ctx[0].size()) > T) {  // the window moves on: keep the last T/2
      fresh.clear();
      for (auto& c : ctx) {
        c.erase(c.begin(), c.end() - T / 2);
        fresh.insert(fresh.end(), c.begin(), c.end());
      }
      k = T / 2;
      state = m.start_decoding(B);
    }
  }
  if (dev.is_cuda()) cuda::synchronize(dev.index);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"TransformerLM generation: key/value cache (decode) against a full window per token"};
  Options o;
  app.add_option("--device", o.device, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", o.dtype, "f32, or bf16 (autocast)")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--batch", o.batch, "batch sizes (comma-separated)")->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--chars", o.chars, "tokens per sequence, cached")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--baseline-chars", o.baseline_chars, "tokens per sequence, uncached")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_flag("--quick", o.quick, "batch 1 and 4, 300 and 40 tokens (a smoke run)");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--batch")) o.batch = {1, 4};
    if (!app.count("--chars")) o.chars = 300;
    if (!app.count("--baseline-chars")) o.baseline_chars = 40;
  }
  try {
    const Device dev = o.device == "cuda" ? Device::cuda(0) : Device::cpu();
    TS_CHECK(!dev.is_cuda() || cuda_available(), DeviceError, "--device cuda, but no GPU is usable");
    models::TransformerLM model(default_model());
    model.to(dev);
    model.eval();
    NoGradGuard no_grad;
    const autocast::Guard amp(o.dtype == "bf16" ? DType::bf16 : DType::f32);
    bench::BenchReport report("decode");
    report.note("model", "train_transformer default: " + model.config().to_json().dump());
    report.note("device", o.device + " " + o.dtype);
    for (int64_t B : o.batch) {
      generate(model, B, 8, true, dev);  // warm-up: kernels, handles, allocator
      const double cached_s = generate(model, B, o.chars, true, dev);
      const double full_s = generate(model, B, o.baseline_chars, false, dev);
      const double cached_rate = B * o.chars / cached_s, full_rate = B * o.baseline_chars / full_s;
      const std::string shape = "B" + std::to_string(B) + " T" + std::to_string(model.config().seq_len);
      report.add({"decode (kv cache), " + std::to_string(o.chars) + " tokens", shape, 1e3 * cached_s / o.chars,
                  cached_rate, "tokens/s", full_rate, "full window per token (this run)"});
      report.add({"full window per token, " + std::to_string(o.baseline_chars) + " tokens", shape,
                  1e3 * full_s / o.baseline_chars, full_rate, "tokens/s", full_rate, "itself"});
    }
    report.print(std::cout);
    if (!o.json.empty()) report.write_json(o.json);
  } catch (const std::exception& e) {
    std::cerr << "decode: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
