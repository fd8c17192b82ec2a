// Bad indices on the GPU (index_select / embedding ids, index_select_backward, cross_entropy
// targets and its backward) are reported without a wait per op: the kernel records the first one
// and the next host wait (to_vector, item, a compiled step's loss) throws the ValueError naming
// the op, the value, its position and the range; the record is cleared and later work runs.
// Under TESSERA_CUDA_SYNC=1 the same errors come at the op itself: each check wraps the op and
// the read together, so the tests hold either way.
#include <gtest/gtest.h>

#include <vector>

#include "core/graph/compile.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using namespace gpu_test;
using testing::all_close;
using testing::expect_error;
using testing::test_randn;

Tensor ids_on_gpu(const std::vector<int32_t>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(kGpu);
}

TEST(CudaIndexErrors, IndexSelectReportsAtTheNextHostWait) {
  REQUIRE_GPU();
  const Tensor x = test_randn({17, 24}, 1, DType::f32);
  const Tensor xg = x.to(kGpu);
  expect_error<ValueError>([&] { index_select(xg, ids_on_gpu({3, 16, 57, 2})).to_vector<float>(); },
                           {"index_select", "index 57", "position 2", "[0, 17)"});
  expect_error<ValueError>([&] { embedding(xg, ids_on_gpu({-1, 4})).to_vector<float>(); },
                           {"index_select", "index -1", "position 0", "[0, 17)"});
  // Reported once: afterwards the record is clear and good lookups read normally.
  const Tensor ids = from_vector<int32_t>({1, 16, 0}, {3});
  EXPECT_TRUE(all_close(index_select(xg, ids.to(kGpu)).to(Device::cpu()), index_select(x, ids), 0, 0));
}

TEST(CudaIndexErrors, IndexSelectBackwardReportsTheIndexItLeavesOut) {
  REQUIRE_GPU();
  const Tensor g = test_randn({4, 6}, 2, DType::f32).to(kGpu);
  expect_error<ValueError>([&] { index_select_backward(g, ids_on_gpu({0, 9, 1, 2}), 0, 9).to_vector<float>(); },
                           {"index_select_backward", "index 9", "position 1", "[0, 9)"});
  expect_error<ValueError>([&] { index_select_backward(g, ids_on_gpu({0, 1, -3, 2}), 0, 9).to_vector<float>(); },
                           {"index_select_backward", "index -3", "position 2", "[0, 9)"});
}

TEST(CudaIndexErrors, CrossEntropyTargetsForwardAndBackward) {
  REQUIRE_GPU();
  const Tensor logits = test_randn({5, 7}, 3, DType::f32).to(kGpu);
  const Tensor bad = ids_on_gpu({1, 7, 2, -100, 3});  // -100: ignore_index, not an error
  expect_error<ValueError>([&] { cross_entropy(logits, bad).item<double>(); },
                           {"cross_entropy", "target 7", "position 1", "[0, 7)"});
  for (Reduction r : {Reduction::none, Reduction::sum}) {
    op::CrossEntropy::Attrs attrs;
    attrs.reduction = r;
    const Tensor g = r == Reduction::none ? full({5}, 1.0, TensorOptions(DType::f32).device(kGpu))
                                          : full({}, 1.0, TensorOptions(DType::f32).device(kGpu));
    expect_error<ValueError>(
        [&] { call<op::CrossEntropyBackward>(attrs, {logits, ids_on_gpu({1, 2, 3, 4, -2}), g})[0].to_vector<float>(); },
        {"cross_entropy_backward", "target -2", "position 4", "[0, 7)"});
  }
  // Ignored rows alone are fine.
  EXPECT_NO_THROW(cross_entropy(logits, ids_on_gpu({1, -100, 2, 3, 6})).item<double>());
}

TEST(CudaIndexErrors, TheFirstBadOpIsNamed) {
  REQUIRE_GPU();
  const Tensor x = test_randn({8, 8}, 4, DType::f32).to(kGpu);
  expect_error<ValueError>(
      [&] {
        Tensor h = index_select(x, ids_on_gpu({0, 8}));         // first: index 8
        Tensor l = cross_entropy(h, ids_on_gpu({1, 99}));      // second: target 99
        l.item<double>();
      },
      {"index_select", "index 8"});
  EXPECT_NO_THROW(cross_entropy(x, ids_on_gpu({0, 1, 2, 3, 4, 5, 6, 7})).item<double>()) << "the record was cleared";
}

TEST(CudaIndexErrors, ACompiledStepReportsABadBatchWhenItsLossIsRead) {
  REQUIRE_GPU();
  Tensor emb = test_randn({11, 6}, 5, DType::f32).to(kGpu).detach().requires_grad_();
  Tensor w = test_randn({6, 11}, 6, DType::f32).to(kGpu).detach().requires_grad_();
  optim::SGD opt({emb, w}, optim::SGDOptions(0.1));
  using Inputs = std::map<std::string, Tensor>;
  auto batch = [](int32_t bad_id) {
    return Inputs{{"x", from_vector<int32_t>({1, 2, bad_id, 4}, {4})}, {"y", from_vector<int32_t>({0, 1, 2, 3}, {4})}};
  };
  CompiledStep step = compile(
      [&](const Inputs& in) { return cross_entropy(matmul(embedding(emb, in.at("x")), w), in.at("y")); },
      {{"emb", emb}, {"w", w}}, &opt, batch(3));
  for (int s = 0; s < 3; ++s) step.run(batch(3));  // plain, captured, replayed
  expect_error<ValueError>([&] { step.run(batch(11)); }, {"index_select", "index 11", "position 2", "[0, 11)"});
  EXPECT_NO_THROW(step.run(batch(3))) << "reported once";
}

}  // namespace
}  // namespace tessera
