// The files of a training run's folder, written as the run goes:
//   config.json        the run's configuration (written once, atomically)
//   metrics.jsonl      one JSON object per logged step: step, train_loss, lr, tokens_per_s,
//                      elapsed_s (wall time since the loop started), train_s (the same less the
//                      evaluations: what time_limit_s counts), grad_norm (the global gradient
//                      norm before clipping, when the task measures it), and val_loss on
//                      evaluation steps
//   events.out.tfevents.*   TensorBoard scalars: the same metrics (core/logging/event_writer.h)
//   loss.svg           train and val loss curves, redrawn at each evaluation
//   samples.txt        text samples appended at each evaluation (when the task makes them)
// A resumed run (start step > 0) keeps metrics.jsonl up to the checkpoint's step (later rows
// are dropped: they are redone) and draws them into loss.svg again.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/logging/event_writer.h"

namespace tessera {
namespace train {

class RunFolder {
 public:
  /// Creates `dir` and proves it writable before any real file is written (IOError naming it),
  /// writes config.json, and opens the logs for a run that starts at `start_step`.
  RunFolder(const std::string& dir, const nlohmann::json& config, int64_t start_step);

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const;

  /// Appends one metrics row ({"step": ..., ...}) to metrics.jsonl and TensorBoard.
  void log(const nlohmann::json& row);
  /// Appends a sample to samples.txt under a heading with the step and val loss.
  void add_sample(int64_t step, double val_loss, const std::string& text);
  /// Flushes TensorBoard and redraws loss.svg (at evaluations and at the end).
  void flush();

 private:
  void add_to_curves(const nlohmann::json& row);

  std::string dir_;
  std::ofstream metrics_;
  std::unique_ptr<logging::EventWriter> events_;
  std::vector<std::pair<int64_t, double>> train_curve_, val_curve_;
};

}  // namespace train
}  // namespace tessera
