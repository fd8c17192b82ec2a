// A ready-made training task for language models over token windows: a loss function of a batch,
// random training windows (data::RandomWindowSampler), a fixed set of validation windows, the
// vocabulary, and how a step runs (compiled or eager, micro-batches, mixed precision, device).
//
//   auto loss_fn = [&](const Tensor& x, const Tensor& y) { return model.loss(x, y); };  // i32 [B*T]
//   data::RandomWindowSampler windows(ds.tokens(data::Part::train), 16, 64, /*seed=*/1);
//   train::WindowTask task(model, opt, loss_fn, windows, ds.tokens(data::Part::val), ds.vocab());
//   train::run_training(options, model, opt, config, task);
//
// A step (train_step):
//   - micro_batches = 1: one batch; compiled (default) it is one traced step (forward, backward,
//     update; on a GPU a replayed CUDA graph), eager it is loss.backward() and opt.step();
//   - micro_batches = k > 1 (gradient accumulation): k batches, each contributing loss_i / k, so
//     the gradients summed over them are those of the mean loss of the k batches (k·B windows at
//     the memory of B); then one optimizer update. Compiled, each micro-batch is a traced
//     gradient step (no update; its gradients are added into the parameters' .grad), then one
//     eager update; eager, backward() accumulates. The step's loss is the mean of the k losses.
//   - mixed precision (options.autocast bf16 / f16): models/train/mixed_precision.h.
// Batches come from the sampler on the CPU and are fed to where the model is (options.device).
// Data parallel (options.group, a process group of W ranks, core/distributed/): every rank draws
// the batch one process would draw with W·B windows (the sampler is widened to W·B) and trains on
// rows r·B … (r+1)·B − 1 of it; rank 0's parameters are broadcast at construction; the gradients are
// averaged over the ranks (compiled: dist::DataParallelUpdater, its all-reduces overlapping
// backward; eager: dist::GradientReducer; micro-batches: dist::average_gradients after the last),
// so each step equals one process's step on the W·B windows; the step's loss is the mean over the
// ranks, and tokens_per_step counts every rank's tokens. Evaluation splits the same W·B windows
// over the ranks and averages (every rank must evaluate). The sampler state is the global one:
// resuming with the same world size is exact. Dropout: each rank draws the part of the global
// batch's masks that falls on its rows (Generator::set_share on options.dropout_gen), so a run
// with dropout is one process's run too (for activations whose rows lead and fill whole Philox blocks).
// evaluate(n): the mean loss over the first n windows of a fixed-seed sampler over the validation
// tokens (the same windows at every evaluation; the training tokens when there are too few), in
// eval mode (no dropout) without autograd; evaluate_test(n) the same over options.test.
// sample(): options.sample, when given.
// State in checkpoints (save_state / restore_state): the vocabulary (/trainer/vocabulary: on resume
// it must be there and equal this task's, or an error names the checkpoint and the data), the
// sampler ("data.sampler" = "random", rng "data", "data.steps"), the dropout generator (rng
// "dropout") and the loss scale.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/distributed/data_parallel.h"
#include "core/graph/compile.h"
#include "core/random.h"
#include "data/sampler.h"
#include "data/text_dataset.h"
#include "layers/module.h"
#include "models/train/mixed_precision.h"
#include "models/train/trainer.h"
#include "optim/optimizer.h"
#include "optim/zero.h"

