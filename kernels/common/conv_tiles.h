// The output tiles of the tensor-core convolution kernels (bsmm_sm90_gather.cu and
// bsmm_sm90_gradient.cu in conv mode, the halo kernels bsconv_sm90_halo.cu and bsconv_sm90_dw_halo.cu),
// shared by the host that plans them, the kernels that walk them and a CPU test that replays the
// walk (tests/kernels/bsconv_tiles_test.cpp).
//
// A stride-1 block-sparse convolution is a block-sparse product whose A strips are shifted boxes
// of the input: output rows are the positions (n, o) of one tile, a box of `box` positions over
// the axes (innermost spatial first, batch last), and for tap t the A strip is the same box of
// A's positions moved by the tap's offset; the bulk tensor copy (TMA) of a 5-D tensor map
// [N, s0, s1, s2, channels] fills what lies outside A with zeros, which is the padding. So
//
//   forward: out = y over the output sizes, A = x over the input sizes,
//            a = o − pad_lo + k·dilation                       (per spatial axis, k the tap's index)
//   dx:      out = dx over the input sizes, A = dy over the output sizes,
//            a = i + pad_lo − k·dilation                       (the transposed convolution)
//   dW:      rows = the output positions (dY's boxes), A = x as in the forward.
//
// Positions outside `ext` within a tile are never stored (the copies of the out-of-range part
// of a box read zeros, the TMA store clips). Tile extents are powers of two whose product is
// the kernel's rows per tile; for two consumer warpgroups the outermost axis with more than one
// position is halved, so that each warpgroup's rows are a box of their own to store.
#pragma once

#include <cstdint>

#include "kernels/common/conv_index.h"

namespace tessera {

struct ConvTiles {
  static constexpr int kAxes = 4;  ///< spatial innermost first (unused ones of size 1), then the batch
  int32_t ext[kAxes];              ///< the product's output positions per axis
  int32_t a_ext[kAxes];            ///< A's positions per axis
  int32_t box[kAxes];              ///< one tile's positions per axis (their product: the rows per tile)
  int32_t tiles[kAxes];            ///< tiles per axis: ceil(ext / box)
  int32_t total_tiles;
  int32_t split;                   ///< the axis halved per consumer warpgroup (of two)
  int32_t taps;
  int32_t kernel[3];               ///< taps per spatial axis (innermost first)
  int32_t off_base[3], off_step[3];///< A's coordinate = out coordinate + off_base + k·off_step
  /// The halo box: the positions of A that any tap of a tile reads, box + (kernel − 1)·|off_step|
  /// per spatial axis (the kernel in halo mode copies it once per block and reads every tap's
  /// rows from it); its first position is the tile's origin + halo_lo.
  int32_t halo[kAxes];
  int32_t halo_lo[3];

  /// The first position (per axis) of tile mt.
  TS_CONV_HD void origin(int64_t mt, int32_t (&c)[kAxes]) const {
    for (int a = 0; a < kAxes; ++a) {
      c[a] = static_cast<int32_t>(mt % tiles[a]) * box[a];
      mt /= tiles[a];
    }
  }
  /// Moves c from the origin of tile mt to that of tile mt + 1 (an odometer over the axes,
  /// innermost first, as origin numbers the tiles): no division, for the kernels' per-tile steps.
  TS_CONV_HD void next_origin(int32_t (&c)[kAxes]) const {
    for (int a = 0; a < kAxes; ++a) {
      c[a] += box[a];
      if (c[a] < tiles[a] * box[a]) return;
      c[a] = 0;
    }
  }
  /// How far A's box for tap t lies from its tile's origin, per axis (the batch axis: 0).
  TS_CONV_HD void tap_offset(int32_t t, int32_t (&d)[kAxes]) const {
    for (int a = 0; a < 3; ++a) {
      const int32_t k = t % kernel[a];
      t /= kernel[a];
      d[a] = off_base[a] + k * off_step[a];
    }
    d[3] = 0;
  }
  /// The first position of A's box for tap t of tile mt (spatial coordinates may be negative or
  /// past A's end: the copy reads zeros there): origin(mt) + tap_offset(t).
  TS_CONV_HD void a_origin(int64_t mt, int32_t t, int32_t (&c)[kAxes]) const {
    origin(mt, c);
    int32_t d[kAxes];
    tap_offset(t, d);
    for (int a = 0; a < kAxes; ++a) c[a] += d[a];
  }
  /// The first position of tile mt's halo box.
  TS_CONV_HD void halo_origin(int64_t mt, int32_t (&c)[kAxes]) const {
    origin(mt, c);
    for (int a = 0; a < 3; ++a) c[a] += halo_lo[a];
  }
  /// The row of the halo box (rows numbered innermost axis first) that tile row r reads at tap 0's
  /// corner: halo_row(r) + tap_rows(t) is the row it reads at tap t.
  TS_CONV_HD int32_t halo_row(int32_t r) const {
    int32_t row = 0, pitch = 1;
    for (int a = 0; a < kAxes; ++a) {
      row += (r % box[a]) * pitch;
      r /= box[a];
      pitch *= halo[a];
    }
    return row;
  }
  TS_CONV_HD int32_t tap_rows(int32_t t) const {
    int32_t row = 0, pitch = 1;
    for (int a = 0; a < 3; ++a) {
      const int32_t k = t % kernel[a];
      t /= kernel[a];
      row += (off_base[a] + k * off_step[a] - halo_lo[a]) * pitch;
      pitch *= halo[a];
    }
    return row;
  }
  /// Rows of the halo box.
  TS_CONV_HD int32_t halo_rows() const { return halo[0] * halo[1] * halo[2] * halo[3]; }
  /// Whether each halo extent fits one TMA box (at most 256 positions).
  TS_CONV_HD bool halo_fits() const { return halo[0] <= 256 && halo[1] <= 256 && halo[2] <= 256; }

