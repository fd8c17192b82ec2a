// transpose, permute, concat, split, chunk, slice, slice_backward: values against loops (odd
// sizes, every dtype width), views, f64 gradient checks, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// out[i] = x[j] with j[perm[d]] = i[d], by walking every output index.
std::vector<double> ref_permute(const std::vector<double>& x, const Shape& s, const std::vector<int>& perm) {
  const int nd = s.ndim();
  std::vector<int64_t> st = s.strides(), os(nd);
  for (int d = 0; d < nd; ++d) os[d] = s[perm[d]];
  std::vector<double> out(x.size());
  for (int64_t flat = 0; flat < static_cast<int64_t>(x.size()); ++flat) {
    int64_t rem = flat, src = 0;
    for (int d = nd - 1; d >= 0; --d) {
      src += (rem % os[d]) * st[perm[d]];
      rem /= os[d];
    }
    out[flat] = x[src];
  }
  return out;
}

TEST(Transpose, HandComputedAndBatched) {
  EXPECT_TRUE(all_close(transpose(tensor({1, 2, 3, 4, 5, 6}, {2, 3})), {1, 4, 2, 5, 3, 6}));
  // Tiles with remainders; the second shape runs the parallel path.
  for (Shape s : {Shape{3, 37, 45}, Shape{4, 129, 67}, Shape{2, 1, 9}}) {
    Tensor x = test_randn(s, 3);
    Tensor t = transpose(x);
    EXPECT_EQ(t.shape(), Shape({s[0], s[2], s[1]}));
    EXPECT_TRUE(all_close(t, ref_permute(x.to_vector<double>(), s, {0, 2, 1}), 0, 0)) << s;
  }
}

TEST(Permute, AllRank4PermutationsAndDtypes) {
  const Shape s{2, 3, 4, 5};
  std::vector<int> perm{0, 1, 2, 3};
  do {
    for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::i32, DType::u8}) {
      Tensor x = from_vector<int32_t>([] {
        std::vector<int32_t> v(120);
        std::iota(v.begin(), v.end(), 0);
        return v;
      }(), s, dt);
      Tensor p = permute(x, perm);
      EXPECT_EQ(p.dtype(), dt);
      EXPECT_TRUE(all_close(p, ref_permute(x.to_vector<double>(), s, perm), 0, 0)) << dt;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Permute, HeadsSplitLargeRank8AndUnitDims) {
  // [B, T, H, D] -> [B, H, T, D], big enough for the parallel row copy.
  Tensor x = test_randn({3, 65, 8, 33}, 4, DType::f32);
  EXPECT_TRUE(all_close(permute(x, {0, 2, 1, 3}), ref_permute(x.to_vector<double>(), x.shape(), {0, 2, 1, 3}), 0, 0));
  // Last dim moved, large: the strided-gather and tiled paths in parallel.
  for (std::vector<int> perm :
       {std::vector<int>{3, 0, 1, 2}, std::vector<int>{0, 1, 3, 2}, std::vector<int>{2, 3, 0, 1}})
    EXPECT_TRUE(all_close(permute(x, perm), ref_permute(x.to_vector<double>(), x.shape(), perm), 0, 0));
  Tensor y = test_randn({2, 1, 3, 2, 1, 3, 2, 2}, 5);
  std::vector<int> p8{7, 2, 0, 5, 1, 3, 6, 4};
  EXPECT_TRUE(all_close(permute(y, p8), ref_permute(y.to_vector<double>(), y.shape(), p8), 0, 0));
  EXPECT_TRUE(
      all_close(permute(y, {-1, 2, 0, 5, 1, 3, 6, 4}), ref_permute(y.to_vector<double>(), y.shape(), p8), 0, 0));
}

TEST(Permute, Gradients) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return transpose(x[0]); }, {test_randn({3, 4, 5}, 1)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return transpose(x[0]); }, {test_randn({5, 3}, 2)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& x) {
        return permute(x[0], {0, 2, 1, 3});
      },
      {test_randn({2, 3, 5, 3}, 3)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& x) {
        return permute(x[0], {2, 0, 1});
      },
      {test_randn({3, 4, 5}, 4)}));
}

TEST(Permute, Errors) {
  Tensor x = test_randn({2, 3, 5});
  expect_error<ShapeError>([&] { permute(x, {0, 1}); }, {"permute", "[2, 3, 5]"});
  expect_error<ValueError>([&] { permute(x, {0, 1, 1}); }, {"permute", "[2, 3, 5]"});
  expect_error<ValueError>([&] { permute(x, {0, 1, 3}); }, {"permute", "[2, 3, 5]"});
  expect_error<ShapeError>([&] { transpose(test_randn({5})); }, {"transpose", "[5]"});
}

