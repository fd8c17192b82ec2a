// Tensor::add_grad_ready_hook: a leaf's hooks run once per backward pass, when its gradient is
// final in that pass (after every contribution), in backward order, and not for leaves the pass
// does not reach; a leaf root; non-leaves refused; hooks stay until cleared.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

TEST(GradReadyHook, RunsOnceWhenTheGradientIsFinalInBackwardOrder) {
  Tensor x = from_vector<float>({1, 2, 3}, {1, 3});
  Tensor w1 = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}).requires_grad_();
  Tensor w2 = from_vector<float>({2, 3}, {2, 1}).requires_grad_();
  Tensor unused = zeros({2}).requires_grad_();
  std::vector<std::string> log;
  std::vector<float> w1_grad_seen;
  w1.add_grad_ready_hook([&] {
    log.push_back("w1");
    w1_grad_seen = w1.grad().to_vector<float>();
  });
  w2.add_grad_ready_hook([&] { log.push_back("w2"); });
  unused.add_grad_ready_hook([&] { log.push_back("unused"); });
  // w1 is used twice: its hook runs after both contributions
  const Tensor h = matmul(x, w1);
  const Tensor loss = add(sum(matmul(h, w2)), sum(mul(h, h)));
  loss.backward();
  EXPECT_EQ(log, (std::vector<std::string>{"w2", "w1"})) << "w2's gradient is final first; unused is not reached";
  EXPECT_EQ(w1_grad_seen, w1.grad().to_vector<float>()) << "the hook saw the final gradient";
  // again: once per pass; then cleared
  log.clear();
  w1.zero_grad();
  w2.zero_grad();
  add(sum(matmul(matmul(x, w1), w2)), sum(mul(matmul(x, w1), matmul(x, w1)))).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"w2", "w1"}));
  w1.clear_grad_ready_hooks();
  log.clear();
  sum(matmul(matmul(x, w1), w2)).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"w2"}));
}

TEST(GradReadyHook, ALeafRootAndNonLeaves) {
  Tensor w = from_vector<float>({1, 2}, {2}).requires_grad_();
  int calls = 0;
  w.add_grad_ready_hook([&] { ++calls; });
  w.backward(ones({2}));
  EXPECT_EQ(calls, 1);
  const Tensor y = mul(w, 2.0);
  try {
    Tensor(y).add_grad_ready_hook([] {});
    ADD_FAILURE() << "a hook on a non-leaf";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a leaf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
