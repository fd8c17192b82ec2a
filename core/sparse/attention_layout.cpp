#include "core/sparse/attention_layout.h"

#include <limits>
#include <sstream>

#include "core/error.h"

namespace tessera {

namespace {

// Block size and sequence length, shared by every generator; returns nb = T / bs.
int64_t check_geometry(const char* who, int64_t T, int64_t bs) {
  TS_CHECK(AttentionLayout::valid_block_size(bs), ValueError,
           "AttentionLayout::" << who << ": block size bs=" << bs << " is not one of 8, 16, 32, 64, 128");
  TS_CHECK(T > 0 && T % bs == 0, ShapeError,
           "AttentionLayout::" << who << ": sequence length T=" << T
                               << " must be a positive multiple of the block size bs=" << bs);
  return T / bs;
}

void check_heads(const char* who, int64_t heads) {
  TS_CHECK(heads >= 1, ValueError, "AttentionLayout::" << who << ": heads must be >= 1, got " << heads);
}

// Masks of `heads` heads from keep(h, i, j), evaluated for the causal blocks j <= i only.
template <class Keep>
std::vector<std::vector<uint8_t>> make_masks(int64_t nb, int64_t heads, Keep keep) {
  std::vector<std::vector<uint8_t>> masks(heads, std::vector<uint8_t>(nb * nb, 0));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j <= i; ++j) masks[h][i * nb + j] = keep(h, i, j) ? 1 : 0;
  return masks;
}

}  // namespace

AttentionLayoutPtr AttentionLayout::dense_causal(int64_t T, int64_t bs, int64_t heads) {
  const int64_t nb = check_geometry("dense_causal", T, bs);
  check_heads("dense_causal", heads);
  return build("dense_causal", "dense_causal", T, bs,
               make_masks(nb, heads, [](int64_t, int64_t, int64_t) { return true; }));
}

AttentionLayoutPtr AttentionLayout::local_window(int64_t T, int64_t bs, int64_t heads, int64_t window_blocks) {
  const int64_t nb = check_geometry("local_window", T, bs);
  check_heads("local_window", heads);
  TS_CHECK(window_blocks >= 1, ValueError,
           "AttentionLayout::local_window: window_blocks must be >= 1, got " << window_blocks);
  // i − w < j <= i
  auto keep = [=](int64_t, int64_t i, int64_t j) { return i - j < window_blocks; };
  return build("local_window", "local_window(window_blocks=" + std::to_string(window_blocks) + ")", T, bs,
               make_masks(nb, heads, keep));
}

AttentionLayoutPtr AttentionLayout::strided(int64_t T, int64_t bs, int64_t heads, int64_t stride_blocks) {
  const int64_t nb = check_geometry("strided", T, bs);
  check_heads("strided", heads);
  const int64_t s = stride_blocks;
  TS_CHECK(s >= 1, ValueError, "AttentionLayout::strided: stride_blocks must be >= 1, got " << s);
  // local: i − s < j <= i;  strided: (i − j) mod s == 0. Every head: the union.
  auto keep = [=](int64_t, int64_t i, int64_t j) { return i - j < s || (i - j) % s == 0; };
  return build("strided", "strided(stride_blocks=" + std::to_string(s) + ")", T, bs,
               make_masks(nb, heads, keep));
}

AttentionLayoutPtr AttentionLayout::fixed(int64_t T, int64_t bs, int64_t heads, int64_t stride_blocks,
                                          int64_t summary_blocks) {
  const int64_t nb = check_geometry("fixed", T, bs);
  check_heads("fixed", heads);
  const int64_t s = stride_blocks, c = summary_blocks;
  TS_CHECK(s >= 1, ValueError, "AttentionLayout::fixed: stride_blocks must be >= 1, got " << s);
  TS_CHECK(c >= 1 && c <= s, ValueError,
           "AttentionLayout::fixed: summary_blocks must be in [1, stride_blocks=" << s << "], got " << c);
  const int64_t patterns = s / c;  // distinct summary sub-blocks inside a stride window
  // local: floor(j/s) == floor(i/s);  summary: j mod s in [s − (p+1)c, s − pc), p = h mod (s/c).
  auto keep = [=](int64_t h, int64_t i, int64_t j) {
    const int64_t p = h % patterns, r = j % s;
    return j / s == i / s || (r >= s - (p + 1) * c && r < s - p * c);
  };
  return build("fixed",
               "fixed(stride_blocks=" + std::to_string(s) + ", summary_blocks=" + std::to_string(c) + ")", T,
               bs, make_masks(nb, heads, keep));
}

AttentionLayoutPtr AttentionLayout::from_masks(int64_t T, int64_t bs,
                                               const std::vector<std::vector<uint8_t>>& masks) {
  check_geometry("from_masks", T, bs);
  TS_CHECK(!masks.empty(), ValueError, "AttentionLayout::from_masks: no masks given (one per head needed)");
  return build("from_masks", "from_masks", T, bs, masks);
}

