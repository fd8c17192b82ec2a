// train_transformer: a character-level language model (models::TransformerLM, a GPT-style transformer
// with block-sparse weights and/or block-sparse attention layouts) on a text file, by default
// tinyshakespeare beside the checkout. The shared flags are examples/common/trainer.h, the loop and
// the step (models/train: run_training, WindowTask) the library's; `train_transformer --help`
// lists every flag.
//
//   train_transformer --steps 600 --out runs/transformer             # compiled step (default)
//   train_transformer --steps 900 --resume runs/transformer/ckpt.h5 --out runs/transformer
//   train_transformer --attn-layout strided --stride 2 --block 32 --density 0.25 --eager
//   train_transformer --data "$(data/fetch.sh gcide)" --split interleaved --out runs/gcide
//
// Data: independent random windows of --seq tokens (RandomWindowSampler, batch-major: row b*T + t
// is token t of window b, the layout TransformerLM::loss reads), the same in both modes, so a run
// may be resumed compiled or --eager. The model's seq_len is --seq (attention is over the window).
// Dropout (--dropout) draws its masks from a generator of the task (seeded from --seed, kept in the
// checkpoint as rng "dropout"); the compiled step draws from it too (compile()'s rng argument).
// Model config: defaults below, then --config FILE (a model config, or a run folder's config.json),
// then the model flags given explicitly; a resumed run takes the checkpoint's model config unless
// --config or model flags are given. --seq counts as a model flag: it sets seq_len, and without it
// the windows are the config's seq_len.
// Samples (samples.txt at each evaluation): --sample-chars characters after a newline at
// --temperature, each drawn from a full forward pass over the last seq_len characters.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>

#include "core/graph/compile.h"
#include "data/sampler.h"
#include "data/text_dataset.h"
#include "examples/common/causal_text_task.h"
#include "examples/common/layout_check.h"
#include "examples/common/trainer.h"
#include "models/train/train.h"
#include "models/transformer_lm.h"

using namespace tessera;
using models::TransformerLM;

namespace {

constexpr const char* kModelType = "transformer";  // config.json's "model_type" (read by `sample`)

// The demo model: 4 pre-LN blocks of width 128 with 4 heads over 128-token windows (dense causal
// attention in blocks of 32); about 0.8M parameters, which learn visibly within minutes on two CPU
// cores. seq_len is the --seq default.
nlohmann::json default_model() {
  return {{"seq_len", 128}, {"width", 128}, {"layers", 4}, {"heads", 4}, {"attn_block", 32},
          {"attn_layout", "dense"}, {"linear_block", 0}, {"density", 1.0}, {"seed", 0}};
}

// A batch-major batch: window b is row b of [B, T], and each target is the input one position later.
void check_batch_major(const data::Batch& b) {
  TS_CHECK(b.layout == data::Layout::batch_major, ValueError, "train_transformer: batches must be batch-major");
  const std::vector<int32_t> x = b.inputs.to_vector<int32_t>(), y = b.targets.to_vector<int32_t>();
  for (int64_t w = 0; w < b.batch; ++w)
    for (int64_t t = 0; t + 1 < b.seq; ++t)
      TS_CHECK(y[w * b.seq + t] == x[w * b.seq + t + 1], ValueError,
               "train_transformer: window " << w << " has targets that are not its inputs shifted by one");
}

// The trainers' causal window task (examples/common/causal_text_task.h: the library's window task,
// compiled or eager steps, micro-batches, mixed precision, the sampler and dropout state in
// checkpoints, with text samples) over batch-major windows, checked once.
class TransformerTask : public examples::CausalTextTask<TransformerLM> {
 public:
  TransformerTask(const examples::TrainerFlags& f, TransformerLM& model, optim::Optimizer& opt,
                  const data::TextDataset& ds, Generator& dropout_gen, int64_t sample_chars, double temperature,
                  std::shared_ptr<optim::ZeroUpdater> zero)
      : examples::CausalTextTask<TransformerLM>(
            model, opt,
            [&model, &dropout_gen, B = f.batch](const Tensor& x, const Tensor& y) {
              return model.loss(x, y, B, dropout_gen);  // the dropout masks come from dropout_gen
            },
            data::RandomWindowSampler(ds.tokens(data::Part::train), f.batch, f.seq, f.seed, data::Layout::batch_major),
            ds, options(f, ds, dropout_gen, std::move(zero)), {sample_chars, temperature, f.seed + 7},
            examples::train_device(f)) {
    data::RandomWindowSampler peek = sampler();  // a copy: the real sampler does not advance
    check_batch_major(peek.next());
  }

