// sample: generate text from a checkpoint written by train_lstm (models::CharLSTMLM),
// train_transformer (models::TransformerLM) or train_conv (models::ConvLM).
//
//   sample runs/lstm/ckpt.h5 --prompt "ROMEO:" --chars 500 --temperature 0.8 --top-k 20 --seed 3
//   sample --ckpt runs/transformer/ckpt.h5 --temperature 0       # greedy, after a newline
//   sample runs/lstm/ckpt.h5 --count 3 --stats                    # three samples, speed on stderr
//
// models::load_model rebuilds the model from the checkpoint (its config's model_type, "char_lstm",
// "transformer" or "conv_lm", and model config; the parameters, not the optimizer state) with its character
// vocabulary (/trainer/vocabulary).
//
// Generation: the prompt is fed to the model, then each next character is drawn from its logits
// (examples/sample/sampling.h: softmax(logits / T) over the top-k, T = 0 greedy) and fed back.
//   LSTM: the prompt runs as one sequence, then one character per step with the state carried.
//   Transformer: the context is one window of at most seq_len characters at positions 0, 1, ...
//   It grows from the prompt; when the next characters would not fit, the window moves on: it
//   restarts with the last seq_len/2 characters of the context (re-encoded at positions 0 ..
//   seq_len/2 - 1) and grows again. By default each step feeds one character to
//   TransformerLM::decode (a key/value cache; moving on re-encodes the kept half). --no-cache
//   runs TransformerLM::logits over the whole window for every character instead (the context at
//   positions 0..n-1, token 0 after it: attention is causal, so position n-1 sees the context
//   alone): the same contexts, so the same text up to rounding (greedy tests compare them).
// Stdout gets the prompt followed by the generated text and a newline (with --count > 1, each
// sample after a line "--- sample k ---"). The same checkpoint, flags and --seed give the same text.
// Errors (missing or unreadable checkpoint, a prompt character outside the vocabulary) are one line
// on stderr and exit status 1; usage errors exit with 2.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "examples/sample/sampling.h"

using namespace tessera;
using nlohmann::json;

namespace {

// A language model as a stream of tokens: feed some, get the logits of the one that follows.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  /// Appends `ids` (at least one) to the context; returns the logits [vocab] of the next token.
  virtual std::vector<float> feed(const std::vector<int32_t>& ids) = 0;
};

// Row `row` of a [rows, V] tensor.
std::vector<float> logits_row(const Tensor& logits, int64_t row) {
  const int64_t V = logits.size(1);
  const std::vector<float> all = logits.to_vector<float>();
  return {all.begin() + row * V, all.begin() + (row + 1) * V};
}

class LstmStream : public TokenStream {
 public:
  explicit LstmStream(const models::CharLSTMLM& model) : model_(model) {}

  std::vector<float> feed(const std::vector<int32_t>& ids) override {
    const int64_t n = static_cast<int64_t>(ids.size());
    auto out = model_.forward(from_vector(ids, {n, 1}), state_);  // ids [T=n, B=1] -> logits [n, V]
    state_ = out.state;                                            // carried to the next call
    return logits_row(out.logits, n - 1);
  }

 private:
  const models::CharLSTMLM& model_;
  models::CharLSTMLM::State state_;  // empty: zeros
};

class TransformerStream : public TokenStream {
 public:
  TransformerStream(const models::TransformerLM& model, bool cached)
      : model_(model), cached_(cached), state_(model.start_decoding(1)) {}

  std::vector<float> feed(const std::vector<int32_t>& ids) override {
    const size_t T = static_cast<size_t>(model_.config().seq_len);
    std::vector<int32_t> fresh = ids;  // what the cache has not seen
    context_.insert(context_.end(), ids.begin(), ids.end());
    if (context_.size() > T) {
      // The window moves on: the last T/2 characters of the context, re-encoded from position 0.
      context_.erase(context_.begin(), context_.end() - static_cast<std::ptrdiff_t>(T / 2));
      state_ = model_.start_decoding(1);
      fresh = context_;
    }
    const int64_t n = static_cast<int64_t>(context_.size());  // 1 <= n <= T
    if (cached_) {
      const int64_t k = static_cast<int64_t>(fresh.size());
      return logits_row(model_.decode(from_vector(fresh, {k}), k, state_), k - 1);  // [k, V]
    }
    std::vector<int32_t> padded(T, 0);  // [T]: the context, then 0s
    std::copy(context_.begin(), context_.end(), padded.begin());
    const Tensor logits = model_.logits(from_vector(padded, {static_cast<int64_t>(T)}), /*batch=*/1);  // [T, V]
    return logits_row(logits, n - 1);  // position n-1 predicts the character after the context
  }

 private:
  const models::TransformerLM& model_;
  bool cached_;
  models::TransformerLM::DecodeState state_;
  std::vector<int32_t> context_;
};

// The causal convolutional model (train_conv): a full pass over a window of seq_len tokens whose
// first positions hold the context (the convolutions are causal: position n-1 sees the context
// alone); when the context passes seq_len, the window moves on to its last half, as the transformer's.
class ConvStream : public TokenStream {
 public:
  explicit ConvStream(const models::ConvLM& model) : model_(model) {}

