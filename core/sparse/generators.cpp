#include "core/sparse/generators.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/philox.h"
#include "core/random.h"

namespace tessera {
namespace {

// Random words from Generator(seed): one Philox block (four 32-bit words) reserved at a time,
// consumed in order, so every draw is a pure function of (seed, draw position).
class BlockRng {
 public:
  explicit BlockRng(uint64_t seed) : gen_(seed) {}

  uint32_t next_u32() {
    if (used_ == 4) {
      buf_ = philox::block(gen_.seed(), gen_.reserve(1));
      used_ = 0;
    }
    return buf_.w[used_++];
  }
  uint64_t next_u64() {
    uint64_t hi = next_u32();
    return hi << 32 | next_u32();
  }
  /// Uniform in [0, 1) with 53 bits.
  double uniform() {
    uint32_t hi = next_u32();
    return philox::to_unit_f64(hi, next_u32());
  }
  /// Uniform integer in [0, n), n > 0, without modulo bias: reject the 2^64 mod n lowest values.
  int64_t below(int64_t n) {
    const uint64_t un = static_cast<uint64_t>(n), reject = (0 - un) % un;
    uint64_t x;
    do x = next_u64(); while (x < reject);
    return static_cast<int64_t>(x % un);
  }
  /// Fisher–Yates shuffle.
  template <class T> void shuffle(std::vector<T>& v) {
    for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) std::swap(v[i], v[below(i + 1)]);
  }

 private:
  Generator gen_;
  philox::Block buf_{};
  int used_ = 4;
};

struct Grid {
  int64_t rows, cols;
};

// Block size and feature counts, with errors naming the generator `gen`.
Grid check_grid(const char* gen, int64_t in_features, int64_t out_features, int64_t bs) {
  TS_CHECK(BlockLayout::valid_block_size(bs), ValueError,
           gen << ": block size " << bs << " is not one of 8, 16, 32, 64");
  TS_CHECK(in_features > 0 && in_features % bs == 0, ShapeError,
           gen << ": input features " << in_features << " must be a positive multiple of the block size " << bs);
  TS_CHECK(out_features > 0 && out_features % bs == 0, ShapeError,
           gen << ": output features " << out_features << " must be a positive multiple of the block size " << bs);
  return {in_features / bs, out_features / bs};
}

// Node count of a square block grid (graph generators).
int64_t check_square(const char* gen, int64_t in_features, int64_t out_features, int64_t bs) {
  Grid g = check_grid(gen, in_features, out_features, bs);
  TS_CHECK(g.rows == g.cols, ShapeError,
           gen << ": needs a square block grid (C == K), got C=" << in_features << ", K=" << out_features << " ("
               << g.rows << "x" << g.cols << " blocks of " << bs << ")");
  return g.rows;
}

// Undirected graph on n nodes (symmetric n x n adjacency) plus the diagonal, as a layout.
LayoutPtr graph_layout(int64_t n, int64_t bs, std::vector<uint8_t> adj) {
  for (int64_t i = 0; i < n; ++i) adj[i * n + i] = 1;
  return BlockLayout::from_mask(n * bs, n * bs, bs, adj);
}

int64_t popcount_words(const std::vector<uint64_t>& words) {
  int64_t n = 0;
  for (uint64_t w : words) n += __builtin_popcountll(w);
  return n;
}

}  // namespace

LayoutPtr dense_layout(int64_t in_features, int64_t out_features, int64_t bs) {
  Grid g = check_grid("dense_layout", in_features, out_features, bs);
  return BlockLayout::from_mask(in_features, out_features, bs, std::vector<uint8_t>(g.rows * g.cols, 1));
}

LayoutPtr random_layout(int64_t in_features, int64_t out_features, int64_t bs, double density, uint64_t seed) {
  Grid g = check_grid("random_layout", in_features, out_features, bs);
  TS_CHECK(density > 0.0 && density <= 1.0, ValueError,
           "random_layout: density " << density << " is outside (0, 1]");
  const int64_t total = g.rows * g.cols;
  const int64_t nnz = std::min(total, std::max(g.cols, static_cast<int64_t>(std::llround(density * total))));
  BlockRng rng(seed);
  std::vector<uint8_t> mask(total, 0);
  // One block per output column first, so no column is empty...
  for (int64_t c = 0; c < g.cols; ++c) mask[rng.below(g.rows) * g.cols + c] = 1;
  // ...then nnz - Q more, uniformly without replacement among the rest (partial Fisher–Yates).
  std::vector<int64_t> free_pos;
  free_pos.reserve(total - g.cols);
  for (int64_t i = 0; i < total; ++i)
    if (!mask[i]) free_pos.push_back(i);
  const int64_t n_free = static_cast<int64_t>(free_pos.size());
  for (int64_t i = 0; i < nnz - g.cols; ++i) {
    std::swap(free_pos[i], free_pos[i + rng.below(n_free - i)]);
    mask[free_pos[i]] = 1;
  }
  return BlockLayout::from_mask(in_features, out_features, bs, mask);
}