 private:
  static train::WindowTaskOptions options(const examples::TrainerFlags& f, const data::TextDataset& ds,
                                          Generator& dropout_gen, std::shared_ptr<optim::ZeroUpdater> zero) {
    train::WindowTaskOptions o = examples::window_task_options(f, ds);
    o.dropout_gen = &dropout_gen;
    o.zero = std::move(zero);  // --zero1
    return o;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a character-level block-sparse transformer language model"};
  examples::TrainerFlags f;
  f.data = TESSERA_EXAMPLE_DATA;
  f.out = "runs/transformer";
  f.steps = 600;
  f.batch = 16;
  f.seq = 128;
  f.lr = 2e-3;
  f.eval_every = 100;
  f.ckpt_every = 200;
  examples::add_trainer_flags(app, f);
  int64_t width = 0, layers = 0, heads = 0, block = 0, attn_block = 0, window = 0, stride = 0, sample_chars = 300;
  double density = 0, dropout = 0, temperature = 0.8;
  std::string attn_layout, activation;
  bool recompute = false, qk_norm = false, log_logits = false;
  CLI::Option_group* m = app.add_option_group("Model");
  m->add_option("--width,--hidden", width, "model width, a multiple of --heads (default 128)");
  m->add_option("--layers", layers, "transformer blocks (default 4)");
  m->add_option("--heads", heads, "attention heads (default 4)");
  m->add_option("--block", block, "block size 8/16/32/64 of the qkv/proj/fc/fc2 weights, 0 = dense (default 0)");
  m->add_option("--density", density, "block density of the sparse weights (default 1)");
  m->add_option("--attn-layout", attn_layout, "dense | local | fixed | strided (default dense)")
      ->check(CLI::IsMember({"dense", "local", "fixed", "strided"}));
  m->add_option("--attn-block", attn_block,
                "attention block size 8/16/32/64/128, divides --seq (default 32; on CUDA with --dtype bf16/f16, "
                "32, 64 and 128 run on tensor cores for head dims 32/64/128, 8 and 16 on a scalar kernel)");
  m->add_option("--window", window, "local: attention blocks seen, itself included (default 4)");
  m->add_option("--stride", stride, "fixed/strided: stride in attention blocks (default 4)");
  m->add_option("--dropout", dropout, "dropout on embeddings, attention and MLP outputs (default 0)");
  m->add_flag("--qk-norm", qk_norm, "LayerNorm on the queries and keys (bounds the attention logits)");
  m->add_flag("--log-attention-logits", log_logits,
              "at each evaluation, log each layer's largest attention logit (the last 256 queries of the first "
              "val window): a probe of logit growth");
  m->add_flag("--recompute", recompute, "recompute each block's activations in the backward pass");
  m->add_option("--activation", activation, "gelu | gelu_tanh | fast_gelu (default gelu)")
      ->check(CLI::IsMember({"gelu", "gelu_tanh", "fast_gelu"}));
  m->add_option("--sample-chars", sample_chars, "characters per sample")->check(CLI::Range(0, 100000))
      ->capture_default_str();
  m->add_option("--temperature", temperature, "sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  if (int rc = examples::parse_flags(app, argc, argv, "train_transformer"); rc >= 0) return rc;

  try {
    examples::check_supported(f);
    // The model config: defaults < checkpoint (resume) or --config < explicit flags.
    std::optional<io::CheckpointData> ck;
    if (!f.resume.empty()) ck = io::load_checkpoint(f.resume);
    nlohmann::json cfg = examples::base_model_config(f, default_model(), kModelType, ck ? &*ck : nullptr);
    if (app.count("--seq")) cfg["seq_len"] = f.seq;
    if (app.count("--width")) cfg["width"] = width;
    if (app.count("--layers")) cfg["layers"] = layers;
    if (app.count("--heads")) cfg["heads"] = heads;
    if (app.count("--block")) cfg["linear_block"] = block;
    if (app.count("--density")) cfg["density"] = density;
    if (app.count("--attn-layout")) cfg["attn_layout"] = attn_layout;
    if (app.count("--attn-block")) cfg["attn_block"] = attn_block;
    if (app.count("--window")) cfg["window"] = window;
    if (app.count("--stride")) cfg["stride"] = stride;
    if (app.count("--dropout")) cfg["dropout"] = dropout;
    if (recompute) cfg["recompute"] = true;
    if (qk_norm) cfg["qk_norm"] = true;
    if (app.count("--activation")) cfg["activation"] = activation;

    const data::TextDataset ds = examples::load_text(f, ck ? &*ck : nullptr);
    cfg["vocab"] = ds.vocab().size();
    const models::TransformerLMConfig mc = models::TransformerLMConfig::from_json(cfg);
    f.seq = mc.seq_len;  // the windows are the model's sequence length
    TransformerLM model(mc);
    // Each layout's real density; a sparse --attn-layout that keeps every causal block is an error.
    examples::check_layouts(models::layout_report(model), "train_transformer",
                            {"use --attn-layout dense, or more attention blocks per sequence (a smaller --attn-block "
                             "or a longer --seq) or a smaller --window / --stride",
                             "use --density < 1 for sparse weights, or --block 0 for dense ones"});
    model.to(examples::train_device(f));  // before the optimizer: its state is made where the parameters are
    examples::Optimizers opts = examples::make_optimizers(f, model.named_parameters());  // --zero1: sharded
    std::unique_ptr<optim::Optimizer>& opt = opts.opt;
    std::cout << "train_transformer: " << ds.name() << " (" << ds.size(data::Part::train) << " train / "
              << ds.size(data::Part::val) << " val chars, vocab " << ds.vocab().size() << "), "
              << model.num_parameters() << " parameters, attention " << mc.attn_layout << ", weights "
              << (mc.linear_block ? "block " + std::to_string(mc.linear_block) : std::string("dense")) << ", "
              << (f.eager ? "eager" : "compiled") << " step\n";
    Generator dropout_gen(f.seed + 13);  // the dropout masks (kept in checkpoints as rng "dropout")
    TransformerTask task(f, model, *opt, ds, dropout_gen, sample_chars, temperature, opts.zero);

    const nlohmann::json config = examples::run_config(f, kModelType, mc.to_json());
    train::TrainOptions options = examples::train_options(f, "train_transformer", argc, argv);
    options.zero = opts.zero;
    if (opts.zero) {  // every rank takes part in the sum; rank 0 prints
      const int64_t mine = opts.zero->state_bytes(), all = opts.zero->total_state_bytes();
      if (options.group->rank() == 0)
        std::cout << "train_transformer: ZeRO-1: rank 0 holds " << mine << " of " << all
                  << " bytes of optimizer state\n";
    }
    if (log_logits) {
      // one fixed window (the first of the val split), the last 256 queries, the model in eval mode
      const std::vector<int32_t>& val = *ds.tokens(data::Part::val);
      TS_CHECK(static_cast<int64_t>(val.size()) >= mc.seq_len, ValueError,
               "--log-attention-logits: the val split is shorter than one window of " << mc.seq_len);
      const std::vector<int32_t> window(val.begin(), val.begin() + mc.seq_len);
      const Tensor probe = from_vector(window, {mc.seq_len}).to(examples::train_device(f));
      const bool lead = !options.group || options.group->rank() == 0;
      options.on_eval = [&model, probe, lead, rows = std::min<int64_t>(256, mc.seq_len)](int64_t step, double) {
        if (!lead) return;
        NoGradGuard no_grad;
        const bool training = model.is_training();
        model.eval();
        const std::vector<double> m = model.max_attention_logits(probe, rows);
        model.train(training);
        std::cout << "attention logits at step " << step << ": largest per layer";
        for (double v : m) std::cout << " " << std::fixed << std::setprecision(2) << v;
        std::cout << std::defaultfloat << std::endl;
      };
    }
    return train::run_training(options, model, *opt, config, task).exit_code();  // 130 / 143 after SIGINT / SIGTERM (a checkpoint was written)
  } catch (const std::exception& e) {
    std::cerr << "train_transformer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
