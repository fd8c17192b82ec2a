// train_conv: a character-level causal convolutional language model (models::ConvLM: dilated 1-D
// convolutions with block-sparse channels, edge bias at the left edge) on a text file, by default
// tinyshakespeare beside the checkout. The shared flags are examples/common/trainer.h, the loop and
// the step (models/train: run_training, WindowTask) the library's; `train_conv --help` lists every
// flag.
//
//   train_conv --steps 600 --out runs/conv                              # dense channels
//   train_conv --width 256 --block 32 --density 0.25 --out runs/conv_sparse
//   train_conv --steps 900 --resume runs/conv/ckpt.h5 --out runs/conv
//
// Data: random windows of --seq tokens, batch-major (as train_transformer's). Model config:
// defaults below, then --config FILE, then the model flags given explicitly; a resumed run takes the
// checkpoint's model config unless --config or model flags are given. Samples (samples.txt at each
// evaluation): --sample-chars characters after a newline at --temperature, each from a full forward
// pass over a window whose first positions hold the context (the convolutions are causal, so the
// logits at the context's last position depend on the context alone).
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <optional>

#include "data/sampler.h"
#include "data/text_dataset.h"
#include "examples/common/causal_text_task.h"
#include "examples/common/layout_check.h"
#include "examples/common/trainer.h"
#include "models/conv_lm.h"
#include "models/train/train.h"

using namespace tessera;
using models::ConvLM;

namespace {

constexpr const char* kModelType = "conv_lm";  // config.json's "model_type" (read by `sample`)

// The demo model: 4 residual blocks of width 128, kernel 3, dilations 1, 2, 4, 8 (a receptive field
// of 31 characters) over 128-token windows; dense channels in blocks of 32.
nlohmann::json default_model() {
  return {{"seq_len", 128}, {"width", 128}, {"layers", 4}, {"kernel", 3}, {"dilation_cycle", 4},
          {"block_size", 32}, {"density", 1.0}, {"edge_bias", true}, {"seed", 0}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a character-level causal convolutional language model with block-sparse channels"};
  examples::TrainerFlags f;
  f.data = TESSERA_EXAMPLE_DATA;
  f.out = "runs/conv";
  f.steps = 600;
  f.batch = 16;
  f.seq = 128;
  f.lr = 2e-3;
  f.eval_every = 100;
  f.ckpt_every = 200;
  examples::add_trainer_flags(app, f);
  int64_t width = 0, layers = 0, kernel = 0, cycle = 0, block = 0, sample_chars = 300;
  double density = 0, temperature = 0.8;
  bool no_edge_bias = false;
  CLI::Option_group* m = app.add_option_group("Model");
  m->add_option("--width,--hidden", width, "channels, a multiple of --block (default 128)");
  m->add_option("--layers", layers, "residual convolution blocks (default 4)");
  m->add_option("--kernel", kernel, "taps per convolution (default 3)");
  m->add_option("--dilation-cycle", cycle, "dilations 1, 2, …, 2^(cycle-1), repeated over the blocks (default 4)");
  m->add_option("--block", block, "channel block size 8/16/32/64 (default 32)");
  m->add_option("--density", density, "block density of the channels (default 1: dense)");
  m->add_flag("--no-edge-bias", no_edge_bias, "leave out the edge-bias layers");
  m->add_option("--sample-chars", sample_chars, "characters per sample")->check(CLI::Range(0, 100000))
      ->capture_default_str();
  m->add_option("--temperature", temperature, "sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  if (int rc = examples::parse_flags(app, argc, argv, "train_conv"); rc >= 0) return rc;

  try {
    examples::check_supported(f);
    TS_CHECK(!f.zero1, ValueError, "train_conv: --zero1 is for train_transformer");
    std::optional<io::CheckpointData> ck;
    if (!f.resume.empty()) ck = io::load_checkpoint(f.resume);
    nlohmann::json cfg = examples::base_model_config(f, default_model(), kModelType, ck ? &*ck : nullptr);
    if (app.count("--seq")) cfg["seq_len"] = f.seq;
    if (app.count("--width")) cfg["width"] = width;
    if (app.count("--layers")) cfg["layers"] = layers;
    if (app.count("--kernel")) cfg["kernel"] = kernel;
    if (app.count("--dilation-cycle")) cfg["dilation_cycle"] = cycle;
    if (app.count("--block")) cfg["block_size"] = block;
    if (app.count("--density")) cfg["density"] = density;
    if (no_edge_bias) cfg["edge_bias"] = false;

    const data::TextDataset ds = examples::load_text(f, ck ? &*ck : nullptr);
    cfg["vocab"] = ds.vocab().size();
    const models::ConvLMConfig mc = models::ConvLMConfig::from_json(cfg);
    f.seq = mc.seq_len;  // the windows are the model's sequence length
    ConvLM model(mc);
    if (mc.density < 1)  // dense channels are stored as every block on purpose: no warning then
      examples::check_layouts(models::layout_report(model), "train_conv",
                              {"", "use a lower --density for sparse channels, or --density 1 for dense ones"});
    model.to(examples::train_device(f));
    examples::Optimizers opts = examples::make_optimizers(f, model.named_parameters());
    std::cout << "train_conv: " << ds.name() << " (" << ds.size(data::Part::train) << " train / "
              << ds.size(data::Part::val) << " val chars, vocab " << ds.vocab().size() << "), "
              << model.num_parameters() << " parameters, receptive field " << model.receptive_field()
              << ", channels " << (mc.density < 1 ? "block " + std::to_string(mc.block_size) + " at density " +
                                                        std::to_string(mc.density)
                                                  : std::string("dense"))
              << ", " << (f.eager ? "eager" : "compiled") << " step\n";
    examples::CausalTextTask<ConvLM> task(
        model, *opts.opt, [&model, B = f.batch](const Tensor& x, const Tensor& y) { return model.loss(x, y, B); },
        data::RandomWindowSampler(ds.tokens(data::Part::train), f.batch, f.seq, f.seed, data::Layout::batch_major),
        ds, examples::window_task_options(f, ds), {sample_chars, temperature, f.seed + 7}, examples::train_device(f));
    const nlohmann::json config = examples::run_config(f, kModelType, mc.to_json());
    train::TrainOptions options = examples::train_options(f, "train_conv", argc, argv);
    return train::run_training(options, model, *opts.opt, config, task).exit_code();
  } catch (const std::exception& e) {
    std::cerr << "train_conv: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
