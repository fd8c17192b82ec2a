// Samplers: batches of (inputs, targets) windows from a token stream, seeded and resumable.
//
//   using namespace tessera::data;
//   RandomWindowSampler rs(ds.tokens(Part::train), /*batch=*/32, /*seq=*/256, /*seed=*/1,
//                          Layout::batch_major);             // for TransformerLM: rows b*seq + t
//   Batch b = rs.next();                                    // b.inputs, b.targets: i32 [batch*seq]
//   auto st = rs.state();                                   // {seed, offset, steps}: checkpoint it
//   rs.set_state(st);                                       // ... and the same batches follow
//
//   SequentialSampler ss(ds.tokens(Part::train), /*batch=*/64, /*seq=*/128);  // time-major
//   for (...) {                          // truncated BPTT: lane b continues where it stopped
//     Batch b = ss.next();
//     if (b.lane_start) state = {};      // new pass over the lanes: drop the carried LSTM state
//     ...
//   }
//
// A window at position s is inputs = tokens[s, s + seq) and targets = tokens[s + 1, s + seq + 1).
// Layouts of the 1-D i32 tensors [seq*batch]:
//   time_major   row t*batch + b   (CharLSTMLM: [T, B] flattened)
//   batch_major  row b*seq + t     (TransformerLM: [B, T] flattened)
#pragma once

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "data/text_dataset.h"

namespace tessera {
namespace data {

enum class Layout { time_major, batch_major };

/// Wraps ids in a shared token array.
TokenArray make_tokens(std::vector<int32_t> ids);

/// One batch of windows.
struct Batch {
  Tensor inputs;   ///< i32 [seq*batch] in `layout`
  Tensor targets;  ///< i32 [seq*batch]: the token after each input
  int64_t batch = 0;
  int64_t seq = 0;
  Layout layout = Layout::time_major;
  int64_t epoch = 0;        ///< SequentialSampler: completed passes before this batch (0 for random)
  bool lane_start = false;  ///< SequentialSampler: the windows start their lanes (reset carried state)
};

/// Independent windows at uniformly random positions in [0, n - seq - 1], drawn from a Philox
/// stream (core/philox.h): window b of a step uses block offset + b/2, words 2(b%2) and 2(b%2)+1 as
/// a 64-bit number x, and starts at x mod (n - seq) (bias below (n - seq) / 2^64). A step reserves
/// ceil(batch/2) blocks, so the batches depend only on (seed, offset) and resume exactly.
class RandomWindowSampler {
 public:
  /// What a checkpoint stores. offset: Philox blocks used; steps: batches drawn.
  struct State {
    uint64_t seed = 0;
    uint64_t offset = 0;
    int64_t steps = 0;
    bool operator==(const State& o) const { return seed == o.seed && offset == o.offset && steps == o.steps; }
  };

  /// ValueError unless batch > 0, seq > 0 and the stream holds at least seq + 1 tokens.
  RandomWindowSampler(TokenArray tokens, int64_t batch, int64_t seq, uint64_t seed,
                      Layout layout = Layout::time_major);

  Batch next();
  /// The window starts the next call of next() will use (does not advance).
  std::vector<int64_t> peek_starts() const;

  State state() const { return {gen_.seed(), gen_.offset(), steps_}; }
  void set_state(const State& s);

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  Layout layout() const { return layout_; }
  int64_t steps() const { return steps_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_->size()); }
  const TokenArray& tokens() const { return tokens_; }

 private:
  std::vector<int64_t> starts_at(uint64_t offset) const;
  TokenArray tokens_;
  int64_t batch_, seq_;
  Layout layout_;
  Generator gen_;
  int64_t steps_ = 0;
};

/// The stream cut into `batch` contiguous lanes of L = n / batch tokens (lane b = tokens[b*L, (b+1)*L);
/// the last n mod batch tokens are unused), walked in order: each batch takes the window at `cursor`
/// in every lane, then cursor += seq, so a lane's inputs continue across batches (truncated BPTT with
/// carried state). When the next window would pass the lane's end (cursor + seq + 1 > L) the sampler
/// wraps: cursor = 0, epoch + 1, and that batch has lane_start set. Each epoch has (L - 1) / seq
/// batches; the lane tail after the last full window is skipped.
class SequentialSampler {
 public:
  /// What a checkpoint stores: the position in every lane of the next window, and the epoch.
  struct State {
    int64_t cursor = 0;
    int64_t epoch = 0;
    bool operator==(const State& o) const { return cursor == o.cursor && epoch == o.epoch; }
  };

  /// ValueError unless batch > 0, seq > 0 and every lane holds at least seq + 1 tokens.
  SequentialSampler(TokenArray tokens, int64_t batch, int64_t seq, Layout layout = Layout::time_major);

  Batch next();

  State state() const { return {cursor_, epoch_}; }
  /// ValueError for a cursor outside [0, lane_length()) or a negative epoch.
  void set_state(const State& s);
  /// Back to the start of the lanes, epoch 0.
  void reset() { set_state({}); }

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  Layout layout() const { return layout_; }
  int64_t epoch() const { return epoch_; }
  int64_t lane_length() const { return lane_; }
  int64_t steps_per_epoch() const { return (lane_ - 1) / seq_; }

 private:
  TokenArray tokens_;
  int64_t batch_, seq_;
  Layout layout_;
  int64_t lane_;
  int64_t cursor_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace data
}  // namespace tessera
