// The tiles of the tensor-core convolution kernels (conv_tiles.h), replayed on the CPU: every
// tile's shifted A boxes (zeros outside A, as the bulk tensor copy fills them) summed over the
// taps, then stored per warpgroup box (clipped to the output, as the TMA store does), must give
// the convolution, its input gradient and (the dW kernel's sum over tiles) its filter gradient
// of ConvIndex's arithmetic, every output position written exactly once; and the halo mode (one
// box per tile holding every tap's rows) the same sums. One channel: the
// channel blocks do not enter the tile arithmetic.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#include "kernels/common/conv_geometry.h"
#include "kernels/common/conv_tiles.h"
#include "kernels/common/ring_cursor.h"

namespace tessera {
namespace {

struct Case {
  std::vector<int64_t> in;
  ConvGeometry g;
};

std::vector<Case> cases() {
  return {{{33}, conv_geometry({33}, {3}, {1}, {4}, ConvPadding::causal)},
          {{128}, conv_geometry({128}, {3}, {1}, {8}, ConvPadding::causal)},
          {{300}, conv_geometry({300}, {5}, {1}, {1}, ConvPadding::same)},
          {{9, 7}, conv_geometry({9, 7}, {3, 3}, {1}, {1}, ConvPadding::same)},
          {{8, 6}, conv_geometry({8, 6}, {2, 3}, {1}, {2}, ConvPadding::valid)},
          {{7, 10}, conv_geometry({7, 10}, {3, 2}, {1}, {1}, ConvPadding::explicit_pads, {2, 0}, {0, 3})},
          {{21, 19}, conv_geometry({21, 19}, {3, 3}, {1}, {2}, ConvPadding::same)},
          {{5, 4, 6}, conv_geometry({5, 4, 6}, {3, 3, 3}, {1}, {1}, ConvPadding::same)}};
}

// The ways of shaping a tile's box (conv_tiles.h's TileBoxes: for per-tap copies, for halo boxes),
// each replayed below (and the strip forms', where they apply: 512-row tiles of at most two spatial axes
// for the halo kernel's, 256-row ones for the dW's).
constexpr TileBoxes kBoxes[] = {TileBoxes::per_tap, TileBoxes::halo, TileBoxes::strip, TileBoxes::strip_dw};
std::string boxes_name(TileBoxes b) {
  if (b == TileBoxes::strip_dw) return " (dW strip boxes)";
  return b == TileBoxes::halo ? " (halo boxes)" : b == TileBoxes::strip ? " (strip boxes)" : " (per-tap boxes)";
}

// Position (per axis, conv_tiles.h's order) of row r of a box with extents e.
void unravel(int64_t r, const int32_t (&e)[ConvTiles::kAxes], int32_t (&off)[ConvTiles::kAxes]) {
  for (int a = 0; a < ConvTiles::kAxes; ++a) {
    off[a] = static_cast<int32_t>(r % e[a]);
    r /= e[a];
  }
}

// Flat index of a position within extents `ext`, or -1 outside.
int64_t flat(const int32_t (&p)[ConvTiles::kAxes], const int32_t (&ext)[ConvTiles::kAxes]) {
  int64_t f = 0;
  for (int a = ConvTiles::kAxes - 1; a >= 0; --a) {
    if (p[a] < 0 || p[a] >= ext[a]) return -1;
    f = f * ext[a] + p[a];
  }
  return f;
}

int64_t rows_of(const int32_t (&e)[ConvTiles::kAxes]) {
  int64_t r = 1;
  for (int32_t v : e) r *= v;
  return r;
}

std::vector<double> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(gen);
  return v;
}

// The kernels' walk: out[tile positions] = Σ_t A[box of tap t]·w[t], stored per warpgroup box.
std::vector<double> replay_product(const ConvTiles& ct, int groups, const std::vector<double>& a,
                                   const std::vector<double>& w, std::vector<int>& writes) {
  const int64_t rows = rows_of(ct.box), out_n = rows_of(ct.ext);
  std::vector<double> out(static_cast<size_t>(out_n), 0.0);
  writes.assign(static_cast<size_t>(out_n), 0);
  for (int64_t mt = 0; mt < ct.total_tiles; ++mt) {
    std::vector<double> acc(static_cast<size_t>(rows), 0.0);
    for (int32_t t = 0; t < ct.taps; ++t) {
      int32_t at[ConvTiles::kAxes];
      ct.a_origin(mt, t, at);
      for (int64_t r = 0; r < rows; ++r) {
        int32_t off[ConvTiles::kAxes], p[ConvTiles::kAxes];
        unravel(r, ct.box, off);
        for (int ax = 0; ax < ConvTiles::kAxes; ++ax) p[ax] = at[ax] + off[ax];
        const int64_t f = flat(p, ct.a_ext);
        if (f >= 0) acc[static_cast<size_t>(r)] += a[static_cast<size_t>(f)] * w[static_cast<size_t>(t)];
      }
    }
    // Halo mode: the halo box once (zeros outside A), every tap's rows read from it.
    int32_t hc[ConvTiles::kAxes];
    ct.halo_origin(mt, hc);
    const int64_t halo_rows = ct.halo_rows();
    std::vector<double> halo(static_cast<size_t>(halo_rows), 0.0);
    for (int64_t h = 0; h < halo_rows; ++h) {
      int32_t off[ConvTiles::kAxes], p[ConvTiles::kAxes];
      unravel(h, ct.halo, off);
      for (int ax = 0; ax < ConvTiles::kAxes; ++ax) p[ax] = hc[ax] + off[ax];
      const int64_t f = flat(p, ct.a_ext);
      if (f >= 0) halo[static_cast<size_t>(h)] = a[static_cast<size_t>(f)];
    }
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int32_t t = 0; t < ct.taps; ++t) {
        const int32_t row = ct.halo_row(static_cast<int32_t>(r)) + ct.tap_rows(t);
        EXPECT_TRUE(row >= 0 && row < halo_rows);
        if (row >= 0 && row < halo_rows) sum += halo[static_cast<size_t>(row)] * w[static_cast<size_t>(t)];
      }
      EXPECT_NEAR(sum, acc[static_cast<size_t>(r)], 1e-12) << "halo row " << r;
    }
    for (int wg = 0; wg < groups; ++wg) {
      int32_t at[ConvTiles::kAxes], extent[ConvTiles::kAxes];
      ct.store_box(mt, wg, groups, at, extent);
      const int64_t half = rows_of(extent);
      EXPECT_EQ(half * groups, rows);
      for (int64_t r = 0; r < half; ++r) {
        int32_t off[ConvTiles::kAxes], p[ConvTiles::kAxes];
        unravel(r, extent, off);
        for (int ax = 0; ax < ConvTiles::kAxes; ++ax) p[ax] = at[ax] + off[ax];
        const int64_t f = flat(p, ct.ext);
        if (f < 0) continue;  // the store clips
        out[static_cast<size_t>(f)] = acc[static_cast<size_t>(wg * half + r)];
        ++writes[static_cast<size_t>(f)];
      }
    }
  }
  return out;
}

