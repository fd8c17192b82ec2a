#include "core/sparse/block_layout.h"

#include <atomic>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace tessera {

namespace {
std::atomic<uint64_t> g_layout_generation{0};
}  // namespace

uint64_t layout_generation() { return g_layout_generation.load(std::memory_order_acquire); }
void advance_layout_generation() { g_layout_generation.fetch_add(1, std::memory_order_acq_rel); }

std::shared_ptr<const BlockLayout> BlockLayout::from_mask(int64_t in_features, int64_t out_features, int64_t bs,
                                                          const std::vector<uint8_t>& mask) {
  TS_CHECK(valid_block_size(bs), ValueError, "BlockLayout: block size " << bs << " is not one of 8, 16, 32, 64");
  TS_CHECK(in_features > 0 && in_features % bs == 0, ShapeError,
           "BlockLayout: input features " << in_features << " must be a positive multiple of the block size " << bs);
  TS_CHECK(out_features > 0 && out_features % bs == 0, ShapeError,
           "BlockLayout: output features " << out_features << " must be a positive multiple of the block size " << bs);
  const int64_t rows = in_features / bs, cols = out_features / bs;
  TS_CHECK(rows * cols <= std::numeric_limits<int32_t>::max(), ShapeError,
           "BlockLayout: " << rows << "x" << cols << " blocks exceed the 32-bit block index tables");
  TS_CHECK(static_cast<int64_t>(mask.size()) == rows * cols, ShapeError,
           "BlockLayout: mask has " << mask.size() << " entries, a " << in_features << "x" << out_features
                                    << " weight with block size " << bs << " has " << rows << "x" << cols << " blocks");
  auto l = std::shared_ptr<BlockLayout>(new BlockLayout());
  l->bs_ = bs;
  l->rows_ = rows;
  l->cols_ = cols;
  l->index_.assign(rows * cols, -1);
  l->row_ptr_.assign(rows + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!mask[r * cols + c]) continue;
      l->index_[r * cols + c] = static_cast<int32_t>(l->block_row_.size());
      l->block_row_.push_back(static_cast<int32_t>(r));
      l->block_col_.push_back(static_cast<int32_t>(c));
    }
    l->row_ptr_[r + 1] = static_cast<int32_t>(l->block_row_.size());
  }
  TS_CHECK(!l->block_row_.empty(), ValueError,
           "BlockLayout: the mask of a " << in_features << "x" << out_features << " weight stores no block");
  // Forward table: blocks grouped by output column, rows increasing within a column.
  l->col_ptr_.assign(cols + 1, 0);
  for (int32_t c : l->block_col_) ++l->col_ptr_[c + 1];
  for (int64_t c = 0; c < cols; ++c) l->col_ptr_[c + 1] += l->col_ptr_[c];
  l->col_blocks_.resize(l->block_row_.size());
  std::vector<int32_t> fill(l->col_ptr_.begin(), l->col_ptr_.end() - 1);
  for (size_t k = 0; k < l->block_row_.size(); ++k) l->col_blocks_[fill[l->block_col_[k]]++] = static_cast<int32_t>(k);
  return l;
}

int64_t BlockLayout::block_index(int64_t r, int64_t c) const {
  if (r < 0 || r >= rows_ || c < 0 || c >= cols_) return -1;
  return index_[r * cols_ + c];
}

std::vector<uint8_t> BlockLayout::mask() const {
  std::vector<uint8_t> m(rows_ * cols_, 0);
  for (size_t k = 0; k < block_row_.size(); ++k) m[block_row_[k] * cols_ + block_col_[k]] = 1;
  return m;
}

std::string BlockLayout::str() const {
  std::ostringstream os;
  os << "BlockLayout(C=" << in_features() << ", K=" << out_features() << ", bs=" << bs_ << ", " << nnz() << "/"
     << rows_ * cols_ << " blocks, density ";
  os.precision(3);
  os << std::fixed << density() << ")";
  return os.str();
}

}  // namespace tessera
