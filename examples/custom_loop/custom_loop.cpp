// custom_loop: a whole training program written only against tessera's public API, to copy and
// change. It trains a small block-sparse character model of its own on a text file and shows each
// piece: data, a model of your own (registered by name so that models::load_model can rebuild it
// from a checkpoint), AdamW with parameter groups and clipping, an LR schedule, and the library's
// training loop (train::run_training: a compiled step, validation, metrics, TensorBoard, loss.svg,
// checkpoints, resuming, and a checkpoint on SIGINT / SIGTERM).
//
//   custom_loop --data input.txt --steps 300 --out runs/custom     # trains, saves runs/custom/ckpt.h5
//   custom_loop --data input.txt --steps 500 --out runs/custom     # resumes at step 300, goes on to 500
//   mpirun -np 2 custom_loop --data input.txt --out runs/custom2   # data parallel: 2 ranks of 16 windows
//
// Data parallelism is two fields: the task's and the loop's `group` (a dist::ProcessGroup from
// dist::init_process_group, null when the program runs alone). The task then trains each rank on
// its rows of the global batch and averages the gradients over the ranks inside the compiled step;
// the loop lets rank 0 write the run folder and checkpoints.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>

#include "core/distributed/init.h"
#ifdef TESSERA_EXAMPLE_MPI
#include "core/distributed/mpi_group.h"  // tessera::tessera_mpi: ranks started by mpirun
#endif
#include <filesystem>
#include <iostream>

using namespace tessera;

#ifndef TESSERA_EXAMPLE_DATA
#define TESSERA_EXAMPLE_DATA "input.txt"  // the build points this at tinyshakespeare
#endif

constexpr int64_t kBatch = 16, kSeq = 64;   // each step: 16 windows of 64 characters
constexpr int64_t kWidth = 128, kBlock = 32;  // model width; weights stored as 32x32 blocks

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
  std::string data = TESSERA_EXAMPLE_DATA, out = "runs/custom", dist_init;
  int64_t steps = 300;
  app.add_option("--data", data, "training text")->capture_default_str();
  app.add_option("--steps", steps, "total steps (a resumed run continues up to it)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--out", out, "run folder: ckpt.h5 is saved, and resumed from, there")
      ->capture_default_str();
  app.add_option("--dist-init", dist_init, "data parallel: mpi (the default under mpirun)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "custom_loop: " << e.what() << "\n";  // a usage error: one line, exit status 2
    return 2;
  }

  try {
    // The model type, by name: its checkpoints' config says {"model_type": "custom_char_model",
    // "model": {"vocab": V}}, and models::load_model rebuilds it from there.
    // The constants are recorded in the checkpoint for readers outside tessera (docs/checkpoints.md).
    models::register_model_type(
        "custom_char_model",
        {[](const nlohmann::json& m) {
           Generator gen(0);
           return std::make_shared<CharModel>(m.at("vocab").get<int64_t>(), gen);
         },
         [](const nlohmann::json&) {
           return nlohmann::json{{"weight_orientation", "[in, out]: y = x·W + b"},
                                 {"width", kWidth}, {"block_size", kBlock}, {"input", "ids [T*B] time-major"}};
         }});

    // Data: characters -> ids (vocabulary = the distinct bytes of the first 90%; the last 10% validates).
    const auto ds = data::TextDataset::load(data, data::TextDatasetOptions().level(data::Level::character));
    data::RandomWindowSampler windows(ds.tokens(data::Part::train), kBatch, kSeq, /*seed=*/1);

    // Data parallel or not: the ranks' group (mpirun's world; null when this process runs alone).
    dist::InitOptions dist_options;
    dist_options.dist_init = dist_init;
#ifdef TESSERA_EXAMPLE_MPI
    dist_options = dist::with_mpi(dist_options);
#endif
    const std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(dist_options);
    const bool lead = !group || group->rank() == 0;  // rank 0 speaks for the run

    Generator gen(0);  // parameter init (and layouts) from a fixed seed
    CharModel model(ds.vocab().size(), gen);

    // AdamW with weight decay on the weights only (param_groups_default leaves biases, norms and
    // embeddings undecayed), gradients clipped to global norm 1 inside the update.
    optim::AdamW opt(optim::param_groups_default(model.named_parameters(), /*weight_decay=*/0.1),
                     optim::AdamWOptions(3e-3).betas(0.9, 0.99));
    opt.set_clip_norm(1.0);  // before the task compiles its step: the traced step keeps the setting

    // The task: what a step is. WindowTask runs the loss over random windows as one compiled step
    // (forward, backward, clipping and the AdamW update traced once, replayed every step);
    // options.micro_batches = k would accumulate the gradients of k batches per update, and
    // options.compiled = false runs eager autograd (slower, but any C++ in the loop).
    train::WindowTaskOptions task_options;
    task_options.data_name = data;  // named in errors (e.g. a checkpoint of another vocabulary)
    task_options.group = group;     // data parallel: this rank's rows, gradients averaged in the step
    train::WindowTask task(
        model, opt, [&](const Tensor& x, const Tensor& y) { return model.loss(x, y); }, windows,
        ds.tokens(data::Part::val), ds.vocab(), task_options);

    // The loop: warm up to 3e-3 over 20 steps, then a cosine down to 3e-4 at the last step;
    // validation (4 fixed batches) at the start and every 50 steps; ckpt.h5 every 50 steps and at
    // the end; metrics.jsonl, TensorBoard events and loss.svg in the run folder. A run folder that
    // holds ckpt.h5 resumes from it: model, optimizer, sampler position and vocabulary (checked).
    train::TrainOptions o;
    o.out = out;
    o.steps = steps;
    o.schedule = std::make_shared<optim::WarmupCosine>(3e-3, std::min<int64_t>(20, steps), steps, 3e-4);
    o.eval_every = 50;
    o.eval_batches = 4;
    o.eval_first = true;
    o.ckpt_every = 50;
    o.program = "custom_loop";
    o.group = group;  // data parallel: rank 0 writes, the ranks stop together
    const std::string ckpt = (std::filesystem::path(out) / "ckpt.h5").string();
    if (std::filesystem::exists(ckpt)) o.resume = ckpt;
    o.resume_command = std::string(argv[0]) + " --data " + data + " --steps " + std::to_string(steps) + " --out " + out;
    const nlohmann::json config = models::checkpoint_config("custom_char_model", {{"vocab", ds.vocab().size()}});
    const train::TrainResult r = train::run_training(o, model, opt, config, task);
    if (r.signal) return r.exit_code();  // stopped by SIGINT / SIGTERM: ckpt.h5 holds the last step

    // The model back from its checkpoint, as another program would get it: one call.
    if (!lead) return 0;
    const models::LoadedModel back = models::load_model(ckpt);
    std::cout << "reloaded " << back.type << " from " << ckpt << " (step " << back.step << ", "
              << back.module->num_parameters() << " parameters, " << back.vocab.size() << " characters)\n";
  } catch (const std::exception& e) {
    std::cerr << "custom_loop: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