LayoutPtr barabasi_albert_layout(int64_t in_features, int64_t out_features, int64_t bs, int64_t m, uint64_t seed) {
  const int64_t n = check_square("barabasi_albert_layout", in_features, out_features, bs);
  TS_CHECK(m >= 1 && m < n, ValueError,
           "barabasi_albert_layout: m = " << m << " must be in [1, " << n << ") for a graph of " << n << " nodes");
  BlockRng rng(seed);
  std::vector<uint8_t> adj(n * n, 0);
  std::vector<int64_t> ends;  // both end nodes of every edge: a node appears degree times
  auto link = [&](int64_t a, int64_t b) {
    adj[a * n + b] = adj[b * n + a] = 1;
    ends.push_back(a);
    ends.push_back(b);
  };
  for (int64_t t = 0; t < m; ++t) link(m, t);
  std::vector<int64_t> targets;
  for (int64_t v = m + 1; v < n; ++v) {
    // m distinct earlier nodes, each draw proportional to degree (before v's own edges count).
    targets.clear();
    const int64_t n_ends = static_cast<int64_t>(ends.size());
    while (static_cast<int64_t>(targets.size()) < m) {
      int64_t t = ends[rng.below(n_ends)];
      if (std::find(targets.begin(), targets.end(), t) == targets.end()) targets.push_back(t);
    }
    for (int64_t t : targets) link(v, t);
  }
  return graph_layout(n, bs, std::move(adj));
}

LayoutPtr watts_strogatz_layout(int64_t in_features, int64_t out_features, int64_t bs, int64_t k, double p,
                                uint64_t seed) {
  const int64_t n = check_square("watts_strogatz_layout", in_features, out_features, bs);
  TS_CHECK(k >= 2 && k % 2 == 0 && k < n, ValueError,
           "watts_strogatz_layout: k = " << k << " must be even and in [2, " << n << ") for a ring of " << n
                                         << " nodes");
  TS_CHECK(p >= 0.0 && p <= 1.0, ValueError,
           "watts_strogatz_layout: rewiring probability p = " << p << " is outside [0, 1]");
  std::vector<uint8_t> adj(n * n, 0);
  std::vector<int64_t> degree(n, k);
  for (int64_t u = 0; u < n; ++u)
    for (int64_t j = 1; j <= k / 2; ++j) {
      const int64_t v = (u + j) % n;
      adj[u * n + v] = adj[v * n + u] = 1;
    }
  BlockRng rng(seed);
  // Lattice edges (u, u+j) are distinct (k < n) and each is visited once, before or after
  // other rewirings; a rewired edge never duplicates one that exists.
  for (int64_t j = 1; j <= k / 2; ++j)
    for (int64_t u = 0; u < n; ++u) {
      if (!(rng.uniform() < p) || degree[u] >= n - 1) continue;
      const int64_t v = (u + j) % n;
      int64_t w;
      do w = rng.below(n); while (w == u || adj[u * n + w]);
      adj[u * n + v] = adj[v * n + u] = 0;
      adj[u * n + w] = adj[w * n + u] = 1;
      --degree[v];
      ++degree[w];
    }
  return graph_layout(n, bs, std::move(adj));
}

LayoutPtr balanced_random_layout(int64_t in_features, int64_t out_features, int64_t bs, int64_t blocks_per_col,
                                 uint64_t seed) {
  Grid g = check_grid("balanced_random_layout", in_features, out_features, bs);
  const int64_t b = blocks_per_col;
  TS_CHECK(b >= 1 && b <= g.rows, ValueError,
           "balanced_random_layout: blocks_per_col = " << b << " must be in [1, " << g.rows
                                                       << "] (the block rows)");
  TS_CHECK((g.cols * b) % g.rows == 0, ValueError,
           "balanced_random_layout: " << g.cols << " block columns x " << b << " blocks = " << g.cols * b
                                      << " is not divisible by the " << g.rows
                                      << " block rows, so the rows cannot all hold the same count");
  BlockRng rng(seed);
  // Regular start: column c holds rows (c*b + i) mod R: b distinct rows, each row hit Q*b/R times;
  // rows and columns relabelled by random permutations.
  std::vector<int64_t> prow(g.rows), pcol(g.cols);
  for (int64_t i = 0; i < g.rows; ++i) prow[i] = i;
  for (int64_t i = 0; i < g.cols; ++i) pcol[i] = i;
  rng.shuffle(prow);
  rng.shuffle(pcol);
  std::vector<uint8_t> mask(g.rows * g.cols, 0);
  std::vector<std::pair<int64_t, int64_t>> blocks;  // (r, c) of every stored block
  for (int64_t c = 0; c < g.cols; ++c)
    for (int64_t i = 0; i < b; ++i) {
      const int64_t r = prow[(c * b + i) % g.rows], cc = pcol[c];
      mask[r * g.cols + cc] = 1;
      blocks.emplace_back(r, cc);
    }
  // Checkerboard swaps (r1,c1),(r2,c2) -> (r1,c2),(r2,c1) keep every row and column count.
  const int64_t nnz = static_cast<int64_t>(blocks.size());
  for (int64_t t = 0; t < 10 * nnz; ++t) {
    const int64_t i = rng.below(nnz), j = rng.below(nnz);
    const auto [r1, c1] = blocks[i];
    const auto [r2, c2] = blocks[j];
    if (r1 == r2 || c1 == c2 || mask[r1 * g.cols + c2] || mask[r2 * g.cols + c1]) continue;
    mask[r1 * g.cols + c1] = mask[r2 * g.cols + c2] = 0;
    mask[r1 * g.cols + c2] = mask[r2 * g.cols + c1] = 1;
    blocks[i] = {r1, c2};
    blocks[j] = {r2, c1};
  }
  return BlockLayout::from_mask(in_features, out_features, bs, mask);
}

