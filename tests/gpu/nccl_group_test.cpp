// The NCCL process group with world size 1 on the GPU (its rendezvous file in a temporary folder):
//   - all_reduce (sum, average), broadcast, barrier and the asynchronous start/join leave the
//     tensor as it is; CPU tensors, other dtypes and unstarted joins are one clear error; rank 0
//     removed the rendezvous file once the group was up;
//   - a compiled AdamW step (clipping) over DataParallelUpdater, captured as a CUDA graph and
//     replayed, gives the bits of the same compiled step over the bare optimizer for 6 steps (the
//     all-reduce of one rank is a copy), with its all-reduces beside backward on NCCL's stream; and so
//     does ZeRO-1's step (optim::ZeroUpdater: segment_reduce and segment_broadcast in the graph);
//   - the eager GradientReducer on the NCCL group leaves one rank's gradients as they are;
//   - the work markers (core/cuda/progress.h): a stream held up by a host function shows a growing
//     stall, a drained one none; and the group's watchdog ends a process whose GPU completes no work
//     for TESSERA_DIST_TIMEOUT_S with one line and status 3 (a death test in a fresh process).
// The two-GPU runs are bench/dp_scaling's (docs/distributed.md).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "core/cuda/progress.h"
#include "core/cuda/runtime.h"
#include "core/distributed/data_parallel.h"
#include "core/distributed/nccl_group.h"
#include "core/graph/compile.h"
#include "gpu_check.h"
#include "kernels/ops.h"
#include "layers/linear.h"
#include "optim/adamw.h"
#include "optim/zero.h"

namespace tessera {
namespace {

std::shared_ptr<dist::ProcessGroup> world_of_one() {
  static std::shared_ptr<dist::ProcessGroup> g = [] {
    const std::string path = "/tmp/tessera_nccl_test_" + std::to_string(::getpid());
    dist::WorldInfo w;  // rank 0 of 1
    auto group = dist::nccl_process_group(w, dist::rendezvous_file(path, w), 0, path);
    EXPECT_FALSE(std::ifstream(path).good()) << "rank 0 removes the rendezvous file once the group is up";
    return group;
  }();
  return g;
}

TEST(NcclGroup, WorldOfOneCollectives) {
  REQUIRE_GPU();
  auto g = world_of_one();
  EXPECT_EQ(g->backend(), "nccl");
  EXPECT_EQ(g->size(), 1);
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::f16}) {
    const Tensor x = cast(testing::test_randn({1000}, 3, DType::f32), dt).to(gpu_test::kGpu);
    Tensor y = x.clone();
    g->all_reduce(y, dist::ReduceOp::sum);
    g->all_reduce(y, dist::ReduceOp::average);
    g->broadcast(y, 0);
    const int t = g->reserve_tickets(1);
    const Tensor z = collective_wait(all_reduce(y, g, true, t), g, t);
    EXPECT_EQ(std::memcmp(z.to(Device::cpu()).data_ptr(), x.to(Device::cpu()).data_ptr(), x.nbytes()), 0) << dt;
    const std::vector<Collective::Segment> segs{{0, 600, 0}, {600, 400, 0}};  // ZeRO-1's collectives
    const int u = g->reserve_tickets(2);
    const Tensor a = collective_wait(segment_reduce(x, g, segs, true, u), g, u);
    const Tensor b = collective_wait(segment_broadcast(a, g, segs, u + 1), g, u + 1);
    EXPECT_EQ(std::memcmp(b.to(Device::cpu()).data_ptr(), x.to(Device::cpu()).data_ptr(), x.nbytes()), 0) << dt;
  }
  g->barrier();
  Tensor cpu = zeros({4});
  EXPECT_THROW(g->all_reduce(cpu, dist::ReduceOp::sum), DeviceError);
  Tensor ints = zeros({4}, TensorOptions(DType::i32).device(gpu_test::kGpu));
  EXPECT_THROW(g->all_reduce(ints, dist::ReduceOp::sum), DTypeError);
  EXPECT_THROW(g->join(g->reserve_tickets(1)), ValueError);
}

struct Net {
  nn::Linear a, b, c;
  explicit Net(Generator&& gen)
      : a(nn::LinearOptions(32, 64), gen), b(nn::LinearOptions(64, 64), gen), c(nn::LinearOptions(64, 8), gen) {}
  std::vector<Tensor> params() const { return {a.weight(), a.bias(), b.weight(), b.bias(), c.weight(), c.bias()}; }
  Tensor loss(const Tensor& x, const Tensor& t) const {
    const Tensor d = sub(c.forward(gelu(b.forward(gelu(a.forward(x))))), t);
    return mean(mul(d, d));
  }
};

