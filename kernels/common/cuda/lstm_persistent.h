// The persistent LSTM recurrence kernels (lstm_persistent.cu), host side: the plan that says
// whether a problem fits, and the forward and backward launches of lstm_recurrence and
// lstm_recurrence_backward (CUDA builds only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/sparse/block_layout.h"
#include "core/tensor.h"
#include "kernels/common/recurrence_plan.h"

namespace tessera {
namespace cuda {

using ::tessera::RecurrencePlan;  // recurrence_plan.h

/// The plan (recurrence_plan.h) of the forward (backward = false) or backward recurrence on CUDA
/// device `device`, from its figures.
RecurrencePlan plan_recurrence(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout,
                               bool backward);

/// lstm_recurrence's forward on the GPU (the plan must fit): gx [T, B, 4H], h0, c0 [B, H], wh,
/// bias [4H] or undefined (none); outputs y [T, B, H], hT, cT [B, H], gates [T, B, 4H] f32, cells
/// [T, B, H] f32.
void recurrence_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                        const LayoutPtr& layout, double forget_bias, const Tensor& y, const Tensor& hT,
                        const Tensor& cT, const Tensor& gates, const Tensor& cells);

/// Whether the recurrence runs on the wgmma kernels (below) where they fit, on a GPU of compute
/// capability 9.0 (an sm_90a build), by TESSERA_LSTM_WGMMA: auto (the default) each case's faster
/// kernel as measured on the H100 (docs/lstm_gpu.md, "Which path runs"), which is the wgmma one in
/// all four (dense and block-sparse, forward and backward); 1 the wgmma ones (today the same as
/// auto); 0 the production kernels only. Either direction takes the other's saved gates and cells,
/// so the two may mix. Anything else is a ValueError.
bool wgmma_wanted();

/// The dense recurrence on wgmma (lstm_wgmma_forward.cu, lstm_wgmma_backward.cu).
/// wgmma_forward_unfit says why it does not take a problem ("" where it does: dense, bf16/f16,
/// batch ≤ 64, hidden a multiple of 64 with its groups of 8 units all resident). wgmma_cluster
/// gives the cluster size a direction runs with here, whose blocks share each operand copy by
/// multicast: 1 unless TESSERA_LSTM_WGMMA_CLUSTER=2|4 asks for more (the multicast measured 3×
/// slower on the H100: docs/lstm_gpu.md), 0 where it does not take the problem or the asked
/// clusters cannot all be resident. wgmma_forward / wgmma_backward run them
/// (recurrence_forward's / recurrence_backward's tensors, without the layout); the launch counts
/// are this process's (for the tests).
std::string wgmma_forward_unfit(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout);
int wgmma_cluster(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout, bool backward);
void wgmma_forward(int cluster, const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh,
                   const Tensor& bias, double forget_bias, const Tensor& y, const Tensor& hT, const Tensor& cT,
                   const Tensor& gates, const Tensor& cells);
void wgmma_backward(int cluster, const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                    const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre, const Tensor& dh0,
                    const Tensor& dc0);
uint64_t wgmma_forward_launch_count();
uint64_t wgmma_backward_launch_count();

/// The dense forward and backward on wgmma with W_h partly streamed from L2
/// (lstm_wgmma_{forward,backward}_streamed.cu, the backward with K split over clusters of two
/// blocks): where they fit (dense, bf16/f16, batch ≤ 64, hidden a multiple of 64, their blocks of
/// 16 units all resident), taken where the resident kernels above do not fit (dense H 2048 on the
/// H100: 16.9 -> 13.3 ms a layer step, 9.6 with the K split; cuDNN's 11.4), or before them where
/// TESSERA_LSTM_WGMMA_STREAMED asks (wgmma_streamed_first: 1, as many of W's K boxes resident as
/// fit; 1:N at most N); 0 turns them off. The _unfit functions say why not.
bool wgmma_streamed_first();
std::string wgmma_streamed_forward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                         const LayoutPtr& layout);
void wgmma_streamed_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh,
                            const Tensor& bias, double forget_bias, const Tensor& y, const Tensor& hT,
                            const Tensor& cT, const Tensor& gates, const Tensor& cells);