TEST(ConvTiles, ReplayedWalkGivesTheConvolutionItsInputGradientAndItsFilterGradient) {
  for (const Case& c : cases()) {
    const ConvIndex ci = conv_index(c.g, c.in, "test");
    ASSERT_TRUE(conv_tiles_support(ci)) << c.g.str();
    for (int64_t batch : {1, 3}) {
      const std::vector<double> x = random_values(batch * ci.in_positions, 1);
      const std::vector<double> dy = random_values(batch * ci.out_positions, 2);
      const std::vector<double> w = random_values(ci.taps, 3);
      // References by ConvIndex.
      std::vector<double> y_ref(static_cast<size_t>(batch * ci.out_positions), 0.0);
      std::vector<double> dx_ref(static_cast<size_t>(batch * ci.in_positions), 0.0);
      std::vector<double> dw_ref(static_cast<size_t>(ci.taps), 0.0);
      for (int64_t row = 0; row < batch * ci.out_positions; ++row)
        for (int64_t t = 0; t < ci.taps; ++t) {
          const int64_t i = ci.input_row(row, t);
          if (i < 0) continue;
          y_ref[static_cast<size_t>(row)] += x[static_cast<size_t>(i)] * w[static_cast<size_t>(t)];
          dx_ref[static_cast<size_t>(i)] += dy[static_cast<size_t>(row)] * w[static_cast<size_t>(t)];
          dw_ref[static_cast<size_t>(t)] += x[static_cast<size_t>(i)] * dy[static_cast<size_t>(row)];
        }
      for (int32_t rows : {64, 128, 256, 512})  // 512: the halo kernel's tall tiles
        for (TileBoxes boxes : kBoxes) {
          const std::string what =
              c.g.str() + " batch " + std::to_string(batch) + " rows " + std::to_string(rows) + boxes_name(boxes);
          for (bool dx : {false, true}) {
            const ConvTiles ct = conv_tiles(ci, batch, dx, rows, boxes);
            if (rows == 512 && !ct.halo_fits()) continue;  // the kernel takes tall tiles only where they fit
            EXPECT_EQ(rows_of(ct.box), rows) << what;
            for (int32_t b : ct.box) EXPECT_LE(b, 256) << what;
            std::vector<int> writes;
            const std::vector<double> got = replay_product(ct, rows == 64 ? 1 : 2, dx ? dy : x, w, writes);
            const std::vector<double>& ref = dx ? dx_ref : y_ref;
            ASSERT_EQ(got.size(), ref.size()) << what;
            for (size_t e = 0; e < ref.size(); ++e) {
              ASSERT_EQ(writes[e], 1) << what << (dx ? " dx" : " fwd") << " position " << e;
              ASSERT_NEAR(got[e], ref[e], 1e-12) << what << (dx ? " dx" : " fwd") << " position " << e;
            }
          }
        }
      // dW: Σ over tiles of 64 output positions of x's box at the tap · dY's box (zeros outside both).
      for (TileBoxes boxes : kBoxes) {
        const ConvTiles ct = conv_tiles(ci, batch, false, 64, boxes);
        std::vector<double> dw(static_cast<size_t>(ci.taps), 0.0);
        for (int64_t mt = 0; mt < ct.total_tiles; ++mt)
          for (int32_t t = 0; t < ct.taps; ++t) {
            int32_t o0[ConvTiles::kAxes], a0[ConvTiles::kAxes];
            ct.origin(mt, o0);
            ct.a_origin(mt, t, a0);
            for (int64_t r = 0; r < 64; ++r) {
              int32_t off[ConvTiles::kAxes], po[ConvTiles::kAxes], pa[ConvTiles::kAxes];
              unravel(r, ct.box, off);
              for (int ax = 0; ax < ConvTiles::kAxes; ++ax) po[ax] = o0[ax] + off[ax], pa[ax] = a0[ax] + off[ax];
              const int64_t fo = flat(po, ct.ext), fa = flat(pa, ct.a_ext);
              if (fo >= 0 && fa >= 0)
                dw[static_cast<size_t>(t)] += x[static_cast<size_t>(fa)] * dy[static_cast<size_t>(fo)];
            }
          }
        for (int64_t t = 0; t < ci.taps; ++t)
          EXPECT_NEAR(dw[static_cast<size_t>(t)], dw_ref[static_cast<size_t>(t)], 1e-10)
              << c.g.str() << boxes_name(boxes) << " tap " << t;
      }
    }
  }
}

