#include "data/sampler.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera {
namespace data {
namespace {

// Tokens whose value is their position.
TokenArray positions(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i);
  return make_tokens(std::move(v));
}

// Element (t, b) of a batch tensor in its layout.
int32_t at(const Batch& x, const Tensor& t, int64_t step, int64_t lane) {
  const int64_t row = x.layout == Layout::time_major ? step * x.batch + lane : lane * x.seq + step;
  return t.data<int32_t>()[row];
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.inputs.to_vector<int32_t>(), b.inputs.to_vector<int32_t>());
  EXPECT_EQ(a.targets.to_vector<int32_t>(), b.targets.to_vector<int32_t>());
}

TEST(RandomWindowSampler, ShapesAndShiftedTargets) {
  const int64_t n = 1001, B = 5, T = 7;
  for (Layout layout : {Layout::time_major, Layout::batch_major}) {
    RandomWindowSampler s(positions(n), B, T, 3, layout);
    std::vector<int64_t> starts = s.peek_starts();
    Batch x = s.next();
    EXPECT_EQ(x.inputs.shape(), Shape({T * B}));
    EXPECT_EQ(x.targets.shape(), Shape({T * B}));
    EXPECT_EQ(x.inputs.dtype(), DType::i32);
    EXPECT_EQ(x.batch, B);
    EXPECT_EQ(x.seq, T);
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_GE(starts[b], 0);
      EXPECT_LE(starts[b], n - T - 1);
      for (int64_t t = 0; t < T; ++t) {
        // Token value = position: window b is starts[b] .. starts[b] + T, targets one further.
        EXPECT_EQ(at(x, x.inputs, t, b), starts[b] + t);
        EXPECT_EQ(at(x, x.targets, t, b), starts[b] + t + 1);
      }
    }
  }
}

TEST(RandomWindowSampler, CoversPositionsUniformlyEnough) {
  // 12 tokens, seq 3: 9 possible starts; 3000 draws should hit each about 333 times.
  RandomWindowSampler s(positions(12), 3, 3, 11);
  int hits[9] = {};
  EXPECT_EQ(s.peek_starts(), s.peek_starts());  // peeking does not advance
  for (int i = 0; i < 1000; ++i) {
    std::vector<int64_t> st = s.peek_starts();
    s.next();
    for (int64_t p : st) ++hits[p];
  }
  for (int p = 0; p < 9; ++p) {
    EXPECT_GT(hits[p], 250) << p;
    EXPECT_LT(hits[p], 420) << p;
  }
}

TEST(RandomWindowSampler, DeterministicFromSeed) {
  RandomWindowSampler a(positions(5000), 4, 16, 42), b(positions(5000), 4, 16, 42),
      c(positions(5000), 4, 16, 43);
  bool differs = false;
  for (int i = 0; i < 5; ++i) {
    Batch xa = a.next(), xb = b.next(), xc = c.next();
    expect_same(xa, xb);
    differs |= xa.inputs.to_vector<int32_t>() != xc.inputs.to_vector<int32_t>();
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.state(), b.state());
  EXPECT_EQ(a.state().steps, 5);
  EXPECT_EQ(a.state().offset, 5u * 2u);  // ceil(4/2) blocks per step
}

TEST(RandomWindowSampler, ResumesExactlyFromState) {
  const int N = 10;
  RandomWindowSampler straight(positions(777), 3, 9, 5, Layout::batch_major);
  std::vector<Batch> want;
  for (int i = 0; i < N; ++i) want.push_back(straight.next());

  RandomWindowSampler first(positions(777), 3, 9, 5, Layout::batch_major);
  for (int i = 0; i < N / 2; ++i) expect_same(first.next(), want[i]);
  RandomWindowSampler::State saved = first.state();
  // A fresh sampler with another seed, restored from the saved state, continues the stream.
  RandomWindowSampler resumed(positions(777), 3, 9, 999, Layout::batch_major);
  resumed.set_state(saved);
  EXPECT_EQ(resumed.state(), saved);
  for (int i = N / 2; i < N; ++i) expect_same(resumed.next(), want[i]);
  EXPECT_EQ(resumed.state(), straight.state());
}

