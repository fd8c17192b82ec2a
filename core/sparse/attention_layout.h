// AttentionLayout: which bs×bs (query block, key block) tiles of causal self-attention each
// head computes.
//
//   auto layout = AttentionLayout::local_window(/*T=*/1024, /*bs=*/32, /*heads=*/8, /*window_blocks=*/4);
//   Tensor o = block_attention(q, k, v, layout);   // q, k, v [B, 8, 1024, D]
//
// The sequence of T tokens is cut into nb = T/bs blocks. Per head h, a pattern over
// [nb query blocks, nb key blocks] says which tiles are computed: query block i attends to
// the tokens of the key blocks j listed for (h, i), and nothing else. Patterns are causal at
// block level (only j <= i may be kept) and every row keeps its diagonal block j = i, inside
// which the kernels apply the token-level causal mask (key position > query position is
// excluded); so every token attends at least to itself.
//
// Look-up tables (built once, CSR over the heads·nb rows (h, i) and columns (h, j)):
//   - by query row, for the forward and dQ kernels: key_blocks()[row_ptr()[h*nb+i] ..
//     row_ptr()[h*nb+i+1]) lists the key blocks j of (h, i), increasing (the diagonal last);
//   - by key column, for the dK/dV kernel: query_blocks()[col_ptr()[h*nb+j] ..
//     col_ptr()[h*nb+j+1]) lists the query blocks i that attend to (h, j), increasing.
//
// Generators (deterministic, no randomness), with i the query block and j <= i the key block:
//   dense_causal:  every j <= i.
//   local_window(w):  i − w < j <= i (the previous w−1 blocks and the block itself).
//   strided(s)  (Sparse Transformer "strided", Child et al. 2019, at block granularity; the
//       two factorized components merged into one pattern that every head uses):
//       local   i − s < j <= i,   strided   (i − j) mod s == 0.
//   fixed(s, c)  (Sparse Transformer "fixed", at block granularity; components merged):
//       local   floor(j/s) == floor(i/s)   (the blocks of i's own stride window, up to i),
//       summary j mod s in [s − (p+1)·c, s − p·c)  with p = h mod floor(s/c):
//       head 0 (p = 0) uses the last c blocks of every stride window as the paper's default;
//       as the paper recommends, further heads use distinct summary sub-blocks of c blocks
//       within the window (p = 1: the c blocks before those, ...), cycling after floor(s/c)
//       heads. Needs 1 <= c <= s; c == s gives dense causal.
//   from_masks: one row-major [nb * nb] block mask per head (non-zero = kept).
// Block sizes: 8, 16, 32, 64 and 128. A layout of 128-blocks is run by the CUDA kernels as its
// refinement into 64-blocks (refined64(): each kept 128-block (i, j) is the 64-blocks (2i + a,
// 2j + b), less (2i, 2i + 1) above the diagonal), the same token-level pattern.
// Layouts are immutable and shared (std::shared_ptr<const AttentionLayout>): ops keep one in
// their attributes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class AttentionLayout;
using AttentionLayoutPtr = std::shared_ptr<const AttentionLayout>;

class AttentionLayout {
 public:
  /// Every causal block: the all-blocks layout (dense causal attention).
  static AttentionLayoutPtr dense_causal(int64_t T, int64_t bs, int64_t heads);
  /// Each query block sees the previous window_blocks − 1 key blocks and itself.
  static AttentionLayoutPtr local_window(int64_t T, int64_t bs, int64_t heads, int64_t window_blocks);
  /// Sparse Transformer "fixed" pattern (see the file comment for the exact definition).
  static AttentionLayoutPtr fixed(int64_t T, int64_t bs, int64_t heads, int64_t stride_blocks,
                                  int64_t summary_blocks);
  /// Sparse Transformer "strided" pattern (see the file comment for the exact definition).
  static AttentionLayoutPtr strided(int64_t T, int64_t bs, int64_t heads, int64_t stride_blocks);
  /// One row-major [T/bs * T/bs] block mask per head. ValueError for a kept block above the
  /// diagonal or a row without its diagonal block; ShapeError for a mask of the wrong size.
  static AttentionLayoutPtr from_masks(int64_t T, int64_t bs, const std::vector<std::vector<uint8_t>>& masks);

