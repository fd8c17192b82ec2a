// custom_loop: a whole training program written only against tessera's public API, to copy and
// change. It trains a small block-sparse character model on a text file and shows each piece:
// data, a model of your own, AdamW with parameter groups and clipping, an LR schedule, a compiled
// step, validation, checkpoints and resuming. (examples/train_lstm is the same with every flag.)
//
//   custom_loop --data input.txt --steps 300 --out runs/custom     # trains, saves runs/custom/ckpt.h5
//   custom_loop --data input.txt --steps 500 --out runs/custom     # resumes at step 300, goes on to 500
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

using namespace tessera;

#ifndef TESSERA_EXAMPLE_DATA
#define TESSERA_EXAMPLE_DATA "input.txt"  // the build points this at tinyshakespeare
#endif

constexpr int64_t kBatch = 16, kSeq = 64;   // each step: 16 windows of 64 characters
constexpr int64_t kWidth = 128, kBlock = 32;  // model width; weights stored as 32x32 blocks
constexpr int64_t kEvalEvery = 50, kEvalBatches = 4;

// A model is an nn::Module that registers its layers; their parameters get dotted paths
// ("lstm.wx.weight"), which name them in optimizers and checkpoints.
class CharModel : public nn::Module {
 public:
  CharModel(int64_t vocab, Generator& gen) {
    embed_ = register_module("embed",
                             std::make_shared<nn::Embedding>(nn::EmbeddingOptions(vocab, kWidth), gen));
    // Block-sparse LSTM: a random 25% of the 32x32 blocks of each gate's weights are stored.
    lstm_ = register_module("lstm", std::make_shared<nn::LSTM>(
        nn::LSTMOptions(kWidth, kWidth).block_size(kBlock).density(0.25, /*seed=*/1), gen));
    // A block-sparse linear layer (half the blocks) as a residual MLP on top.
    mlp_ = register_module("mlp", std::make_shared<nn::BlockSparseLinear>(
        nn::BlockSparseLinearOptions(kWidth, kWidth, kBlock).density(0.5, /*seed=*/2), gen));
    head_ = register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(kWidth, vocab), gen));
  }

  // ids, targets: i32 [T*B], time-major (row t*B + b). Only ops: the same code runs eagerly and
  // traced by compile(). Each batch starts from a zero LSTM state.
  Tensor loss(const Tensor& ids, const Tensor& targets) const {
    Tensor x = embed_->forward(reshape(ids, {kSeq, kBatch}));  // [T, B, C]
    Tensor h = lstm_->forward(x).output;                        // [T*B, C]
    h = h + gelu(mlp_->forward(h));                             // [T*B, C]
    return cross_entropy(head_->forward(h), targets);           // logits [T*B, V] -> mean loss []
  }

 private:
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::BlockSparseLinear> mlp_;
  std::shared_ptr<nn::Linear> head_;
};

