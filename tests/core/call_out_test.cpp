// call_out / output_metas / copy_into (core/op.h, kernels/copy): an op run into existing
// outputs gives the values call() gives, in place too, records no autograd, and refuses outputs
// of the wrong count or meta with one error naming the op and the output.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::test_randn;

TEST(CallOut, WritesWhatCallReturnsInPlaceTooWithoutAutograd) {
  const Tensor a = test_randn({3, 4}, 1, DType::f32).requires_grad_(), b = test_randn({3, 4}, 2, DType::f32);
  const Tensor want = call<op::Add>({}, {a, b})[0];
  const std::vector<TensorMeta> metas = output_metas<op::Add>({}, {a.meta(), b.meta()});
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0], want.meta());
  Tensor out = empty({3, 4});
  call_out<op::Add>({}, {a, b}, {out});
  EXPECT_TRUE(all_close(out, want, 0, 0));
  EXPECT_FALSE(out.requires_grad()) << "no autograd is recorded";
  Tensor acc = b.clone();  // acc <- a + acc in acc's own buffer
  call_out<op::Add>({}, {a, acc}, {acc});
  EXPECT_TRUE(all_close(acc, want, 0, 0));
}

TEST(CallOut, WrongOutputsGiveOneErrorNamingTheOp) {
  const Tensor a = zeros({2, 3});
  expect_error<ShapeError>([&] { call_out<op::Add>({}, {a, a}, {zeros({3, 2})}); },
                           {"add", "output buffer 0", "f32[3, 2]", "f32[2, 3]"});
  expect_error<ShapeError>([&] { call_out<op::Add>({}, {a, a}, {zeros({2, 3}, DType::f64)}); }, {"add", "f64[2, 3]"});
  expect_error<ValueError>([&] { call_out<op::Add>({}, {a, a}, {}); }, {"add", "0 output buffers", "1"});
  expect_error<ShapeError>([&] { output_metas<op::Add>({}, {a.meta(), zeros({4}).meta()}); }, {"add"});
}

TEST(CopyInto, CopiesAndRefusesAnotherMeta) {
  const Tensor src = test_randn({5}, 3, DType::f32);
  Tensor dst = zeros({5});
  copy_into(src, dst);
  EXPECT_TRUE(all_close(dst, src, 0, 0));
  expect_error<ShapeError>([&] { copy_into(src, zeros({6})); }, {"copy_into", "f32[5]", "f32[6]"});
  expect_error<ShapeError>([&] { copy_into(src, zeros({5}, DType::f64)); }, {"copy_into", "f64[5]"});
}

}  // namespace
}  // namespace tessera