TEST(Concat, HandComputed) {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}), b = tensor({5, 6}, {2, 1}), c = tensor({7, 8}, {1, 2});
  EXPECT_TRUE(all_close(concat({a, b}, 1), {1, 2, 5, 3, 4, 6}));
  EXPECT_TRUE(all_close(concat({a, b, a}, -1), {1, 2, 5, 1, 2, 3, 4, 6, 3, 4}));
  EXPECT_TRUE(all_close(concat({a, c}, 0), {1, 2, 3, 4, 7, 8}));
  EXPECT_EQ(concat({a, zeros({2, 0}), b}, 1).shape(), Shape({2, 3}));
  Tensor i = concat({arange(3), arange(2)}, 0);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1}));
}

TEST(Concat, GradientsAndPartialRequiresGrad) {
  auto cat1 = [](const std::vector<Tensor>& x) { return concat(x, 1); };
  EXPECT_TRUE(gradcheck(cat1, {test_randn({3, 2, 5}, 1), test_randn({3, 5, 5}, 2), test_randn({3, 1, 5}, 3)}));
  auto cat0 = [](const std::vector<Tensor>& x) { return concat(x, 0); };
  EXPECT_TRUE(gradcheck(cat0, {test_randn({3, 7}, 1), test_randn({1, 7}, 2)}));
  Tensor a = test_randn({2, 3}).requires_grad_(), b = test_randn({2, 2}, 2);
  Tensor g = test_randn({2, 5}, 3);
  concat({a, b}, 1).backward(g);
  EXPECT_TRUE(all_close(a.grad(), slice(g, 1, 0, 3)));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Concat, Errors) {
  Tensor a = test_randn({2, 3}), b = test_randn({3, 3});
  expect_error<ShapeError>([&] { concat({a, b}, 1); }, {"concat", "[2, 3]", "[3, 3]"});
  expect_error<ShapeError>([&] { concat({a, b}, 2); }, {"concat", "[2, 3]"});
  expect_error<DTypeError>([&] { concat({a, arange(3)}, 0); }, {"concat", "i32"});
  expect_error<ValueError>([&] { concat({}, 0); }, {"concat"});
}

TEST(Split, ValuesAndChunk) {
  Tensor x = tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  std::vector<Tensor> p = split(x, {2, 0, 3}, 1);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_TRUE(all_close(p[0], {0, 1, 5, 6}));
  EXPECT_EQ(p[1].shape(), Shape({2, 0}));
  EXPECT_TRUE(all_close(p[2], {2, 3, 4, 7, 8, 9}));
  std::vector<Tensor> r = split(x, {1, 1}, 0);
  EXPECT_TRUE(all_close(r[1], {5, 6, 7, 8, 9}));
  std::vector<Tensor> c = chunk(x, 4, 1);  // ceil(5 / 4) = 2: pieces 2, 2, 1
  ASSERT_EQ(c.size(), 3u);
  EXPECT_TRUE(all_close(c[1], {2, 3, 7, 8}));
  EXPECT_TRUE(all_close(c[2], {4, 9}));
  EXPECT_EQ(chunk(test_randn({6, 3}), 3).size(), 3u);
  // Round trip on a large tensor (parallel path) in f32.
  Tensor big = test_randn({7, 3001, 3}, 5, DType::f32);
  EXPECT_TRUE(all_close(concat(split(big, {1000, 1, 2000}, 1), 1), big, 0, 0));
}

TEST(Split, GradientsWithUnusedOutputs) {
  // Only some outputs reach the result: the others' gradients arrive as zeros.
  auto f = [](const std::vector<Tensor>& x) {
    std::vector<Tensor> p = split(x[0], {2, 1, 4}, 1);
    return concat({p[2], p[0]}, 1);
  };
  EXPECT_TRUE(gradcheck(f, {test_randn({3, 7, 2}, 1)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& x) {
        return split(x[0], {4, 1}, -1)[1];
      },
      {test_randn({3, 5}, 2)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return chunk(x[0], 3, 0)[1]; }, {test_randn({7, 3}, 3)}));
}

TEST(Split, Errors) {
  Tensor x = test_randn({2, 5});
  expect_error<ShapeError>([&] { split(x, {2, 2}, 1); }, {"split", "[2, 5]", "4"});
  expect_error<ValueError>([&] { split(x, {6, -1}, 1); }, {"split", "-1"});
  expect_error<ValueError>([&] { chunk(x, 0, 1); }, {"chunk", "[2, 5]"});
}