// The halo kernels' A fragments, emulated: a halo box laid out in shared memory as the bulk
// tensor copy swizzles it (swizzled_offset), ldmatrix x4 (plain or transposing) at the addresses
// the lanes give (halo_a_lane / halo_at_lane, halo_row + tap_rows), each thread's registers
// compared with the mma A fragment it must hold: a0 (row g, columns 2t, 2t + 1), a1 (g + 8),
// a2 (columns + 8), a3 (both), g = lane / 4, t = lane % 4.
struct Box16 {  // a [rows, bs] box of 16-bit values, element (r, ch) = r·bs + ch, and its smem image
  int rows, bs;
  std::vector<uint16_t> smem;
  Box16(int rows_, int bs_) : rows(rows_), bs(bs_), smem(static_cast<size_t>(rows_ * bs_)) {
    for (int r = 0; r < rows; ++r)
      for (int ch = 0; ch < bs; ++ch) {
        const int at = swizzled_offset(r, ch / 8, 2 * bs) / 2 + ch % 8;
        smem[static_cast<size_t>(at)] = static_cast<uint16_t>(value(r, ch));
      }
  }
  int value(int r, int ch) const { return r * bs + ch; }
  // ldmatrix x4: matrix j's row i from the 8 values at the byte offset lane 8j + i gives; thread
  // (g, t) gets rows g, columns 2t, 2t + 1 (transposing: rows 2t, 2t + 1, column g).
  using Fragments = std::vector<std::array<std::pair<int, int>, 4>>;  // per lane: a0 .. a3
  void ldmatrix(const std::vector<int>& lane_byte, bool trans, Fragments& out) const {
    out.assign(32, {});
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      for (int j = 0; j < 4; ++j) {
        auto at = [&](int row, int col) {
          return static_cast<int>(smem[static_cast<size_t>(lane_byte[8 * j + row] / 2 + col)]);
        };
        out[static_cast<size_t>(lane)][static_cast<size_t>(j)] =
            trans ? std::make_pair(at(2 * t, g), at(2 * t + 1, g)) : std::make_pair(at(g, 2 * t), at(g, 2 * t + 1));
      }
    }
  }
};