  /// The box that consumer warpgroup wg of `groups` (1 or 2) stores: its first position and extents.
  TS_CONV_HD void store_box(int64_t mt, int wg, int groups, int32_t (&c)[kAxes], int32_t (&extent)[kAxes]) const {
    origin(mt, c);
    for (int a = 0; a < kAxes; ++a) {  // no indexing by `split`: the arrays stay in registers
      const bool halved = groups == 2 && a == split;
      extent[a] = halved ? box[a] / 2 : box[a];
      if (halved) c[a] += wg * extent[a];
    }
  }
};

/// The byte offset of 16-byte chunk `chunk` of row `row` in a box that the bulk tensor copy wrote
/// with the swizzle of its row length (128, 64 or 32 bytes; 16: none) into 1024-aligned shared
/// memory: chunk bits [4, 7) XOR row-address bits [7, 10), as many as the row has chunks.
TS_CONV_HD int swizzled_offset(int row, int chunk, int row_bytes) {
  const int byte = row * row_bytes + chunk * 16;
  return byte ^ (((byte >> 7) & (row_bytes / 16 - 1)) << 4);
}

/// The same lane's offset at k16 slice kk of the row, from its offset at slice 0 (chunk 0 or 1):
/// chunk c + 2·kk = c | 2·kk, and the swizzle XORs the chunk with row bits, so the offset is
/// off0 XOR 32·kk (rows of 2·kk + 2 chunks or more: every slice of a block's row).
TS_CONV_HD int swizzled_slice(int off0, int kk) { return off0 ^ (32 * kk); }

/// The halo kernels' ldmatrix x4 lanes (an A fragment of 16 rows × 16 columns per warp: a0 rows
/// 0-7 / columns 0-7, a1 rows 8-15, a2 columns 8-15, a3 both, the lanes 8j .. 8j + 7 giving the
/// addresses of matrix j's rows):
///   bsconv / bsconv_dx (rows = tile positions, columns = channels k16 slice kk): lane l reads
///   position row l % 16 of the warp's rows at chunk 2·kk + l / 16;
///   bsconv_dw, transposing (rows = the warp's 16 channels from c0, columns = positions of a k16
///   slice): lane l reads position 8·(l / 16) + l % 8 of the slice at chunk c0 / 8 + (l / 8) % 2.
TS_CONV_HD void halo_a_lane(int lane, int kk, int& row, int& chunk) {
  row = lane % 16;
  chunk = 2 * kk + lane / 16;
}
TS_CONV_HD void halo_at_lane(int lane, int c0, int& position, int& chunk) {
  position = 8 * (lane / 16) + lane % 8;
  chunk = c0 / 8 + (lane / 8) % 2;
}

namespace conv_tiles_detail {
inline int32_t pow2_at_least(int64_t v, int32_t cap) {
  int32_t p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

/// The box of `rows` positions whose extents, innermost axis first, are the smallest powers of two
/// that cover ext's (or what is left of the rows): fewest_positions' start, and what it is measured against.
inline void innermost_first(const int32_t (&ext)[4], int32_t rows, int32_t (&box)[4]) {
  int32_t left = rows;
  for (int a = 0; a < 3; ++a) {
    box[a] = pow2_at_least(ext[a], left);
    left /= box[a];
  }
  box[3] = left;
}

/// Replaces `box` (powers of two over ext's 4 axes, product `rows`) by the one whose tiles cover
/// ext with the fewest positions, Π ceil(ext / box)·box, or with `halo_weight` the least
/// positions × (1 + halo rows / (2·rows)), each covered position charged half its share of the
/// halo box; ties go to the smaller halo box, Π (box + reach) over the spatial axes times the batch
/// box, then to the larger innermost extent. Every extent stays within one copy's 256 positions,
/// and the halo's do where the given box's did (no such box: `box` stays).
inline void fewest_positions(const int32_t (&ext)[4], const int32_t (&reach)[3], int32_t rows, bool halo_weight,
                             int32_t (&box)[4]) {
  auto covered = [&](const int32_t (&b)[4]) {
    int64_t n = 1;
    for (int a = 0; a < 4; ++a) n *= (ext[a] + b[a] - 1) / b[a] * static_cast<int64_t>(b[a]);
    return n;
  };
  auto halo = [&](const int32_t (&b)[4]) {
    int64_t n = b[3];
    for (int a = 0; a < 3; ++a) n *= b[a] + reach[a];
    return n;
  };
  auto halo_fits = [&](const int32_t (&b)[4]) {
    for (int a = 0; a < 3; ++a)
      if (b[a] + reach[a] > 256) return false;
    return true;
  };
  const bool need_fit = halo_fits(box);
  int32_t best[4] = {}, b[4];
  int64_t best_cost = -1, best_halo = 0;  // best_cost < 0: none found yet
  for (b[0] = 1; b[0] <= rows; b[0] *= 2)
    for (b[1] = 1; b[0] * b[1] <= rows; b[1] *= 2)
      for (b[2] = 1; b[0] * b[1] * b[2] <= rows; b[2] *= 2) {
        b[3] = rows / (b[0] * b[1] * b[2]);
        if (b[0] > 256 || b[1] > 256 || b[2] > 256 || b[3] > 256 || (need_fit && !halo_fits(b))) continue;
        const int64_t h = halo(b), c = halo_weight ? covered(b) * (2 * rows + h) : covered(b);
        const bool better = best_cost < 0 || c < best_cost ||
                            (c == best_cost && (h < best_halo || (h == best_halo && b[0] > best[0])));
        if (!better) continue;
        for (int a = 0; a < 4; ++a) best[a] = b[a];
        best_cost = c;
        best_halo = h;
      }
  if (best_cost >= 0)
    for (int a = 0; a < 4; ++a) box[a] = best[a];
}

/// The strip forms' box (strip_row; the dW's strips): x ∈ {min_x .. 16} (powers of two, min_x 4 or 8),
/// y ∈ {4, 8, 16}, one position on axis 2, the rest samples (at least two at 512 rows); of those the least
/// covered positions × (2·rows + halo rows), as the halo rule charges them (ties: the smaller halo box,
/// then the larger x).
inline void strip_box(const int32_t (&ext)[4], const int32_t (&reach)[3], int32_t rows, int32_t min_x,
                      int32_t (&box)[4]) {
  int64_t best_cost = -1, best_halo = 0;
  for (int32_t x = 16; x >= min_x; x /= 2)
    for (int32_t y = 4; y <= 16; y *= 2) {
      const int32_t b[4] = {x, y, 1, rows / (x * y)};
      int64_t covered = 1;
      for (int a = 0; a < 4; ++a) covered *= (ext[a] + b[a] - 1) / b[a] * static_cast<int64_t>(b[a]);
      const int64_t halo = static_cast<int64_t>(x + reach[0]) * (y + reach[1]) * (1 + reach[2]) * b[3];
      const int64_t cost = covered * (2 * rows + halo);
      if (best_cost >= 0 && (cost > best_cost || (cost == best_cost && halo >= best_halo))) continue;
      for (int a = 0; a < 4; ++a) box[a] = b[a];
      best_cost = cost;
      best_halo = halo;
    }
}
}  // namespace conv_tiles_detail

/// Whether the strip forms' boxes can shape `rows`-row tiles over ext: 512 rows for the halo kernel's
/// (two consumer warpgroups of four m64 tiles), 256 for the dW's (four strips of 64 positions), and at
/// most two spatial axes (a sample's positions a plane).
TS_CONV_HD bool strip_tiles_apply(const int32_t (&ext)[4], int32_t rows) { return rows == 512 && ext[2] == 1; }
TS_CONV_HD bool strip_dw_tiles_apply(const int32_t (&ext)[4], int32_t rows) { return rows == 256 && ext[2] == 1; }

/// The strip form of the halo kernel (bsconv_sm90_halo.cu's kStrip, the default at bs 32: 512-row tiles of a
/// 3x3 filter with dilation 1; docs/convolution.md, "the strip form"). Its tiles' boxes are TileBoxes::strip's,
/// X × Y × 1 × samples (X, Y ∈ {4, 8, 16}); consumer warpgroup c's rows are samples c·S/2 .. (S samples,
/// axis 3 halved as ConvTiles::split does), and in it warp w's m64 tile mi and lane row r (0..15) hold
///
///   x = r % X,   y = 4·(w % A) + mi,   sample = c·S/2 + (w / A)·(16 / X) + r / X,     A = Y / 4,
///
/// so that a warp's four m64 tiles are four consecutive image rows of the same 16 positions. Tap
/// (dy, dx) of tile mi then reads the halo rows of tile mi + dy at column offset dx: a warp's A
/// fragments for the 12 (mi, dy) pairs of one dx are 6 (rows f = mi + dy, 0..5), and each fragment
/// loaded serves two wgmmas on average instead of one. That halves the A bytes each wgmma reads from
/// shared memory at bs 32 (2 KB of A and 1 KB of B per m64n32k16, 24 cycles of shared memory against
/// 16 of tensor work, become 1 KB + 1 KB, 16 cycles) and the ldmatrix count and address math per wgmma.
/// Returns the tile row (box order, ConvTiles::halo_row's r) of (c, w, mi, r): tile 0's plus mi·X.
TS_CONV_HD int32_t strip_row(const ConvTiles& ct, int c, int w, int mi, int r) {
  const int32_t X = ct.box[0], Y = ct.box[1], A = Y / 4, S = ct.box[3];
  const int32_t x = r % X, y = 4 * (w % A) + mi, sample = c * (S / 2) + (w / A) * (16 / X) + r / X;
  return x + X * (y + Y * sample);
}

/// The dW's strip form (bsconv_sm90_dw_strip.cu; TileBoxes::strip_dw's 256-row tiles, X × Y × 1 × S with
/// X ∈ {8, 16}): the tile's 16 k16 slices of positions are (strip st = 0..3, mi = 0..3), position
/// pos = 0..15 of slice (st, mi) at
///
///   x = pos % X,   y = 4·(st % A) + mi,   sample = (16 / X)·(st / A) + pos / X,     A = Y / 4,
///
/// so that strip st is four consecutive image rows. Tap (dy, dx) of slice (st, mi) reads the halo rows of
/// slice (st, mi + dy) at column offset dx: halo_row(strip_dw_row(st, 0, pos)) + (mi + dy)·halo[0] + dx,
/// six fragments a strip for its twelve (mi, dy) products. Returns the tile row (box order) of the
/// position; the dY box holds a slice's rows as two 8-row halves, the second strip_dw_half rows after
/// the first (side by side at X = 16, a sample apart at X = 8).
TS_CONV_HD int32_t strip_dw_row(const ConvTiles& ct, int st, int mi, int pos) {
  const int32_t X = ct.box[0], Y = ct.box[1], A = Y / 4;
  const int32_t x = pos % X, y = 4 * (st % A) + mi, sample = (16 / X) * (st / A) + pos / X;
  return x + X * (y + Y * sample);
}
TS_CONV_HD int32_t strip_dw_half(const ConvTiles& ct) { return ct.box[0] == 16 ? 8 : ct.box[0] * ct.box[1]; }

/// Whether tile row r's halo row at tap t is halo_row(r) + dy·halo[0] + dx with dx, dy ∈ [0, 3): the
/// tap's offset split into image rows and columns of the halo box (the strip form's reuse needs it).
TS_CONV_HD bool strip_tap(const ConvTiles& ct, int32_t t, int32_t& dy, int32_t& dx) {
  const int32_t rows = ct.tap_rows(t);
  dy = rows / ct.halo[0];
  dx = rows % ct.halo[0];
  return ct.kernel[0] == 3 && ct.kernel[1] == 3 && ct.kernel[2] == 1 && dy < 3 && dx < 3;
}

/// Parts of the tiles for the convolution dW kernels (bsconv_sm90_dw_halo.cu, bsconv_sm90_dw_strip.cu), whose
/// work items are (run, part of the `steps` tiles of `positions` output positions) taken in turn by a
/// persistent grid of `grid` thread blocks. Returns the count (1 .. 64, each part at least 4 tiles where there
/// are more) with the least cost, in tiles of one run on one thread block (ties: fewer parts):
///
///   cost = ceil(runs·used / grid) · ceil(steps / parts)              the busiest block's tiles
///        + (used > 1 ? used · kDwPartCost · runs / positions : 0)    the parts' f32 sums
///
/// (used: the parts that have tiles). The second term: each part beyond one writes every run's dw entries
/// in f32 (runs · entries · bs² · 4 bytes) and the sum kernel reads them back, against a tile's
/// entries · positions · bs² products of a run, so a part costs kDwPartCost · runs / positions tiles.
/// kDwPartCost = 14 fits the twelve dW timings of both rules before this one on an H100 (2026-12-08,
/// docs/convolution.md, "The dW kernels' parts, fitted") within 0.8-1.2x of the measured ratios but one;
/// the rule before it counted the tiles alone and took 11 parts where 4 did at N 32 × 28 × 28, bs 64,
/// density 1 (0.568 ms against 0.238: 104 MB of partial sums). A fixed rule of the layout's runs, the
/// shape and the grid: the same bits on every run.
constexpr double kDwPartCost = 14.0;
inline double conv_dw_cost(int64_t runs, int64_t steps, int64_t grid, int64_t positions, int32_t parts) {
  const int64_t per_part = (steps + parts - 1) / parts, used = (steps + per_part - 1) / per_part;
  const double busiest = static_cast<double>((runs * used + grid - 1) / grid * per_part);
  return busiest + (used > 1 ? static_cast<double>(used) * kDwPartCost * static_cast<double>(runs) /
                                   static_cast<double>(positions)
                             : 0.0);
}
inline int32_t conv_dw_parts(int64_t runs, int64_t steps, int64_t grid, int64_t positions) {
  int32_t best = 1;
  double best_cost = conv_dw_cost(runs, steps, grid, positions, 1);
  for (int32_t parts = 2; parts <= 64 && (steps + parts - 1) / parts >= 4; ++parts) {
    const double c = conv_dw_cost(runs, steps, grid, positions, parts);
    if (c < best_cost) {
      best = parts;
      best_cost = c;
    }
  }
  return best;
}

/// Whether the tensor-core kernels take convolution ci at all: stride 1 in every dimension and at
/// most 64 taps (dilation, padding and kernel sizes are free).
inline bool conv_tiles_support(const ConvIndex& ci) {
  for (int d = 0; d < ci.dims; ++d)
    if (ci.stride[d] != 1) return false;
  return ci.taps <= 64;
}

/// How conv_tiles shapes a tile's box (powers of two, their product the rows per tile): the box whose
/// tiles cover the product with the fewest positions, so that no product or copy is spent on positions
/// past the image's edge (ties: the smallest halo box, then the larger innermost extent); for a kernel
/// that copies each tile's halo box once per block, each covered position is charged half its share of
/// the halo box as well:
///   per_tap: the per-tap copies (bsmm_sm90_gather.cu, the dW kernel of bsmm_sm90_gradient.cu): 8 × 8 × 4
///            samples on 56 × 56, 4 × 4 × 16 on 28 × 28, 8 × 8 for dW's 64 positions;
///   halo:    the halo kernels (bsconv_sm90_halo.cu, bsconv_sm90_dw_halo.cu): 8 × 8 × 4 on 56 × 56 (a halo
///            of 400 rows), 32 × 4 × 2 on 28 × 28 (12.5% unused, 408 halo rows where 4 × 4 × 16 has 576).
/// Against the first rule, each axis innermost first taking the smallest power of two that covers it
/// (64 × 4 on 56 × 56: 12.5% of the positions unused, 32 × 8 on 28 × 28: 23%), 0.88-0.90x the time of
/// every pass at bs 32 and 64 on 56 × 56, and at 28 × 28 the halo rule 0.91-0.96x at bs 64's forward
/// and dgrad and bs 32's dgrad and dW, the per-tap one 0.91x at bs 64's dW (H100, docs/convolution.md).
///   strip:   the halo kernel's strip form (strip_row; 512-row tiles over at most two spatial axes):
///            x ∈ {4, 8, 16} × y ∈ {4, 8, 16} × 1 × samples, the least positions × (2·rows + halo rows)
///            among those: 8 × 8 × 8 samples on 56 × 56 (none unused), 16 × 4 × 8 on 28 × 28;
///   strip_dw: the dW's strip form (bsconv_sm90_dw_strip.cu; 256-row tiles): the same with x ∈ {8, 16}
///            (a k16 slice of positions is two 8-row halves of the dY box): 8 × 8 × 4 on 56 × 56,
///            16 × 4 × 4 on 28 × 28.
enum class TileBoxes { per_tap, halo, strip, strip_dw };

/// The tiles of `rows` positions (64, 128, 256 or 512) over a batch of `batch` samples of ci: the
/// forward's (dx = false: out = ci.out, A = ci.in) or the input gradient's (dx = true: out =
/// ci.in, A = ci.out), their boxes shaped for the kernel's copies (`boxes`). The dW kernels use the
/// forward's tiles.
inline ConvTiles conv_tiles(const ConvIndex& ci, int64_t batch, bool dx, int32_t rows, TileBoxes boxes) {
  ConvTiles t{};
  t.taps = static_cast<int32_t>(ci.taps);
  for (int a = 0; a < 3; ++a) {
    const int d = ci.dims - 1 - a;  // the geometry's dimension of axis a (none: a size-1 axis)
    const bool used = d >= 0;
    const int64_t out = used ? (dx ? ci.in[d] : ci.out[d]) : 1, in = used ? (dx ? ci.out[d] : ci.in[d]) : 1;
    t.ext[a] = static_cast<int32_t>(out);
    t.a_ext[a] = static_cast<int32_t>(in);
    t.kernel[a] = used ? static_cast<int32_t>(ci.kernel[d]) : 1;
    const int32_t pad = used ? static_cast<int32_t>(ci.pad_lo[d]) : 0;
    const int32_t dil = used ? static_cast<int32_t>(ci.dilation[d]) : 1;
    t.off_base[a] = dx ? pad : -pad;
    t.off_step[a] = dx ? -dil : dil;
  }
  t.ext[3] = t.a_ext[3] = static_cast<int32_t>(batch);
  int32_t reach[3];  // per spatial axis, how much wider the halo box is than the tile: (kernel − 1)·|step|
  for (int a = 0; a < 3; ++a) {
    const int32_t span = (t.kernel[a] - 1) * t.off_step[a];  // from tap 0's offset to the last tap's
    reach[a] = span < 0 ? -span : span;
    t.halo_lo[a] = t.off_base[a] + (span < 0 ? span : 0);
  }
  conv_tiles_detail::innermost_first(t.ext, rows, t.box);
  if ((boxes == TileBoxes::strip && strip_tiles_apply(t.ext, rows)) ||
      (boxes == TileBoxes::strip_dw && strip_dw_tiles_apply(t.ext, rows))) {
    conv_tiles_detail::strip_box(t.ext, reach, rows, boxes == TileBoxes::strip_dw ? 8 : 4, t.box);
  } else {
    conv_tiles_detail::fewest_positions(t.ext, reach, rows, boxes != TileBoxes::per_tap, t.box);
  }
  for (int a = 0; a < 3; ++a) t.halo[a] = t.box[a] + reach[a];
  t.halo[3] = t.box[3];
  t.total_tiles = 1;
  t.split = 0;
  for (int a = 0; a < ConvTiles::kAxes; ++a) {
    t.tiles[a] = (t.ext[a] + t.box[a] - 1) / t.box[a];
    t.total_tiles *= t.tiles[a];
    if (t.box[a] > 1) t.split = a;
  }
  return t;
}

}  // namespace tessera
