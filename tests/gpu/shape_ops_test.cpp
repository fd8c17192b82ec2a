// CUDA data-movement kernels against their CPU counterparts (label `gpu`; skipped visibly
// without a GPU): copy, reshape, expand, transpose, permute, concat, split, slice,
// slice_backward, index_select and the deterministic index_select_backward, plus the backward
// of each family through eager autograd on GPU tensors.
//
// These ops move values without arithmetic (index_select_backward sums in the CPU's order), so
// every result must equal the CPU's exactly, for every dtype the op takes. Inputs are random,
// sizes odd (tile edges of the transpose, rows that are not a multiple of a wide word), and GPU
// outputs are poisoned (NaN, or 171 / -123456789 for u8 / i32) before the kernel runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

using testing::test_rand;
using testing::test_randn;

const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};
const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u8};

// Random values of any dtype: N(0,1) for floating types, integers around 0 (i32) or in [0, 255].
Tensor random_of(const Shape& shape, DType dt, uint64_t seed) {
  if (dt == DType::i32) return cast(mul(test_randn(shape, seed), 1000.0), DType::i32);
  if (dt == DType::u8) return cast(test_rand(shape, 0, 256, seed), DType::u8);
  return cast(test_randn(shape, seed), dt);
}

Tensor indices_of(const std::vector<int32_t>& v) {
  return from_vector(v, Shape{static_cast<int64_t>(v.size())}, TensorOptions(DType::i32));
}

// n random indices in [0, R) (many repeats when n > R).
Tensor random_indices(int64_t n, int64_t R, uint64_t seed) {
  return cast(test_rand({n}, 0, static_cast<double>(R), seed), DType::i32);
}

std::string describe(const std::vector<Tensor>& inputs) {
  std::string s;
  for (const Tensor& t : inputs) s += std::string(s.empty() ? "" : ", ") + dtype_name(t.dtype()) + t.shape().str();
  return s;
}

// Runs Op on the CPU inputs and on their GPU copies (into poisoned outputs); the outputs must
// agree bit for bit. Non-floating inputs (indices, masks) are copied to the GPU as they are.
template <class Op>
void expect_gpu_matches_cpu(typename Op::Attrs attrs, const std::vector<Tensor>& inputs, const std::string& what) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back(t.meta());
  std::vector<Tensor> want, got, gpu_inputs;
  for (const TensorMeta& m : output_metas<Op>(attrs, metas)) {
    want.push_back(empty(m.shape, TensorOptions(m.dtype)));
    got.push_back(poisoned(m));
  }
  call_out<Op>(attrs, inputs, want);
  for (const Tensor& t : inputs) gpu_inputs.push_back(t.to(kGpu));
  call_out<Op>(attrs, gpu_inputs, got);
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].device(), kGpu);
    EXPECT_TRUE(same_bits(got[k], want[k]))
        << Op::kName << " (" << what << ") on " << describe(inputs) << ", output " << k;
  }
}

// ---- forward ----

TEST(CudaShapeOps, CopyAndReshapeMoveEveryByte) {
  REQUIRE_GPU();
  uint64_t seed = 10;
  for (DType dt : kAllDtypes)
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{1001}, Shape{33, 65}}) {
      const Tensor x = random_of(s, dt, ++seed);
      expect_gpu_matches_cpu<op::Copy>({}, {x}, "copy");
      // A reshape's kernel runs only where an executor gives it its own buffer, as here.
      expect_gpu_matches_cpu<op::Reshape>({{-1}}, {x}, "reshape to [-1]");
    }
}

TEST(CudaShapeOps, ExpandBroadcastsLikeTheCpu) {
  REQUIRE_GPU();
  struct Case {
    Shape from, to;
  };
  const std::vector<Case> cases = {
      {{1, 33}, {7, 33}}, {{}, {5, 3}}, {{5, 1, 3}, {2, 5, 4, 3}}, {{65, 1}, {65, 33}}, {{1}, {1001}},
      // last dimensions of whole 16-byte words for every dtype (the word path): the last dimension
      // read along x (stride 1) and broadcast (stride 0), a scalar, a middle dimension broadcast
      {{1, 64}, {7, 64}}, {{65, 1}, {65, 32}}, {{}, {16, 8}}, {{3, 1, 16}, {2, 3, 5, 16}}, {{1, 8}, {1001, 8}}};
  uint64_t seed = 20;
  for (DType dt : kFloating)
    for (const Case& c : cases) expect_gpu_matches_cpu<op::Expand>({c.to}, {random_of(c.from, dt, ++seed)}, c.to.str());
}

