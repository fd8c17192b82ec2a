// SIGINT and SIGTERM during training: the first asks the loop to stop after the current step (it
// then writes a checkpoint and returns), the second exits at once with status 128 + signal, which
// leaves the previous checkpoint intact (checkpoints are written to a temporary file and renamed,
// core/io/atomic_file.h, so a write cut short never replaces one).
//
//   train::StopSignals stop;              // handlers installed; the previous ones back at scope end
//   while (...) {
//     step();
//     if (stop.requested()) { save(); return 128 + stop.signal(); }   // 130 SIGINT, 143 SIGTERM
//   }
//
// Clusters (Slurm) send SIGTERM some time before they kill a job; users press Ctrl-C (SIGINT).
// One StopSignals at a time per process (a second one while the first lives is a ValueError).
#pragma once

namespace tessera {
namespace train {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// Whether SIGINT or SIGTERM arrived since construction.
  bool requested() const;
  /// The signal that arrived first (SIGINT or SIGTERM), 0 when none.
  int signal() const;
  /// "SIGINT", "SIGTERM" (or "a signal" for another number).
  static const char* name(int signo);
};

}  // namespace train
}  // namespace tessera
