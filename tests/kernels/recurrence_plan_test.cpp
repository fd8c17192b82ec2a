// plan_recurrence on a device written out (132 SMs of compute capability 9.0 with 232,448 bytes of
// shared memory per block, 66 pairs of blocks resident: an H100 or H200), so that the persistent
// LSTM recurrence's plans are checked in every build: which layers keep W_h resident, which split
// K over pairs, which split groups over blocks and which stream W_h from L2 (dense H 2048 and the
// block-sparse layers of its parameter count: 33.5 MB of W_h against 30 MB of shared memory), the
// shared memory every plan asks for against the device's, and the problems it refuses, named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "scoped_env.h"
#include "kernels/common/recurrence_geometry.h"
#include "kernels/common/recurrence_plan.h"
#include "layers/lstm.h"

namespace tessera {
namespace {

using recurrence::kStreamStageK;

RecurrenceDevice hopper(int major = 9) {
  RecurrenceDevice d;
  d.index = 1000 + major;  // not a real device's plan cache entries
  d.sms = 132;
  d.major = major;
  d.smem = 232448;
  d.clusters = [](DType, bool, int, int cluster) { return 132 / cluster; };
  return d;
}

using testing::ScopedEnv;

LayoutPtr gate_layout(int64_t hs, int64_t bs, double density, uint64_t seed) {
  return nn::lstm_gate_layout(*random_layout(hs, hs, bs, density, seed));
}

// Every plan that fits asks for at most the device's shared memory, a ring of at least two
// stages, and (streamed) whole stages resident and streamed.
void expect_sane(const RecurrencePlan& p, const RecurrenceDevice& d, const std::string& what) {
  ASSERT_TRUE(p.reason.empty()) << what << ": " << p.reason;
  EXPECT_LE(p.smem, d.smem) << what;
  EXPECT_GE(p.ring, 2) << what;
  EXPECT_LE(p.grid, d.sms) << what;
  EXPECT_EQ(p.grid % p.cluster, 0) << what;
  if (p.stream_rows > 0) {
    EXPECT_EQ(p.stage_k, kStreamStageK) << what;
    EXPECT_LE(p.w_rows, p.groups_per_block * p.resident_stages * kStreamStageK) << what;
    EXPECT_EQ(p.stream_rows % kStreamStageK, 0) << what;
    EXPECT_FALSE(p.packing) << what;
  }
}

TEST(RecurrencePlan, DenseH1024KeepsWResidentAndSplitsKOverPairs) {
  const RecurrenceDevice d = hopper();
  for (bool backward : {false, true}) {
    const RecurrencePlan p = plan_recurrence(d, DType::bf16, 64, 1024, nullptr, backward);
    expect_sane(p, d, backward ? "backward" : "forward");
    EXPECT_EQ(p.units, 8);
    EXPECT_EQ(p.grid, 128);
    EXPECT_EQ(p.cluster, 2);
    EXPECT_EQ(p.stream_rows, 0);
    EXPECT_EQ(p.w_rows, backward ? 2 * 1024 : 512);  // half of K per block of a pair
  }
}

// W_h of dense H 2048 is 33.5 MB in bf16: each block of a pair keeps the first stages of its
// 256 KB slice and streams the rest. Forward: N = 128 columns, K = 1024 rows per block, a ring of
// 3 slots of 17,408 + 32,768 bytes leaves room for 2 resident stages (6 streamed: 196 KB per block
// per step); backward: N = 32, K = 4096, 18 resident stages of 8 KB (14 streamed).
TEST(RecurrencePlan, DenseH2048StreamsWFromL2) {
  const RecurrenceDevice d = hopper();
  for (bool backward : {false, true}) {
    const RecurrencePlan p = plan_recurrence(d, DType::bf16, 64, 2048, nullptr, backward);
    expect_sane(p, d, backward ? "backward" : "forward");
    EXPECT_EQ(p.units, 16);
    EXPECT_EQ(p.cluster, 2);
    EXPECT_EQ(p.grid, 128);
    EXPECT_EQ(p.ring, 3);
    EXPECT_EQ(p.resident_stages, backward ? 18 : 2);
    EXPECT_EQ(p.w_rows + p.stream_rows, backward ? 4096 : 1024);
  }
  // without clusters (a device or build without them) each block holds all of K, and streams too
  const RecurrenceDevice a100 = hopper(8);
  for (bool backward : {false, true}) {
    const RecurrencePlan p = plan_recurrence(a100, DType::bf16, 64, 2048, nullptr, backward);
    expect_sane(p, a100, backward ? "backward, no clusters" : "forward, no clusters");
    EXPECT_EQ(p.cluster, 1);
    EXPECT_GT(p.stream_rows, 0);
    EXPECT_EQ(p.w_rows + p.stream_rows, backward ? 8192 : 2048);
  }
}

// The block-sparse layers of dense H 2048's recurrent parameter count stream too: H 4096 at 1/4
// in blocks of 32 (32-unit groups), H 8192 at 1/16 in blocks of 32 (256 groups of 32 units, two
// per block) and of 64 (64-unit groups; the forward's W stage of 64 KB leaves a ring of 2 and no
// resident stage).
TEST(RecurrencePlan, SparseLayersOfH2048sParametersStream) {
  const RecurrenceDevice d = hopper();
  struct Layer {
    int64_t hidden, bs;
    double density;
    int units;
  };
  for (const Layer& l : {Layer{4096, 32, 0.25, 32}, Layer{8192, 32, 0.0625, 32}, Layer{8192, 64, 0.0625, 64}}) {
    const LayoutPtr layout = gate_layout(l.hidden, l.bs, l.density, 5);
    for (bool backward : {false, true}) {
      const std::string what = "H " + std::to_string(l.hidden) + " bs " + std::to_string(l.bs) +
                               (backward ? " backward" : " forward");
      const RecurrencePlan p = plan_recurrence(d, DType::bf16, 64, l.hidden, layout, backward);
      expect_sane(p, d, what);
      std::cout << what << ": " << p.groups_per_block << " groups per block, ring " << p.ring << ", "
                << p.resident_stages << " resident stages, " << p.w_rows << " rows resident, " << p.stream_rows
                << " streamed, " << p.smem << " bytes" << std::endl;
      EXPECT_EQ(p.units, l.units) << what;
      EXPECT_EQ(p.cluster, 1) << what;
      EXPECT_GT(p.stream_rows, 0) << what;
    }
  }
  const RecurrencePlan h8192 = plan_recurrence(d, DType::bf16, 64, 8192, gate_layout(8192, 64, 0.0625, 5), false);
  EXPECT_EQ(h8192.ring, 2);
  EXPECT_EQ(h8192.resident_stages, 0);
  const RecurrencePlan bs32 = plan_recurrence(d, DType::bf16, 64, 8192, gate_layout(8192, 32, 0.0625, 5), false);
  EXPECT_EQ(bs32.groups_per_block, 2);
}

// The layers that fit keep their plans: the trainer's H 4096 at 1/16 resident, unsplit; the
// Barabási–Albert layout that trains (generator seed 1001) split over blocks: the backward
// balanced, the forward in the fewest parts.
TEST(RecurrencePlan, LayersThatFitAreNotStreamed) {
  const RecurrenceDevice d = hopper();
  const LayoutPtr random = gate_layout(4096, 32, 0.0625, 5);
  const LayoutPtr ba = nn::lstm_gate_layout(*barabasi_albert_layout(4096, 4096, 32, 4, 1001));
  for (bool backward : {false, true}) {
    const RecurrencePlan r = plan_recurrence(d, DType::bf16, 64, 4096, random, backward);
    expect_sane(r, d, "random");
    EXPECT_EQ(r.stream_rows, 0);
    EXPECT_FALSE(r.packing);
    const RecurrencePlan b = plan_recurrence(d, DType::bf16, 64, 4096, ba, backward);
    expect_sane(b, d, "Barabási–Albert");
    EXPECT_EQ(b.stream_rows, 0);
    ASSERT_TRUE(b.packing);
    EXPECT_EQ(b.max_chunks, backward ? 48 : 20);  // backward balanced, forward the fewest parts
  }
}

TEST(RecurrencePlan, ResidentStagesCanBeForcedAndBadValuesAreNamed) {
  const RecurrenceDevice d = hopper();
  {
    const ScopedEnv forced("TESSERA_LSTM_RESIDENT_STAGES", "1");
    for (bool backward : {false, true}) {
      const RecurrencePlan p = plan_recurrence(d, DType::bf16, 7, 512, nullptr, backward);
      expect_sane(p, d, "dense H 512, forced");
      EXPECT_EQ(p.resident_stages, 1);
      EXPECT_EQ(p.w_rows + p.stream_rows, backward ? 1024 : 256);  // pairs: half of K
    }
    // one 128-row stage of K in all: nothing to stream, the plan as it was
    const RecurrencePlan small = plan_recurrence(d, DType::bf16, 7, 128, nullptr, false);
    expect_sane(small, d, "dense H 128, forced");
    EXPECT_EQ(small.stream_rows, 0);
  }
  for (const char* bad : {"x", "-1", "2.5"}) {
    const ScopedEnv forced("TESSERA_LSTM_RESIDENT_STAGES", bad);
    testing::expect_error<ValueError>([&] { plan_recurrence(d, DType::bf16, 7, 512, nullptr, true); },
                                      {"TESSERA_LSTM_RESIDENT_STAGES", std::string("'") + bad + "'"});
  }
  // the other switches: one line naming the switch and the value (sparse plans read them all)
  const LayoutPtr sparse = gate_layout(256, 32, 0.5, 5);
  const std::pair<const char*, const char*> bad_values[] = {{"TESSERA_LSTM_SPLIT_CHUNKS", "0"},
                                                            {"TESSERA_LSTM_BALANCE", "yes"},
                                                            {"TESSERA_LSTM_STREAM_RING", "4"},
                                                            {"TESSERA_LSTM_CLUSTER", "3"}};
  for (const auto& [name, bad] : bad_values) {
    const ScopedEnv forced(name, bad);
    const LayoutPtr layout = std::string(name) == "TESSERA_LSTM_CLUSTER" ? nullptr : sparse;
    testing::expect_error<ValueError>([&] { plan_recurrence(d, DType::bf16, 7, 256, layout, true); },
                                      {name, std::string("'") + bad + "'", "expected"});
  }
}

TEST(RecurrencePlan, ProblemsItRefusesAreNamed) {
  const RecurrenceDevice d = hopper();
  // 136 groups of 64 units, two in some blocks: their staging and state leave no room for a ring
  // of two 81 KB slots (an operand stage and 128 rows of the 256 gate columns)
  const RecurrencePlan big = plan_recurrence(d, DType::bf16, 8, 8704, nullptr, false);
  EXPECT_NE(big.reason.find("shared memory"), std::string::npos) << big.reason;
  EXPECT_NE(big.reason.find("no room for a ring"), std::string::npos) << big.reason;
  EXPECT_NE(plan_recurrence(d, DType::f32, 8, 256, nullptr, false).reason.find("bf16 or f16"), std::string::npos);
  EXPECT_NE(plan_recurrence(d, DType::bf16, 65, 256, nullptr, false).reason.find("1 to 64"), std::string::npos);
  EXPECT_NE(plan_recurrence(d, DType::bf16, 8, 96, nullptr, false).reason.find("multiples of 64"), std::string::npos);
  RecurrenceDevice no_coop = d;
  no_coop.smem = 0;
  no_coop.index += 100;
  EXPECT_NE(plan_recurrence(no_coop, DType::bf16, 8, 256, nullptr, false).reason.find("cooperative"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
