#include "examples/common/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/logging/event_writer.h"
#include "core/logging/svg_plot.h"

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

MixedPrecision::MixedPrecision(const TrainerFlags& f) : dtype_(dtype_from_name(f.dtype)) {
  TS_CHECK(dtype_ == DType::f32 || dtype_ == DType::bf16 || dtype_ == DType::f16, ValueError,
           "--dtype must be f32, bf16 or f16, got " << f.dtype);
  if (dtype_ == DType::f16) scaler_.emplace();
}

std::unique_ptr<autocast::Guard> MixedPrecision::guard() const { return std::make_unique<autocast::Guard>(dtype_); }

bool MixedPrecision::eager_update(const Tensor& loss, optim::Optimizer& opt) {
  if (!scaler_) {
    loss.backward();
    opt.step();
    opt.zero_grad();
    return true;
  }
  scaler_->scale_loss(loss).backward();
  const bool stepped = scaler_->step(opt);  // a skipped step still counts (optim/loss_scaler.h)
  opt.zero_grad();
  return stepped;
}

ParamUpdater* MixedPrecision::updater(optim::Optimizer& opt) {
  if (!scaler_) return &opt;
  scaled_ = std::make_unique<optim::ScaledUpdater>(opt);
  return scaled_.get();
}

Tensor MixedPrecision::traced_loss(const Tensor& loss, const std::map<std::string, Tensor>& inputs) {
  if (!scaler_) return loss;
  TS_CHECK(scaled_, ValueError, "MixedPrecision: updater() must make the compiled step's updater first");
  return scaled_->scale_loss(loss, inputs.at(optim::ScaledUpdater::kScaleInput));
}

void MixedPrecision::add_feeds(std::map<std::string, Tensor>& feeds) const {
  if (scaler_) feeds.insert(optim::ScaledUpdater::feed(*scaler_));
}

double MixedPrecision::after_run(const CompiledStep& step, double loss) {
  if (!scaler_) return loss;
  const double unscaled = loss / scaler_->scale();  // a power of two: exact
  scaler_->update(step.fetch("grads_finite").item<float>() == 0);
  return unscaled;
}

void MixedPrecision::save(io::CheckpointData& ck) const {
  ck.trainer.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_) ck.trainer.ints["loss_scaler.clean_steps"] = scaler_->clean_steps();
}

void MixedPrecision::restore(const io::CheckpointData& ck) {
  // A run that was not f16 saved no scaler state: an f16 resume of it starts from the default.
  auto it = ck.trainer.ints.find("loss_scaler.clean_steps");
  if (scaler_ && it != ck.trainer.ints.end()) scaler_->set_state(ck.trainer.loss_scale, it->second);
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
  if (ck && !ck->trainer.vocabulary.empty())
    opt.vocab(data::Vocabulary::from_bytes({ck->trainer.vocabulary.begin(), ck->trainer.vocabulary.end()}));
  return data::TextDataset::load(f.data, opt);
}

nlohmann::json run_config(const TrainerFlags& f, const std::string& model_type, const nlohmann::json& model) {
  return {{"model_type", model_type},
          {"model", model},
          {"train", {{"data", f.data}, {"steps", f.steps}, {"batch", f.batch}, {"seq", f.seq}, {"lr", f.lr},
                     {"warmup", f.warmup}, {"schedule", f.schedule}, {"clip", f.clip}, {"optimizer", f.optimizer},
                     {"weight_decay", f.weight_decay}, {"seed", f.seed}, {"eager", f.eager}}}};
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

// Creates the run folder and proves it writable with a probe file, before any real file is written.
void prepare_out_dir(const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  TS_CHECK(!ec, IOError, "cannot create run folder '" << out << "': " << ec.message());
  const fs::path probe = fs::path(out) / ".write_probe";
  { std::ofstream f(probe); TS_CHECK(f.good(), IOError, "run folder '" << out << "' is not writable"); }
  fs::remove(probe, ec);
}

// Writes `text` to `path` through a temporary file and a rename (no half-written file).
void write_file_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    TS_CHECK(f.good(), IOError, "cannot write '" << tmp.string() << "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  TS_CHECK(!ec, IOError, "cannot write '" << path.string() << "': " << ec.message());
}

// The loss curves drawn in loss.svg: every logged train loss and every val loss.
struct LossCurves {
  std::vector<std::pair<int64_t, double>> train, val;
  void add(const nlohmann::json& row) {
    const int64_t s = row["step"].get<int64_t>();
    if (row.contains("train_loss") && row["train_loss"].is_number()) train.push_back({s, row["train_loss"].get<double>()});
    if (row.contains("val_loss") && row["val_loss"].is_number()) val.push_back({s, row["val_loss"].get<double>()});
  }
  void write(const fs::path& path) const {
    logging::write_loss_svg(path.string(), {{"train", train}, {"val", val}}, logging::PlotOptions());
  }
};

// metrics.jsonl of a resumed run: rows after the checkpoint's step are dropped (they will be
// redone); the rows kept go back into the loss curves.
void trim_metrics(const fs::path& path, int64_t step, LossCurves& curves) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step) {
      kept += line + "\n";
      curves.add(j);
    }
  }
  in.close();
  write_file_atomic(path, kept);
}

std::string fmt_duration(double s) {
  const auto t = static_cast<int64_t>(std::max(0.0, s) + 0.5);
  std::ostringstream o;
  if (t >= 3600) o << t / 3600 << "h";
  if (t >= 60) o << (t / 60) % 60 << "m";
  o << t % 60 << "s";
  return o.str();
}

std::string fmt(double v, int prec) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(prec);
  o << v;
  return o.str();
}

}  // namespace