namespace tessera {
namespace train {

struct WindowTaskOptions {
  bool compiled = true;            ///< a traced step (false: eager autograd)
  int64_t micro_batches = 1;       ///< batches per optimizer update (gradient accumulation)
  DType autocast = DType::f32;     ///< f32, bf16 or f16 (models/train/mixed_precision.h)
  Device device = Device::cpu();   ///< where the model is: batches are fed there
  /// The generator the loss function's dropout draws from (compiled steps reserve its stream
  /// per run; saved as rng "dropout"); null when the loss has no random ops.
  Generator* dropout_gen = nullptr;
  int64_t eval_seed = 12345;       ///< seed of the fixed validation windows
  data::TokenArray test;           ///< the test split's tokens, for evaluate_test (null: none)
  std::string data_name;           ///< the training data as errors name it (e.g. the file path)
  std::function<std::string()> sample;  ///< a text sample at each evaluation; empty: none
  std::string dump_graph;          ///< compiled: write the step's graph (Graphviz) to this file
  /// Data parallelism over this group (see above); null: one process.
  std::shared_ptr<dist::ProcessGroup> group;
  /// ZeRO-1 (optim/zero.h) over `group`: the compiled step's updater instead of
  /// dist::DataParallelUpdater; the task's optimizer then holds this rank's parameters only.
  /// Compiled steps without micro-batches, f32 or bf16 (ValueError otherwise).
  std::shared_ptr<optim::ZeroUpdater> zero;
};

class WindowTask : public TrainTask {
 public:
  /// loss(inputs, targets) -> a 0-d loss; inputs, targets i32 [batch*seq] in the sampler's layout,
  /// on options.device. The loss must use only ops (it is traced when compiled).
  using LossFn = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;

  WindowTask(nn::Module& model, optim::Optimizer& opt, LossFn loss, data::RandomWindowSampler train,
             data::TokenArray val, data::Vocabulary vocab, WindowTaskOptions options = {});

  double train_step() override;
  int64_t tokens_per_step() const override;
  /// last_step_grad_norm of this task's step and optimizer.
  double last_grad_norm() const override;
  /// Compiled tasks: the next step runs op by op (with micro-batches, its first micro-batch).
  bool profile_next_step(std::ostream& out) override;
  double evaluate(int64_t batches) override;
  /// evaluate's windows over options.test (NaN when it is null or not longer than a window).
  double evaluate_test(int64_t batches) override;
  std::string sample() override { return options_.sample ? options_.sample() : std::string(); }
  void save_state(io::CheckpointData& ck) const override;
  void restore_state(const io::CheckpointData& ck, const std::string& path) override;

  const data::RandomWindowSampler& sampler() const { return sampler_; }
  /// The compiled step (compiled tasks), e.g. for its memory plan's summary.
  const CompiledStep* compiled_step() const { return step_ ? &*step_ : nullptr; }

 private:
  std::map<std::string, Tensor> feeds(const data::Batch& b) const;
  /// This rank's rows of a global batch (the batch itself in one process).
  data::Batch local(const data::Batch& b) const;
  /// The mean of `loss` over the ranks.
  double global_mean(double loss) const;
  double accumulate_step();
  double mean_loss(const data::TokenArray& tokens, int64_t batches);

  nn::Module& model_;
  optim::Optimizer& opt_;
  LossFn loss_;
  data::RandomWindowSampler sampler_;
  data::TokenArray val_;
  data::Vocabulary vocab_;
  WindowTaskOptions options_;
  MixedPrecision precision_;
  std::optional<CompiledStep> step_;  // compiled tasks
  std::ostream* profile_ = nullptr;   // profile_next_step's stream, until the next step takes it
  std::vector<graph::NamedParam> params_;  // the model's, for accumulating a compiled step's gradients
  std::unique_ptr<dist::DataParallelUpdater> dp_;      // compiled data-parallel steps
  std::unique_ptr<dist::GradientReducer> reducer_;     // eager data-parallel steps
  std::vector<dist::GradientBucket> buckets_;          // data parallel with micro-batches
};

/// The vocabulary of a checkpoint being resumed by a character-level run: IOError naming the
/// checkpoint and `data_name` (the data the ids would be matched to) when it has none.
data::Vocabulary require_vocabulary(const io::CheckpointData& ck, const std::string& path, const std::string& data_name);

/// Checks a resumed checkpoint's vocabulary against the one of the data being trained on:
/// require_vocabulary's IOError when the checkpoint has none, ValueError when it differs; both
/// name the checkpoint and `data_name`.
void check_vocabulary(const io::CheckpointData& ck, const std::string& path, const data::Vocabulary& vocab,
                      const std::string& data_name);

}  // namespace train
}  // namespace tessera
