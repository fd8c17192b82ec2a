// The command-line part of the example trainers (train_lstm, train_transformer): the flags they
// share and what they make from them. The loop itself (run folder, metrics, TensorBoard, loss.svg,
// evaluation, checkpoints, resume, signals) is the library's, models/train/trainer.h.
//
//   TrainerFlags flags;  flags.out = "runs/lstm";
//   CLI::App app{"..."};
//   add_trainer_flags(app, flags);
//   if (int rc = parse_flags(app, argc, argv, "train_lstm"); rc >= 0) return rc;
//   ... build the model, optimizer (make_optimizer) and a train::TrainTask ...
//   train::TrainResult r = train::run_training(train_options(flags, "train_lstm", argc, argv), model, *opt,
//                                              run_config(flags, "char_lstm", model_json), task);
//   return r.exit_code();
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/distributed/process_group.h"
#include "core/io/checkpoint.h"
#include "data/text_dataset.h"
#include "models/train/trainer.h"
#include "optim/optim.h"

namespace tessera {
namespace examples {

/// The flags every trainer shares (defaults are the program's, set before add_trainer_flags).
struct TrainerFlags {
  std::string data;         ///< training text
  std::string split = "contiguous";  ///< --split: contiguous | interleaved[:CHUNK[:PERIOD]] (parse_split)
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
  double beta2 = 0.999;     ///< adam/adamw: decay of the squared-gradient average (0.95 steadies long runs)
  uint64_t seed = 1;        ///< data order and sampling
  std::string device = "cpu";
  std::string dtype = "f32";
  int64_t eval_every = 100;
  int64_t eval_batches = 8;
  int64_t test_batches = 0; ///< > 0: the test split's loss over that many batches at the end
  int64_t ckpt_every = 500;
  int keep = 0;             ///< numbered checkpoints kept besides ckpt.h5
  int64_t log_every = 10;   ///< plain log lines (not a terminal) and metrics.jsonl rows
  std::string resume;       ///< checkpoint to resume from
  std::string config;       ///< JSON model config file
  bool eager = false;       ///< eager autograd instead of the compiled step
  std::string dump_graph;   ///< the compiled step as Graphviz
  int64_t micro_batches = 1;  ///< batches per optimizer update (gradient accumulation)
  bool keep_best = false;   ///< also best.h5, the checkpoint of the lowest val loss
  double time_limit = 0;    ///< seconds of training (evaluations not counted); 0: none
  int64_t profile_step = 0; ///< > 0: that step runs op by op and its time by op is printed
  int64_t test_signal_at = 0;        ///< test hook: raise --test-signal after this step (hidden flag)
  std::string test_signal = "TERM";  ///< TERM | INT
  int test_signal_count = 1;          ///< 2: the signal twice (the second exits at once)
  /// Data parallelism (process_group below): "" (auto: under a launcher of several ranks, MPI's
  /// world), "mpi", or "file:///shared/path" (an NCCL rendezvous file; GPUs without MPI).
  std::string dist_init;
  bool zero1 = false;  ///< --zero1: ZeRO-1, the optimizer state sharded over the data-parallel ranks
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

/// The device named by --device: "cpu", or "cuda" = cuda:0, or in a data-parallel run the GPU
/// of this process's local rank (modulo the GPUs on the node).
Device train_device(const TrainerFlags& flags);

/// The process group of a data-parallel run, made once per process, or null for one process:
/// dist::init_process_group (core/distributed/init.h) with --dist-init, --device and, in builds
/// with tessera_mpi, the MPI part. A run is data parallel when the launcher's environment
/// (mpirun, RANK / WORLD_SIZE, Slurm) has several ranks or --dist-init is given; its errors are
/// one ValueError line each.
std::shared_ptr<dist::ProcessGroup> process_group(const TrainerFlags& flags);

/// The model config of a run before explicit model flags: `defaults`; when resuming, the model
/// config of checkpoint `ck` (which must hold `model_type` when it names one); with --config, the
/// defaults updated from that file (a model config object, or a run folder's config.json whose
/// "model" part is taken). Errors name the file and the problem.
nlohmann::json base_model_config(const TrainerFlags& flags, const nlohmann::json& defaults,
                                 const std::string& model_type, const io::CheckpointData* ck);

/// The split named by --split: "contiguous" (train = the first 90% of the file, val = the rest, in
/// file order) or "interleaved[:CHUNK[:PERIOD]]" (data::Split::interleaved(CHUNK, PERIOD), default
/// 1000000:20: 1 MB chunks, chunk c to val when c % PERIOD == PERIOD-2, to test when
/// c % PERIOD == PERIOD-1, else to train; for corpora sorted by topic or key, e.g. gcide).
/// ValueError naming the value otherwise (CHUNK >= 1, PERIOD >= 3).
data::Split parse_split(const std::string& spec);

/// The spelling of a --split value that run configs record: "contiguous" or
/// "interleaved:CHUNK:PERIOD" with the defaults filled in. ValueError as parse_split.
std::string canonical_split(const std::string& spec);

/// The character-level text at --data, cut by --split, with the vocabulary of checkpoint `ck` when
/// resuming (an IOError naming the checkpoint and --data when the checkpoint has none). When
/// resuming, the split must be the one the checkpoint's run recorded ("contiguous" when it recorded
/// none): ValueError naming both otherwise. An interleaved split that leaves no validation bytes
/// is a ValueError too.
data::TextDataset load_text(const TrainerFlags& flags, const io::CheckpointData* ck);

/// config.json of a run: models::checkpoint_config(model_type, model, the training flags):
/// {"model_type", "model", "constants", "train"}.
nlohmann::json run_config(const TrainerFlags& flags, const std::string& model_type, const nlohmann::json& model);

/// The optimizer named by --optimizer with --lr, --weight-decay and --clip.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerFlags& flags, std::vector<Tensor> params);

/// The optimizer of a run, and with --zero1 its ZeRO-1 updater (optim/zero.h): the optimizer then
/// holds this rank's parameters only and ZeroUpdater clips at --clip. ValueError for --zero1 without
/// a data-parallel group, or with --optimizer adafactor.
struct Optimizers {
  std::unique_ptr<optim::Optimizer> opt;
  std::shared_ptr<optim::ZeroUpdater> zero;  ///< null without --zero1
};
Optimizers make_optimizers(const TrainerFlags& flags, const std::vector<graph::NamedParam>& params);

/// The schedule named by --schedule (warm-up --warmup, decay to lr/10 at --steps).
std::unique_ptr<optim::LRSchedule> make_schedule(const TrainerFlags& flags);

/// The loop's options from the flags: run folder, steps, evaluation, checkpoints, resume, the
/// schedule (make_schedule), the program's name, and the command that resumes the run (this
/// command line with --resume <out>/ckpt.h5 appended), printed when a signal stops it.
train::TrainOptions train_options(const TrainerFlags& flags, const std::string& prog, int argc, char** argv);

/// The autocast dtype of --dtype.
DType train_dtype(const TrainerFlags& flags);

}  // namespace examples
}  // namespace tessera
