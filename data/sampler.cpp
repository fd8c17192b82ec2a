#include "data/sampler.h"

#include "core/philox.h"

namespace tessera {
namespace data {

TokenArray make_tokens(std::vector<int32_t> ids) {
  return std::make_shared<const std::vector<int32_t>>(std::move(ids));
}

namespace {

void check_args(const char* who, const TokenArray& tokens, int64_t batch, int64_t seq) {
  TS_CHECK(tokens != nullptr, ValueError, who << ": no token array");
  TS_CHECK(batch > 0 && seq > 0, ValueError,
           who << ": batch and seq must be > 0, got batch " << batch << ", seq " << seq);
}

// Gathers the windows starting at starts[b] (b < batch) into inputs/targets [seq*batch].
//   time_major:  row t*batch + b = tokens[starts[b] + t]      (targets: + 1)
//   batch_major: row b*seq + t   = tokens[starts[b] + t]
Batch gather(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts, int64_t seq,
             Layout layout) {
  const int64_t batch = static_cast<int64_t>(starts.size());
  Batch out;
  out.inputs = empty({seq * batch}, DType::i32);
  out.targets = empty({seq * batch}, DType::i32);
  out.batch = batch;
  out.seq = seq;
  out.layout = layout;
  int32_t* x = out.inputs.data<int32_t>();
  int32_t* y = out.targets.data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* w = tokens.data() + starts[b];
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t row = layout == Layout::time_major ? t * batch + b : b * seq + t;
      x[row] = w[t];
      y[row] = w[t + 1];
    }
  }
  return out;
}

}  // namespace

// ---- RandomWindowSampler ----

RandomWindowSampler::RandomWindowSampler(TokenArray tokens, int64_t batch, int64_t seq, uint64_t seed,
                                         Layout layout)
    : tokens_(std::move(tokens)), batch_(batch), seq_(seq), layout_(layout), gen_(seed) {
  check_args("RandomWindowSampler", tokens_, batch, seq);
  TS_CHECK(num_tokens() >= seq + 1, ValueError,
           "RandomWindowSampler: a window of seq " << seq << " needs " << seq + 1
                                                   << " tokens, the stream has " << num_tokens());
}

std::vector<int64_t> RandomWindowSampler::starts_at(uint64_t offset) const {
  const uint64_t positions = static_cast<uint64_t>(num_tokens() - seq_);  // starts 0 .. n - seq - 1
  std::vector<int64_t> starts(static_cast<size_t>(batch_));
  for (int64_t b = 0; b < batch_; ++b) {
    philox::Block blk = philox::block(gen_.seed(), offset + static_cast<uint64_t>(b) / 2);
    const unsigned j = 2 * static_cast<unsigned>(b % 2);
    const uint64_t x = static_cast<uint64_t>(blk.w[j]) << 32 | blk.w[j + 1];
    starts[b] = static_cast<int64_t>(x % positions);
  }
  return starts;
}

std::vector<int64_t> RandomWindowSampler::peek_starts() const { return starts_at(gen_.offset()); }

Batch RandomWindowSampler::next() {
  const uint64_t offset = gen_.reserve(philox::blocks_for_pairs(static_cast<uint64_t>(batch_)));
  ++steps_;
  return gather(*tokens_, starts_at(offset), seq_, layout_);
}

void RandomWindowSampler::set_state(const State& s) {
  TS_CHECK(s.steps >= 0, ValueError, "RandomWindowSampler::set_state: steps " << s.steps << " is negative");
  gen_.set_state({s.seed, s.offset});
  steps_ = s.steps;
}

// ---- SequentialSampler ----

SequentialSampler::SequentialSampler(TokenArray tokens, int64_t batch, int64_t seq, Layout layout)
    : tokens_(std::move(tokens)), batch_(batch), seq_(seq), layout_(layout) {
  check_args("SequentialSampler", tokens_, batch, seq);
  const int64_t n = static_cast<int64_t>(tokens_->size());
  lane_ = n / batch;
  TS_CHECK(lane_ >= seq + 1, ValueError,
           "SequentialSampler: " << n << " tokens in " << batch << " lanes give " << lane_
                                 << " tokens per lane, a window of seq " << seq << " needs " << seq + 1);
}

Batch SequentialSampler::next() {
  if (cursor_ + seq_ + 1 > lane_) {  // the window would pass the lane's end: next epoch
    cursor_ = 0;
    ++epoch_;
  }
  std::vector<int64_t> starts(static_cast<size_t>(batch_));
  for (int64_t b = 0; b < batch_; ++b) starts[b] = b * lane_ + cursor_;
  Batch out = gather(*tokens_, starts, seq_, layout_);
  out.epoch = epoch_;
  out.lane_start = cursor_ == 0;
  cursor_ += seq_;
  return out;
}

void SequentialSampler::set_state(const State& s) {
  TS_CHECK(s.cursor >= 0 && s.cursor < lane_ && s.epoch >= 0, ValueError,
           "SequentialSampler::set_state: cursor " << s.cursor << " must be in [0, " << lane_
                                                   << ") and epoch " << s.epoch << " >= 0");
  cursor_ = s.cursor;
  epoch_ = s.epoch;
}

}  // namespace data
}  // namespace tessera
