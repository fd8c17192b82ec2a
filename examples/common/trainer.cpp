#include "examples/common/trainer.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/error.h"
#include "models/model_registry.h"
#include "models/train/window_task.h"

namespace fs = std::filesystem;

namespace tessera {
namespace examples {

void add_trainer_flags(CLI::App& app, TrainerFlags& f) {
  // A flag given twice takes the last value (scripts pass defaults, users append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option_group* g = app.add_option_group("Training");
  g->add_option("--data", f.data, "training text file")->capture_default_str();
  g->add_option("--out", f.out, "run folder")->capture_default_str();
  g->add_option("--steps", f.steps, "total steps of the run")->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  g->add_option("--batch", f.batch, "sequences per batch")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  g->add_option("--seq", f.seq, "tokens per sequence")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  g->add_option("--lr", f.lr, "peak learning rate")->check(CLI::Range(0.0, 10.0))->capture_default_str();
  g->add_option("--warmup", f.warmup, "linear warm-up steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--schedule", f.schedule, "learning-rate schedule")
      ->check(CLI::IsMember({"cosine", "linear", "constant"}))->capture_default_str();
  g->add_option("--clip", f.clip, "gradient-norm clip (0: off)")->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--optimizer", f.optimizer, "optimizer")
      ->check(CLI::IsMember({"adamw", "adam", "sgd", "adafactor"}))->capture_default_str();
  g->add_option("--weight-decay", f.weight_decay, "weight decay")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  g->add_option("--seed", f.seed, "seed of the data order and of sampling")->capture_default_str();
  g->add_option("--device", f.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  g->add_option("--dtype", f.dtype, "f32 | bf16 | f16")->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  g->add_option("--eval-every", f.eval_every, "evaluate every N steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--eval-batches", f.eval_batches, "validation batches per evaluation")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  g->add_option("--ckpt-every", f.ckpt_every, "checkpoint every N steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--keep", f.keep, "numbered checkpoints to keep besides ckpt.h5")->check(CLI::Range(0, 1000))
      ->capture_default_str();
  g->add_option("--log-every", f.log_every, "log line / metrics row every N steps")->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  g->add_option("--resume", f.resume, "resume from this checkpoint");
  g->add_option("--config", f.config, "JSON model config file");
  g->add_flag("--eager", f.eager, "eager autograd instead of the compiled step");
  g->add_option("--dump-graph", f.dump_graph, "write the compiled step as Graphviz (.dot)");
  g->add_option("--micro-batches", f.micro_batches, "batches per optimizer update (gradient accumulation)")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  g->add_flag("--keep-best", f.keep_best, "also keep best.h5, the checkpoint of the lowest val loss");
  // Test hooks (no help line): raise a signal right after a step, as one arriving then would.
  app.add_option("--test-signal-at", f.test_signal_at)->group("")->check(CLI::NonNegativeNumber);
  app.add_option("--test-signal", f.test_signal)->group("")->check(CLI::IsMember({"TERM", "INT"}));
  app.add_option("--test-signal-count", f.test_signal_count)->group("")->check(CLI::Range(1, 2));
}

int parse_flags(CLI::App& app, int argc, char** argv, const std::string& prog) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << prog << ": " << e.what() << "\n";
    return 2;
  }
  return -1;
}

void check_supported(const TrainerFlags& f) {
  if (f.device == "cuda") TS_CHECK(cuda_available(), DeviceError, "--device cuda: no GPU is visible to this process");
}

DType train_dtype(const TrainerFlags& f) {
  return dtype_from_name(f.dtype);  // f32, bf16 or f16 (the flag's check; train::MixedPrecision checks again)
}

Device train_device(const TrainerFlags& f) { return f.device == "cuda" ? Device::cuda(0) : Device::cpu(); }

namespace {

// The model part of a config object: itself, or its "model" (a run's config.json / checkpoint
// config), checked against `model_type` when the object names one.
nlohmann::json model_part(const nlohmann::json& j, const std::string& what, const std::string& model_type) {
  if (!j.contains("model")) return j;
  TS_CHECK(j["model"].is_object(), ValueError, what << ": \"model\" is not a JSON object");
  TS_CHECK(!j.contains("model_type") || j["model_type"] == model_type, ValueError,
           what << " holds a model of type " << j["model_type"].dump() << ", not \"" << model_type << "\"");
  return j["model"];
}

}  // namespace

nlohmann::json base_model_config(const TrainerFlags& f, const nlohmann::json& defaults, const std::string& model_type,
                                 const io::CheckpointData* ck) {
  nlohmann::json cfg = defaults;
  if (ck) {
    const auto j = nlohmann::json::parse(ck->config, nullptr, /*allow_exceptions=*/false);
    TS_CHECK(j.is_object() && j.contains("model"), IOError, "checkpoint '" << f.resume << "' has no model config");
    cfg = model_part(j, "checkpoint '" + f.resume + "'", model_type);
  }
  if (!f.config.empty()) {
    std::ifstream in(f.config);
    TS_CHECK(in.good(), IOError, "cannot open config file '" << f.config << "'");
    const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    TS_CHECK(j.is_object(), ValueError, "config file '" << f.config << "' is not a JSON object");
    cfg = defaults;
    cfg.update(model_part(j, "config file '" + f.config + "'", model_type));
  }
  return cfg;
}

data::TextDataset load_text(const TrainerFlags& f, const io::CheckpointData* ck) {
  data::TextDatasetOptions opt = data::TextDatasetOptions().level(data::Level::character);
  if (ck) opt.vocab(train::require_vocabulary(*ck, f.resume, f.data));
  return data::TextDataset::load(f.data, opt);
}

nlohmann::json run_config(const TrainerFlags& f, const std::string& model_type, const nlohmann::json& model) {
  return models::checkpoint_config(
      model_type, model,
      {{"data", f.data}, {"steps", f.steps}, {"batch", f.batch}, {"seq", f.seq}, {"lr", f.lr}, {"warmup", f.warmup},
       {"schedule", f.schedule}, {"clip", f.clip}, {"optimizer", f.optimizer}, {"weight_decay", f.weight_decay},
       {"seed", f.seed}, {"eager", f.eager}, {"micro_batches", f.micro_batches}, {"dtype", f.dtype}});
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerFlags& f, std::vector<Tensor> params) {
  std::unique_ptr<optim::Optimizer> opt;
  if (f.optimizer == "adamw") {
    opt = std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions(f.lr).weight_decay(f.weight_decay));
  } else if (f.optimizer == "adam") {
    opt = std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(f.lr).weight_decay(f.weight_decay));
  } else if (f.optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(std::move(params),
                                       optim::SGDOptions(f.lr).momentum(0.9).weight_decay(f.weight_decay));
  } else {
    opt = std::make_unique<optim::Adafactor>(std::move(params),
                                             optim::AdafactorOptions(f.lr).weight_decay(f.weight_decay));
  }
  if (f.clip > 0) opt->set_clip_norm(f.clip);
  return opt;
}

