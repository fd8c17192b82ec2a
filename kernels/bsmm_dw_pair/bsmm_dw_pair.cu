// bsmm_dw_pair on the GPU: both layouts' blocks in one launch of the gate-run dW kernel where it
// takes them (bsmm_dw_pair_fused), else bsmm_dw's CUDA kernels on each layout.
#include <memory>

#include "core/cuda/check.cuh"
#include "kernels/bsmm_dw/bsmm_dw.h"
#include "kernels/bsmm_dw_pair/bsmm_dw_pair.h"
#include "kernels/col_sum/col_sum.h"
#include "kernels/common/cuda/bsmm_dense.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/env_switch.h"

namespace tessera {

namespace {

/// Rows [from, from + rows) of a contiguous 2-D tensor, as a tensor on its storage.
Tensor row_range(const Tensor& t, int64_t from, int64_t rows) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->offset = t.impl()->offset + static_cast<size_t>(from * t.size(1)) * dtype_size(t.dtype());
  impl->meta = {Shape({rows, t.size(1)}), t.dtype(), t.device()};
  return Tensor(impl);
}

/// The kernel's view of the pair: a as bsmm_dw's BlockGradient (its tables), b's operands.
struct PairCall {
  cuda::BlockGradient a;
  cuda::GatePairOperand b;
};

PairCall pair_call(const void* x_a, const void* x_b, const void* dy, void* dw_a, void* dw_b, DType dt, DType out,
                   int64_t n, const LayoutPtr& la, const LayoutPtr& lb, int64_t shift, int device,
                   float* column_sums = nullptr) {
  const BlockLayout &a = *la, &b = *lb;
  const cuda::BlockTables t = cuda::device_tables(la, device);
  return {cuda::BlockGradient{dt, out, static_cast<int>(a.block_size()), false, x_a, dy, dw_a, n, a.in_features(),
                              a.out_features(), a.nnz(), t.dw_groups, t.dw_group, t.dw_col_runs, t.dw_col_run,
                              t.col_blocks, t.col_rows, t.block_row, t.block_col, t.counter},
          cuda::GatePairOperand{x_b, n - shift, b.in_features(), b.nnz(), shift, dw_b, column_sums}};
}

// TESSERA_BSMM_DW_PAIR: 1 the one launch where it applies, 0 two bsmm_dw (the lab's A/B switch);
// unset: kPairByDefault. On since its GPU tests passed (H100, 2026-12-07): the graph step of the
// random sparse H 4096 layer at 1/16 6.37 / 6.41 -> 6.16 / 6.21 ms, of H 8192 at 1/64 9.91 / 9.89 ->
// 9.70 / 9.74 (two rounds; docs/bsmm_kernels.md). Layouts whose pair saves no runs take two
// launches (gate_pair_dw_runs).
constexpr bool kPairByDefault = true;
bool pair_switch_on() { return env_switch("TESSERA_BSMM_DW_PAIR", "0", "1", kPairByDefault); }

// TESSERA_BSMM_DW_PAIR_SUMS: 1 the column sums in the pair's kernel where it can write them (each
// column's first run), 0 col_sum's kernel after it; unset: kSumsByDefault. On since its GPU tests
// passed (H100, 2026-12-07, lstm_chunks_call.sh, graph step, 1 chunk paced by 2, quads on): random
// sparse H 4096 at 1/16 5.669 / 5.567 -> 5.460 / 5.440 ms, H 8192 at 1/64 9.202 / 9.129 -> 8.723 /
// 8.777, H 8192 at 1/16 18.290 / 18.255 -> 18.150 / 17.927 (the pair's op, col_sum in it, 1.84 ->
// 1.50 ms at H 8192 1/64).
constexpr bool kSumsByDefault = true;
bool sums_switch_on() { return env_switch("TESSERA_BSMM_DW_PAIR_SUMS", "0", "1", kSumsByDefault); }

/// Whether the pair may run as one launch: the switch on, neither layout on bsmm_dw's dense route
/// (high densities), where bsmm_dw would not take the gate-run kernel either.
bool pair_wanted(const PairCall& c, const LayoutPtr& la, const LayoutPtr& lb, int device) {
  auto dense = [&](const BlockLayout& l, int64_t rows, const void* x) {
    return cuda::dense_route_takes(cuda::BsmmOp::dw, c.a.in_dtype, l, rows, {x, c.a.dy}, device);
  };
  return pair_switch_on() && !dense(*la, c.a.n, c.a.x) && !dense(*lb, c.b.rows, c.b.x);
}

}  // namespace

bool bsmm_dw_pair_fused(const TensorMeta& x_a, const TensorMeta& x_b, const TensorMeta& dy,
                        const LayoutPtr& layout_a, const LayoutPtr& layout_b, int64_t shift) {
  if (!dy.device.is_cuda() || !layout_a || !layout_b || x_a.shape.ndim() != 2 || x_b.shape.ndim() != 2 ||
      dy.shape.ndim() != 2 || x_a.dtype != dy.dtype || x_b.dtype != dy.dtype)
    return false;
  const int64_t n = dy.shape[0];
  const int device = dy.device.index;
  if (x_a.shape[0] != n || x_b.shape[0] != n - shift) return false;
  // dummy aligned addresses: the rules read only shapes, dtypes and alignment here
  void* const aligned = reinterpret_cast<void*>(uintptr_t{256});
  const PairCall c =
      pair_call(aligned, aligned, aligned, aligned, aligned, dy.dtype, dy.dtype, n, layout_a, layout_b, shift, device);
  return pair_wanted(c, layout_a, layout_b, device) &&
         cuda::gate_pair_gradient_applies(c.a, layout_a, c.b, layout_b, device);
}

void op::BsmmDwPair::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x_a = in[0], &x_b = in[1], &dy = in[2];
  const int64_t n = dy.size(0), shift = attrs.shift;
  const int device = dy.device().index;
  const cudaStream_t stream = cuda::current_stream(dy);
  float* const sums = attrs.column_sums && sums_switch_on() ? static_cast<float*>(out[2].data_ptr()) : nullptr;
  const PairCall c = pair_call(x_a.data_ptr(), x_b.data_ptr(), dy.data_ptr(), out[0].data_ptr(), out[1].data_ptr(),
                               dy.dtype(), out[0].dtype(), n, attrs.layout_a, attrs.layout_b, shift, device, sums);
  bool sums_written = false;
  if (!(pair_wanted(c, attrs.layout_a, attrs.layout_b, device) &&
        cuda::run_gate_pair_gradient(c.a, attrs.layout_a, c.b, attrs.layout_b, device, stream, &sums_written))) {
    op::BsmmDw::cuda({x_a, dy}, {out[0]}, {attrs.layout_a, attrs.f32_output});
    op::BsmmDw::cuda({x_b, row_range(dy, shift, n - shift)}, {out[1]}, {attrs.layout_b, attrs.f32_output});
  }
  if (attrs.column_sums && !sums_written) op::ColSum::cuda({dy}, {out[2]}, {});
}

}  // namespace tessera