  std::vector<float> feed(const std::vector<int32_t>& ids) override {
    const size_t T = static_cast<size_t>(model_.config().seq_len);
    context_.insert(context_.end(), ids.begin(), ids.end());
    if (context_.size() > T) context_.erase(context_.begin(), context_.end() - static_cast<std::ptrdiff_t>(T / 2));
    std::vector<int32_t> padded(T, 0);  // [T]: the context, then 0s
    std::copy(context_.begin(), context_.end(), padded.begin());
    const Tensor logits = model_.logits(from_vector(padded, {static_cast<int64_t>(T)}), /*batch=*/1);  // [T, V]
    return logits_row(logits, static_cast<int64_t>(context_.size()) - 1);
  }

 private:
  const models::ConvLM& model_;
  std::vector<int32_t> context_;
};

// sample generates from the LSTM, transformer and convolutional language models; ValueError for
// another model type.
void check_streamable(const models::LoadedModel& m, const std::string& path) {
  TS_CHECK(m.type == "char_lstm" || m.type == "transformer" || m.type == "conv_lm", ValueError,
           "checkpoint '" << path << "' holds a model of model_type \"" << m.type
                          << "\"; sample generates from \"char_lstm\", \"transformer\" and \"conv_lm\" models");
}

// A token stream of a model that check_streamable accepted.
std::unique_ptr<TokenStream> make_stream(const models::LoadedModel& m, bool cached) {
  if (m.type == "char_lstm") return std::make_unique<LstmStream>(m.as<models::CharLSTMLM>());
  if (m.type == "conv_lm") return std::make_unique<ConvStream>(m.as<models::ConvLM>());
  return std::make_unique<TransformerStream>(m.as<models::TransformerLM>(), cached);
}

// 'a', '\n' or 0xe2: a byte as an error message shows it.
std::string show_byte(uint8_t c) {
  std::ostringstream s;
  if (c == '\n') s << "'\\n'";
  else if (c == '\t') s << "'\\t'";
  else if (c >= 0x20 && c < 0x7f) s << "'" << static_cast<char>(c) << "'";
  else { char buf[8]; std::snprintf(buf, sizeof buf, "0x%02x", c); s << buf; }
  return s.str();
}

std::vector<int32_t> encode_prompt(const std::string& prompt, const data::Vocabulary& vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(prompt[i]);
    TS_CHECK(vocab.contains(c), ValueError,
             "prompt character " << show_byte(c) << " at position " << i << " is not in the checkpoint's "
                                 << vocab.size() << "-character vocabulary");
    ids.push_back(vocab.id(c));
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text from a train_lstm, train_transformer or train_conv checkpoint"};
  std::string ckpt, prompt = "\n";
  int64_t chars = 200, count = 1;
  examples::SamplingOptions sopt{0.8, 0};
  uint64_t seed = 1;
  bool stats = false, no_cache = false;
  app.add_option("ckpt,--ckpt", ckpt, "checkpoint file (ckpt.h5 of a run folder)")->required();
  app.add_option("--prompt", prompt, "text the sample continues (default: a newline)");
  app.add_option("--chars", chars, "characters to generate")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}))->capture_default_str();
  app.add_option("--temperature", sopt.temperature, "softmax temperature; 0 = greedy")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--top-k", sopt.top_k, "draw from the k most likely characters only; 0 = all")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", seed, "seed of the draws (same seed, same text)")->capture_default_str();
  app.add_option("--count", count, "number of samples")->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  app.add_flag("--stats", stats, "print the model and the speed (chars/s) on stderr");
  app.add_flag("--no-cache", no_cache, "transformer: a full pass over the window per character (no key/value cache)");
  try {
    app.parse(argc, argv);
    if (prompt.empty())
      throw CLI::ValidationError("--prompt", "must not be empty (the model needs a first character)");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "sample: " << e.what() << "\n";
    return 2;
  }

  try {
    using clock = std::chrono::steady_clock;
    const models::LoadedModel model = models::load_model(ckpt);  // the model type, config, vocabulary, weights
    TS_CHECK(model.has_vocab, IOError, "checkpoint '" << ckpt << "' has no /trainer/vocabulary");
    check_streamable(model, ckpt);  // before any output
    const std::vector<int32_t> prompt_ids = encode_prompt(prompt, model.vocab);
    if (stats)
      std::cerr << "sample: " << model.type << " from " << ckpt << " (step " << model.step << "), "
                << model.module->num_parameters() << " parameters, vocabulary " << model.vocab.size() << "\n";

    NoGradGuard no_grad;
    Generator gen(seed);  // one stream for all samples: sample k continues where k-1 stopped
    for (int64_t k = 1; k <= count; ++k) {
      if (count > 1) std::cout << "--- sample " << k << " ---\n";
      std::cout << prompt << std::flush;
      const auto t0 = clock::now();
      std::unique_ptr<TokenStream> s = make_stream(model, !no_cache);
      std::vector<float> logits = s->feed(prompt_ids);
      const auto t1 = clock::now();
      for (int64_t i = 0; i < chars; ++i) {
        const int32_t id = examples::sample_token(logits, sopt, gen);
        std::cout << static_cast<char>(model.vocab.symbol(id)) << std::flush;  // as it is made
        if (i + 1 < chars) logits = s->feed({id});
      }
      std::cout << "\n" << std::flush;
      const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
      const double gen_s = std::chrono::duration<double>(clock::now() - t1).count();
      if (stats)
        std::cerr << "sample: prompt " << prompt_ids.size() << " chars in " << prompt_s << " s; " << chars
                  << " chars in " << gen_s << " s (" << (gen_s > 0 ? chars / gen_s : 0.0) << " chars/s)\n";
    }
    TS_CHECK(std::cout.good(), IOError, "cannot write to stdout");
  } catch (const std::exception& e) {
    std::cerr << "sample: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
