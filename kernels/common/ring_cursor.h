// A position in a ring of n buffers guarded by mbarriers (pipeline stages, halo slots, work-item
// slots), advanced without division: the buffer's index and the parity of the phase that the
// next wait on its barrier waits for. The sm_90a kernels' steps once computed both as
// `it % n` and `(it / n) & 1` with n known only at run time, about 25 instructions per
// division on every step of every consumer warp (docs/convolution.md, "the profile").
//
// Host and device (the CPU test of the halo kernel's walk replays it).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TS_RING_HD __host__ __device__ __forceinline__
#else
#define TS_RING_HD inline
#endif

namespace tessera {

struct RingCursor {
  int32_t slot = 0;    ///< the buffer: it % n
  uint32_t phase = 0;  ///< the parity its full barrier completes next: (it / n) & 1
  TS_RING_HD void next(int32_t n) {
    if (++slot == n) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

/// The halo convolution kernel's steps (bsconv_sm90_halo.cu): step e of the launch is tap `tap`
/// of a list entry (a stored block), its weight block in ring `stage` (one stage per step), the
/// entry's halo box in ring `slot` (one slot per entry, so it moves on after the last tap).
struct HaloStepWalk {
  int32_t tap = 0;
  RingCursor stage, slot;
  TS_RING_HD bool first_tap() const { return tap == 0; }
  TS_RING_HD void next(int32_t taps, int32_t stages, int32_t slots) {
    stage.next(stages);
    if (++tap == taps) {
      tap = 0;
      slot.next(slots);
    }
  }
};

}  // namespace tessera
