#include "examples/common/trainer.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "core/distributed/init.h"
#include "core/error.h"
#include "models/model_registry.h"
#ifdef TESSERA_EXAMPLES_MPI
#include "core/distributed/mpi_group.h"
#endif
#include "models/train/window_task.h"

namespace fs = std::filesystem;

namespace tessera {
namespace examples {

void add_trainer_flags(CLI::App& app, TrainerFlags& f) {
  // A flag given twice takes the last value (scripts pass defaults, users append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option_group* g = app.add_option_group("Training");
  g->add_option("--data", f.data, "training text file")->capture_default_str();
  g->add_option("--split", f.split,
                "train/val split: contiguous (90%/10% in file order) or interleaved[:CHUNK[:PERIOD]] (chunks of "
                "CHUNK bytes, default 1000000; chunk c to val when c % PERIOD == PERIOD-2, to test when "
                "PERIOD-1; PERIOD default 20)")
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              parse_split(v);
              return std::string();
            } catch (const Error& e) {
              const std::string m = e.what();  // CLI11 prefixes "--split: " itself
              return m.rfind("--split ", 0) == 0 ? m.substr(8) : m;
            }
          },
          "SPLIT"))
      ->capture_default_str();
  g->add_option("--out", f.out, "run folder")->capture_default_str();
  g->add_option("--steps", f.steps, "total steps of the run")->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  g->add_option("--batch", f.batch, "sequences per batch")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  g->add_option("--seq", f.seq, "tokens per sequence")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  g->add_option("--lr", f.lr, "peak learning rate")->check(CLI::Range(0.0, 10.0))->capture_default_str();
  g->add_option("--warmup", f.warmup, "linear warm-up steps (every schedule)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--schedule", f.schedule, "after the warm-up: cosine or linear decay to lr/10 at --steps, or constant")
      ->check(CLI::IsMember({"cosine", "linear", "constant"}))->capture_default_str();
  g->add_option("--clip", f.clip, "gradient-norm clip (0: off)")->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--optimizer", f.optimizer, "optimizer")
      ->check(CLI::IsMember({"adamw", "adam", "sgd", "adafactor"}))->capture_default_str();
  g->add_option("--weight-decay", f.weight_decay, "weight decay")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  g->add_option("--beta2", f.beta2, "adam/adamw: decay of the squared-gradient average (beta1 is 0.9)")
      ->check(CLI::Range(0.0, 0.999999))->capture_default_str();
  g->add_option("--seed", f.seed,
                "seed of the data order (random windows; train_lstm reads its lanes in order) and of sampling; "
                "the model's weights and layouts take the config's \"seed\"")
      ->capture_default_str();
  g->add_option("--device", f.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  g->add_option("--dtype", f.dtype, "f32 | bf16 | f16")->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  g->add_option("--eval-every", f.eval_every, "evaluate every N steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--eval-batches", f.eval_batches, "validation batches per evaluation")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  g->add_option("--test-batches", f.test_batches,
                "at the end, the mean loss over this many batches of the test split (--split interleaved has "
                "one; 0: none)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
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
  g->add_option("--dist-init", f.dist_init,
                "data parallel: mpi (under mpirun) or file:///shared/path (an NCCL rendezvous file; ranks from RANK / "
                "WORLD_SIZE / LOCAL_RANK or Slurm); under mpirun the default is mpi. --batch is per rank");
  g->add_flag("--zero1", f.zero1,
              "data parallel: shard the optimizer state over the ranks (ZeRO-1; compiled steps, adamw/adam/sgd)");
  g->add_option("--time-limit", f.time_limit,
                "stop after this many seconds of training (evaluations not counted), as if --steps ended there; "
                "0: no limit")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  g->add_option("--profile-step", f.profile_step,
                "run step N op by op (not replayed as a CUDA graph) and print its time by op, then by op and shapes; "
                "compiled steps only; 0: none")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
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
  TS_CHECK(!(f.eager && f.profile_step > 0), ValueError, "--profile-step needs the compiled step, not --eager");
}

DType train_dtype(const TrainerFlags& f) {
  return dtype_from_name(f.dtype);  // f32, bf16 or f16 (the flag's check; train::MixedPrecision checks again)
}

Device train_device(const TrainerFlags& f) {
  if (f.device != "cuda") return Device::cpu();
  const std::shared_ptr<dist::ProcessGroup> g = process_group(f);
  return g ? g->device() : Device::cuda(0);
}

std::shared_ptr<dist::ProcessGroup> process_group(const TrainerFlags& f) {
  static bool made = false;
  static std::shared_ptr<dist::ProcessGroup> group;
  if (made) return group;
  dist::InitOptions o;
  o.dist_init = f.dist_init;
  o.cuda = f.device == "cuda";
#ifdef TESSERA_EXAMPLES_MPI
  o = dist::with_mpi(o);
#endif
  group = dist::init_process_group(o);
  made = true;
  return group;
}

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

namespace {

constexpr int64_t kDefaultChunk = 1000000;  // interleaved: 1 MB chunks ...
constexpr int64_t kDefaultPeriod = 20;      // ... every 20th to val, the next to test

// The numbers of an interleaved --split: {chunk, period}, defaults where left out.
std::pair<int64_t, int64_t> interleaved_args(const std::string& spec) {
  const std::string usage = "--split '" + spec + "': expected contiguous or interleaved[:CHUNK[:PERIOD]]" +
                            " with whole numbers, e.g. interleaved:1000000:20";
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1)
    fields.push_back(spec.substr(start, colon - start));
  fields.push_back(spec.substr(start));
  TS_CHECK(fields[0] == "interleaved" && fields.size() <= 3, ValueError, usage);
  int64_t v[2] = {kDefaultChunk, kDefaultPeriod};
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::string& w = fields[i];
    const bool digits = std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; });
    TS_CHECK(!w.empty() && w.size() <= 15 && digits, ValueError, usage);
    v[i - 1] = std::stoll(w);
  }
  TS_CHECK(v[0] >= 1 && v[1] >= 3, ValueError,
           "--split '" << spec << "': need CHUNK >= 1 and PERIOD >= 3, got CHUNK " << v[0] << ", PERIOD " << v[1]);
  return {v[0], v[1]};
}

}  // namespace