TEST(CudaShapeOps, TransposeOddShapesAndEveryDtype) {
  REQUIRE_GPU();
  uint64_t seed = 30;
  for (DType dt : kAllDtypes)
    for (const Shape& s : {Shape{1, 7}, Shape{7, 1}, Shape{33, 65}, Shape{3, 37, 129}, Shape{2, 70, 2}, Shape{64, 32},
                           Shape{2, 1, 1001}})
      expect_gpu_matches_cpu<op::Transpose>({}, {random_of(s, dt, ++seed)}, "transpose");
}

TEST(CudaShapeOps, PermuteEveryOrderOfFourDims) {
  REQUIRE_GPU();
  uint64_t seed = 40;
  for (DType dt : kAllDtypes)
    for (const Shape& s : {Shape{2, 3, 5, 7}, Shape{3, 1, 33, 4}}) {
      const Tensor x = random_of(s, dt, ++seed);
      std::vector<int> perm = {0, 1, 2, 3};
      do {
        std::string name = "perm";
        for (int p : perm) name += " " + std::to_string(p);
        expect_gpu_matches_cpu<op::Permute>({perm}, {x}, name);
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
  // Five dims, negative entries, and the attention head split [B, T, H, D] -> [B, H, T, D].
  for (DType dt : {DType::f32, DType::bf16}) {
    expect_gpu_matches_cpu<op::Permute>({{4, 0, -2, 1, 2}}, {random_of({2, 3, 1, 4, 5}, dt, 50)}, "5-d");
    expect_gpu_matches_cpu<op::Permute>({{0, 2, 1, 3}}, {random_of({2, 17, 3, 64}, dt, 51)}, "heads");
    expect_gpu_matches_cpu<op::Permute>({{0, 2, 1, 3}}, {random_of({2, 17, 3, 5}, dt, 52)}, "heads, odd D");
  }
}

TEST(CudaShapeOps, ConcatAndSplitAlongEveryDim) {
  REQUIRE_GPU();
  uint64_t seed = 60;
  for (DType dt : kAllDtypes) {
    // Pieces of sizes 5, 2, 0, 9 along dim 1 of [3, ., 7]; then along dims 0 and -1.
    const std::vector<Tensor> mid = {random_of({3, 5, 7}, dt, ++seed), random_of({3, 2, 7}, dt, ++seed),
                                     random_of({3, 0, 7}, dt, ++seed), random_of({3, 9, 7}, dt, ++seed)};
    expect_gpu_matches_cpu<op::Concat>({1}, mid, "dim 1");
    const std::vector<Tensor> first = {random_of({1, 33}, dt, ++seed), random_of({4, 33}, dt, ++seed)};
    expect_gpu_matches_cpu<op::Concat>({0}, first, "dim 0");
    const std::vector<Tensor> last = {random_of({7, 3}, dt, ++seed), random_of({7, 1}, dt, ++seed),
                                      random_of({7, 65}, dt, ++seed)};
    expect_gpu_matches_cpu<op::Concat>({-1}, last, "dim -1");
    expect_gpu_matches_cpu<op::Concat>({0}, {random_of({1001}, dt, ++seed)}, "one input");

    const Tensor x = random_of({3, 16, 7}, dt, ++seed);
    expect_gpu_matches_cpu<op::Split>({{5, 2, 0, 9}, 1}, {x}, "dim 1");
    expect_gpu_matches_cpu<op::Split>({{1, 2}, 0}, {x}, "dim 0");
    expect_gpu_matches_cpu<op::Split>({{3, 1, 3}, -1}, {x}, "dim -1");
    expect_gpu_matches_cpu<op::Split>({{1001}, 0}, {random_of({1001}, dt, ++seed)}, "one piece");
  }
}

TEST(CudaShapeOps, SliceAndSliceBackward) {
  REQUIRE_GPU();
  uint64_t seed = 70;
  struct Case {
    int dim;
    int64_t start, end;
  };
  // Copies (dims after the first), the contiguous cases (dim 0, whole dim), Python bounds.
  const std::vector<Case> cases = {{1, 2, 9},  {2, 1, 64}, {-1, -5, 1000}, {0, 1, 3},
                                   {1, 0, 33}, {1, 7, 7},  {2, -100, 3},   {0, -2, 100}};
  for (DType dt : kAllDtypes) {
    const Tensor x = random_of({3, 33, 65}, dt, ++seed);
    for (const Case& c : cases) {
      const std::string what =
          "dim " + std::to_string(c.dim) + " [" + std::to_string(c.start) + ", " + std::to_string(c.end) + ")";
      expect_gpu_matches_cpu<op::Slice>({c.dim, c.start, c.end}, {x}, what);
      const int d = x.shape().normalize_dim(c.dim);
      const auto [b, e] = detail::slice_bounds(x.shape()[d], c.start, c.end);
      std::vector<int64_t> gs = x.shape().vec();
      gs[d] = e - b;
      expect_gpu_matches_cpu<op::SliceBackward>({x.shape(), c.dim, b}, {random_of(Shape(gs), dt, ++seed)}, what);
    }
  }
}

TEST(CudaShapeOps, IndexSelectWithRepeatsAlongEveryDim) {
  REQUIRE_GPU();
  uint64_t seed = 80;
  for (DType dt : kAllDtypes) {
    const Tensor x = random_of({11, 5, 33}, dt, ++seed);
    expect_gpu_matches_cpu<op::IndexSelect>({0}, {x, indices_of({3, 0, 10, 3, 3, 7})}, "dim 0");
    expect_gpu_matches_cpu<op::IndexSelect>({1}, {x, indices_of({4, 4, 1})}, "dim 1");
    expect_gpu_matches_cpu<op::IndexSelect>({-1}, {x, random_indices(100, 33, ++seed)}, "dim -1");
    expect_gpu_matches_cpu<op::IndexSelect>({0}, {x, indices_of({})}, "no indices");
    // An embedding-sized lookup: rows of 1001 elements (not a multiple of a wide word).
    expect_gpu_matches_cpu<op::IndexSelect>({0}, {random_of({37, 1001}, dt, ++seed), random_indices(257, 37, ++seed)},
                                        "rows");
  }
}

TEST(CudaShapeOps, IndexSelectBackwardEqualsTheCpuAndIsDeterministic) {
  REQUIRE_GPU();
  uint64_t seed = 90;
  for (DType dt : kFloating) {
    // Many repeats (the embedding gradient of a batch of tokens), R larger and smaller than N.
    expect_gpu_matches_cpu<op::IndexSelectBackward>(
        {0, 37}, {random_of({5000, 33}, dt, ++seed), random_indices(5000, 37, ++seed)}, "5000 tokens, vocabulary 37");
    expect_gpu_matches_cpu<op::IndexSelectBackward>(
        {0, 1001}, {random_of({7, 65}, dt, ++seed), random_indices(7, 1001, ++seed)}, "7 tokens, vocabulary 1001");
    expect_gpu_matches_cpu<op::IndexSelectBackward>(
        {1, 11}, {random_of({3, 64, 5}, dt, ++seed), random_indices(64, 11, ++seed)}, "dim 1");
    expect_gpu_matches_cpu<op::IndexSelectBackward>(
        {-1, 9}, {random_of({4, 6}, dt, ++seed), indices_of({8, 0, 8, 8, 2, 0})}, "dim -1");
    expect_gpu_matches_cpu<op::IndexSelectBackward>({0, 5}, {random_of({0, 3}, dt, ++seed), indices_of({})}, "no indices");
    // Skewed, as characters are: index 0 at every third position (thousands of places, many
    // runs of kRun), the rest spread over 65.
    std::vector<int32_t> skewed = random_indices(20000, 65, ++seed).to_vector<int32_t>();
    for (size_t n = 0; n < skewed.size(); n += 3) skewed[n] = 0;
    expect_gpu_matches_cpu<op::IndexSelectBackward>({0, 65}, {random_of({20000, 390}, dt, ++seed), indices_of(skewed)},
                                                "20000 tokens, one index at a third of them");
  }
  // The same bits on every run.
  const Tensor g = random_of({20000, 65}, DType::f32, 99).to(kGpu);
  const Tensor idx = random_indices(20000, 50, 98).to(kGpu);
  const Tensor first = index_select_backward(g, idx, 0, 50).to(Device::cpu());
  for (int run = 0; run < 5; ++run)
    EXPECT_TRUE(same_bits(index_select_backward(g, idx, 0, 50), first)) << "run " << run;
}

// ---- backward: eager autograd on GPU tensors against the CPU ----

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on CPU leaves and on GPU copies of them (floating inputs require grad), then backward with
// one random seed on both devices; the values and every input gradient must agree exactly.
void expect_backward_matches_cpu(const Fn& f, const std::vector<Tensor>& inputs, const std::string& what) {
  std::vector<Tensor> xc, xg;
  for (const Tensor& x : inputs) {
    Tensor c = x.detach().clone(), g = x.detach().to(kGpu);
    if (is_floating(x.dtype())) {
      c.requires_grad_();
      g.requires_grad_();
    }
    xc.push_back(c);
    xg.push_back(g);
  }
  const Tensor yc = f(xc), yg = f(xg);
  ASSERT_EQ(yg.device(), kGpu) << what;
  EXPECT_TRUE(same_bits(yg, yc)) << what << ": forward";
  const Tensor seed = test_randn(yc.shape(), 900, yc.dtype());
  yc.backward(seed);
  yg.backward(seed.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!xc[i].requires_grad()) continue;
    ASSERT_TRUE(xc[i].grad().defined()) << what << ": input " << i;
    ASSERT_TRUE(xg[i].grad().defined()) << what << ": input " << i << " got no gradient on the GPU";
    EXPECT_EQ(xg[i].grad().device(), kGpu);
    EXPECT_TRUE(same_bits(xg[i].grad(), xc[i].grad())) << what << ": gradient of input " << i;
  }
}

TEST(CudaShapeOpsBackward, TransposePermuteCopy) {
  REQUIRE_GPU();
  const Tensor x = random_of({3, 33, 65}, DType::f32, 1000);
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return transpose(v[0]); }, {x}, "transpose");
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return permute(v[0], {2, 0, 1}); }, {x}, "permute");
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return copy(v[0]); }, {x}, "copy");
}

