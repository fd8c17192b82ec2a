// The shared part of the example trainers (train_lstm now, a transformer trainer later): the common
// flags, the run folder, metrics.jsonl, config.json, the progress line, evaluation, checkpoints,
// resume and the summary line. A program supplies the model-specific part as a TrainTask.
//
//   TrainerFlags flags;  flags.out = "runs/lstm";
//   CLI::App app{"..."};
//   add_trainer_flags(app, flags);
//   if (int rc = parse_flags(app, argc, argv, "train_lstm"); rc >= 0) return rc;
//   ... build the model, optimizer (make_optimizer) and a TrainTask ...
//   return run_training(flags, "train_lstm", model, *opt, config_json, task);
//
// Run folder (--out): config.json (the model and training configuration), metrics.jsonl (one
// object per logged step: step, train_loss, lr, tokens_per_s, elapsed_s, val_loss on eval steps),
// ckpt.h5 (latest; with --keep K also ckpt.<step>.h5, the K newest), samples.txt, a TensorBoard
// event file (events.out.tfevents.*: the metrics' scalars) and loss.svg (train and val loss).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "models/model_checkpoint.h"
#include "data/text_dataset.h"
#include "optim/optim.h"

namespace tessera {
namespace examples {

/// The flags every trainer shares (defaults are the program's, set before add_trainer_flags).
struct TrainerFlags {
  std::string data;         ///< training text
  std::string out;          ///< run folder
  int64_t steps = 1000;     ///< total steps of the run (a resumed run continues up to it)
  int64_t batch = 32;
  int64_t seq = 64;
  double lr = 3e-3;         ///< peak learning rate
  int64_t warmup = 50;      ///< linear warm-up steps
  std::string schedule = "cosine";   ///< cosine | linear | constant
  double clip = 1.0;        ///< global gradient-norm clip; 0 = off
  std::string optimizer = "adamw";   ///< adamw | adam | sgd | adafactor
  double weight_decay = 0.0;
  uint64_t seed = 1;        ///< data order and sampling
  std::string device = "cpu";
  std::string dtype = "f32";
  int64_t eval_every = 100;
  int64_t eval_batches = 8;
  int64_t ckpt_every = 500;
  int keep = 0;             ///< numbered checkpoints kept besides ckpt.h5
  int64_t log_every = 10;   ///< plain log lines (not a terminal) and metrics.jsonl rows
  std::string resume;       ///< checkpoint to resume from
  std::string config;       ///< JSON model config file
  bool eager = false;       ///< eager autograd instead of the compiled step
  std::string dump_graph;   ///< the compiled step as Graphviz
};

/// Adds the shared flags to `app` as the option group "Training"; every option of `app` added from
/// then on takes the last of repeated values.
void add_trainer_flags(CLI::App& app, TrainerFlags& flags);

/// Parses; returns -1 to go on, else the exit code: 0 after --help, 2 after a usage error (one
/// line "<prog>: <problem>" on stderr).
int parse_flags(CLI::App& app, int argc, char** argv, const std::string& prog);

/// Checks --device against what the trainers can do: DeviceError for --device cuda without a
/// usable GPU.
void check_supported(const TrainerFlags& flags);

/// Mixed precision of a run (--dtype). f32: everything in f32. bf16 / f16: the model's
/// matmuls, block-sparse products and attention run under autocast (core/autocast.h) with the
/// f32 parameters as master weights; f16 also scales the loss (optim::LossScaler): eagerly in
/// eager_update(), in compiled steps through an optim::ScaledUpdater (an overflowing step leaves
/// parameters and state unchanged). A task computes its losses inside guard(); eager tasks update
/// through eager_update(); compiled ones trace traced_loss() with updater(), feed add_feeds() and
/// read each run's loss through after_run().
class MixedPrecision {
 public:
  explicit MixedPrecision(const TrainerFlags& flags);
  /// The autocast dtype: f32 (off), bf16 or f16.
  DType autocast_dtype() const { return dtype_; }
  /// A guard to hold while computing a loss (switches autocast on for bf16/f16).
  std::unique_ptr<autocast::Guard> guard() const;
  /// backward() of `loss` (scaled for f16), then opt.step() (skipped by the scaler when a
  /// gradient overflowed, the step still counted), then opt.zero_grad(). Returns whether the
  /// optimizer updated.
  bool eager_update(const Tensor& loss, optim::Optimizer& opt);
  /// The updater a compiled step traces: `opt` itself, or for f16 a ScaledUpdater around it.
  ParamUpdater* updater(optim::Optimizer& opt);
  /// Inside a compiled step's loss function: the loss to differentiate (f16: times the fed scale).
  Tensor traced_loss(const Tensor& loss, const std::map<std::string, Tensor>& inputs);
  /// Adds what a compiled step needs fed besides the batch (f16: the loss scale).
  void add_feeds(std::map<std::string, Tensor>& feeds) const;
  /// After a compiled run that returned `loss`: the unscaled loss. f16: moves the scale (backoff
  /// when the step was skipped for an overflow, growth after enough clean steps).
  double after_run(const CompiledStep& step, double loss);
  /// The loss scale (1 unless f16) into / out of a checkpoint's trainer state.
  void save(io::CheckpointData& ck) const;
  void restore(const io::CheckpointData& ck);