void run_training(const TrainerFlags& f, nn::Module& model, optim::Optimizer& opt, const nlohmann::json& config,
                  TrainTask& task) {
  int64_t step = 0, tokens_seen = 0;
  if (!f.resume.empty()) {  // validates everything before changing a tensor; reads only
    io::CheckpointData ck = io::restore(f.resume, model, &opt);
    task.restore_state(ck);
    step = ck.trainer.step;
    tokens_seen = ck.trainer.tokens_seen;
    TS_CHECK(opt.step_count() == step, IOError,
             "checkpoint '" << f.resume << "' is inconsistent: optimizer step " << opt.step_count()
                            << " but trainer step " << step);
  }
  prepare_out_dir(f.out);
  const fs::path out(f.out), metrics_path = out / "metrics.jsonl", ckpt_path = out / "ckpt.h5";
  write_file_atomic(out / "config.json", config.dump(2) + "\n");
  LossCurves curves;
  if (step > 0) trim_metrics(metrics_path, step, curves);
  logging::EventWriter events(out.string());  // TensorBoard: the same scalars as metrics.jsonl
  std::ofstream metrics(metrics_path, step > 0 ? std::ios::app : std::ios::trunc);
  TS_CHECK(metrics.good(), IOError, "cannot write '" << metrics_path.string() << "'");
  if (step == 0) write_file_atomic(out / "samples.txt", "");

  const std::unique_ptr<optim::LRSchedule> schedule = make_schedule(f);
  const bool tty = isatty(fileno(stdout));
  const int64_t first = step;
  auto save = [&] {
    io::CheckpointData ck = io::capture(model, &opt);
    ck.config = config.dump();
    ck.trainer.step = step;
    ck.trainer.tokens_seen = tokens_seen;
    task.save_state(ck);
    io::save_checkpoint(ckpt_path.string(), ck, f.keep);
  };
  if (step >= f.steps)
    std::cout << "checkpoint is at step " << step << " >= --steps " << f.steps << ": nothing to do\n";

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  double train_loss = NAN, val_loss = NAN, smooth = NAN, last_log_t = 0.0;
  int64_t last_log_step = step;
  while (step < f.steps) {
    schedule->apply(opt);
    const double lr = opt.lr();
    train_loss = task.train_step();
    TS_CHECK(std::isfinite(train_loss), ValueError, "training loss became " << train_loss << " at step " << step + 1
                                                    << " (try a lower --lr or --clip)");
    ++step;
    tokens_seen += task.tokens_per_step();
    smooth = std::isnan(smooth) ? train_loss : 0.9 * smooth + 0.1 * train_loss;

    const bool last = step == f.steps;
    const bool eval = last || (f.eval_every > 0 && step % f.eval_every == 0);
    const bool log = eval || step % f.log_every == 0 || step == first + 1;
    const double now = elapsed();
    const double tok_s = tokens_seen > 0 && now > 0 ? (step - first) * task.tokens_per_step() / now : 0.0;
    if (tty) {
      const double eta = (f.steps - step) * now / static_cast<double>(step - first);
      std::cout << "\rstep " << step << "/" << f.steps << "  loss " << fmt(smooth, 3) << "  " << fmt(tok_s, 0)
                << " tok/s  ETA " << fmt_duration(eta) << "    " << std::flush;
    }
    if (!last && f.ckpt_every > 0 && step % f.ckpt_every == 0) save();
    if (!log) continue;
    nlohmann::json row = {{"step", step}, {"train_loss", train_loss}, {"lr", lr},
                          {"tokens_per_s", (step - last_log_step) * task.tokens_per_step() /
                                               std::max(1e-9, now - last_log_t)},
                          {"elapsed_s", now}};
    last_log_step = step;
    last_log_t = now;
    if (eval) {
      val_loss = task.evaluate(f.eval_batches);
      row["val_loss"] = val_loss;
      const std::string text = task.sample();
      if (!text.empty()) {
        std::ofstream s(out / "samples.txt", std::ios::app);
        s << "=== step " << step << " (val_loss " << fmt(val_loss, 4) << ") ===\n" << text << "\n\n";
        TS_CHECK(s.good(), IOError, "cannot write '" << (out / "samples.txt").string() << "'");
      }
    }
    metrics << row.dump() << "\n" << std::flush;
    TS_CHECK(metrics.good(), IOError, "cannot write '" << metrics_path.string() << "'");
    const double wall = logging::EventWriter::now();
    for (const char* key : {"train_loss", "val_loss", "lr", "tokens_per_s"})
      if (row.contains(key)) events.add_scalar(key, row[key].get<double>(), step, wall);
    curves.add(row);
    if (eval) {
      events.flush();
      curves.write(out / "loss.svg");
    }
    if (eval && tty) std::cout << "\n" << "step " << step << "  val_loss " << fmt(val_loss, 4) << "\n";
    if (!tty) {
      std::cout << "step " << step << "/" << f.steps << "  loss " << fmt(train_loss, 4) << "  lr " << lr << "  "
                << fmt(tok_s, 0) << " tok/s  " << fmt(now, 1) << "s";
      if (eval) std::cout << "  val_loss " << fmt(val_loss, 4);
      std::cout << "\n" << std::flush;
    }
  }
  if (step > first || !fs::exists(ckpt_path)) save();
  if (tty && step > first) std::cout << "\n";
  if (std::isnan(val_loss)) val_loss = task.evaluate(f.eval_batches);
  std::cout << "done: step " << step << "  train_loss " << (std::isnan(train_loss) ? "-" : fmt(train_loss, 4))
            << "  val_loss " << fmt(val_loss, 4)
            << "  (" << fmt_duration(elapsed()) << ", run folder " << f.out << ")\n";
}

}  // namespace examples
}  // namespace tessera