data::Split parse_split(const std::string& spec) {
  if (spec == "contiguous") return data::Split::fractions(0.9, 0.1);
  const auto [chunk, period] = interleaved_args(spec);
  return data::Split::interleaved(chunk, period);
}

std::string canonical_split(const std::string& spec) {
  if (spec == "contiguous") return spec;
  const auto [chunk, period] = interleaved_args(spec);
  return "interleaved:" + std::to_string(chunk) + ":" + std::to_string(period);
}

data::TextDataset load_text(const TrainerFlags& f, const io::CheckpointData* ck) {
  data::TextDatasetOptions opt = data::TextDatasetOptions().level(data::Level::character).split(parse_split(f.split));
  const std::string split = canonical_split(f.split);
  if (ck) {
    // The split of the checkpoint's run (runs before --split existed were contiguous).
    const auto j = nlohmann::json::parse(ck->config, nullptr, /*allow_exceptions=*/false);
    std::string saved = "contiguous";
    if (j.is_object() && j.contains("train") && j["train"].is_object() && j["train"].contains("split") &&
        j["train"]["split"].is_string())
      saved = j["train"]["split"].get<std::string>();
    TS_CHECK(saved == split, ValueError,
             "checkpoint '" << f.resume << "' was trained with --split " << saved << ", this run has --split " << split
                            << " (resume with the same --split)");
    opt.vocab(train::require_vocabulary(*ck, f.resume, f.data));
  }
  data::TextDataset ds = data::TextDataset::load(f.data, opt);
  const data::Split& s = opt.split_;
  TS_CHECK(s.kind != data::Split::Kind::interleaved || ds.size(data::Part::val) > 0, ValueError,
           "--split " << split << " leaves '" << f.data << "' (" << ds.total_bytes()
                      << " bytes) no validation bytes: use a smaller CHUNK, e.g. --split interleaved:"
                      << std::max<int64_t>(1, ds.total_bytes() / (2 * s.period)) << ":" << s.period);
  return ds;
}