TEST(RandomWindowSampler, BadArgumentsThrow) {
  EXPECT_THROW(RandomWindowSampler(positions(10), 0, 3, 1), ValueError);
  EXPECT_THROW(RandomWindowSampler(positions(10), 2, 0, 1), ValueError);
  EXPECT_THROW(RandomWindowSampler(positions(10), 2, 10, 1), ValueError);  // needs 11 tokens
  EXPECT_NO_THROW(RandomWindowSampler(positions(10), 2, 9, 1));
  EXPECT_THROW(RandomWindowSampler(nullptr, 2, 3, 1), ValueError);
  RandomWindowSampler s(positions(10), 2, 3, 1);
  EXPECT_THROW(s.set_state({1, 0, -1}), ValueError);
}

TEST(SequentialSampler, LanesAreContinuousAcrossBatches) {
  // 103 tokens in 4 lanes of 25 (3 unused); seq 6: windows at 0, 6, 12, 18 (18 + 7 = 25 fits).
  const int64_t B = 4, T = 6;
  for (Layout layout : {Layout::time_major, Layout::batch_major}) {
    SequentialSampler s(positions(103), B, T, layout);
    EXPECT_EQ(s.lane_length(), 25);
    EXPECT_EQ(s.steps_per_epoch(), 4);
    std::vector<int32_t> lane_inputs[4];
    for (int k = 0; k < 4; ++k) {
      Batch x = s.next();
      EXPECT_EQ(x.inputs.shape(), Shape({T * B}));
      EXPECT_EQ(x.epoch, 0);
      EXPECT_EQ(x.lane_start, k == 0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
          EXPECT_EQ(at(x, x.targets, t, b), at(x, x.inputs, t, b) + 1);
          lane_inputs[b].push_back(at(x, x.inputs, t, b));
        }
    }
    // Each lane's inputs over the epoch are its first 24 tokens, in order, without gaps.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(lane_inputs[b][i], b * 25 + i);
    // The fifth batch wraps: lanes start again, epoch 1.
    Batch w = s.next();
    EXPECT_EQ(w.epoch, 1);
    EXPECT_TRUE(w.lane_start);
    EXPECT_EQ(at(w, w.inputs, 0, 2), 50);
    EXPECT_EQ(s.epoch(), 1);
  }
}

TEST(SequentialSampler, ResumesExactlyFromState) {
  const int N = 12;  // crosses two epoch boundaries (5 steps per epoch)
  SequentialSampler straight(positions(500), 3, 33);
  EXPECT_EQ(straight.steps_per_epoch(), 5);
  std::vector<Batch> want;
  for (int i = 0; i < N; ++i) want.push_back(straight.next());

  SequentialSampler first(positions(500), 3, 33);
  for (int i = 0; i < N / 2; ++i) expect_same(first.next(), want[i]);
  SequentialSampler::State saved = first.state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.cursor, 33);
  SequentialSampler resumed(positions(500), 3, 33);
  resumed.set_state(saved);
  for (int i = N / 2; i < N; ++i) {
    Batch x = resumed.next();
    expect_same(x, want[i]);
    EXPECT_EQ(x.epoch, want[i].epoch);
    EXPECT_EQ(x.lane_start, want[i].lane_start);
  }
  EXPECT_EQ(resumed.state(), straight.state());
  resumed.reset();
  expect_same(resumed.next(), want[0]);
}

TEST(SequentialSampler, BadArgumentsThrow) {
  EXPECT_THROW(SequentialSampler(positions(20), 0, 3), ValueError);
  EXPECT_THROW(SequentialSampler(positions(20), 2, 0), ValueError);
  EXPECT_THROW(SequentialSampler(positions(20), 4, 5), ValueError);  // lanes of 5 < seq + 1
  EXPECT_NO_THROW(SequentialSampler(positions(20), 4, 4));
  SequentialSampler s(positions(20), 2, 3);
  EXPECT_THROW(s.set_state({10, 0}), ValueError);  // lane length is 10
  EXPECT_THROW(s.set_state({-1, 0}), ValueError);
  EXPECT_THROW(s.set_state({0, -1}), ValueError);
}

}  // namespace
}  // namespace data
}  // namespace tessera
