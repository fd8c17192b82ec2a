// graph_step: your own training loop around a compiled step (core/graph/compile.h).
//
//   graph_step [--data FILE] [--steps N] [--dump-graph FILE.dot]
//
// Trains a small byte-level language model (an MLP that predicts the next byte from the 8
// before it) on tinyshakespeare when the file is found, else on synthetic text. The recipe:
//   1. parameters are leaf tensors with requires_grad; an optimizer holds them;
//   2. the loss is a function of named inputs written with tessera's ops;
//   3. compile() traces forward + backward + optimizer update once and plans its memory;
//   4. every step.run(inputs) runs that whole step and updates the parameters in place.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>

#include "core/graph/compile.h"
#include "optim/optim.h"

using namespace tessera;

namespace {

constexpr int64_t kContext = 8, kEmbed = 32, kHidden = 256, kVocab = 256, kBatch = 64;

// The model: its parameters and its loss. Nothing here knows whether it runs eagerly or traced.
struct ByteMlp {
  Tensor embed, w1, b1, w2, b2;

  explicit ByteMlp(Generator& gen)
      : embed(normal({kVocab, kEmbed}, 0, 0.1, gen).requires_grad_()),
        w1(normal({kContext * kEmbed, kHidden}, 0, 0.05, gen).requires_grad_()),
        b1(zeros({kHidden}).requires_grad_()),
        w2(normal({kHidden, kVocab}, 0, 0.05, gen).requires_grad_()),
        b2(zeros({kVocab}).requires_grad_()) {}

  // x: i32 (N, kContext), the previous bytes; y: i32 (N), the byte that follows.
  Tensor loss(const Tensor& x, const Tensor& y) const {
    const int64_t n = x.size(0);
    Tensor e = reshape(embedding(embed, x), {n, kContext * kEmbed});  // (N, 8*32): the context's embeddings side by side
    Tensor h = gelu(matmul(e, w1) + b1);                                // (N, 256)
    return cross_entropy(matmul(h, w2) + b2, y);                        // logits (N, 256) -> mean loss
  }

  // Names appear in the graph, its summary and its outputs ("grad/w1" when there is no optimizer).
  std::vector<graph::NamedParam> named_parameters() const {
    return {{"embed", embed}, {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
  }
};

std::vector<uint8_t> load_text(const std::string& path, bool required) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    TS_CHECK(!required, IOError, "cannot open data file '" << path << "'");
    std::cout << "no data at " << path << ": training on synthetic text\n";
    std::string s;
    for (int i = 0; i < 200; ++i) s += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + ". ";
    return {s.begin(), s.end()};
  }
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  TS_CHECK(bytes.size() > static_cast<size_t>(kContext), ValueError,
           "data file '" << path << "' has " << bytes.size() << " bytes; need more than " << kContext);
  std::cout << "training on " << path << " (" << bytes.size() << " bytes)\n";
  return bytes;
}

// A batch of kBatch random windows: x = bytes[p, p+8), y = bytes[p+8].
std::map<std::string, Tensor> sample_batch(const std::vector<uint8_t>& text, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pos(0, text.size() - kContext - 1);
  std::vector<int32_t> x, y;
  for (int64_t b = 0; b < kBatch; ++b) {
    const size_t p = pos(rng);
    for (int64_t k = 0; k < kContext; ++k) x.push_back(text[p + k]);
    y.push_back(text[p + kContext]);
  }
  return {{"x", from_vector(x, {kBatch, kContext})}, {"y", from_vector(y, {kBatch})}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a byte-level MLP with a compiled training step"};
  std::string data = TESSERA_EXAMPLE_DATA, dot;
  int steps = 50;
  app.add_option("--data", data, "text file to train on (default: tinyshakespeare next to the checkout)");
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 1000000));
  app.add_option("--dump-graph", dot, "write the compiled step as Graphviz to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "graph_step: " << e.what() << "\n";
    return 2;
  }

  try {
    const std::vector<uint8_t> text = load_text(data, /*required=*/app.count("--data") > 0);
    Generator gen(0);
    ByteMlp model(gen);
    optim::AdamW opt({model.embed, model.w1, model.b1, model.w2, model.b2}, optim::AdamWOptions(3e-3));

    // The loss as a function of named inputs. While compile() traces it, the inputs and the
    // parameters are symbolic (shapes only): it must only run ops, not read values.
    auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return model.loss(in.at("x"), in.at("y")); };
    std::mt19937_64 rng(1);
    std::map<std::string, Tensor> batch = sample_batch(text, rng);
    // Example inputs fix the input names, dtypes and (for this plan) shapes.
    CompiledStep step = compile(loss_fn, model.named_parameters(), &opt, batch);
    std::cout << step.summary();
    if (!dot.empty()) {
      std::ofstream f(dot);
      f << step.to_dot();
      TS_CHECK(f.good(), IOError, "cannot write '" << dot << "'");
      std::cout << "wrote the step's graph to " << dot << " (render: dot -Tsvg " << dot << " -o step.svg)\n";
    }

    for (int i = 1; i <= steps; ++i) {
      opt.set_lr(3e-3 * std::min(1.0, i / 10.0));  // a warm-up schedule: lr is fed each run, no re-trace
      const double loss = step.run(batch);           // forward, backward, AdamW: parameters updated in place
      if (i % 10 == 0 || i == 1 || i == steps) std::cout << "step " << i << "  loss " << loss << "\n";
      batch = sample_batch(text, rng);  // same shapes: the same plan is reused
    }
    // The eager equivalent of one step, for comparison (and debugging):
    //   Tensor loss = model.loss(x, y); loss.backward(); opt.step(); opt.zero_grad();
    std::cout << "steps taken by the optimizer: " << opt.step_count() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "graph_step: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
