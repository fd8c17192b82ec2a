// BlockLayout: which bs×bs blocks of a weight W [C, K] are stored.
//
//   auto layout = BlockLayout::from_mask(/*in C=*/512, /*out K=*/1024, /*bs=*/32, mask);  // mask [C/bs * K/bs]
//   Tensor w = zeros({layout->nnz(), 32, 32});    // block k covers W[r*bs:(r+1)*bs, c*bs:(c+1)*bs]
//   Tensor y = bsmm(x, w, layout);                 // x [N, C] -> y [N, K]
//
// Block (r, c) (block row r < C/bs, block column c < K/bs) is stored when mask[r * (K/bs) + c]
// is set. Stored blocks are numbered k = 0..nnz-1 in row-major order (by r, then c): that is
// the order of W's [nnz, bs, bs] storage, of checkpoints and of the dW kernel's output. The
// look-up tables every kernel needs are built once here, on the host:
//   - forward (by output block column c): col_blocks[col_ptr[c] .. col_ptr[c+1]) lists the k
//     with block column c, by increasing r;
//   - dX (by input block row r): row_ptr[r] .. row_ptr[r+1] is the range of k in row r
//     (contiguous, since k is row-major);
//   - dW (the nonzero list): block_row[k], block_col[k].
// Layouts are immutable and shared (std::shared_ptr<const BlockLayout>): ops keep one in their
// attributes; the CUDA backend will upload the tables once per layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class BlockLayout {
 public:
  /// Block sizes the kernels support.
  static bool valid_block_size(int64_t bs) { return bs == 8 || bs == 16 || bs == 32 || bs == 64; }

  /// A layout for W [in_features, out_features] from a row-major block mask of
  /// (in_features/bs) × (out_features/bs) entries (non-zero = stored). ShapeError unless both
  /// feature counts are positive multiples of bs and the mask has that many entries;
  /// ValueError for an unsupported block size or an empty mask.
  static std::shared_ptr<const BlockLayout> from_mask(int64_t in_features, int64_t out_features, int64_t bs,
                                                      const std::vector<uint8_t>& mask);

  int64_t block_size() const { return bs_; }
  int64_t block_rows() const { return rows_; }  ///< C / bs
  int64_t block_cols() const { return cols_; }  ///< K / bs
  int64_t in_features() const { return rows_ * bs_; }
  int64_t out_features() const { return cols_ * bs_; }
  int64_t nnz() const { return static_cast<int64_t>(block_row_.size()); }
  /// All blocks of the grid, (C/bs)·(K/bs): a dense weight's block count.
  int64_t grid_blocks() const { return rows_ * cols_; }
  /// Stored blocks / all blocks.
  double density() const { return static_cast<double>(nnz()) / static_cast<double>(grid_blocks()); }
  /// Whether every block is stored (density 1): the weight is dense, held in block form.
  bool stores_every_block() const { return nnz() == grid_blocks(); }
  /// Index k of block (r, c), or -1 when it is not stored.
  int64_t block_index(int64_t r, int64_t c) const;
  bool has(int64_t r, int64_t c) const { return block_index(r, c) >= 0; }

  const std::vector<int32_t>& block_row() const { return block_row_; }
  const std::vector<int32_t>& block_col() const { return block_col_; }
  const std::vector<int32_t>& col_ptr() const { return col_ptr_; }        ///< [K/bs + 1]
  const std::vector<int32_t>& col_blocks() const { return col_blocks_; }  ///< [nnz]
  const std::vector<int32_t>& row_ptr() const { return row_ptr_; }        ///< [C/bs + 1]

  /// The block mask, row-major [C/bs * K/bs], 1 = stored.
  std::vector<uint8_t> mask() const;
  /// "BlockLayout(C=512, K=1024, bs=32, 123/512 blocks, density 0.240)".
  std::string str() const;
  bool operator==(const BlockLayout& o) const {
    return bs_ == o.bs_ && rows_ == o.rows_ && cols_ == o.cols_ && block_row_ == o.block_row_ &&
           block_col_ == o.block_col_;
  }

 private:
  BlockLayout() = default;
  int64_t bs_ = 0, rows_ = 0, cols_ = 0;
  std::vector<int32_t> block_row_, block_col_, col_ptr_, col_blocks_, row_ptr_;
  std::vector<int32_t> index_;  // [rows * cols]: k or -1
};

using LayoutPtr = std::shared_ptr<const BlockLayout>;

/// How many times a module has switched to another layout in this process (see
/// nn::BlockSparseLinear::set_layout). Layouts themselves never change; a module holding a new
/// one does. Compiled steps trace again when it moved since they traced, since their ops hold the
/// layouts they were traced with (so a step never keeps multiplying by a module's old layout).
uint64_t layout_generation();
/// Moves layout_generation() on; called by modules whenever they take another layout.
void advance_layout_generation();

}  // namespace tessera