nlohmann::json run_config(const TrainerFlags& f, const std::string& model_type, const nlohmann::json& model) {
  return models::checkpoint_config(
      model_type, model,
      {{"data", f.data}, {"split", canonical_split(f.split)}, {"steps", f.steps}, {"batch", f.batch}, {"seq", f.seq},
       {"lr", f.lr}, {"warmup", f.warmup}, {"schedule", f.schedule}, {"clip", f.clip}, {"optimizer", f.optimizer},
       {"beta2", f.beta2}, {"weight_decay", f.weight_decay}, {"seed", f.seed}, {"eager", f.eager},
       {"micro_batches", f.micro_batches}, {"dtype", f.dtype}});
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerFlags& f, std::vector<Tensor> params) {
  std::unique_ptr<optim::Optimizer> opt;
  TS_CHECK(f.beta2 == TrainerFlags{}.beta2 || f.optimizer == "adamw" || f.optimizer == "adam", ValueError,
           "--beta2 applies to adamw and adam, not " << f.optimizer);
  if (f.optimizer == "adamw") {
    opt = std::make_unique<optim::AdamW>(std::move(params),
                                         optim::AdamWOptions(f.lr).betas(0.9, f.beta2).weight_decay(f.weight_decay));
  } else if (f.optimizer == "adam") {
    opt = std::make_unique<optim::Adam>(std::move(params),
                                        optim::AdamOptions(f.lr).betas(0.9, f.beta2).weight_decay(f.weight_decay));
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

Optimizers make_optimizers(const TrainerFlags& f, const std::vector<graph::NamedParam>& params) {
  std::vector<Tensor> tensors;
  for (const graph::NamedParam& p : params) tensors.push_back(p.tensor);
  Optimizers out;
  if (!f.zero1) {
    out.opt = make_optimizer(f, std::move(tensors));
    return out;
  }
  const std::shared_ptr<dist::ProcessGroup> group = process_group(f);
  TS_CHECK(group != nullptr, ValueError,
           "--zero1 shards the optimizer state over data-parallel ranks: run under mpirun or with --dist-init");
  TS_CHECK(f.optimizer != "adafactor", ValueError, "--zero1 shards adamw, adam and sgd, not adafactor");
  TrainerFlags unclipped = f;
  unclipped.clip = 0;  // ZeroUpdater clips over every rank's gradients
  const std::vector<int> owners = optim::shard_owners(tensors, group->size());
  out.opt = make_optimizer(unclipped, optim::owned(tensors, owners, group->rank()));
  out.zero = std::make_shared<optim::ZeroUpdater>(*out.opt, params, group, f.clip);
  return out;
}

std::unique_ptr<optim::LRSchedule> make_schedule(const TrainerFlags& f) {
  // The constant schedule's warm-up does not depend on --steps, so a run resumed with another
  // --steps follows the same rates; a decay needs its warm-up within the total.
  if (f.schedule == "constant") return std::make_unique<optim::ConstantLR>(f.lr, f.warmup);
  const int64_t warmup = std::min(f.warmup, f.steps);
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
  o.test_batches = f.test_batches;
  o.ckpt_every = f.ckpt_every;
  o.keep = f.keep;
  o.keep_best = f.keep_best;
  o.time_limit_s = f.time_limit;
  o.profile_step = f.profile_step;
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
  o.group = process_group(f);
  if (f.test_signal_at > 0) {
    o.test_signal_step = f.test_signal_at;
    o.test_signal = f.test_signal == "INT" ? SIGINT : SIGTERM;
    o.test_signal_count = f.test_signal_count;
  }
  return o;
}

}  // namespace examples
}  // namespace tessera
