// The window task of the trainers of causal models that read whole windows of T tokens
// (train_transformer, train_conv): the library's train::WindowTask with the trainers' text samples,
// and the sampling generator's state in checkpoints (so that a resumed run draws the samples an
// uninterrupted one would).
//
//   examples::CausalTextTask<ConvLM> task(model, opt, loss, sampler, ds, options,
//                                         {sample_chars, temperature, /*seed=*/f.seed + 7}, device);
//
// A sample is sample_chars characters after a newline, drawn at `temperature` (0: greedy) by
// sample_causal_windows from model.logits(window, /*batch=*/1) over windows of the model's
// config().seq_len tokens.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "data/text_dataset.h"
#include "examples/common/trainer.h"
#include "examples/sample/sampling.h"
#include "models/train/train.h"

namespace tessera {
namespace examples {

/// The window task's options from the shared trainer flags: test split, compiled or eager steps,
/// micro-batches, autocast dtype, device, data name, graph dump, and the process group (data
/// parallel under mpirun or --dist-init; null otherwise). A trainer adds its own (dropout, ZeRO).
inline train::WindowTaskOptions window_task_options(const TrainerFlags& f, const data::TextDataset& ds) {
  train::WindowTaskOptions o;
  o.test = ds.tokens(data::Part::test);
  o.compiled = !f.eager;
  o.micro_batches = f.micro_batches;
  o.autocast = train_dtype(f);
  o.device = train_device(f);
  o.data_name = f.data;
  o.dump_graph = f.dump_graph;
  o.group = process_group(f);
  return o;
}

struct TextSampleOptions {
  int64_t chars = 300;       ///< characters per sample
  double temperature = 0.8;  ///< 0: greedy
  uint64_t seed = 7;         ///< of the sampling generator
};

template <class Model>
class CausalTextTask : public train::WindowTask {
 public:
  CausalTextTask(Model& model, optim::Optimizer& opt, LossFn loss, data::RandomWindowSampler sampler,
                 const data::TextDataset& ds, train::WindowTaskOptions options, const TextSampleOptions& samples,
                 Device device)
      : train::WindowTask(model, opt, std::move(loss), std::move(sampler), ds.tokens(data::Part::val), ds.vocab(),
                          std::move(options)),
        model_(model), vocab_(ds.vocab()), samples_(samples), sample_gen_(samples.seed), device_(device) {}

  std::string sample() override {
    model_.eval();
    NoGradGuard ng;
    const std::vector<int32_t> ids = sample_causal_windows(
        [&](const Tensor& window) { return model_.logits(window.to(device_), /*batch=*/1); },
        model_.config().seq_len, vocab_.contains('\n') ? vocab_.id('\n') : 0, samples_.chars,
        {samples_.temperature, /*top_k=*/0}, sample_gen_);
    model_.train();
    return vocab_.decode(ids);
  }

  void save_state(io::CheckpointData& ck) const override {
    train::WindowTask::save_state(ck);
    ck.rng["sample"] = sample_gen_.state();
  }

  void restore_state(const io::CheckpointData& ck, const std::string& path) override {
    train::WindowTask::restore_state(ck, path);
    if (ck.rng.count("sample")) sample_gen_.set_state(ck.rng.at("sample"));
  }

 private:
  Model& model_;
  data::Vocabulary vocab_;
  TextSampleOptions samples_;
  Generator sample_gen_;
  Device device_;  // where the model lives
};

}  // namespace examples
}  // namespace tessera