TEST(Slice, PythonBounds) {
  Tensor x = tensor({0, 1, 2, 3, 4, 5, 6}, {7});
  EXPECT_TRUE(all_close(slice(x, 0, 2, 5), {2, 3, 4}));
  EXPECT_TRUE(all_close(slice(x, 0, -3), {4, 5, 6}));
  EXPECT_TRUE(all_close(slice(x, 0, 1, -4), {1, 2}));
  EXPECT_TRUE(all_close(slice(x, 0, -100, 2), {0, 1}));    // clamped, like Python
  EXPECT_TRUE(all_close(slice(x, 0, 5, 100), {5, 6}));
  EXPECT_EQ(slice(x, 0, 5, 3).shape(), Shape({0}));       // end before start: empty
  EXPECT_EQ(slice(x, 0, 9, 12).shape(), Shape({0}));
}

TEST(Slice, LeadingDimIsAViewOtherDimsCopy) {
  Tensor x = test_randn({5, 3}, 1, DType::f32);
  Tensor rows = slice(x, 0, 1, 3);
  EXPECT_EQ(rows.data_ptr(), static_cast<void*>(x.data<float>() + 3));  // shares x's storage
  x.data<float>()[4] = 42.f;
  EXPECT_EQ(rows.to_vector<float>()[1], 42.f);
  // Dims before `dim` of size 1: still contiguous, still a view.
  Tensor y = test_randn({1, 6, 2}, 2, DType::f32);
  EXPECT_EQ(slice(y, 1, 2, 5).data_ptr(), static_cast<void*>(y.data<float>() + 4));
  // A dim-1 slice of [4, 5, 3] is strided in x: a copy with the right values.
  Tensor z = test_randn({4, 5, 3}, 3);
  Tensor s = slice(z, 1, 1, 4);
  const char* zb = static_cast<const char*>(z.data_ptr());
  const char* sb = static_cast<const char*>(s.data_ptr());
  EXPECT_TRUE(sb < zb || sb >= zb + z.nbytes());
  std::vector<double> zv = z.to_vector<double>(), ref;
  for (int o = 0; o < 4; ++o)
    for (int k = 1; k < 4; ++k)
      for (int i = 0; i < 3; ++i) ref.push_back(zv[(o * 5 + k) * 3 + i]);
  EXPECT_TRUE(all_close(s, ref, 0, 0));
  std::vector<double> last;  // z[:, :, 1:2]
  for (int j = 0; j < 20; ++j) last.push_back(zv[j * 3 + 1]);
  EXPECT_TRUE(all_close(slice(z, -1, 1, 2), last, 0, 0));
}

TEST(Slice, Gradients) {
  for (int d : {0, 1, 2, -1})
    EXPECT_TRUE(gradcheck([=](const std::vector<Tensor>& x) { return slice(x[0], d, 1, -1); },
                          {test_randn({5, 7, 3}, 1)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return slice(x[0], 0, -2); }, {test_randn({5, 3}, 2)}));
  // slice_backward is linear; its own gradient is a slice.
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return slice_backward(x[0], Shape{3, 7}, 1, 2); },
                        {test_randn({3, 4}, 3)}));
  EXPECT_TRUE(all_close(slice_backward(tensor({1, 2, 3, 4}, {2, 2}), Shape{2, 4}, 1, 1), {0, 1, 2, 0, 0, 3, 4, 0}));
}

TEST(ShapeOps, SymbolicTensorsRunShapeRulesOnly) {
  Tensor x = symbolic({2, 7, 3, 5});
  EXPECT_EQ(permute(x, {0, 2, 1, 3}).shape(), Shape({2, 3, 7, 5}));
  EXPECT_EQ(transpose(x).shape(), Shape({2, 7, 5, 3}));
  EXPECT_EQ(concat({x, x}, 1).shape(), Shape({2, 14, 3, 5}));
  std::vector<Tensor> p = split(x, {3, 4}, 1);
  EXPECT_TRUE(p[1].is_symbolic());
  EXPECT_EQ(p[1].shape(), Shape({2, 4, 3, 5}));
  EXPECT_EQ(slice(x, 0, 1).shape(), Shape({1, 7, 3, 5}));
  EXPECT_TRUE(slice(x, 0, 1).is_symbolic());
  EXPECT_EQ(max(x, 2).shape(), Shape({2, 7, 5}));
  EXPECT_EQ(argmax(x, 2, true).dtype(), DType::i32);
  EXPECT_EQ(index_select(x, symbolic({9}, DType::i32), 1).shape(), Shape({2, 9, 3, 5}));
}

TEST(Slice, Errors) {
  Tensor x = test_randn({2, 5});
  expect_error<ShapeError>([&] { slice(x, 2, 0, 1); }, {"slice", "[2, 5]"});
  expect_error<ShapeError>([&] { slice(full({}, 1.0), 0, 0, 1); }, {"slice", "[]"});
  expect_error<ShapeError>([&] { slice_backward(x, Shape{2, 6}, 1, 2); }, {"slice_backward", "[2, 5]", "[2, 6]"});
}

}  // namespace
}  // namespace tessera
