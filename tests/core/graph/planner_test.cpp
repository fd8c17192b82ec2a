// The memory planner on hand-built graphs whose optimal arena is known.
#include <gtest/gtest.h>

#include "core/graph/executor.h"
#include "core/graph/planner.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace graph {
namespace {

template <class Op>
std::shared_ptr<const OpInstance> op(typename Op::Attrs attrs = {}) {
  return std::make_shared<detail::OpInstanceT<Op>>(attrs);
}

TensorMeta f32(std::initializer_list<int64_t> shape) { return {Shape(shape), DType::f32, Device::cpu()}; }

// x -> exp -> tanh -> sigmoid -> out, all [1024] f32 (4096 bytes).
Graph unary_chain(bool in_place_ops) {
  Graph g;
  int v = g.add_value(f32({1024}), ValueKind::input, "x");
  for (int i = 0; i < 3; ++i) {
    auto o = in_place_ops ? (i == 0 ? op<op::Exp>() : i == 1 ? op<op::Tanh>() : op<op::Sigmoid>()) : op<op::Copy>();
    v = g.nodes[g.add_node(o, {v}, {f32({1024})}, NodePhase::forward, -1)].outputs[0];
  }
  g.outputs.push_back({"out", v});
  return g;
}

TEST(Planner, InPlaceChainNeedsOneBuffer) {
  Graph g = unary_chain(true);
  MemoryPlan p = plan_memory(g);
  // The first result takes a buffer; tanh overwrites it (its only reader); the marked output
  // gets a buffer of its own outside the arena.
  EXPECT_EQ(p.arena_bytes, 4096u);
  EXPECT_EQ(p.naive_bytes, 2 * 4096u);
  EXPECT_EQ(p.in_place, 1);
  EXPECT_EQ(p.place[g.outputs[0].second], MemoryPlan::Place::output);
}

TEST(Planner, ChainOfNonInPlaceOpsNeedsTwoBuffers) {
  MemoryPlan p = plan_memory(unary_chain(false));
  // Input and output of each copy are live together: two buffers, used alternately.
  EXPECT_EQ(p.arena_bytes, 2 * 4096u);
  EXPECT_EQ(p.in_place, 0);
}

TEST(Planner, ShrinkingChainPeakIsTheLargestAdjacentPair) {
  // Sums that halve the size: [64,64] -> [64] -> []: peak = 16 KiB + 256 B live together.
  Graph g;
  int x = g.add_value(f32({64, 64}), ValueKind::input, "x");
  int a = g.nodes[g.add_node(op<op::Exp>(), {x}, {f32({64, 64})}, NodePhase::forward, -1)].outputs[0];
  int b = g.nodes[g.add_node(op<op::Sum>({1, false}), {a}, {f32({64})}, NodePhase::forward, -1)].outputs[0];
  int c = g.nodes[g.add_node(op<op::Sum>({0, false}), {b}, {f32({})}, NodePhase::forward, -1)].outputs[0];
  g.outputs.push_back({"out", c});
  MemoryPlan p = plan_memory(g);
  EXPECT_EQ(p.arena_bytes, 16384u + 256u);
  // b reuses nothing of a (both live while the sum runs); c, the output, is outside the arena.
  EXPECT_NE(p.offset[b], p.offset[a]);
  EXPECT_EQ(p.place[c], MemoryPlan::Place::output);
}

TEST(Planner, NoInPlaceIntoAnInputOfAnotherMeta) {
  // exp(x) [1] feeds add(a [1], b [7]) -> [7]: both round to one 64-byte block, but a broadcast
  // input is not element-for-element the output, so add must not write over it; likewise
  // gelu's f32 [8] x under a bf16 [8] y (another element size).
  Graph g;
  int x = g.add_value(f32({1}), ValueKind::input, "x");
  int b = g.add_value(f32({7}), ValueKind::input, "b");
  int a = g.nodes[g.add_node(op<op::Exp>(), {x}, {f32({1})}, NodePhase::forward, -1)].outputs[0];
  int y = g.nodes[g.add_node(op<op::Add>(), {a, b}, {f32({7})}, NodePhase::forward, -1)].outputs[0];
  int e = g.nodes[g.add_node(op<op::Exp>(), {y}, {f32({7})}, NodePhase::forward, -1)].outputs[0];
  const TensorMeta bf16_7{Shape{7}, DType::bf16, Device::cpu()};
  int h = g.nodes[g.add_node(op<op::Gelu>({GeluApprox::none, DType::bf16}), {e}, {bf16_7}, NodePhase::forward, -1)]
              .outputs[0];
  int z = g.nodes[g.add_node(op<op::Cast>({DType::f32}), {h}, {f32({7})}, NodePhase::forward, -1)].outputs[0];
  g.outputs.push_back({"z", z});
  MemoryPlan p = plan_memory(g);
  EXPECT_NE(p.offset[y], p.offset[a]);
  EXPECT_EQ(p.offset[e], p.offset[y]);  // same meta: in place
  EXPECT_NE(p.offset[h], p.offset[e]);
  EXPECT_EQ(p.in_place, 1);

  Executor ex(std::move(g));
  Tensor xin = testing::test_randn({1}, 4, DType::f32), bin = testing::test_randn({7}, 5, DType::f32);
  ex.run({{"x", xin}, {"b", bin}});
  const Tensor want = cast(gelu(exp(add(exp(xin), bin)), GeluApprox::none, DType::bf16), DType::f32);
  EXPECT_TRUE(testing::all_close(ex.fetch("z"), want, 0, 0));
}

TEST(Planner, NoInPlaceWhenTheInputHasAnotherReader) {
  // y = exp(x); z = tanh(y); w = y + z: tanh must not overwrite y, which add still reads.
  Graph g;
  int x = g.add_value(f32({256}), ValueKind::input, "x");
  int y = g.nodes[g.add_node(op<op::Exp>(), {x}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  int z = g.nodes[g.add_node(op<op::Tanh>(), {y}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  int w = g.nodes[g.add_node(op<op::Add>(), {y, z}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  g.outputs.push_back({"w", w});
  MemoryPlan p = plan_memory(g);
  EXPECT_NE(p.offset[z], p.offset[y]);
  EXPECT_EQ(p.in_place, 0);
  EXPECT_EQ(p.place[w], MemoryPlan::Place::output);

  // And the values are right when run.
  Executor ex(std::move(g));
  Tensor xin = testing::test_randn({256}, 3, DType::f32);
  ex.run({{"x", xin}});
  Tensor yy = exp(xin);
  EXPECT_TRUE(testing::all_close(ex.fetch("w"), add(yy, tanh(yy)), 0, 0));
}

TEST(Planner, InPlaceOnlyWithASingleConsumer) {
  // y = exp(x); a = tanh(y) (y's only reader: may overwrite it); b = neg(a); c = a * b.
  // neg must not overwrite a: a has a second reader (mul).
  Graph g;
  int x = g.add_value(f32({256}), ValueKind::input, "x");
  int y = g.nodes[g.add_node(op<op::Exp>(), {x}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  int a = g.nodes[g.add_node(op<op::Tanh>(), {y}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  int b = g.nodes[g.add_node(op<op::Neg>(), {a}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  int c = g.nodes[g.add_node(op<op::Mul>(), {a, b}, {f32({256})}, NodePhase::forward, -1)].outputs[0];
  g.outputs.push_back({"c", c});
  MemoryPlan p = plan_memory(g);
  EXPECT_EQ(p.offset[a], p.offset[y]);
  EXPECT_NE(p.offset[b], p.offset[a]);
  EXPECT_EQ(p.in_place, 1);
  Executor ex(std::move(g));
  Tensor xin = testing::test_randn({256}, 5, DType::f32);
  ex.run({{"x", xin}});
  Tensor av = tanh(exp(xin));
  EXPECT_TRUE(testing::all_close(ex.fetch("c"), mul(av, neg(av)), 0, 0));
}

TEST(Planner, ViewsShareTheirSourceAndExtendItsLife) {
  // y = exp(x) [4,8]; r = reshape(y) [32]; s = sum(r); y's block must stay until sum has read r.
  Graph g;
  int x = g.add_value(f32({4, 8}), ValueKind::input, "x");
  int y = g.nodes[g.add_node(op<op::Exp>(), {x}, {f32({4, 8})}, NodePhase::forward, -1)].outputs[0];
  int r = g.nodes[g.add_node(op<op::Reshape>({{32}}), {y}, {f32({32})}, NodePhase::forward, -1)].outputs[0];
  int t = g.nodes[g.add_node(op<op::Neg>(), {x}, {f32({4, 8})}, NodePhase::forward, -1)].outputs[0];
  int s = g.nodes[g.add_node(op<op::Sum>({0, false}), {r}, {f32({})}, NodePhase::forward, -1)].outputs[0];
  int u = g.nodes[g.add_node(op<op::Sum>({1, false}), {t}, {f32({4})}, NodePhase::forward, -1)].outputs[0];
  g.outputs.push_back({"s", s});
  g.outputs.push_back({"u", u});
  MemoryPlan p = plan_memory(g);
  EXPECT_EQ(p.place[r], MemoryPlan::Place::view);
  EXPECT_EQ(p.base[r], y);
  EXPECT_TRUE(p.skip[1]);
  EXPECT_NE(p.offset[t], p.offset[y]) << "neg must not take y's buffer while the view r is still to be read";
  Executor ex(std::move(g));
  Tensor xin = testing::test_randn({4, 8}, 4, DType::f32);
  ex.run({{"x", xin}});
  EXPECT_TRUE(testing::all_close(ex.fetch("s"), sum(exp(xin)), 0, 0));
  EXPECT_TRUE(testing::all_close(ex.fetch("u"), sum(neg(xin), 1), 0, 0));
}

}  // namespace
}  // namespace graph
}  // namespace tessera
