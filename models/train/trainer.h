// The training loop as a library: a model, its optimizer and a task (what one step is) in; the
// run folder, evaluation, logs, checkpoints, resume, the progress line and stop signals handled
// here. The example trainers (train_lstm, train_transformer) and custom_loop are built on it.
//
//   train::TrainOptions o;
//   o.out = "runs/mine";  o.steps = 2000;  o.eval_every = 200;  o.ckpt_every = 500;  o.keep = 3;
//   o.schedule = std::make_shared<optim::WarmupCosine>(3e-3, 100, o.steps, 3e-4);
//   train::WindowTask task(model, opt, loss_fn, train_sampler, val_tokens, vocab);   // or your own
//   train::TrainResult r = train::run_training(o, model, opt, config, task);
//   return r.exit_code();                  // 0; 130 / 143 when SIGINT / SIGTERM stopped the run
//
// The loop, from the checkpoint's step (options.resume) or 0 up to options.steps:
//   - resume (one line "<program>: resumed from <ckpt> at step N"): io::restore checks and fills the model and the optimizer (moments, step count, lr),
//     the task takes its state back (samplers, generators, vocabulary, carried state), the
//     schedule continues from the step (it is a function of the step);
//   - each step: the schedule's lr, task.train_step(), a non-finite loss stops the run with an
//     error naming the step (ValueError; the last good checkpoint stays as it was);
//   - every log_every steps a metrics row (metrics.jsonl, TensorBoard) and a log line (plain
//     lines; a progress line redrawn in place when stdout is a terminal);
//   - every eval_every steps and at the end: task.evaluate(eval_batches), a sample, loss.svg;
//     with keep_best the checkpoint best.h5 whenever the val loss is the lowest so far;
//   - at the end, with test_batches > 0: task.evaluate_test(test_batches), a row "test_loss";
//   - every ckpt_every steps and at the end: ckpt.h5 (atomic; with keep > 0 also ckpt.<step>.h5,
//     the keep newest);
//   - SIGINT / SIGTERM (handle_signals): the current step finishes, ckpt.h5 is written, one line
//     says the step and the command to resume, and the result carries the signal; a second signal
//     exits at once (status 128 + signal) and leaves the previous checkpoint intact.
// Files of the run folder: models/train/run_folder.h. Errors are tessera errors (the caller prints
// the one line and exits 1).
//
// Data parallel (options.group of W ranks; the task trains on each rank's part of the batch, e.g.
// WindowTaskOptions::group): every rank runs the loop; rank 0 alone writes the run folder, the
// checkpoints, the metrics and the progress lines (the others are quiet); every rank evaluates
// (the same windows; rank 0 samples). After each step the ranks agree on stopping: a SIGINT or
// SIGTERM on any rank, or any rank's time limit, stops all of them after that step, rank 0 writes
// the checkpoint, and every rank returns the signal. Every rank can resume from the checkpoint.
// With TESSERA_DIST_CHECK=1 the ranks also check at each checkpoint that their parameters are
// still rank 0's bit for bit (a ValueError on every rank naming the first that is not).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/distributed/process_group.h"
#include "core/io/checkpoint.h"
#include "layers/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/zero.h"

