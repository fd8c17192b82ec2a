// The persistent LSTM recurrence kernels (lstm_persistent.cu), host side: the plan that says
// whether a problem fits, and the forward and backward launches of lstm_recurrence and
// lstm_recurrence_backward (CUDA builds only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/sparse/block_layout.h"
#include "core/tensor.h"
#include "kernels/common/recurrence_items.h"

namespace tessera {
namespace cuda {

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
  int cluster = 1;        ///< the backward's K split: blocks per thread block cluster (1: none; see the .cu)
  size_t smem = 0;
  /// Set where a block-sparse layout's largest groups do not fit one block (Barabási–Albert hubs):
  /// the groups split into parts over blocks and each block's items (recurrence_items.h); the
  /// grid is then one block per packed block. Null: group g in block g % grid, as it always was.
  std::shared_ptr<const RecurrencePacking> packing;
  std::string reason;
};

/// The plan of the forward (backward = false) or backward recurrence on `device` for batch B,
/// hidden size H, dtype and layout (null: dense). Dense layers split K over thread block clusters
/// (each block of a pair reads half of h or dpre per step) on compute capability 9.0 when every
/// cluster fits at once (and K's 64-column chunks split evenly); TESSERA_LSTM_CLUSTER=1 turns
/// the split off.
RecurrencePlan plan_recurrence(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout,
                               bool backward);

/// lstm_recurrence's forward on the GPU (the plan must fit): gx [T, B, 4H], h0, c0 [B, H], wh;
/// outputs y [T, B, H], hT, cT [B, H], gates [T, B, 4H] f32, cells [T, B, H] f32.
void recurrence_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh,
                        const LayoutPtr& layout, double forget_bias, const Tensor& y, const Tensor& hT,
                        const Tensor& cT, const Tensor& gates, const Tensor& cells);

/// lstm_recurrence_backward on the GPU: outputs dpre [T, B, 4H], dh0, dc0 [B, H].
void recurrence_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                         const Tensor& cells, const Tensor& c0, const Tensor& wh, const LayoutPtr& layout,
                         const Tensor& dpre, const Tensor& dh0, const Tensor& dc0);

/// The floor of a persistent recurrence's step on `device`, enqueued on its stream: one
/// cooperative launch of the kernels' grid (one block per SM) doing `steps` grid barriers, each
/// after one dependent 16-byte exchange between blocks through L2 (exchange) or alone. With
/// cluster > 1 (2, 4 or 8; compute capability 9.0) the launch is cooperative and clustered at
/// once, on as many whole clusters as can be resident, and every round adds a cluster barrier:
/// what a recurrence that splits K over a cluster would pay. Returns the grid it launched; throws
/// the driver's refusal (a clustered cooperative launch may not be supported). For
/// bench/lstm_step, which times it.
int launch_step_floor(int device, int64_t steps, bool exchange, int cluster = 1);

}  // namespace cuda
}  // namespace tessera
