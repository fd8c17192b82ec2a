// bsmm's column quads (kernels/common/gate_quad_lists.h, the work list of the sm_90a forward
// kernel's kCols = 4 items): every gate-0 column once, longest list first, and the forward replayed
// on the CPU from the list alone equal to bsmm's CPU result.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/common/gate_quad_lists.h"
#include "kernels/ops.h"
#include "layers/lstm.h"

namespace tessera {
namespace {

using testing::test_randn;

// Per work item (c, begin, end), per entry (r, k0..k3), per gate g: y[:, (c + g·q)-block] +=
// x[:, r-block]·W[k_g], in list order. A gate-0 column with no blocks (column 2 of the mask) gives
// zeros, as the kernel's empty item does.
TEST(GateQuadLists, ReplayingTheQuadsGivesBsmm) {
  constexpr int64_t bs = 8, q = 5, n = 7;
  std::vector<uint8_t> mask(6 * q, 0);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < q; ++c) mask[r * q + c] = c != 2 && r != 4 && (r + c) % 3 != 1;
  for (const LayoutPtr& l : {nn::lstm_gate_layout(*BlockLayout::from_mask(6 * bs, q * bs, bs, mask)),
                             nn::lstm_gate_layout(*random_layout(6 * bs, q * bs, bs, 0.4, 3))}) {
    const GateQuadLists t = gate_quad_lists(*l, q);
    ASSERT_EQ(t.work.size(), 3u * q) << l->str();
    ASSERT_EQ(t.entries.size(), 5u * static_cast<size_t>(l->nnz() / 4)) << l->str();
    const Tensor x = test_randn({n, l->in_features()}, 1, DType::f64);
    const Tensor w = test_randn({l->nnz(), bs, bs}, 2, DType::f64);
    const std::vector<double> vx = x.to_vector<double>(), vw = w.to_vector<double>();
    const int64_t cols = l->out_features(), in_cols = l->in_features();
    std::vector<double> y(n * cols, 0.0);
    std::vector<int> seen(q, 0);
    for (int64_t i = 0; i < q; ++i) {
      const int32_t c = t.work[3 * i], begin = t.work[3 * i + 1], end = t.work[3 * i + 2];
      ++seen[c];
      if (i > 0) {
        EXPECT_LE(end - begin, t.work[3 * i - 1] - t.work[3 * i - 2]) << "longest first";
      }
      EXPECT_EQ(end - begin, l->col_ptr()[c + 1] - l->col_ptr()[c]) << "column " << c;
      for (int32_t e = begin; e < end; ++e) {
        const int64_t r = t.entries[5 * e];
        for (int g = 0; g < 4; ++g) {
          const int64_t k = t.entries[5 * e + 1 + g];
          ASSERT_EQ(l->block_row()[k], r);
          ASSERT_EQ(l->block_col()[k], c + g * q);
          for (int64_t s = 0; s < n; ++s)
            for (int64_t jj = 0; jj < bs; ++jj) {
              double dot = 0;
              for (int64_t ii = 0; ii < bs; ++ii) dot += vx[s * in_cols + r * bs + ii] * vw[(k * bs + ii) * bs + jj];
              y[s * cols + (c + g * q) * bs + jj] += dot;
            }
        }
      }
    }
    for (int64_t c = 0; c < q; ++c) EXPECT_EQ(seen[c], 1) << "column " << c;
    const std::vector<double> want = bsmm(x, w, l).to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-12) << l->str() << " element " << i;
  }
}

}  // namespace
}  // namespace tessera