uint64_t wgmma_streamed_forward_launch_count();
std::string wgmma_streamed_backward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                          const LayoutPtr& layout);
void wgmma_streamed_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                             const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre,
                             const Tensor& dh0, const Tensor& dc0);
uint64_t wgmma_streamed_backward_launch_count();

/// The block-sparse forward on wgmma (lstm_wgmma_sparse_forward.cu), for nn::LSTM's gate layouts
/// in blocks of 32 whose groups all fit (one group of 32 units per resident block, or where those
/// pass the resident blocks two a block; at most 32 block rows a group). wgmma_sparse_forward_unfit
/// says why not ("" where it takes the problem).
std::string wgmma_sparse_forward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                       const LayoutPtr& layout);
void wgmma_sparse_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                          const LayoutPtr& layout, double forget_bias, const Tensor& y, const Tensor& hT,
                          const Tensor& cT, const Tensor& gates, const Tensor& cells);
uint64_t wgmma_sparse_forward_launch_count();
/// Launches of its streamed form (two groups a block, W tiles past each group's resident ones copied
/// with their operand boxes; TESSERA_LSTM_SPARSE_STREAMED, on by default where nothing else fits).
uint64_t wgmma_sparse_streamed_forward_launch_count();
uint64_t wgmma_sparse_streamed_backward_launch_count();

/// The block-sparse backward on wgmma (lstm_wgmma_sparse_backward.cu), for W_h [H, 4H] in blocks
/// of 32 whose block rows all fit (one row of 32 units per resident block, or two a block as the
/// forward's groups; at most 96 blocks a row). wgmma_sparse_backward_unfit says why not.
std::string wgmma_sparse_backward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                        const LayoutPtr& layout);
void wgmma_sparse_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                           const Tensor& cells, const Tensor& c0, const Tensor& wh, const LayoutPtr& layout,
                           const Tensor& dpre, const Tensor& dh0, const Tensor& dc0);
uint64_t wgmma_sparse_backward_launch_count();
/// Launches of either block-sparse kernel with two groups or block rows a block
/// (TESSERA_LSTM_SPARSE_PAIRS, lstm_wgmma_ring.cuh).
uint64_t wgmma_sparse_paired_launch_count();
/// Launches of the block-sparse backward with gate boxes (TESSERA_LSTM_SPARSE_GATE_BOXES).
uint64_t wgmma_sparse_backward_gate_box_launch_count();

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

/// Lab (lstm_wgmma_floor.cu, issue 16): T steps of a stripped dense LSTM recurrence (H 1024,
/// batch 64, bf16) whose per-step product runs on wgmma from shared memory fed by TMA, one block
/// of 8 units per SM and a split grid barrier per step, on a's stream. Forward: a = h [(T + 1)·64,
/// 1024] (h_0 in rows 0 … 63, h_t written to rows t·64 …), w = wt [4096, 1024] (row n: product
/// column n; block g's rows 32g … are gates i, f, o, u of units 8g … 8g+7), the LSTM cell after
/// the product. Backward: a = dpre [(T + 1)·64, 4096], w [1024, 4096] (row u: unit u's row of
/// W_h), dh = dpre·W_hᵀ with a stand-in for the gate gradients (lstm_wgmma_floor.cu). The products
/// sum over a's first k_cols columns (a multiple of 64). cluster 2 or 4: the blocks in clusters
/// of that many, each operand box copied from L2 once per cluster and multicast to its blocks
/// (NotImplementedError where that many clusters cannot be resident at once). Returns the grid.
/// Compute capability 9.0 and a build for it only (else NotImplementedError). For bench/lstm_step.
int wgmma_step_floor(const Tensor& a, const Tensor& w, int64_t k_cols, bool backward = false, int cluster = 1);

}  // namespace cuda
}  // namespace tessera