int main(int argc, char** argv) {
  CLI::App app{"A commented training loop on tessera's public API"};
  std::string data = TESSERA_EXAMPLE_DATA, out = "runs/custom";
  int64_t steps = 300;
  app.add_option("--data", data, "training text")->capture_default_str();
  app.add_option("--steps", steps, "total steps (a resumed run continues up to it)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--out", out, "run folder: ckpt.h5 is saved, and resumed from, there")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "custom_loop: " << e.what() << "\n";  // a usage error: one line, exit status 2
    return 2;
  }

  try {
    // Data: characters -> ids (vocabulary = the distinct bytes of the first 90%; the last 10% validates).
    const auto ds = data::TextDataset::load(data, data::TextDatasetOptions().level(data::Level::character));
    data::RandomWindowSampler train(ds.tokens(data::Part::train), kBatch, kSeq, /*seed=*/1);

    Generator gen(0);  // parameter init (and layouts) from a fixed seed
    CharModel model(ds.vocab().size(), gen);

    // AdamW with weight decay on the weights only (param_groups_default leaves biases, norms and
    // embeddings undecayed), gradients clipped to global norm 1 inside the update.
    optim::AdamW opt(optim::param_groups_default(model.named_parameters(), /*weight_decay=*/0.1),
                     optim::AdamWOptions(3e-3).betas(0.9, 0.99));
    opt.set_clip_norm(1.0);  // before compile(): the traced step keeps the setting
    // Warm up to 3e-3 over 20 steps, then a cosine down to 3e-4 at the last step.
    const optim::WarmupCosine schedule(3e-3, std::min<int64_t>(20, steps), steps, 3e-4);

    // Resume: io::restore checks every name, shape and layout, then fills the parameters and the
    // optimizer (moments, step count). The data sampler continues from its saved position.
    const std::string ckpt = (std::filesystem::path(out) / "ckpt.h5").string();
    if (std::filesystem::exists(ckpt)) {
      io::CheckpointData back = io::restore(ckpt, model, &opt);
      TS_CHECK(back.rng.count("data") && back.trainer.ints.count("data.steps"), IOError,
               ckpt << " lacks the data sampler's position (rng/data, trainer data.steps)");
      const auto& symbols = ds.vocab().symbols();
      TS_CHECK(back.trainer.vocabulary == std::string(symbols.begin(), symbols.end()), ValueError,
               ckpt << " was trained on a text with another character set than " << data);
      const Generator::State data_rng = back.rng.at("data");
      train.set_state({data_rng.seed, data_rng.offset, back.trainer.ints.at("data.steps")});
      std::cout << "resumed from " << ckpt << " at step " << opt.step_count() << "\n";
    }

    // The compiled step: forward, backward, clipping and the AdamW update traced once into a graph
    // with planned memory; run() replays it and updates the parameters in place. Inputs are named;
    // the example batch fixes their names, dtypes and shapes. (A model with dropout also passes its
    // Generator as compile()'s last argument; graph::mark_output adds outputs besides the loss.)
    auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
      return model.loss(in.at("x"), in.at("y"));
    };
    data::RandomWindowSampler peek = train;  // a copy, so the real sampler does not advance
    const data::Batch ex = peek.next();
    CompiledStep step =
        compile(loss_fn, model.named_parameters(), &opt, {{"x", ex.inputs}, {"y", ex.targets}});
    // The eager alternative (slower, but any C++ in the loop, e.g. for debugging):
    //   Tensor loss = model.loss(b.inputs, b.targets);  loss.backward();  opt.step();  opt.zero_grad();

    // Validation: mean loss over the same fixed windows each time, without autograd.
    auto validate = [&] {
      NoGradGuard no_grad;
      data::RandomWindowSampler val(ds.tokens(data::Part::val), kBatch, kSeq, /*seed=*/12345);
      double sum = 0;
      for (int64_t i = 0; i < kEvalBatches; ++i) {
        const data::Batch b = val.next();
        sum += model.loss(b.inputs, b.targets).item<float>();
      }
      return sum / kEvalBatches;
    };
    // A checkpoint: parameters, layouts and optimizer state (io::capture), plus what resuming needs.
    auto save = [&] {
      io::CheckpointData ck = io::capture(model, &opt);
      ck.trainer.step = opt.step_count();
      const auto& v = ds.vocab().symbols();
      ck.trainer.vocabulary.assign(v.begin(), v.end());
      const auto s = train.state();
      ck.rng["data"] = Generator::State{s.seed, s.offset};
      ck.trainer.ints["data.steps"] = s.steps;
      ck.config = R"({"model_type": "custom_loop"})";  // describe your model here (JSON)
      std::filesystem::create_directories(out);
      io::save_checkpoint(ckpt, ck);  // atomic: a crash never leaves a half-written ckpt.h5
    };

    if (opt.step_count() == 0) std::cout << "step 0  val_loss " << validate() << "\n";
    for (int64_t t = opt.step_count() + 1; t <= steps; ++t) {
      schedule.apply(opt);  // lr of step t, fed to the compiled step: no re-trace
      const data::Batch b = train.next();
      const double loss = step.run({{"x", b.inputs}, {"y", b.targets}});
      if (t % 10 == 0) std::cout << "step " << t << "  loss " << loss << "  lr " << opt.lr() << "\n";
      if (t % kEvalEvery == 0 || t == steps) {
        std::cout << "step " << t << "  val_loss " << validate() << "\n";
        save();
      }
    }
    std::cout << "done: step " << opt.step_count() << ", checkpoint " << ckpt << "\n";
  } catch (const std::exception& e) {
    std::cerr << "custom_loop: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
