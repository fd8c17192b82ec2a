// The tensor-core kernels of the block-sparse matmuls (bsmm, bsmm_dx, bsmm_dw) and the rule that
// picks one (CUDA builds only):
//
//   cuda::GatherProduct p{...};                        // fwd (Y = X·W) or dx (dX = dY·Wᵀ)
//   if (!cuda::run_gather(p, device, stream)) ...      // no tensor-core kernel takes it: scalar kernel
//
// The rule is deterministic, by (dtype, block size, gate, architecture, alignment) (the ops ask
// bsmm_dense.h's rule first whether the dense route, cuBLAS on the blocks laid out densely,
// takes the call instead):
//   - sm_90a kernels (bsmm_sm90_*.cu: wgmma, TMA, warp-specialized, persistent) on compute
//     capability 9.0, when the build has them (CUDA architecture 90): bf16/f16 operands,
//     block sizes 16, 32 and 64 for fwd/dx (gated or not), every block size for dW;
//   - otherwise sm_80 kernels (bsmm_sm80.cu: mma.sync, ldmatrix, cp.async) on compute
//     capability 8.0 or higher: bf16/f16 operands, and f32 operands rounded to tf32 when TF32 is
//     allowed (cuda::allow_tf32(), TESSERA_ALLOW_TF32=1); every block size, gated or not;
//   - otherwise (f32 without TF32, f64, operands not 16-byte aligned) the op's exact scalar kernel.
// The environment variable TESSERA_BSMM_PATH overrides it: `sm80` never takes the sm_90a kernels
// (the A100 path, on any GPU), `simt` never takes a tensor-core kernel. It is read on every call.
// Within the sm_90a fwd/dx kernel, column pairs (two output block columns per work item) run
// where the layout's lists overlap enough (bsmm_sm90.h's pairs_pay; TESSERA_BSMM_PAIRS=0/1
// forces them off/on); they give the same bits as single columns.
//
// Deterministic: every output element is summed by one thread, over the stored blocks in the
// order of the layout's list (increasing block row for fwd, increasing block column for dx; the
// sum over the N rows for dW in increasing row order), with no atomics: the same inputs give the
// same bits on every run and in CUDA-graph replay. The sm_90a dW kernel may split the sum over N
// into parts (by a rule of the layout, N and the device's multiprocessor count: see
// bsmm_sm90_gradient.cu; TESSERA_BSMM_DW_PARTS=P forces P) that a second kernel adds in a fixed
// order, into f32 partial sums from the device's pool. Different kernels (sm_90a, sm_80) may round
// differently from each other; the rule gives each call the same kernel every time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/conv_index.h"

