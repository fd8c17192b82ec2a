// index_select, index_select_backward, embedding: values, repeated indices, determinism,
// f64 gradient checks, out-of-range errors.
#include <gtest/gtest.h>

#include <string>

#include "core/random.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

Tensor ids(const std::vector<int32_t>& v, const Shape& s) { return from_vector<int32_t>(v, s); }

TEST(IndexSelect, RowsAndOtherDims) {
  Tensor x = tensor({0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, {4, 3});
  EXPECT_TRUE(all_close(index_select(x, ids({2, 0, 2}, {3})), {20, 21, 22, 0, 1, 2, 20, 21, 22}));
  EXPECT_TRUE(all_close(index_select(x, ids({2, 1}, {2}), 1), {2, 1, 12, 11, 22, 21, 32, 31}));
  EXPECT_EQ(index_select(x, ids({}, {0})).shape(), Shape({0, 3}));
  // i32 and bf16 data are moved as bytes.
  Tensor xi = from_vector<int32_t>({5, 6, 7}, {3});
  EXPECT_EQ(index_select(xi, ids({1, 1, 0}, {3})).to_vector<int32_t>(), (std::vector<int32_t>{6, 6, 5}));
  Tensor xh = tensor({0.5, 1.5, -2, 8}, {2, 2}, DType::bf16);
  EXPECT_TRUE(all_close(index_select(xh, ids({1, 0}, {2})), {-2, 8, 0.5, 1.5}));
  // Middle dim of a 3-D tensor against a loop.
  Tensor y = test_randn({3, 5, 7}, 2);
  std::vector<int32_t> iv{4, 0, 4, 2};
  std::vector<double> yv = y.to_vector<double>(), ref;
  for (int o = 0; o < 3; ++o)
    for (int32_t r : iv)
      for (int i = 0; i < 7; ++i) ref.push_back(yv[(o * 5 + r) * 7 + i]);
  EXPECT_TRUE(all_close(index_select(y, ids(iv, {4}), -2), ref, 0, 0));
}

TEST(IndexSelect, Gradients) {
  Tensor rep = ids({3, 0, 3, 3, 1}, {5});  // repeated rows accumulate
  EXPECT_TRUE(
      gradcheck([&](const std::vector<Tensor>& x) { return index_select(x[0], rep); }, {test_randn({5, 3}, 1)}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return index_select(x[0], rep, 1); },
                        {test_randn({2, 4, 3}, 2)}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return index_select(x[0], ids({2, 2}, {2}), 2); },
                        {test_randn({2, 3, 3}, 3)}));
  // index_select_backward is linear in g; its gradient is index_select.
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return index_select_backward(x[0], rep, 0, 6); },
                        {test_randn({5, 3}, 4)}));
}

TEST(IndexSelect, BackwardScatterAddsRepeatedRows) {
  Tensor g = tensor({1, 2, 10, 20, 100, 200}, {3, 2}, DType::f64);
  EXPECT_TRUE(all_close(index_select_backward(g, ids({2, 0, 2}, {3}), 0, 4), {10, 20, 0, 0, 101, 202, 0, 0}));
}

TEST(Embedding, ShapesValuesAndAccumulatingBackward) {
  Tensor w = tensor({0, 1, 10, 11, 20, 21}, {3, 2}, DType::f64).requires_grad_();
  Tensor e = embedding(w, ids({2, 0, 2, 2, 1, 0}, {2, 3}));
  EXPECT_EQ(e.shape(), Shape({2, 3, 2}));
  EXPECT_TRUE(all_close(e, {20, 21, 0, 1, 20, 21, 20, 21, 10, 11, 0, 1}));
  e.backward(ones({2, 3, 2}, DType::f64));
  EXPECT_TRUE(all_close(w.grad(), {2, 2, 1, 1, 3, 3}));  // counts of each id
  EXPECT_EQ(embedding(w, full({}, 1, DType::i32)).shape(), Shape({2}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return embedding(x[0], ids({1, 1, 4, 0, 1, 3}, {3, 2})); },
                        {test_randn({5, 3}, 5)}));
}

TEST(Embedding, BackwardIsDeterministic) {
  // Many repeated ids over a large table (parallel path), f32: two runs must agree bit for bit.
  Generator gen(7);
  Tensor idf = uniform({40000}, 0.0, 50.0, gen, DType::f64);
  std::vector<int32_t> iv;
  for (double v : idf.to_vector<double>()) iv.push_back(static_cast<int32_t>(v));
  Tensor id = ids(iv, {40000});
  Tensor g = test_randn({40000, 37}, 8, DType::f32);
  std::vector<float> a = index_select_backward(g, id, 0, 50).to_vector<float>();
  std::vector<float> b = index_select_backward(g, id, 0, 50).to_vector<float>();
  EXPECT_EQ(a, b);
  // And it matches the documented order, written out: row r's positions n (increasing), at
  // sorted places start_r + k, summed in runs of places [j·kRun, (j+1)·kRun), run sums in order.
  const int64_t kRun = op::IndexSelectBackward::kRun;
  std::vector<float> ref(50 * 37, 0.f), seq(50 * 37, 0.f), gv = g.to_vector<float>();
  int64_t start_r = 0;
  for (int32_t r = 0; r < 50; ++r) {
    std::vector<int64_t> places;
    for (int64_t n = 0; n < 40000; ++n)
      if (iv[n] == r) places.push_back(n);
    for (int i = 0; i < 37; ++i) {
      float run = 0.f;
      for (size_t k = 0; k < places.size(); ++k) {
        run += gv[places[k] * 37 + i];
        seq[r * 37 + i] += gv[places[k] * 37 + i];
        const int64_t place = start_r + static_cast<int64_t>(k);
        if ((place + 1) % kRun == 0 || k + 1 == places.size()) ref[r * 37 + i] += run, run = 0.f;
      }
    }
    start_r += static_cast<int64_t>(places.size());
  }
  EXPECT_EQ(a, ref);
  EXPECT_NE(a, seq);  // the runs do change the rounding here: the comparison above has teeth
}

TEST(IndexSelect, Errors) {
  Tensor x = test_randn({4, 3});
  expect_error<ValueError>([&] { index_select(x, ids({0, 4}, {2})); }, {"index_select", "index 4", "4"});
  expect_error<ValueError>([&] { index_select(x, ids({-1}, {1})); }, {"index_select", "index -1", "[4, 3]"});
  expect_error<DTypeError>([&] { index_select(x, tensor({0, 1})); }, {"index_select", "i32", "f32[2]"});
  expect_error<ShapeError>([&] { index_select(x, ids({0, 1}, {1, 2})); }, {"index_select", "[1, 2]"});
  expect_error<ShapeError>([&] { index_select(x, ids({0}, {1}), 2); }, {"index_select", "[4, 3]"});
  expect_error<ShapeError>([&] { embedding(test_randn({4}), ids({0}, {1})); }, {"embedding", "[4]"});
  expect_error<ValueError>([&] { index_select_backward(x, ids({0, 1, 9, 0}, {4}), 0, 5); },
                           {"index_select_backward", "index 9", "5"});
}

}  // namespace
}  // namespace tessera