  int64_t seq_len() const { return nb_ * bs_; }  ///< T
  int64_t block_size() const { return bs_; }
  int64_t blocks() const { return nb_; }  ///< nb = T / bs
  int64_t heads() const { return heads_; }
  /// Kept blocks over all heads.
  int64_t nnz() const { return static_cast<int64_t>(key_blocks_.size()); }
  /// Kept blocks of head h.
  int64_t nnz(int64_t h) const { return row_ptr_[(h + 1) * nb_] - row_ptr_[h * nb_]; }
  /// Whether head h's query block i attends to key block j.
  bool has(int64_t h, int64_t i, int64_t j) const;
  /// Causal blocks over all heads, heads · nb(nb+1)/2: the blocks of dense causal attention (the
  /// lower triangle of the block grid, diagonal included), the most a layout can keep.
  int64_t causal_blocks() const { return heads_ * nb_ * (nb_ + 1) / 2; }
  /// Kept blocks / causal blocks (heads · nb(nb+1)/2): 1 for dense_causal.
  double density() const;
  /// Whether every causal block of every head is kept, i.e. the layout is dense causal attention
  /// whatever its kind says (e.g. strided(s) with s >= nb, or any kind with nb = 1). Layouts
  /// keep causal blocks only, so nnz() == causal_blocks() means the mask equals dense_causal's.
  bool keeps_every_causal_block() const { return nnz() == causal_blocks(); }

  const std::vector<int32_t>& row_ptr() const { return row_ptr_; }            ///< [heads*nb + 1]
  const std::vector<int32_t>& key_blocks() const { return key_blocks_; }      ///< [nnz]
  const std::vector<int32_t>& col_ptr() const { return col_ptr_; }            ///< [heads*nb + 1]
  const std::vector<int32_t>& query_blocks() const { return query_blocks_; }  ///< [nnz]

  /// Head h's block mask, row-major [nb * nb], 1 = kept.
  std::vector<uint8_t> mask(int64_t h) const;
  /// The generator and its arguments, e.g. "local_window(window_blocks=4)".
  const std::string& kind() const { return kind_; }
  /// "AttentionLayout(local_window(window_blocks=4), T=1024, bs=32, heads=8, 32x32 blocks,
  ///  1012/4224 causal blocks, density 0.240)".
  std::string str() const;
  /// Whether bs is an attention block size: 8, 16, 32, 64 or 128.
  static bool valid_block_size(int64_t bs) { return bs == 8 || bs == 16 || bs == 32 || bs == 64 || bs == 128; }
  /// For a layout of 128-blocks, the same token-level pattern in 64-blocks (what the CUDA kernels
  /// run); nullptr for other block sizes.
  const AttentionLayoutPtr& refined64() const { return refined64_; }
  /// Same geometry and kept blocks (the kind string is not compared).
  bool operator==(const AttentionLayout& o) const {
    return bs_ == o.bs_ && nb_ == o.nb_ && heads_ == o.heads_ && row_ptr_ == o.row_ptr_ &&
           key_blocks_ == o.key_blocks_;
  }

 private:
  AttentionLayout() = default;
  // Validates the masks (causal, diagonal kept) and builds the tables; `who` names the
  // generator in error messages.
  static AttentionLayoutPtr build(const char* who, std::string kind, int64_t T, int64_t bs,
                                  const std::vector<std::vector<uint8_t>>& masks);

  int64_t bs_ = 0, nb_ = 0, heads_ = 0;
  std::string kind_;
  std::vector<int32_t> row_ptr_, key_blocks_, col_ptr_, query_blocks_;
  AttentionLayoutPtr refined64_;  // bs 128 only
};

}  // namespace tessera