TEST(ConvTiles, HaloLanesLoadTheAFragmentsOfEveryTap) {
  const std::vector<std::pair<std::vector<int64_t>, ConvGeometry>> geos = {
      {{128}, conv_geometry({128}, {3}, {1}, {8}, ConvPadding::causal)},
      {{21, 19}, conv_geometry({21, 19}, {3, 3}, {1}, {2}, ConvPadding::same)},
      {{5, 4, 6}, conv_geometry({5, 4, 6}, {3, 3, 3}, {1}, {1}, ConvPadding::same)}};
  for (const auto& [in, g] : geos)
    for (int bs : {16, 32, 64})
      for (bool dx : {false, true}) {
        // bsconv / bsconv_dx: warp w of warpgroup c, m64 tile mi; 256-row tiles (kWgRows 128) and
        // the tall 512-row ones of bs 16/32 (kWgRows 256)
        for (int32_t rows : {256, 512})
          for (TileBoxes boxes : kBoxes) {
            if (rows == 512 && bs == 64) continue;
            const ConvTiles ct = conv_tiles(conv_index(g, in, "t"), 2, dx, rows, boxes);
            const int wg_rows = rows / 2;
            const Box16 box(ct.halo_rows(), bs);
            const std::string what = g.str() + " bs " + std::to_string(bs) + (dx ? " dx" : " fwd") + " rows " +
                                     std::to_string(rows) + boxes_name(boxes);
            Box16::Fragments regs;
            for (int32_t t = 0; t < ct.taps; t += 5)
              for (int c = 0; c < 2; ++c)
                for (int mi = 0; mi < wg_rows / 64; ++mi)
                  for (int w = 0; w < 4; ++w)
                    for (int kk = 0; kk < bs / 16; ++kk) {
                      const int first = c * wg_rows + mi * 64 + w * 16;  // the warp's first tile row
                      std::vector<int> lane_byte(32);
                      for (int lane = 0; lane < 32; ++lane) {
                        int row, chunk, chunk0;
                        halo_a_lane(lane, kk, row, chunk);
                        halo_a_lane(lane, 0, row, chunk0);
                        const int hrow = ct.halo_row(first + row) + ct.tap_rows(t);
                        // the kernel's address: slice 0's offset, moved to slice kk (swizzled_slice)
                        lane_byte[static_cast<size_t>(lane)] =
                            swizzled_slice(swizzled_offset(hrow, chunk0, 2 * bs), kk);
                        ASSERT_EQ(lane_byte[static_cast<size_t>(lane)], swizzled_offset(hrow, chunk, 2 * bs))
                            << what << " lane " << lane << " slice " << kk;
                      }
                      box.ldmatrix(lane_byte, false, regs);
                      for (int lane = 0; lane < 32; ++lane) {
                        const int gg = lane / 4, tt = lane % 4;
                        for (int j = 0; j < 4; ++j) {
                          const int m = gg + 8 * (j % 2), k = 2 * tt + 8 * (j / 2);  // a_j's row and column
                          const int hrow = ct.halo_row(first + m) + ct.tap_rows(t), ch = 16 * kk + k;
                          const std::pair<int, int> want{box.value(hrow, ch), box.value(hrow, ch + 1)};
                          ASSERT_EQ(regs[static_cast<size_t>(lane)][static_cast<size_t>(j)], want)
                              << what << " tap " << t << " lane " << lane << " a" << j;
                        }
                      }
                    }
          }
        if (dx) continue;
        // bsconv_dw: 256-position tiles (128 at bs 64), the warp's 16 channels from c0, positions of
        // slice kk
        const int32_t dw_positions = bs == 64 ? 128 : 256;
        for (TileBoxes boxes : kBoxes) {
          const ConvTiles cw = conv_tiles(conv_index(g, in, "t"), 2, false, dw_positions, boxes);
          const Box16 xbox(cw.halo_rows(), bs);
          Box16::Fragments regs;
          for (int32_t t = 0; t < cw.taps; t += 4)
            for (int c0 = 0; c0 < bs; c0 += 16)
              for (int kk = 0; kk < dw_positions / 16; ++kk) {
                std::vector<int> lane_byte(32);
                for (int lane = 0; lane < 32; ++lane) {
                  int position, chunk;
                  halo_at_lane(lane, c0, position, chunk);
                  lane_byte[static_cast<size_t>(lane)] =
                      swizzled_offset(cw.halo_row(16 * kk + position) + cw.tap_rows(t), chunk, 2 * bs);
                }
                xbox.ldmatrix(lane_byte, true, regs);
                for (int lane = 0; lane < 32; ++lane) {
                  const int gg = lane / 4, tt = lane % 4;
                  for (int j = 0; j < 4; ++j) {
                    const int m = gg + 8 * (j % 2),
                              k = 2 * tt + 8 * (j / 2);  // a_j: channel c0 + m, positions k, k + 1
                    auto at = [&](int kpos) {
                      return xbox.value(cw.halo_row(16 * kk + kpos) + cw.tap_rows(t), c0 + m);
                    };
                    ASSERT_EQ(regs[static_cast<size_t>(lane)][static_cast<size_t>(j)], std::make_pair(at(k), at(k + 1)))
                        << g.str() << " bs " << bs << boxes_name(boxes) << " dW tap " << t << " lane " << lane << " a"
                        << j;
                  }
                }
              }
        }
      }
}

// The kernels walk the tiles of a part without division (next_origin) and place a tap's box by
// its offset from the tile's origin (tap_offset): the odometer must visit origin(mt) for every mt
// in order, and tap t's offset is tap (k0, k1, k2)'s, t = k0 + kernel0·(k1 + kernel1·k2),
// counted here without division.
TEST(ConvTiles, TheTileOdometerAndTheTapOffsetsAgreeWithTheirDefinitions) {
  for (const Case& c : cases()) {
    const ConvIndex ci = conv_index(c.g, c.in, "test");
    for (bool dx : {false, true})
      for (int32_t rows : {64, 128, 256})
        for (int64_t batch : {1, 5})
          for (TileBoxes boxes : kBoxes) {
            const ConvTiles ct = conv_tiles(ci, batch, dx, rows, boxes);
            int32_t walked[ConvTiles::kAxes];
            ct.origin(0, walked);
            for (int64_t mt = 0; mt < ct.total_tiles; ++mt) {
              int32_t want[ConvTiles::kAxes];
              ct.origin(mt, want);
              for (int a = 0; a < ConvTiles::kAxes; ++a)
                ASSERT_EQ(walked[a], want[a]) << c.g.str() << " tile " << mt << " axis " << a;
              ct.next_origin(walked);
            }
            int32_t t = 0;
            for (int32_t k2 = 0; k2 < ct.kernel[2]; ++k2)
              for (int32_t k1 = 0; k1 < ct.kernel[1]; ++k1)
                for (int32_t k0 = 0; k0 < ct.kernel[0]; ++k0, ++t) {
                  int32_t d[ConvTiles::kAxes];
                  ct.tap_offset(t, d);
                  const int32_t k[3] = {k0, k1, k2};
                  for (int a = 0; a < 3; ++a) EXPECT_EQ(d[a], ct.off_base[a] + k[a] * ct.off_step[a]) << c.g.str();
                  EXPECT_EQ(d[3], 0);
                }
            EXPECT_EQ(t, ct.taps);
          }
  }
}