namespace tessera {
namespace cuda {

/// out [n, outs·bs] (+)= sum over the list of output block o of gate[k]·A[:, in(k)-block]·B(k),
/// B(k) = W[k] (fwd) or W[k]ᵀ (dx). A [n, a_cols].
struct GatherProduct {
  DType in_dtype;            ///< of a, w, gate: bf16, f16 or f32 (tf32 math)
  DType out_dtype;           ///< in_dtype or f32
  int bs;                    ///< block size 8, 16, 32 or 64
  bool transpose_w;          ///< dx: B(k) = W[k]ᵀ
  bool accumulate;           ///< out += (β = 1) instead of out =
  const void* a;             ///< [n, a_cols]
  const void* w;             ///< [nnz, bs, bs]
  const void* gate;          ///< [nnz] or nullptr
  void* out;                 ///< [n, outs·bs]
  int64_t n, a_cols, out_cols;
  int32_t outs;              ///< output block columns
  int64_t nnz;               ///< stored blocks (of w)
  const int32_t* work;       ///< [outs, 3]: (output block o, list begin, list end), longest list first
  const int32_t* list;       ///< fwd: the list's block indices k (col_blocks); dx: nullptr (k = list position)
  const int32_t* list_in;    ///< [nnz]: A's block column of each list entry (col_rows for fwd, block_col for dx)
  int32_t* counter;          ///< 2 device ints, 0 between launches: the sm_90a kernel hands out work items with them
  /// Output block columns pair_list(j, 0, s) and pair_list(j, 1, s) merged into one list by input
  /// block (layout_tables.h's PairLists: col_pairs for fwd, row_pairs for dx), for the sm_90a
  /// kernel's column pairs; s is pair_stride below.
  const int32_t* pair_work = nullptr;
  const int32_t* pair_entries = nullptr;
  int32_t pairs = 0;
  int64_t pair_steps = 0;
  /// fwd: [out_cols] in out_dtype (f32 with bias_f32), added to every row of the sums before they
  /// are stored (not with accumulate, nor a convolution, nor on the dense route, whose caller adds
  /// it); nullptr: none
  const void* bias = nullptr;
  bool bias_f32 = false;  ///< bias is f32 while out_dtype is bf16/f16 (autocast's low output)
  int32_t pair_stride = 1;  ///< PairLists::stride of pair_work (a gate layout's forward: q)
  /// nn::LSTM's gate layouts, fwd at bs 32: column quads, the four gates' columns c, c + q, c + 2q,
  /// c + 3q of a gate-0 column (one list) in one work item of the sm_90a kernel (layout_tables.h's
  /// gate_fwd_quads); quads = q, 0: none (the lab's TESSERA_BSMM_QUADS=1 asks for them)
  const int32_t* quad_work = nullptr;
  const int32_t* quad_entries = nullptr;
  int32_t quads = 0;
};

/// dw [nnz, bs, bs] (+)= gate·P per stored block, P[k] = X[:, r-block]ᵀ·dY[:, c-block] (gate 1
/// without one), and with a gate dgate [nnz] = sum over each block of P ⊙ w, computed in runs of
/// blocks that share a strip: of one block row (sm_80 kernel: the X strip) or of one block
/// column (sm_90a kernel: the dY strip). The gate epilogue runs on the f32 accumulators; dgate's
/// sum over a block is a fixed-order tree (warp shuffles, then the warps in order).
struct BlockGradient {
  DType in_dtype, out_dtype;
  int bs;
  bool accumulate;
  const void* x;             ///< [n, C]
  const void* dy;            ///< [n, K]
  void* dw;                  ///< [nnz, bs, bs]
  int64_t n, C, K;
  int64_t nnz;               ///< stored blocks
  int32_t groups;            ///< entries of `group`
  const int32_t* group;      ///< [groups, 2]: (first block k, block count <= 128/bs) of one block row
  int32_t col_runs;          ///< entries of `col_run`
  const int32_t* col_run;    ///< [col_runs, 3]: (list begin in col_blocks, count <= 256/bs, block column),
                             ///< longest first
  const int32_t* col_blocks; ///< [nnz]: the blocks of each block column, by row (block_layout.h)
  const int32_t* col_rows;   ///< [nnz]: block_row of each col_blocks entry
  const int32_t* block_row;  ///< [nnz]
  const int32_t* block_col;  ///< [nnz]
  int32_t* counter;          ///< as GatherProduct's
  bool transposed = false;   ///< x is Xᵀ [C, n] and dy is dYᵀ [K, n] (see gradient_wants_transposed)
  const void* w = nullptr;   ///< [nnz, bs, bs] in in_dtype, with a gate
  const void* gate = nullptr;///< [nnz] in in_dtype, or nullptr: ungated
  void* dgate = nullptr;     ///< [nnz] in out_dtype, with a gate
};

/// Whether the kernel that run_gradient picks for g takes its operands transposed: Xᵀ [C, n] and
/// dYᵀ [K, n] in x and dy, with `transposed` set (the sm_90a kernel at bs 8 when n is a multiple
/// of 8: its strips [n, 8] are rows of 16 bytes, half an L2 sector; Xᵀ's are 128). The caller
/// transposes, into temporaries.
bool gradient_wants_transposed(const BlockGradient& g, int device);

/// The kernel families, for launch counts (sm90_pairs: the sm_90a gather kernel's column pairs;
/// sm90_conv: the sm_90a kernels in convolution mode, sm90_halo those of them in halo mode,
/// sm90_halo_tall those with 512-row tiles, sm90_halo_entry those in entry mode, sm90_halo_strip those
/// in the strip form (TESSERA_BSCONV_HALO_STRIP), sm90_dw_strip the halo dW kernel's strip form
/// (TESSERA_BSCONV_DW_STRIP, also counted as sm90_conv and sm90_halo); sm90_gate_runs:
/// the sm_90a dW kernel of gate layouts; all also counted as sm90; sm80_conv: the sm_80 kernels in
/// convolution mode, also counted as sm80).
enum class BsmmKernel {
  sm80, sm90, sm90_pairs, sm90_quads, sm90_conv, sm90_halo, sm90_halo_tall, sm90_halo_entry, sm90_halo_strip,
  sm90_dw_strip, sm90_gate_runs, sm80_conv
};

/// Runs p / g on the kernel the rule above picks; false (nothing launched) when no tensor-core
/// kernel takes it.
bool run_gather(const GatherProduct& p, int device, cudaStream_t stream);
bool run_gradient(const BlockGradient& g, int device, cudaStream_t stream);
/// bsmm_dw of a gate layout (nn::LSTM's: four gates of one mask) on the sm_90a kernel whose runs
/// share each entry's X strip among the four gates (bsmm_sm90.h's gate_gradient), where it takes
/// g; false (nothing launched) otherwise, and then run_gradient.
bool run_gate_gradient(const BlockGradient& g, const LayoutPtr& layout, int device, cudaStream_t stream);

/// bsmm_dw_pair's second layout: X_b [rows, C] with rows = n − shift (dY row t reads X_b row
/// t − shift), its blocks' gradients dw [nnz, bs, bs] in a's output dtype; and, not null, where
/// dY's column sums Σ_t dY[t, :] [K] go in f32 (column_sums: the kernel writes them where every
/// gate-0 column has a run).
struct GatePairOperand {
  const void* x;
  int64_t rows, C, nnz, shift;
  void* dw;
  float* column_sums;
};
/// bsmm_dw_pair of two gate layouts (nn::LSTM's input and recurrent masks, one dY) in one launch
/// of the gate-run kernel (bsmm_sm90.h's gate_pair_gradient), where it takes them: a = g of
/// layout a, b of layout b; false (nothing launched) otherwise. *sums_written (where given): whether
/// the launch wrote b.column_sums. gate_pair_gradient_applies: the same rule without launching.
bool run_gate_pair_gradient(const BlockGradient& a, const LayoutPtr& la, const GatePairOperand& b,
                            const LayoutPtr& lb, int device, cudaStream_t stream, bool* sums_written = nullptr);
bool gate_pair_gradient_applies(const BlockGradient& a, const LayoutPtr& la, const GatePairOperand& b,
                                const LayoutPtr& lb, int device);

/// The block-sparse convolutions (bsconv, bsconv_dx; bsconv_dw) on the tensor-core kernels in
/// convolution mode, over `batch` samples of geometry ci, by the same rule as the matmuls:
///   - sm_90a (bsmm_sm90.h's gather_conv, gather_conv_halo, conv_gradient) on compute
///     capability 9.0: stride 1, at most 64 taps, bf16/f16, bs 16-64 for bsconv and bsconv_dx
///     (in halo mode where it fits: each block's input box copied once for all taps), 8-64 for
///     bsconv_dw (halo mode at bs 16 and 32: conv_gradient_halo);
///   - otherwise sm_80 (bsmm_sm80.h's gather_conv, conv_gradient) on compute capability 8.0 or
///     higher: every geometry (stride included) and block size, bf16/f16, f32 as tf32 under
///     TESSERA_ALLOW_TF32=1;
///   - otherwise (or with a gate, accumulate, misaligned operands) the op's scalar kernel.
/// conv_takes / conv_gradient_takes say whether a tensor-core kernel takes the call; run_conv /
/// run_conv_gradient run it (DeviceError when none does). TESSERA_BSMM_PATH=sm80 forces the
/// sm_80 kernels, simt the scalar ones; TESSERA_BSCONV_HALO=0 the sm_90a per-tap copies instead
/// of the halo mode (1 or unset: halo mode where it pays; any other value a ValueError).
/// run_conv_gradient wants g.col_run / g.col_runs from cuda::conv_dw_runs (layout_tables.h) with
/// conv_gradient_run_size's entries a run for the sm_90a kernels, and the layout's dw_group / dw_groups
/// for sm_80.
bool conv_takes(const GatherProduct& p, const ConvIndex& ci, int device);
bool conv_gradient_takes(const BlockGradient& g, const ConvIndex& ci, int device);
int32_t conv_gradient_run_size(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device);
void run_conv(const GatherProduct& p, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream);
void run_conv_gradient(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream);

/// Launches of a kernel family so far in this process (all devices): tests check with it which
/// kernel a call took.
uint64_t bsmm_launches(BsmmKernel kernel);

/// Whether this build has the sm_90a kernels.
bool have_sm90_kernels();

}  // namespace cuda
}  // namespace tessera