 private:
  DType dtype_;
  std::optional<optim::LossScaler> scaler_;  // f16 only
  std::unique_ptr<optim::ScaledUpdater> scaled_;  // f16 compiled steps
};

/// The device named by --device ("cpu" or "cuda" = cuda:0).
Device train_device(const TrainerFlags& flags);

/// The model config of a run before explicit model flags: `defaults`; when resuming, the model
/// config of checkpoint `ck` (which must hold `model_type` when it names one); with --config, the
/// defaults updated from that file (a model config object, or a run folder's config.json whose
/// "model" part is taken). Errors name the file and the problem.
nlohmann::json base_model_config(const TrainerFlags& flags, const nlohmann::json& defaults,
                                 const std::string& model_type, const io::CheckpointData* ck);

/// The character-level text at --data, with the vocabulary of checkpoint `ck` when resuming.
data::TextDataset load_text(const TrainerFlags& flags, const io::CheckpointData* ck);

/// config.json of a run: {"model_type", "model": `model`, "train": the training flags}.
nlohmann::json run_config(const TrainerFlags& flags, const std::string& model_type, const nlohmann::json& model);

/// The optimizer named by --optimizer with --lr, --weight-decay and --clip.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerFlags& flags, std::vector<Tensor> params);

/// The schedule named by --schedule (warm-up --warmup, decay to lr/10 at --steps).
std::unique_ptr<optim::LRSchedule> make_schedule(const TrainerFlags& flags);

/// The model-specific part of a training run.
class TrainTask {
 public:
  virtual ~TrainTask() = default;
  /// One optimizer update (the learning rate is already set); returns the training loss.
  virtual double train_step() = 0;
  /// Tokens consumed by one train_step().
  virtual int64_t tokens_per_step() const = 0;
  /// Mean validation loss over `batches` batches (no parameter changes).
  virtual double evaluate(int64_t batches) = 0;
  /// A text sample from the model (appended to samples.txt at each evaluation); empty: none.
  virtual std::string sample() { return {}; }
  /// Adds the task's resumable state (sampler positions, generators, vocabulary) to `ck`.
  virtual void save_state(io::CheckpointData& ck) const = 0;
  /// Takes it back from a checkpoint being resumed.
  virtual void restore_state(const io::CheckpointData& ck) = 0;
};

/// Runs the loop from the checkpoint's step (--resume) or 0 up to --steps: checks that --out is
/// writable before anything is written, restores model, optimizer and task state, writes
/// config.json, trains with progress output, evaluates every --eval-every steps and at the end,
/// checkpoints every --ckpt-every steps and at the end, and prints one summary line. Throws
/// tessera errors (the caller prints them and exits 1).
void run_training(const TrainerFlags& flags, nn::Module& model, optim::Optimizer& opt,
                  const nlohmann::json& config, TrainTask& task);

}  // namespace examples
}  // namespace tessera