// The halo kernel's consumers and producer walk a launch's (entry, tap) steps with counters
// (HaloStepWalk, RingCursor) instead of the divisions they replace: step number `it` of the
// launch, entry number `hq`: tap (it - first step of the entry), stage it % stages with phase
// (it / stages) & 1, halo slot hq % slots with phase (hq / slots) & 1. Work items of several
// entries (none too), every filter size the kernels take, few and many stages.
TEST(ConvTiles, TheHaloKernelsStepWalkEqualsItsDivisions) {
  const std::vector<int> entries = {3, 0, 1, 7, 2, 0, 0, 5, 1, 4};
  for (int32_t taps : {1, 2, 3, 9, 27, 64})
    for (int32_t stages : {2, 3, 7, 16})
      for (int32_t slots : {2, 3}) {
        HaloStepWalk walk;
        RingCursor items;
        int64_t it = 0, hq = 0;
        for (size_t n = 0; n < entries.size(); ++n) {
          EXPECT_EQ(items.slot, static_cast<int32_t>(n % 4));
          EXPECT_EQ(items.phase, static_cast<uint32_t>((n / 4) & 1));
          items.next(4);
          for (int q = 0; q < entries[n]; ++q, ++hq)
            for (int32_t t = 0; t < taps; ++t, ++it) {
              ASSERT_EQ(walk.tap, t);
              EXPECT_EQ(walk.first_tap(), t == 0);
              ASSERT_EQ(walk.stage.slot, static_cast<int32_t>(it % stages)) << taps << " " << stages;
              ASSERT_EQ(walk.stage.phase, static_cast<uint32_t>((it / stages) & 1));
              ASSERT_EQ(walk.slot.slot, static_cast<int32_t>(hq % slots));
              ASSERT_EQ(walk.slot.phase, static_cast<uint32_t>((hq / slots) & 1));
              walk.next(taps, stages, slots);
            }
        }
      }
}

// In entry mode (bsconv_sm90_halo.cu: a slot holds an entry's halo box and all of its taps'
// weight blocks, stages = slots · taps) the same walk's stage is slot · taps + tap at every step,
// so the weight block each step reads lies in its entry's slot.
TEST(ConvTiles, TheHaloKernelsEntryModeStagesLieInTheirEntrysSlot) {
  for (int32_t taps : {1, 2, 3, 9, 27})
    for (int32_t slots : {2, 3, 4}) {
      HaloStepWalk walk;
      const int32_t stages = slots * taps;
      for (int64_t hq = 0; hq < 11; ++hq)
        for (int32_t t = 0; t < taps; ++t) {
          ASSERT_EQ(walk.stage.slot, walk.slot.slot * taps + t) << taps << " taps, " << slots << " slots";
          walk.next(taps, stages, slots);
        }
    }
}

// Positions a tile set covers: Π ceil(ext / box)·box.
int64_t covered(const ConvTiles& ct) {
  int64_t n = 1;
  for (int a = 0; a < ConvTiles::kAxes; ++a) n *= static_cast<int64_t>(ct.tiles[a]) * ct.box[a];
  return n;
}

// Both rules' boxes never cover more positions than the innermost-first ones (conv_tiles_detail::
// innermost_first, where those are copies at all), nor do the halo rule's cost more by its measure
// (positions × (2·rows + halo rows)); both keep every copy's extents within 256 (the halo's too where
// the innermost boxes' were), and on the benchmark's images: 8 × 8 × 4 samples at 56 × 56 for both
// (none unused, a halo of 400 rows against 64 × 4's 396 with 8 of 64 columns unused); at 28 × 28
// 4 × 4 × 16 per tap (none unused), 32 × 4 × 2 for halo boxes (12.5% unused, 408 halo rows, not 576).
TEST(ConvTiles, TheBoxesCoverNoMorePositionsThanTheInnermostFirstOnes) {
  std::vector<Case> all = cases();
  all.push_back({{56, 56}, conv_geometry({56, 56}, {3, 3}, {1}, {1}, ConvPadding::same)});
  all.push_back({{28, 28}, conv_geometry({28, 28}, {3, 3}, {1}, {1}, ConvPadding::same)});
  for (const Case& c : all) {
    const ConvIndex ci = conv_index(c.g, c.in, "test");
    for (int64_t batch : {1, 5, 32, 64})
      for (int32_t rows : {64, 128, 256, 512})
        for (bool dx : {false, true}) {
          const ConvTiles few = conv_tiles(ci, batch, dx, rows, TileBoxes::per_tap);
          const ConvTiles bal = conv_tiles(ci, batch, dx, rows, TileBoxes::halo);
          // the innermost-first box over the same extents, its halo box and its covered positions
          int32_t inner[ConvTiles::kAxes];
          conv_tiles_detail::innermost_first(few.ext, rows, inner);
          int64_t inner_covered = 1, inner_halo = inner[3];
          bool inner_copies = true, inner_halo_fits = true;  // every extent within one copy (and the halo's)
          for (int a = 0; a < ConvTiles::kAxes; ++a) {
            inner_covered *= (few.ext[a] + inner[a] - 1) / inner[a] * static_cast<int64_t>(inner[a]);
            inner_copies = inner_copies && inner[a] <= 256;
            if (a < 3) {
              const int32_t reach = few.halo[a] - few.box[a];
              inner_halo *= inner[a] + reach;
              inner_halo_fits = inner_halo_fits && inner[a] + reach <= 256;
            }
          }
          const std::string what = c.g.str() + " batch " + std::to_string(batch) + " rows " + std::to_string(rows);
          if (inner_copies) {
            EXPECT_LE(covered(few), inner_covered) << what;
            EXPECT_LE(covered(bal) * (2 * rows + bal.halo_rows()), inner_covered * (2 * rows + inner_halo)) << what;
          }
          for (const ConvTiles* t : {&few, &bal}) {
            EXPECT_EQ(rows_of(t->box), rows) << what;
            for (int32_t b : t->box) EXPECT_LE(b, 256) << what;
            if (inner_halo_fits) {
              EXPECT_TRUE(t->halo_fits()) << what;
            }
          }
        }
  }
  const ConvIndex c56 = conv_index(all[all.size() - 2].g, all[all.size() - 2].in, "test");
  const ConvIndex c28 = conv_index(all.back().g, all.back().in, "test");
  for (TileBoxes boxes : kBoxes) {
    const ConvTiles t56 = conv_tiles(c56, 64, false, 256, boxes);
    EXPECT_EQ(t56.box[0], 8) << boxes_name(boxes);
    EXPECT_EQ(t56.box[1], 8) << boxes_name(boxes);
    EXPECT_EQ(t56.box[3], 4) << boxes_name(boxes);
    EXPECT_EQ(covered(t56), 64 * 56 * 56) << boxes_name(boxes);
    EXPECT_EQ(t56.halo_rows(), 400) << boxes_name(boxes);
  }
  const ConvTiles t28 = conv_tiles(c28, 32, false, 256, TileBoxes::per_tap);
  EXPECT_EQ(covered(t28), 32 * 28 * 28);
  EXPECT_EQ(t28.halo_rows(), 576);
  const ConvTiles h28 = conv_tiles(c28, 32, false, 256, TileBoxes::halo);
  EXPECT_EQ(h28.box[0], 32);
  EXPECT_EQ(h28.box[1], 4);
  EXPECT_EQ(h28.box[3], 2);
  EXPECT_EQ(h28.halo_rows(), 408);
}

