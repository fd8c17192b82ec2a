// bsmm on the GPU: y [N, K] = x [N, C] · W over the layout's stored blocks (w [nnz, bs, bs]),
// block k scaled by gate[k] when gated, plus bias[K] on every row when biased (in every kernel's
// epilogue; on the dense route an elementwise add after the GEMMs). Where the block-sparse kernels would be slower
// than the dense product (small blocks at moderate density, many rows), the dense route runs a
// cuBLAS GEMM on the blocks laid out densely (kernels/common/cuda/bsmm_dense.h); otherwise bf16/f16 (and f32
// when TF32 is allowed) run on tensor cores (kernels/common/cuda/bsmm_tc.h picks the kernel); f32
// and f64 otherwise, and operands that are not 16-byte aligned, run the exact scalar kernel below.
//
//   y[n, c·bs + j] = sum over the stored blocks k of block column c (block row r = block_row[k],
//                    increasing r, as on the CPU) of gate[k] · sum_i x[n, r·bs + i] · W[k][i][j]
//
// Thread mapping: one CUDA block per (tile of kRows rows of x, output block column c), threads
// (j, t) with j < bs, t < kRows = 256 / bs; thread (j, t) computes y[n0 + t, c·bs + j]. For each
// block k of the column, W[k] [bs, bs] and the tile's x block [kRows, bs] are staged in shared
// memory (as acc_t), then each thread adds its dot product. A column without stored blocks gives
// zeros. The CPU kernel in bsmm.cpp is the reference. Scalar kernel:
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/bsmm/bsmm.h"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/bsmm_dense.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/env_switch.h"

