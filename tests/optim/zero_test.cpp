// ZeRO-1 (optim/zero.h) on a group of one process: shard_owners balances bytes and is
// deterministic; a compiled step over ZeroUpdater gives the bits of the plain compiled AdamW step
// with the same clipping; the updater refuses an optimizer over other parameters, one that clips
// itself, and Adafactor, each with one clear error. Two ranks: examples' data-parallel tests
// (train_transformer --zero1 against plain data parallelism, checkpoints across world sizes).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>

#include "core/distributed/process_group.h"
#include "core/graph/compile.h"
#include "core/random.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

TEST(ShardOwners, LargestFirstToTheLeastLoadedRank) {
  const std::vector<Tensor> ps{zeros({100}), zeros({10}), zeros({60}), zeros({50})};
  EXPECT_EQ(optim::shard_owners(ps, 2), (std::vector<int>{0, 0, 1, 1}));  // 110 and 110 floats
  EXPECT_EQ(optim::shard_owners(ps, 1), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(optim::owned(ps, {0, 0, 1, 1}, 1).size(), 2u);
  EXPECT_THROW(optim::shard_owners(ps, 0), ValueError);
}

std::vector<graph::NamedParam> named(const std::vector<Tensor>& ps) {
  std::vector<graph::NamedParam> out;
  for (size_t i = 0; i < ps.size(); ++i) out.push_back({"p" + std::to_string(i), ps[i]});
  return out;
}

// 4 compiled AdamW steps of a two-layer net, clipped at 0.3, over ZeroUpdater or plainly.
std::vector<std::vector<float>> train(bool zero) {
  Generator gen(3);
  std::vector<Tensor> ps{mul(normal({6, 16}, 0, 1, gen), 0.3), zeros({16}), mul(normal({16, 2}, 0, 1, gen), 0.3)};
  for (Tensor& p : ps) p = p.detach().requires_grad_();
  auto group = dist::single_process_group();
  optim::AdamW opt(zero ? optim::owned(ps, optim::shard_owners(ps, 1), 0) : ps, optim::AdamWOptions(1e-2));
  if (!zero) opt.set_clip_norm(0.3);
  std::optional<optim::ZeroUpdater> z;
  if (zero) z.emplace(opt, named(ps), group, 0.3);
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
    const Tensor h = tanh(add(matmul(in.at("x"), ps[0]), ps[1]));
    return mean(mul(matmul(h, ps[2]), matmul(h, ps[2])));
  };
  Generator data(5);
  CompiledStep step = compile(loss_fn, ps, zero ? static_cast<ParamUpdater*>(&*z) : &opt, {{"x", normal({8, 6}, 0, 1, data)}});
  for (int s = 0; s < 4; ++s) step.run({{"x", normal({8, 6}, 0, 1, data)}});
  std::vector<std::vector<float>> out;
  for (const Tensor& p : ps) out.push_back(p.to_vector<float>());
  if (z) {
    EXPECT_EQ(z->state_bytes(), 2 * 4 * (6 * 16 + 16 + 16 * 2)) << "one rank holds every moment";
  }
  return out;
}

TEST(ZeroUpdater, OneRankGivesTheBitsOfThePlainClippedStep) {
  const auto plain = train(false), zero = train(true);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(std::memcmp(plain[i].data(), zero[i].data(), plain[i].size() * sizeof(float)), 0) << "parameter " << i;
}

TEST(ZeroUpdater, RefusesOtherParametersSelfClippingAndAdafactor) {
  const std::vector<Tensor> ps{zeros({4}).requires_grad_(), zeros({3}).requires_grad_()};
  auto group = dist::single_process_group();
  optim::AdamW partial({ps[0]}, optim::AdamWOptions(1e-3));
  EXPECT_THROW(optim::ZeroUpdater(partial, named(ps), group), ValueError);
  optim::AdamW clipped(ps, optim::AdamWOptions(1e-3));
  clipped.set_clip_norm(1.0);
  EXPECT_THROW(optim::ZeroUpdater(clipped, named(ps), group), ValueError);
  optim::Adafactor ada(ps, optim::AdafactorOptions(1e-3));
  EXPECT_THROW(optim::ZeroUpdater(ada, named(ps), group), ValueError);
  optim::AdamW ok(ps, optim::AdamWOptions(1e-3));
  optim::ZeroUpdater z(ok, named(ps), group);
  EXPECT_THROW(z.update(0, zeros({4}), zeros({}, TensorOptions(DType::f64)), zeros({}, TensorOptions(DType::f64))),
               ValueError);
}

}  // namespace
}  // namespace tessera