namespace tessera {
class CompiledStep;

namespace train {

/// The global gradient norm (before clipping) of a task's last step: the compiled step's output
/// optim::kGradNormOutput when it has one (its updater clips), else the optimizer's last eager
/// one (eager steps, and the eager update after micro-batches); NaN without clipping. What
/// TrainTask::last_grad_norm returns for tasks that run `step` (null: eager) and `opt`.
double last_step_grad_norm(const CompiledStep* step, const optim::Optimizer& opt);

/// step.run(feeds); with `profile` non-null, the same step run by CompiledStep::profile instead,
/// its tables written to *profile: by op (format_profile), then the kProfileSignatureRows
/// costliest (op, shapes) groups (format_profile_by_signature). Returns the loss. What a task's
/// train_step calls after profile_next_step(out) asked for a profile.
inline constexpr size_t kProfileSignatureRows = 20;
double run_compiled_step(CompiledStep& step, const std::map<std::string, Tensor>& feeds, std::ostream* profile);

/// What one training step is, and the state it must keep across a resume.
class TrainTask {
 public:
  virtual ~TrainTask() = default;
  /// One optimizer update (the learning rate is already set); returns the training loss.
  virtual double train_step() = 0;
  /// The global gradient norm of the last train_step, before clipping; NaN when the step does
  /// not measure it (the default; the window tasks measure it when the optimizer clips).
  virtual double last_grad_norm() const { return std::numeric_limits<double>::quiet_NaN(); }
  /// Tokens (or examples) consumed by one train_step(): the progress line's rate.
  virtual int64_t tokens_per_step() const = 0;
  /// Mean validation loss over `batches` batches (no parameter changes).
  virtual double evaluate(int64_t batches) = 0;
  /// Mean loss over `batches` batches of the test split, the same way; NaN when the task has no
  /// test split (the default).
  virtual double evaluate_test(int64_t batches) {
    (void)batches;
    return std::numeric_limits<double>::quiet_NaN();
  }
  /// Asks the next train_step() to run its compiled step op by op (CompiledStep::profile: the same
  /// step, loss and updates, not replayed as a CUDA graph) and to write where its time went
  /// (format_profile) to `out`. Returns false when the task cannot (the default: eager steps).
  virtual bool profile_next_step(std::ostream& out) {
    (void)out;
    return false;
  }
  /// A text sample from the model (appended to samples.txt at each evaluation); empty: none.
  virtual std::string sample() { return {}; }
  /// Adds the task's resumable state (sampler positions, generators, vocabulary) to `ck`. Data
  /// parallel: called on every rank at each checkpoint (it may gather state across the ranks);
  /// rank 0's is written.
  virtual void save_state(io::CheckpointData& ck) const = 0;
  /// Takes it back from the checkpoint at `path` being resumed (errors name the path).
  virtual void restore_state(const io::CheckpointData& ck, const std::string& path) = 0;
};

/// What the loop reports after a step (the on_step callback).
struct StepInfo {
  int64_t step = 0;          ///< steps done
  double train_loss = 0;     ///< this step's loss
  double lr = 0;             ///< this step's learning rate
  double elapsed_s = 0;      ///< since the loop started
};

struct TrainOptions {
  std::string out = "runs/train";  ///< run folder (models/train/run_folder.h)
  int64_t steps = 1000;            ///< total steps of the run (a resumed run continues up to it)
  int64_t eval_every = 100;        ///< evaluate every N steps; 0: only at the end
  int64_t eval_batches = 8;        ///< validation batches per evaluation
  /// > 0: at the end of the run, task.evaluate_test(test_batches), logged as a metrics row
  /// {"step", "test_loss"} and in TrainResult::test_loss (NaN, and no row, without a test split).
  int64_t test_batches = 0;
  int64_t ckpt_every = 500;        ///< checkpoint every N steps; 0: only at the end
  int keep = 0;                    ///< numbered checkpoints kept besides ckpt.h5
  bool keep_best = false;          ///< also best.h5: the checkpoint of the lowest val loss so far
  int64_t log_every = 10;          ///< metrics row and log line every N steps
  /// > 0: a wall-clock budget of this process's training steps, in seconds: the first step that
  /// ends at or past it is the run's last (evaluated and checkpointed as the last of `steps` would
  /// be; evaluations do not count). For comparisons at equal training time. 0: none.
  double time_limit_s = 0;
  /// > 0: step N of the run (counted like `steps`, so after a resume too) runs op by op
  /// (TrainTask::profile_next_step) and its table goes to stdout (rank 0's). That step is slower
  /// than a replayed one and counts against time_limit_s as any step. 0: none.
  int64_t profile_step = 0;
  bool eval_first = false;         ///< a fresh run (not a resume) also evaluates before step 1 (row "step": 0)
  std::string resume;              ///< checkpoint to resume from; empty: start at step 0
  std::shared_ptr<const optim::LRSchedule> schedule;  ///< lr of each step; null: the optimizer's lr stays
  bool handle_signals = true;      ///< SIGINT / SIGTERM stop the run with a checkpoint
  std::string program = "train";   ///< the name that prefixes messages ("train_lstm")
  /// The command that resumes the run, printed when a signal stops it; empty: "<program> ...
  /// --resume <ckpt>". Trainers pass their own command line with --resume appended.
  std::string resume_command;
  bool quiet = false;              ///< no progress or log lines (errors still throw)
  /// Called after every step (after the step's checkpoint, before its log line).
  std::function<void(const StepInfo&)> on_step;
  /// Called after every evaluation with the step and the val loss.
  std::function<void(int64_t step, double val_loss)> on_eval;
  /// Test hook: raise `test_signal` (e.g. SIGTERM) in this process right after step
  /// `test_signal_step` (0: never), as a signal arriving during that step would. Deterministic,
  /// for tests of the stop path.
  int64_t test_signal_step = 0;
  int test_signal = 0;
  int test_signal_count = 1;  ///< 2: the signal twice, as a user pressing Ctrl-C again would
  int test_signal_rank = 0;   ///< data parallel: the rank that raises test_signal (-1: every rank)
  /// Data parallelism over this group (see above); null: one process.
  std::shared_ptr<dist::ProcessGroup> group;
  /// ZeRO-1 (optim/zero.h): `opt` holds this rank's parameters only; checkpoints gather every
  /// parameter's state to rank 0, and a resume keeps this rank's part. Null: none.
  std::shared_ptr<optim::ZeroUpdater> zero;

  /// ValueError naming the field: steps < 1, a negative eval_every / ckpt_every / keep /
  /// time_limit_s, eval_batches or log_every < 1, an empty out.
  void validate() const;
};

/// How a run ended.
struct TrainResult {
  int64_t step = 0;              ///< steps done (the checkpoint's step)
  double train_loss = 0;         ///< the last step's loss (NaN when no step ran)
  double val_loss = 0;           ///< the last evaluation's val loss
  double best_val_loss = 0;      ///< lowest val loss seen (NaN before any evaluation)
  int signal = 0;                ///< SIGINT / SIGTERM when a signal stopped the run, else 0
  std::string checkpoint;        ///< the last checkpoint written (ckpt.h5 of the run folder)
  double test_loss = std::numeric_limits<double>::quiet_NaN();  ///< the final test loss (test_batches)
  /// 0, or 128 + signal (130 SIGINT, 143 SIGTERM): the exit status a program returns.
  int exit_code() const { return signal ? 128 + signal : 0; }
};

/// Runs the loop (see the file comment). `config` is the run's configuration, written as
/// config.json and as the checkpoints' config attribute (models/model_registry.h describes its
/// schema: {"model_type", "model", "constants", "train"}).
TrainResult run_training(const TrainOptions& options, nn::Module& model, optim::Optimizer& opt,
                         const nlohmann::json& config, TrainTask& task);

}  // namespace train
}  // namespace tessera