AttentionLayoutPtr AttentionLayout::build(const char* who, std::string kind, int64_t T, int64_t bs,
                                          const std::vector<std::vector<uint8_t>>& masks) {
  const int64_t nb = T / bs, heads = static_cast<int64_t>(masks.size());
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<uint8_t>& m = masks[h];
    TS_CHECK(static_cast<int64_t>(m.size()) == nb * nb, ShapeError,
             "AttentionLayout::" << who << ": mask of head " << h << " has " << m.size() << " entries, T=" << T
                                 << " with bs=" << bs << " needs " << nb << "x" << nb << " = " << nb * nb);
    for (int64_t i = 0; i < nb; ++i) {
      for (int64_t j = i + 1; j < nb; ++j)
        TS_CHECK(!m[i * nb + j], ValueError,
                 "AttentionLayout::"
                     << who << ": head " << h << " keeps block (query " << i << ", key " << j
                     << ") above the diagonal; attention layouts are causal (key block <= query block)");
      TS_CHECK(m[i * nb + i], ValueError,
               "AttentionLayout::" << who << ": head " << h << ", query block " << i
                                   << " does not keep its diagonal block (" << i << ", " << i << ")");
    }
  }
  TS_CHECK(heads * nb * (nb + 1) / 2 < std::numeric_limits<int32_t>::max(), ValueError,
           "AttentionLayout::" << who << ": " << heads << " heads of " << nb << "x" << nb
                               << " blocks overflow the 32-bit look-up tables");
  auto l = std::shared_ptr<AttentionLayout>(new AttentionLayout());
  l->bs_ = bs;
  l->nb_ = nb;
  l->heads_ = heads;
  l->kind_ = std::move(kind);
  // By query row (h, i): key blocks increasing.
  l->row_ptr_.assign(heads * nb + 1, 0);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < nb; ++i) {
      for (int64_t j = 0; j <= i; ++j)
        if (masks[h][i * nb + j]) l->key_blocks_.push_back(static_cast<int32_t>(j));
      l->row_ptr_[h * nb + i + 1] = static_cast<int32_t>(l->key_blocks_.size());
    }
  // By key column (h, j): query blocks increasing.
  l->col_ptr_.assign(heads * nb + 1, 0);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < nb; ++j) {
      for (int64_t i = j; i < nb; ++i)
        if (masks[h][i * nb + j]) l->query_blocks_.push_back(static_cast<int32_t>(i));
      l->col_ptr_[h * nb + j + 1] = static_cast<int32_t>(l->query_blocks_.size());
    }
  if (bs == 128) {  // the 64-block refinement the CUDA kernels run
    const int64_t n2 = 2 * nb;
    std::vector<std::vector<uint8_t>> fine(heads, std::vector<uint8_t>(n2 * n2, 0));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < nb; ++i)
        for (int64_t j = 0; j <= i; ++j)
          if (masks[h][i * nb + j])
            for (int64_t a = 0; a < 2; ++a)
              for (int64_t b = 0; b < 2; ++b)
                if (2 * j + b <= 2 * i + a) fine[h][(2 * i + a) * n2 + 2 * j + b] = 1;
    l->refined64_ = build(who, l->kind_ + " in 64-blocks", T, 64, fine);
  }
  return l;
}

bool AttentionLayout::has(int64_t h, int64_t i, int64_t j) const {
  if (h < 0 || h >= heads_ || i < 0 || i >= nb_ || j < 0 || j > i) return false;
  for (int32_t p = row_ptr_[h * nb_ + i]; p < row_ptr_[h * nb_ + i + 1]; ++p)
    if (key_blocks_[p] == j) return true;
  return false;
}

double AttentionLayout::density() const {
  return static_cast<double>(nnz()) / static_cast<double>(causal_blocks());
}

std::vector<uint8_t> AttentionLayout::mask(int64_t h) const {
  TS_CHECK(h >= 0 && h < heads_, ValueError,
           "AttentionLayout::mask: head " << h << " out of range [0, " << heads_ << ")");
  std::vector<uint8_t> m(nb_ * nb_, 0);
  for (int64_t i = 0; i < nb_; ++i)
    for (int32_t p = row_ptr_[h * nb_ + i]; p < row_ptr_[h * nb_ + i + 1]; ++p) m[i * nb_ + key_blocks_[p]] = 1;
  return m;
}

std::string AttentionLayout::str() const {
  std::ostringstream os;
  os << "AttentionLayout(" << kind_ << ", T=" << seq_len() << ", bs=" << bs_ << ", heads=" << heads_ << ", "
     << nb_ << "x" << nb_ << " blocks, " << nnz() << "/" << causal_blocks()
     << " causal blocks, density ";
  os.precision(3);
  os << std::fixed << density() << ")";
  return os.str();
}

}  // namespace tessera