std::unique_ptr<optim::LRSchedule> make_schedule(const TrainerFlags& f) {
  const int64_t warmup = std::min(f.warmup, f.steps);
  if (f.schedule == "constant") return std::make_unique<optim::ConstantLR>(f.lr);
  if (f.schedule == "linear") return std::make_unique<optim::WarmupLinear>(f.lr, warmup, f.steps, f.lr / 10);
  return std::make_unique<optim::WarmupCosine>(f.lr, warmup, f.steps, f.lr / 10);
}

namespace {

// A word of a command line as a POSIX shell reads it back: as it is when it is plain, else quoted.
std::string shell_word(const std::string& w) {
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=:,+@%", c) != nullptr;
  });
  if (plain) return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

train::TrainOptions train_options(const TrainerFlags& f, const std::string& prog, int argc, char** argv) {
  train::TrainOptions o;
  o.out = f.out;
  o.steps = f.steps;
  o.eval_every = f.eval_every;
  o.eval_batches = f.eval_batches;
  o.ckpt_every = f.ckpt_every;
  o.keep = f.keep;
  o.keep_best = f.keep_best;
  o.log_every = f.log_every;
  o.resume = f.resume;
  o.schedule = make_schedule(f);
  o.program = prog;
  // The resume command: this command line, then --resume <ckpt> (a repeated flag takes the last value).
  std::string cmd;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--test-signal", 0) == 0) {  // the test hooks are not part of the run
      if (a.find('=') == std::string::npos) ++i;
      continue;
    }
    cmd += (cmd.empty() ? "" : " ") + shell_word(a);
  }
  o.resume_command = cmd + " --resume " + shell_word((fs::path(f.out) / "ckpt.h5").string());
  if (f.test_signal_at > 0) {
    o.test_signal_step = f.test_signal_at;
    o.test_signal = f.test_signal == "INT" ? SIGINT : SIGTERM;
    o.test_signal_count = f.test_signal_count;
  }
  return o;
}

}  // namespace examples
}  // namespace tessera