namespace tessera {

namespace {

// TESSERA_BSMM_QUADS: 1 the sm_90a kernel's column quads for nn::LSTM's gate layouts (the four
// gates of a column in one work item: bsmm_sm90_gather.cu), 0 pairs as before; unset:
// kQuadsByDefault. On since its GPU tests passed (H100, 2026-12-07, lstm_switches_call.sh, the
// layer's x·W_x forward, two rounds): random sparse H 4096 at 1/16 0.558 -> 0.416 / 0.428 ms, H 8192
// at 1/64 0.790 -> 0.761 / 0.755. Read only where the layout is asked for bs 32 (a bad value is a
// ValueError there).
constexpr bool kQuadsByDefault = true;
bool quads_switch_on() { return env_switch("TESSERA_BSMM_QUADS", "0", "1", kQuadsByDefault); }

template <class T, class TO, class TB, int BS>
__global__ void bsmm_forward(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ gate,
                             const TB* __restrict__ bias, TO* __restrict__ y, int64_t n, int64_t C, int64_t K,
                             int64_t Q,
                             const int32_t* __restrict__ col_ptr, const int32_t* __restrict__ col_blocks,
                             const int32_t* __restrict__ block_row) {
  using A = cuda::acc_t<T>;
  constexpr int kRows = 256 / BS;
  __shared__ A ws[BS][BS];    // W[k]
  __shared__ A xs[kRows][BS];  // x[n0 .. n0 + kRows, r·bs .. (r+1)·bs]
  const int j = threadIdx.x, t = threadIdx.y;
  const int64_t c = blockIdx.x % Q, row = (blockIdx.x / Q) * kRows + t;
  A acc = 0;
  for (int32_t p = col_ptr[c]; p < col_ptr[c + 1]; ++p) {
    const int64_t k = col_blocks[p], r = block_row[k];
    for (int e = t * BS + j; e < BS * BS; e += BS * kRows) ws[e / BS][e % BS] = cuda::to_acc(w[k * BS * BS + e]);
    xs[t][j] = row < n ? cuda::to_acc(x[row * C + r * BS + j]) : A(0);
    __syncthreads();
    A dot = 0;
    for (int i = 0; i < BS; ++i) dot += xs[t][i] * ws[i][j];
    acc += gate ? cuda::to_acc(gate[k]) * dot : dot;
    __syncthreads();  // before the next block overwrites ws and xs
  }
  if (bias) acc += static_cast<A>(cuda::to_acc(bias[c * BS + j]));
  if (row < n) y[row * K + c * BS + j] = cuda::from_acc<TO>(acc);
}

}  // namespace

void op::Bsmm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1], &y = out[0];
  const Tensor bias = attrs.biased ? in[attrs.gated ? 3 : 2] : Tensor();  // [K] in y's dtype, or f32
  const void* bias_ptr = bias.defined() ? bias.data_ptr() : nullptr;
  const BlockLayout& l = *attrs.layout;
  const int64_t n = x.size(0), C = l.in_features(), K = l.out_features(), Q = l.block_cols();
  if (y.numel() == 0) return;
  const int dev = y.device().index;
  const cuda::BlockTables tables = cuda::device_tables(attrs.layout, dev);
  {
    cuda::GatherProduct p{x.dtype(), y.dtype(), static_cast<int>(l.block_size()), /*transpose_w=*/false,
                                /*accumulate=*/false, x.data_ptr(), w.data_ptr(),
                                attrs.gated ? in[2].data_ptr() : nullptr, y.data_ptr(), n, C, K,
                                static_cast<int32_t>(Q), l.nnz(), tables.col_work, tables.col_blocks, tables.col_rows,
                                tables.counter,
                                tables.col_pairs.work,
                                tables.col_pairs.entries,
                                tables.col_pairs.pairs,
                                tables.col_pairs.steps,
                                bias_ptr,
                                attrs.f32_bias,
                                tables.col_pairs.stride};
    if (l.block_size() == 32 && !attrs.gated && quads_switch_on()) {  // a gate layout's column quads
      const cuda::GateQuadTables quads = cuda::gate_fwd_quads(attrs.layout, dev);
      p.quad_work = quads.work;
      p.quad_entries = quads.entries;
      p.quads = quads.quads;
    }
    if (cuda::dense_route_takes(cuda::BsmmOp::fwd, x.dtype(), l, n, {p.a, p.w, p.out}, dev)) {
      cuda::GatherProduct gemm = p;
      gemm.bias = nullptr;  // the GEMMs take none: y += bias in one pass after them
      if (attrs.f32_bias) {  // f32 sums + f32 bias, rounded once: the GEMMs into an f32 temporary
        const Tensor sums = empty(y.shape(), TensorOptions(DType::f32).device(y.device()));
        gemm.out = sums.data_ptr();
        gemm.out_dtype = DType::f32;
        cuda::dense_product(gemm, l, tables, dev, cuda::current_stream(y));
        cuda::binary_op(sums, bias, sums, kName, [] __device__(auto a, auto b) { return a + b; });
        cuda::unary_op_narrowing(sums, y, kName, [] __device__(float v) { return v; });
        return;
      }
      cuda::dense_product(gemm, l, tables, dev, cuda::current_stream(y));
      if (bias.defined()) cuda::binary_op(y, bias, y, kName, [] __device__(auto a, auto b) { return a + b; });
      return;
    }
    if (cuda::run_gather(p, dev, cuda::current_stream(y))) return;
  }
  cuda::dispatch_cuda_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::dispatch_block_size(l.block_size(), kName, [&](auto bs) {
      constexpr int BS = decltype(bs)::value, kRows = 256 / BS;
      const int64_t blocks = (n + kRows - 1) / kRows * Q;
      TS_CHECK(blocks <= INT32_MAX, ShapeError, kName << ": x " << x.shape() << " is too large for one launch");
      auto launch = [&](auto out_tag) {
        using TO = typename decltype(out_tag)::type;
        auto run = [&](auto bias_tag) {
          using TB = typename decltype(bias_tag)::type;
          bsmm_forward<T, TO, TB, BS><<<static_cast<unsigned>(blocks), dim3(BS, kRows), 0, cuda::current_stream(y)>>>(
              static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()),
              attrs.gated ? static_cast<const T*>(in[2].data_ptr()) : nullptr, static_cast<const TB*>(bias_ptr),
              static_cast<TO*>(y.data_ptr()), n, C, K, Q, tables.col_ptr, tables.col_blocks, tables.block_row);
          TS_CUDA_LAUNCH_CHECK(kName);
        };
        // the bias in TO, or f32 (f32_bias, with bf16/f16 TO)
        if constexpr (std::is_same_v<TO, float> || std::is_same_v<TO, double>) run(out_tag);
        else if (attrs.f32_bias) run(cuda::TypeTag<float>{});
        else run(out_tag);
      };
      cuda::with_output_type<T>(attrs.f32_output, launch);
    });
  });
}

}  // namespace tessera
