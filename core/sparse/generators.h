// Block-sparse layout generators and layout statistics.
//
//   LayoutPtr l = random_layout(/*C=*/1024, /*K=*/1024, /*bs=*/32, /*density=*/0.1, /*seed=*/7);
//   LayoutPtr g = barabasi_albert_layout(1024, 1024, 32, /*m=*/2, /*seed=*/7);
//   std::cout << layout_stats_str(layout_stats(*g)) << "\n";
//
// Every generator works on the block grid of a weight W [C, K]: R = C/bs block rows (inputs),
// Q = K/bs block columns (outputs), bs in {8, 16, 32, 64}. A bad block size is a ValueError,
// feature counts that are not positive multiples of bs (or a non-square grid for the graph
// generators) a ShapeError, any other bad argument a ValueError; every message names the
// generator and the bad value. Random generators are deterministic functions of their seed:
// they draw from Philox 4x32-10 (core/philox.h) through a Generator(seed), so the same seed
// gives the same layout on every platform.
//
// Graph generators (Barabási–Albert, Watts–Strogatz) read the square grid as the adjacency
// matrix of an undirected graph on N = R = Q nodes: block (i, j) is stored when i == j or
// nodes i and j are linked, so their masks are symmetric and contain the diagonal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/sparse/block_layout.h"

namespace tessera {

/// Every block stored (density 1).
LayoutPtr dense_layout(int64_t in_features, int64_t out_features, int64_t bs);

/// Exactly nnz = max(Q, round(density * R * Q)) blocks (capped at R * Q), so every output block
/// column keeps at least one block: each column first gets one block in a uniformly random row,
/// then the other nnz - Q blocks are drawn uniformly without replacement from the remaining
/// positions. density in (0, 1]; the realised density is above `density` only when
/// density < 1/R (where one block per column already exceeds it).
LayoutPtr random_layout(int64_t in_features, int64_t out_features, int64_t bs, double density, uint64_t seed);

/// Barabási–Albert preferential attachment on N nodes (square grid only), 1 <= m < N: node m
/// links to nodes 0..m-1, then each node v = m+1..N-1 links to m distinct earlier nodes, each
/// picked with probability proportional to its current degree. Symmetric, plus the diagonal.
LayoutPtr barabasi_albert_layout(int64_t in_features, int64_t out_features, int64_t bs, int64_t m, uint64_t seed);

/// Watts–Strogatz small world on N nodes (square grid only): a ring lattice linking each node to
/// its k nearest neighbours (k/2 on each side; k even, 2 <= k < N), then each lattice edge
/// (u, u+j), j = 1..k/2, is rewired with probability p in [0, 1] to (u, w) for a uniformly
/// random w that is neither u nor already linked to u (skipped when u is linked to all nodes).
/// The edge count stays N*k/2. p = 0 gives exactly the ring lattice. Symmetric, plus the diagonal.
LayoutPtr watts_strogatz_layout(int64_t in_features, int64_t out_features, int64_t bs, int64_t k, double p,
                                uint64_t seed);

/// Every output block column holds exactly b = blocks_per_col blocks (1 <= b <= R) and every input
/// block row the same count r = Q * b / R, which must be a whole number (ValueError otherwise).
/// Built as a regular pattern (column c holds rows (c*b + i) mod R, i < b), whose rows and
/// columns are then shuffled and mixed by 10 * nnz attempted checkerboard swaps
/// ((r1,c1),(r2,c2) -> (r1,c2),(r2,c1)), which keep every row and column count. On a square
/// grid (r == b) the result is a union of b permutation matrices with no block repeated.
LayoutPtr balanced_random_layout(int64_t in_features, int64_t out_features, int64_t bs, int64_t blocks_per_col,
                                 uint64_t seed);

/// BlockLayout::from_mask: a row-major R x Q mask, non-zero = stored.
LayoutPtr mask_layout(int64_t in_features, int64_t out_features, int64_t bs, const std::vector<uint8_t>& mask);

/// Summary of a layout. fan_in = stored blocks per output block column (the inputs a column
/// sums over), fan_out = stored blocks per input block row; empty_* count rows/columns with none.
///
/// mix_factor (in [0, 1]) measures how fast the layout spreads information between blocks:
///   - square grid (R == Q): density of the boolean product M·M, i.e. the fraction of (input
///     block, output block) pairs connected through two stacked layers with this layout;
///   - otherwise: density of the boolean product M·Mᵀ·M, i.e. the fraction of (input row,
///     output column) pairs joined by a path of length 1 or 3 in the bipartite block graph
///     (r -> c' -> r' -> c: r and c are linked through blocks sharing a row or a column).
/// It is 1 for a dense layout and for any layout that mixes everything in those hops.
struct LayoutStats {
  double density = 0;
  int64_t fan_in_min = 0, fan_in_max = 0;
  double fan_in_mean = 0;
  int64_t fan_out_min = 0, fan_out_max = 0;
  double fan_out_mean = 0;
  int64_t empty_rows = 0, empty_cols = 0;
  double mix_factor = 0;
};

LayoutStats layout_stats(const BlockLayout& l);

/// "density 0.250, fan-in 2..6 (mean 4.00), fan-out 3..5 (mean 4.00), empty rows 0, empty cols 0,
/// mix 0.812".
std::string layout_stats_str(const LayoutStats& s);

}  // namespace tessera