// The strip form's plan (conv_tiles.h's strip_row): the warps' rows cover each 512-row tile once, each
// warpgroup within its own half (its store box), and tap (dy, dx) of m64 tile mi reads the rows that
// tile mi + dy reads at column offset dx (so a warp's 12 (mi, dy) products per dx need 6 fragments),
// all within the halo box; the boxes it picks on the benchmark's images; elsewhere the halo rule's.
TEST(ConvTiles, TheStripFormsWarpsCoverTheTileOnceAndShareFragmentsAcrossTaps) {
  std::vector<Case> all = {{{56, 56}, conv_geometry({56, 56}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{28, 28}, conv_geometry({28, 28}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{21, 19}, conv_geometry({21, 19}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{9, 7}, conv_geometry({9, 7}, {3, 3}, {1}, {1}, ConvPadding::valid)},
                           {{7, 10},
                            conv_geometry({7, 10}, {3, 3}, {1}, {1}, ConvPadding::explicit_pads, {2, 0}, {0, 1})}};
  for (const Case& cs : all)
    for (int64_t batch : {1, 5, 32, 64})
      for (bool dx : {false, true}) {
        const ConvTiles ct = conv_tiles(conv_index(cs.g, cs.in, "test"), batch, dx, 512, TileBoxes::strip);
        const std::string what = cs.g.str() + " batch " + std::to_string(batch) + (dx ? " dx" : " fwd");
        ASSERT_EQ(rows_of(ct.box), 512) << what;
        ASSERT_TRUE(ct.box[0] == 4 || ct.box[0] == 8 || ct.box[0] == 16) << what;
        ASSERT_TRUE(ct.box[1] == 4 || ct.box[1] == 8 || ct.box[1] == 16) << what;
        ASSERT_EQ(ct.box[2], 1) << what;
        ASSERT_EQ(ct.split, 3) << what;  // the warpgroups' halves are halves of the samples
        std::vector<int> seen(512, 0);
        for (int c = 0; c < 2; ++c)
          for (int w = 0; w < 4; ++w)
            for (int mi = 0; mi < 4; ++mi)
              for (int r = 0; r < 16; ++r) {
                const int32_t row = strip_row(ct, c, w, mi, r);
                ASSERT_GE(row, 256 * c) << what;
                ASSERT_LT(row, 256 * (c + 1)) << what;
                ++seen[static_cast<size_t>(row)];
              }
        for (int row = 0; row < 512; ++row) ASSERT_EQ(seen[static_cast<size_t>(row)], 1) << what << " row " << row;
        for (int32_t t = 0; t < ct.taps; ++t) {
          int32_t dy = -1, dxo = -1;
          ASSERT_TRUE(strip_tap(ct, t, dy, dxo)) << what << " tap " << t;
          // the kernel's tap of (dy, dx) (bsconv_sm90_halo.cu's strip form, checked by strip_fits)
          ASSERT_EQ(t, dx ? (2 - dy) * 3 + (2 - dxo) : dy * 3 + dxo) << what << " tap " << t;
          for (int c = 0; c < 2; ++c)
            for (int w = 0; w < 4; ++w)
              for (int mi = 0; mi < 4; ++mi)
                for (int r = 0; r < 16; ++r) {
                  const int32_t want = ct.halo_row(strip_row(ct, c, w, mi, r)) + ct.tap_rows(t);
                  const int32_t got = ct.halo_row(strip_row(ct, c, w, 0, r)) + (mi + dy) * ct.halo[0] + dxo;
                  ASSERT_EQ(got, want) << what << " tap " << t << " warp " << w << " tile " << mi << " row " << r;
                  ASSERT_LT(got, ct.halo_rows()) << what;
                }
        }
      }
  const ConvIndex c56 = conv_index(all[0].g, all[0].in, "test"), c28 = conv_index(all[1].g, all[1].in, "test");
  const ConvTiles t56 = conv_tiles(c56, 64, false, 512, TileBoxes::strip);
  EXPECT_EQ(std::vector<int32_t>(t56.box, t56.box + 4), (std::vector<int32_t>{8, 8, 1, 8}));
  EXPECT_EQ(covered(t56), 64 * 56 * 56);
  const ConvTiles t28 = conv_tiles(c28, 32, false, 512, TileBoxes::strip);
  EXPECT_EQ(std::vector<int32_t>(t28.box, t28.box + 4), (std::vector<int32_t>{16, 4, 1, 8}));
  // not a strip tile (256 rows; three spatial axes): the halo rule's box
  const Case c3{{5, 4, 6}, conv_geometry({5, 4, 6}, {3, 3, 3}, {1}, {1}, ConvPadding::same)};
  for (const auto& [ci, rows] : {std::make_pair(c56, 256), std::make_pair(conv_index(c3.g, c3.in, "test"), 512)}) {
    const ConvTiles s = conv_tiles(ci, 8, false, rows, TileBoxes::strip);
    const ConvTiles h = conv_tiles(ci, 8, false, rows, TileBoxes::halo);
    EXPECT_EQ(std::vector<int32_t>(s.box, s.box + 4), std::vector<int32_t>(h.box, h.box + 4)) << rows;
  }
  // a filter other than 3x3: strip_tap says no
  const ConvIndex c5 = conv_index(conv_geometry({9, 7}, {5, 3}, {1}, {1}, ConvPadding::same), {9, 7}, "test");
  int32_t dy = 0, dxo = 0;
  EXPECT_FALSE(strip_tap(conv_tiles(c5, 8, false, 512, TileBoxes::strip), 0, dy, dxo));
}

// The dW's strip form (bsconv_sm90_dw_strip.cu): its 16 slices of 16 positions cover the 256-row tile
// once; each slice's rows are two 8-row halves of the dY box, strip_dw_half apart (the B descriptor's
// stride); and tap (dy, dx) of slice (st, mi) reads the halo rows the kernel's fragment mi + dy holds.
TEST(ConvTiles, TheDwStripFormsSlicesCoverTheTileOnceAndShareFragmentsAcrossTaps) {
  std::vector<Case> all = {{{56, 56}, conv_geometry({56, 56}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{28, 28}, conv_geometry({28, 28}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{21, 19}, conv_geometry({21, 19}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{9, 7}, conv_geometry({9, 7}, {3, 3}, {1}, {1}, ConvPadding::valid)},
                           {{5, 70}, conv_geometry({5, 70}, {3, 3}, {1}, {1}, ConvPadding::same)},
                           {{7, 10},
                            conv_geometry({7, 10}, {3, 3}, {1}, {1}, ConvPadding::explicit_pads, {2, 0}, {0, 1})}};
  for (const Case& cs : all)
    for (int64_t batch : {1, 5, 32, 64}) {
      const ConvTiles ct = conv_tiles(conv_index(cs.g, cs.in, "test"), batch, false, 256, TileBoxes::strip_dw);
      const std::string what = cs.g.str() + " batch " + std::to_string(batch);
      ASSERT_EQ(rows_of(ct.box), 256) << what;
      ASSERT_TRUE(ct.box[0] == 8 || ct.box[0] == 16) << what;
      ASSERT_TRUE(ct.box[1] == 4 || ct.box[1] == 8 || ct.box[1] == 16) << what;
      ASSERT_EQ(ct.box[2], 1) << what;
      std::vector<int> seen(256, 0);
      for (int st = 0; st < 4; ++st)
        for (int mi = 0; mi < 4; ++mi)
          for (int pos = 0; pos < 16; ++pos) {
            const int32_t row = strip_dw_row(ct, st, mi, pos);
            ASSERT_GE(row, 0) << what;
            ASSERT_LT(row, 256) << what;
            ++seen[static_cast<size_t>(row)];
            // the B descriptor's rows: the slice's first row, then + pos % 8, the second half strip_dw_half on
            ASSERT_EQ(row, strip_dw_row(ct, st, mi, 0) + pos % 8 + (pos / 8) * strip_dw_half(ct)) << what;
            // the kernel's offsets of strip st and slice mi from slice (0, 0) (bsconv_sm90_dw_strip.cu)
            const int32_t X = ct.box[0], Y = ct.box[1], A = Y / 4;
            ASSERT_EQ(strip_dw_row(ct, st, mi, 0), 4 * X * (st % A) + X * Y * (16 / X) * (st / A) + X * mi) << what;
          }
      for (int row = 0; row < 256; ++row) ASSERT_EQ(seen[static_cast<size_t>(row)], 1) << what << " row " << row;
      for (int32_t t = 0; t < ct.taps; ++t) {
        int32_t dy = -1, dx = -1;
        ASSERT_TRUE(strip_tap(ct, t, dy, dx)) << what << " tap " << t;
        ASSERT_EQ(t, 3 * dy + dx) << what << " tap " << t;  // the kernel's tap of (dy, dx) (dw_strip_takes)
        const int32_t hx = ct.halo[0], hxy = ct.halo[0] * ct.halo[1], X = ct.box[0], A = ct.box[1] / 4;
        for (int st = 0; st < 4; ++st)
          for (int mi = 0; mi < 4; ++mi)
            for (int pos = 0; pos < 16; ++pos) {
              const int32_t want = ct.halo_row(strip_dw_row(ct, st, mi, pos)) + ct.tap_rows(t);
              // the kernel's fragment mi + dy of strip st at column dx
              const int32_t strip_off = 4 * hx * (st % A) + hxy * (16 / X) * (st / A);
              const int32_t got = ct.halo_row(strip_dw_row(ct, 0, 0, pos)) + dx + strip_off + (mi + dy) * hx;
              ASSERT_EQ(got, want) << what << " tap " << t << " strip " << st << " slice " << mi << " pos " << pos;
              ASSERT_LT(got, ct.halo_rows()) << what;
            }
      }
    }
  const ConvIndex c56 = conv_index(all[0].g, all[0].in, "test"), c28 = conv_index(all[1].g, all[1].in, "test");
  const ConvTiles t56 = conv_tiles(c56, 64, false, 256, TileBoxes::strip_dw);
  EXPECT_EQ(std::vector<int32_t>(t56.box, t56.box + 4), (std::vector<int32_t>{8, 8, 1, 4}));
  EXPECT_EQ(covered(t56), 64 * 56 * 56);
  const ConvTiles t28 = conv_tiles(c28, 32, false, 256, TileBoxes::strip_dw);
  EXPECT_EQ(std::vector<int32_t>(t28.box, t28.box + 4), (std::vector<int32_t>{16, 4, 1, 4}));
  // 512 rows: not the dW's strip tiles (the halo rule's box)
  const ConvTiles s = conv_tiles(c56, 8, false, 512, TileBoxes::strip_dw);
  const ConvTiles h = conv_tiles(c56, 8, false, 512, TileBoxes::halo);
  EXPECT_EQ(std::vector<int32_t>(s.box, s.box + 4), std::vector<int32_t>(h.box, h.box + 4));
}

// The dW kernels' parts of the tiles: the least cost of any count, the cost (conv_tiles.h) the busiest
// block's tiles plus, for several parts, kDwPartCost · runs / positions tiles a part (their f32 sums).
TEST(ConvTiles, TheDwPartsHaveTheLeastCost) {
  auto cost = [](int64_t runs, int64_t steps, int64_t grid, int64_t positions, int64_t parts) {
    const int64_t per_part = (steps + parts - 1) / parts, used = (steps + per_part - 1) / per_part;
    const double part = 14.0 * static_cast<double>(runs) / static_cast<double>(positions);
    const double sums = used > 1 ? static_cast<double>(used) * part : 0.0;
    return static_cast<double>((runs * used + grid - 1) / grid * per_part) + sums;
  };
  // N 32 × 28 × 28, bs 64, density 1 (96 runs of 6 over 196 tiles of 128): 4 parts (11, taken by the rule of
  // the busiest block's tiles alone, measured 0.568 ms against 0.238 at 4)
  EXPECT_EQ(conv_dw_parts(96, 196, 132, 128), 4);
  // the dW's strip form at N 64 × 56 × 56 (11 runs, 784 tiles of 256): 12 parts, one wave of 66 tiles
  EXPECT_EQ(conv_dw_parts(11, 784, 132, 256), 12);
  // parts that cost nothing: the count whose busiest block has the fewest tiles (13: one wave of 61)
  EXPECT_EQ(conv_dw_parts(10, 784, 132, int64_t{1} << 40), 13);
  for (int64_t runs : {1, 3, 10, 24, 40, 131, 132, 133, 500})
    for (int64_t steps : {1, 3, 7, 20, 98, 784, 5000})
      for (int64_t grid : {1, 66, 132})
        for (int64_t positions : {128, 256}) {
          const int32_t parts = conv_dw_parts(runs, steps, grid, positions);
          const std::string what = std::to_string(runs) + " runs, " + std::to_string(steps) + " steps, grid " +
                                   std::to_string(grid) + ", " + std::to_string(positions) + " positions";
          ASSERT_GE(parts, 1) << what;
          ASSERT_LE(parts, 64) << what;
          if (parts > 1) {
            ASSERT_GE((steps + parts - 1) / parts, 4) << what;  // each part at least 4 tiles
          }
          EXPECT_DOUBLE_EQ(conv_dw_cost(runs, steps, grid, positions, parts), cost(runs, steps, grid, positions, parts))
              << what;
          for (int64_t other = 1; other <= 64; ++other) {
            if (other > 1 && (steps + other - 1) / other < 4) break;
            const double mine = cost(runs, steps, grid, positions, parts);
            const double theirs = cost(runs, steps, grid, positions, other);
            ASSERT_LE(mine, theirs) << what << " against " << other;
            if (other < parts) {
              ASSERT_LT(mine, theirs) << what << " against " << other;  // ties: fewer parts
            }
          }
        }
}

TEST(ConvTiles, StridedOrVeryWideFiltersAreLeftToTheScalarKernels) {
  EXPECT_FALSE(conv_tiles_support(conv_index(conv_geometry({9, 7}, {3, 3}, {2}, {1}, ConvPadding::same), {9, 7}, "t")));
  EXPECT_FALSE(conv_tiles_support(conv_index(conv_geometry({9, 9}, {9, 9}, {1}, {1}, ConvPadding::same), {9, 9}, "t")));
  EXPECT_TRUE(conv_tiles_support(conv_index(conv_geometry({9, 9}, {3, 3}, {1}, {3}, ConvPadding::same), {9, 9}, "t")));
}

}  // namespace
}  // namespace tessera