TEST(CudaShapeOpsBackward, ConcatSplitSlice) {
  REQUIRE_GPU();
  const Tensor a = random_of({3, 5, 7}, DType::f32, 1010), b = random_of({3, 2, 7}, DType::f32, 1011);
  expect_backward_matches_cpu(
      [](const std::vector<Tensor>& v) {
        return concat({v[0], v[1], v[0]}, 1);
      },
      {a, b}, "concat (a used twice)");
  const Tensor x = random_of({3, 16, 7}, DType::f32, 1012);
  // Pieces 0 and 2 reordered, piece 1 unused: its gradient is zeros.
  expect_backward_matches_cpu(
      [](const std::vector<Tensor>& v) {
        const std::vector<Tensor> s = split(v[0], {5, 2, 9}, 1);
        return concat({s[2], s[0]}, 1);
      },
      {x}, "split");
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return slice(v[0], 1, 3, 11); }, {x}, "slice (copy)");
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return slice(v[0], 0, 1, 3); }, {x}, "slice (view)");
}

TEST(CudaShapeOpsBackward, EmbeddingGradientSumsRepeatedIds) {
  REQUIRE_GPU();
  const Tensor weight = random_of({37, 65}, DType::f32, 1020);
  const Tensor ids = cast(test_rand({4, 129}, 0, 37, 1021), DType::i32);
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return embedding(v[0], v[1]); }, {weight, ids},
                              "embedding");
  const Tensor x = random_of({5, 11, 7}, DType::f32, 1022);
  expect_backward_matches_cpu([](const std::vector<Tensor>& v) { return index_select(v[0], v[1], 1); },
                              {x, indices_of({10, 0, 10, 3, 10})}, "index_select dim 1");
}

TEST(CudaShapeOpsBackward, ExpandSumsBackOverTheBroadcastDims) {
  REQUIRE_GPU();
  const Tensor x = random_of({5, 1, 3}, DType::f32, 1030);
  try {
    // The gradient is sum_to, a reduction: equal to the CPU within f32 rounding, not bitwise.
    std::vector<Tensor> xc = {x.clone().requires_grad_()}, xg = {x.to(kGpu).requires_grad_()};
    const Tensor seed = test_randn({2, 5, 4, 3}, 1031, DType::f32);
    expand(xc[0], Shape{2, 5, 4, 3}).backward(seed);
    expand(xg[0], Shape{2, 5, 4, 3}).backward(seed.to(kGpu));
    ASSERT_TRUE(xg[0].grad().defined());
    EXPECT_TRUE(testing::all_close(xg[0].grad(), xc[0].grad(), 1e-5, 1e-6));
  } catch (const NotImplementedError& e) {
    if (std::string(e.what()).find("sum") == std::string::npos) throw;
    GTEST_SKIP() << "needs the CUDA kernel of sum: " << e.what();
  }
}

}  // namespace
}  // namespace tessera