std::vector<std::vector<float>> train(bool data_parallel, bool* replayed = nullptr, bool zero = false) {
  Net m(Generator(5));
  m.a.to(gpu_test::kGpu);
  m.b.to(gpu_test::kGpu);
  m.c.to(gpu_test::kGpu);
  optim::AdamW opt(m.params(), optim::AdamWOptions(1e-2));
  if (!zero) opt.set_clip_norm(0.5);
  dist::DataParallelUpdater dp(opt, world_of_one(), /*bucket_bytes=*/20000, /*first_bytes=*/2000);
  std::vector<graph::NamedParam> named;
  for (size_t i = 0; i < m.params().size(); ++i) named.push_back({"p" + std::to_string(i), m.params()[i]});
  std::optional<optim::ZeroUpdater> z;
  if (zero) z.emplace(opt, named, world_of_one(), 0.5, 20000, 2000);
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return m.loss(in.at("x"), in.at("t")); };
  Generator data(9);
  auto feed = [&] {
    return std::map<std::string, Tensor>{{"x", normal({16, 32}, 0, 1, data).to(gpu_test::kGpu)},
                                         {"t", normal({16, 8}, 0, 1, data).to(gpu_test::kGpu)}};
  };
  ParamUpdater* updater = zero ? static_cast<ParamUpdater*>(&*z) : data_parallel ? static_cast<ParamUpdater*>(&dp) : &opt;
  CompiledStep step = compile(loss_fn, m.params(), updater, feed());
  for (int s = 0; s < 6; ++s) step.run(feed());
  if (replayed) *replayed = step.executor().replays_cuda_graph();
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.params()) out.push_back(p.to_vector<float>());
  return out;
}

TEST(NcclGroup, CompiledDataParallelStepOfOneRankEqualsTheStepWithout) {
  REQUIRE_GPU();
  bool replayed = false;
  const auto plain = train(false), dp = train(true, &replayed);
  const char* e = std::getenv("TESSERA_CUDA_GRAPHS");
  if (!(e && std::strcmp(e, "0") == 0)) EXPECT_TRUE(replayed) << "the data-parallel step replays as a CUDA graph";
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(std::memcmp(plain[i].data(), dp[i].data(), plain[i].size() * sizeof(float)), 0) << "parameter " << i;
  // ZeRO-1 over NCCL (segment_reduce, segment_broadcast in the graph): the same bits at one rank
  bool zero_replayed = false;
  const auto zero = train(true, &zero_replayed, /*zero=*/true);
  if (!(e && std::strcmp(e, "0") == 0)) EXPECT_TRUE(zero_replayed);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(std::memcmp(plain[i].data(), zero[i].data(), plain[i].size() * sizeof(float)), 0) << "ZeRO-1, parameter " << i;
}

TEST(NcclGroup, EagerReducerOfOneRankLeavesTheGradients) {
  REQUIRE_GPU();
  Net m(Generator(5));
  m.a.to(gpu_test::kGpu);
  m.b.to(gpu_test::kGpu);
  m.c.to(gpu_test::kGpu);
  dist::GradientReducer reducer(m.params(), world_of_one(), 20000, 2000);
  Generator data(9);
  m.loss(normal({16, 32}, 0, 1, data).to(gpu_test::kGpu), normal({16, 8}, 0, 1, data).to(gpu_test::kGpu)).backward();
  std::vector<std::vector<float>> before;
  for (const Tensor& p : m.params()) before.push_back(p.grad().to_vector<float>());
  reducer.finish();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(m.params()[i].grad().to_vector<float>(), before[i]) << i;
}

// Holds the device's stream up for `ms` milliseconds (a host function queued on it), then marks.
void stall_stream(int ms) {
  static int hold_ms = 0;
  hold_ms = ms;
  cudaLaunchHostFunc(
      static_cast<cudaStream_t>(cuda::stream(0)),
      [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms)); }, nullptr);
  cuda::mark_progress(0);
}

TEST(NcclGroup, ProgressMarkersShowAStalledStream) {
  REQUIRE_GPU();
  world_of_one();  // tracks cuda:0
  cuda::synchronize(0);
  EXPECT_EQ(cuda::seconds_without_progress(0), 0.0) << "nothing pending";
  stall_stream(1500);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_GE(cuda::seconds_without_progress(0), 1.0) << "a marker pending behind a held-up stream";
  cuda::synchronize(0);
  EXPECT_EQ(cuda::seconds_without_progress(0), 0.0);
}

TEST(NcclGroupDeathTest, TheWatchdogEndsAProcessWhoseGpuMakesNoProgress) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts afresh (CUDA does not fork)
  EXPECT_EXIT(
      {
        ::setenv("TESSERA_DIST_TIMEOUT_S", "2", 1);
        const std::string path = "/tmp/tessera_nccl_watchdog_" + std::to_string(::getpid());
        dist::WorldInfo w;
        auto g = dist::nccl_process_group(w, dist::rendezvous_file(path, w), 0, path);
        stall_stream(8000);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::exit(0);  // not reached: the watchdog ends the process first
      },
      ::testing::ExitedWithCode(3), "completed no work for [0-9]+ s with a collective in flight");
}

}  // namespace
}  // namespace tessera