LayoutPtr mask_layout(int64_t in_features, int64_t out_features, int64_t bs, const std::vector<uint8_t>& mask) {
  Grid g = check_grid("mask_layout", in_features, out_features, bs);
  TS_CHECK(static_cast<int64_t>(mask.size()) == g.rows * g.cols, ShapeError,
           "mask_layout: mask has " << mask.size() << " entries, a " << in_features << "x" << out_features
                                    << " weight with block size " << bs << " has " << g.rows << "x" << g.cols
                                    << " blocks");
  return BlockLayout::from_mask(in_features, out_features, bs, mask);
}

LayoutStats layout_stats(const BlockLayout& l) {
  const int64_t R = l.block_rows(), Q = l.block_cols(), nnz = l.nnz();
  LayoutStats s;
  s.density = l.density();
  auto count_range = [](const std::vector<int32_t>& ptr, int64_t& lo, int64_t& hi, int64_t& empty) {
    lo = ptr[1] - ptr[0];
    hi = lo;
    for (size_t i = 0; i + 1 < ptr.size(); ++i) {
      const int64_t n = ptr[i + 1] - ptr[i];
      lo = std::min(lo, n);
      hi = std::max(hi, n);
      empty += n == 0;
    }
  };
  count_range(l.col_ptr(), s.fan_in_min, s.fan_in_max, s.empty_cols);
  count_range(l.row_ptr(), s.fan_out_min, s.fan_out_max, s.empty_rows);
  s.fan_in_mean = static_cast<double>(nnz) / static_cast<double>(Q);
  s.fan_out_mean = static_cast<double>(nnz) / static_cast<double>(R);

  // Boolean products on bitset rows: row r of M is the set of columns c with block (r, c).
  const int64_t wq = (Q + 63) / 64, wr = (R + 63) / 64;
  std::vector<uint64_t> mrow(R * wq, 0);
  for (int64_t k = 0; k < nnz; ++k) {
    const int32_t r = l.block_row()[k], c = l.block_col()[k];
    mrow[r * wq + c / 64] |= 1ull << (c % 64);
  }
  // reach row r |= OR of the M rows listed in `src`.
  std::vector<uint64_t> reach(R * wq, 0);
  auto or_rows = [&](int64_t r, const std::vector<int64_t>& src) {
    for (int64_t s2 : src)
      for (int64_t w = 0; w < wq; ++w) reach[r * wq + w] |= mrow[s2 * wq + w];
  };
  std::vector<int64_t> src;
  if (R == Q) {
    // (M·M)[r, c] = OR_m M[r, m] & M[m, c]: the rows m are the columns of row r.
    for (int64_t r = 0; r < R; ++r) {
      src.clear();
      for (int32_t k = l.row_ptr()[r]; k < l.row_ptr()[r + 1]; ++k) src.push_back(l.block_col()[k]);
      or_rows(r, src);
    }
  } else {
    // (M·Mᵀ)[r, r'] = rows r and r' share a column;
    // (M·Mᵀ·M)[r, c] = OR_r' (M·Mᵀ)[r, r'] & M[r', c].
    std::vector<uint64_t> share(wr, 0);
    for (int64_t r = 0; r < R; ++r) {
      std::fill(share.begin(), share.end(), 0);
      for (int32_t k = l.row_ptr()[r]; k < l.row_ptr()[r + 1]; ++k) {
        const int32_t c = l.block_col()[k];
        for (int32_t i = l.col_ptr()[c]; i < l.col_ptr()[c + 1]; ++i) {
          const int32_t r2 = l.block_row()[l.col_blocks()[i]];
          share[r2 / 64] |= 1ull << (r2 % 64);
        }
      }
      src.clear();
      for (int64_t r2 = 0; r2 < R; ++r2)
        if (share[r2 / 64] >> (r2 % 64) & 1) src.push_back(r2);
      or_rows(r, src);
    }
  }
  s.mix_factor = static_cast<double>(popcount_words(reach)) / static_cast<double>(R * Q);
  return s;
}

std::string layout_stats_str(const LayoutStats& s) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "density " << s.density;
  os.precision(2);
  os << ", fan-in " << s.fan_in_min << ".." << s.fan_in_max << " (mean " << s.fan_in_mean << "), fan-out "
     << s.fan_out_min << ".." << s.fan_out_max << " (mean " << s.fan_out_mean << "), empty rows " << s.empty_rows
     << ", empty cols " << s.empty_cols;
  os.precision(3);
  os << ", mix " << s.mix_factor;
  return os.str();
}

}  // namespace tessera
