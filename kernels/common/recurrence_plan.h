// The plan of the persistent LSTM recurrence kernels (kernels/common/cuda/lstm_persistent.cu):
// how a launch deals the hidden units out to thread blocks and what each block keeps in shared
// memory, or why the kernels do not take a problem. Host code, every build: the CUDA side asks it
// with the GPU's figures (cuda::plan_recurrence), the CPU tests with a device's figures written out.
//
//   RecurrenceDevice h200{0, 132, 9, 232448, [](DType, bool, int, int) { return 66; }};
//   RecurrencePlan p = plan_recurrence(h200, DType::bf16, 64, 2048, nullptr, /*backward=*/false);
//   p.reason.empty(), p.grid, p.stream_rows, ...
//
// Switches (read at each call; unknown values are one ValueError line):
//   TESSERA_LSTM_CLUSTER=1|2         dense layers' K split over pairs of blocks (default 2 where built)
//   TESSERA_LSTM_SPLIT_CHUNKS=n      block-sparse groups split into parts of at most n chunks (tests)
//   TESSERA_LSTM_BALANCE=0|1         block-sparse layouts that fit split where that balances the blocks
//   TESSERA_LSTM_RESIDENT_STAGES=n   W_h streamed past n resident stages of each group, even where it fits
//   TESSERA_LSTM_STREAM_RING=2|3     streamed W's ring depth (default 3 where it fits, else 2)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/recurrence_items.h"

namespace tessera {

/// How a persistent launch splits the hidden units: `groups` groups of `units` consecutive
/// hidden units (all four gate columns of each in one thread block's shared memory for the
/// forward, their rows of W_h for the backward), `grid` resident thread blocks taking groups
/// grid apart, `smem` bytes of dynamic shared memory per block. `reason` is empty when the
/// problem fits and names why not otherwise.
struct RecurrencePlan {
  int units = 0, groups = 0, grid = 0, groups_per_block = 0;
  int chunk = 0;          ///< K columns per chunk of the recurrent product: bs (sparse) or 64 (dense)
  int max_chunks = 0;     ///< chunks of all groups of one block, the most of any block
  int w_rows = 0;         ///< rows of W_h's slice in shared memory, the most of any block
  int ring = 0;           ///< stages in the cp.async ring (as many as fit, 2 … 15)
  int stage_k = 0;        ///< K columns per stage: 256 where 3 such stages fit, else 128
  int cluster = 1;        ///< the K split: blocks per thread block cluster (1: none; see the .cu)
  /// Streamed W (stream_rows > 0): where a block's slices of W_h do not fit its shared memory (dense
  /// H 2048; the layers of that parameter count), each group's first resident_stages stages of
  /// stage_k (128) K rows stay there and the rest come from L2 each step, through the cp.async ring
  /// beside the operand: stream_rows rows per block at most (w_rows resident). 0 and 0: all resident.
  int resident_stages = 0, stream_rows = 0;
  size_t smem = 0;
  /// Set where a block-sparse layout's largest groups do not fit one block (Barabási–Albert hubs):
  /// the groups split into parts over blocks and each block's items (recurrence_items.h); the
  /// grid is then one block per packed block. Null: group g in block g % grid, as it always was.
  std::shared_ptr<const RecurrencePacking> packing;
  std::string reason;
};

/// What a plan needs to know of the GPU.
struct RecurrenceDevice {
  int index = 0;    ///< the device (plans are cached per device)
  int sms = 0;      ///< streaming multiprocessors: at most one block each
  int major = 0;    ///< compute capability; clusters need 9
  size_t smem = 0;  ///< dynamic shared memory a block may have; 0: no cooperative launches
  /// How many clusters of `cluster` blocks of the kernel (dtype, direction, units per group) can be
  /// resident at once; 0 (or no function): none, the kernel was not built for compute capability 9.
  std::function<int(DType dtype, bool backward, int units, int cluster)> clusters;
};

/// The plan of the forward (backward = false) or backward recurrence on `device` for batch B,
/// hidden size H, dtype and layout (null: dense). Dense layers split K over thread block clusters
/// (each block of a pair reads half of h or dpre per step) on compute capability 9.0 when every
/// cluster fits at once (and K's 64-column chunks split evenly); TESSERA_LSTM_CLUSTER=1 turns the
/// split off. Block-sparse plans are cached per layout object.
RecurrencePlan plan_recurrence(const RecurrenceDevice& device, DType dtype, int64_t batch, int64_t hidden,
                               const LayoutPtr& layout, bool backward);

}  // namespace tessera
