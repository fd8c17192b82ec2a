// The dense route of the block-sparse matmuls (CUDA builds only): where the block-sparse kernels
// would be slower than the dense product of the same shape, bsmm, bsmm_dx and bsmm_dw run as
// cuBLAS GEMMs on a dense copy of the weight's stored blocks (zeros elsewhere), built in chunks
// of output columns, and gather the weight gradient's blocks from a dense f32 product:
//
//   fwd  Y[:, cols] (+)= X · Wd[:, cols]           Wd [C, K]: block k at (block_row, block_col), times gate[k]
//   dx   dX[:, rows] (+)= dY · Wd[rows, :]ᵀ
//   dw   P = Xᵀ · dY[:, cols] in f32 [C, |cols|];  dw[k] (+)= gate[k]·P's block k,  dgate[k] = Σ P⊙w[k]
//
// It pays for small blocks at moderate density: their kernels reach a useful-frac (sparse useful
// flop rate over the dense product's) of about 0.03 at bs 8 and 0.08 at bs 16 on the H200, so a
// layout denser than that runs faster as the dense product (docs/bsmm_kernels.md).
//
// The rule (deterministic, by operand dtype, block size, density, N, op and kernel family): the
// route is taken when density > u·(1 + r/N) and N ≥ kDenseRouteMinRows, where u is the measured
// useful-frac of the block-sparse kernel that would run (sparse_useful_frac) and r/N the route's
// extra memory traffic (zeroing, filling and reading Wd, or P's f32 write and read) relative to
// the GEMM's time (so at bs 64 the sm_90a fwd/dx kernels, 0.85 of cuBLAS at density 1, hand off
// only above density 0.93 at N 8192); f64 never hands off. TESSERA_BSMM_DENSE overrides it: `0` never, `1` whenever the
// operands allow (bf16, f16, f32; 16-byte aligned); any other value is a ValueError naming it.
// TESSERA_BSMM_PATH=simt turns the route off too (the exact scalar kernels, for comparisons).
//
// Chunks: Wd and P are temporaries of the device's stream-ordered pool of at most
// kDenseChunkBytes each (a chunk covers as many whole block columns or block rows as fit), so
// C = K = 32768 needs no 2-4 GB buffer. Deterministic: each GEMM is one cuBLAS call of fixed
// configuration (the same bits on every run and in CUDA-graph replay), the fill and the gather
// write each element once, dgate sums in the epilogue's fixed order (bsmm_gate.cuh). The bits
// differ from the block-sparse kernels' (another order of the sums); the rule gives a call the
// same route every time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/sparse/block_layout.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {
namespace cuda {

enum class BsmmOp { fwd, dx, dw };

/// Bytes of one chunk of Wd or P (on the H200, bs 16, N 8192 x 4096 x 4096: 64 MB, one GEMM,
/// 0.330 / 0.350 ms fwd / dw; 16 MB 0.343 / 0.367; 8 MB 0.358 / 0.397).
constexpr int64_t kDenseChunkBytes = int64_t{64} << 20;
/// Fewer rows than this never take the route (a recurrent step's batch: the sparse kernels read
/// only the stored blocks, the GEMM all of Wd).
constexpr int64_t kDenseRouteMinRows = 512;

/// The useful-frac the rule assumes for the block-sparse kernel that would run `op` on `dt`
/// operands at block size bs on `device` (measured on the H200, docs/bsmm_kernels.md).
double sparse_useful_frac(BsmmOp op, DType dt, int bs, int device);

/// Whether the dense route takes a call of `op` with n rows (the rule above and its overrides);
/// `operands` (null ones ignored) must start on 16-byte boundaries.
bool dense_route_takes(BsmmOp op, DType dt, const BlockLayout& l, int64_t n,
                       std::initializer_list<const void*> operands, int device);

/// fwd or dx (p.transpose_w) through the dense route: p's operands and epilogue (out dtype,
/// accumulate), the layout l and its device tables t.
void dense_product(const GatherProduct& p, const BlockLayout& l, const BlockTables& t, int device,
                   cudaStream_t stream);

/// dw (and, with g.gate, dgate) through the dense route; g.transposed must be false.
void dense_gradient(const BlockGradient& g, const BlockLayout& l, const BlockTables& t, int device,
                    cudaStream_t stream);

/// Calls that took the dense route so far in this process (tests check the rule with it).
uint64_t dense_route_calls();

}  // namespace cuda
}  // namespace tessera
