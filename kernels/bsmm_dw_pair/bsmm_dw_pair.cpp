#include "kernels/bsmm_dw_pair/bsmm_dw_pair.h"

#include "kernels/bsmm/bsmm.h"
#include "kernels/col_sum/col_sum.h"
#include "kernels/common/bsmm_dw_cpu.h"
#include "kernels/common/dispatch.h"

namespace tessera {

std::pair<Tensor, Tensor> bsmm_dw_pair(const Tensor& x_a, const Tensor& x_b, const Tensor& dy,
                                       const LayoutPtr& layout_a, const LayoutPtr& layout_b, int64_t shift,
                                       bool f32_output) {
  std::vector<Tensor> out = call<op::BsmmDwPair>({layout_a, layout_b, shift, f32_output, false}, {x_a, x_b, dy});
  return {out[0], out[1]};
}

std::tuple<Tensor, Tensor, Tensor> bsmm_dw_pair_and_column_sums(const Tensor& x_a, const Tensor& x_b, const Tensor& dy,
                                                                const LayoutPtr& layout_a, const LayoutPtr& layout_b,
                                                                int64_t shift, bool f32_output) {
  std::vector<Tensor> out = call<op::BsmmDwPair>({layout_a, layout_b, shift, f32_output, true}, {x_a, x_b, dy});
  return {out[0], out[1], out[2]};
}

#ifndef TESSERA_WITH_CUDA
bool bsmm_dw_pair_fused(const TensorMeta&, const TensorMeta&, const TensorMeta&, const LayoutPtr&, const LayoutPtr&,
                        int64_t) {
  return false;
}
#endif

std::vector<TensorMeta> op::BsmmDwPair::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 3);
  detail::bsmm_check_layout(kName, attrs.layout_a);
  detail::bsmm_check_layout(kName, attrs.layout_b);
  const BlockLayout &a = *attrs.layout_a, &b = *attrs.layout_b;
  TS_CHECK(a.block_size() == b.block_size() && a.out_features() == b.out_features(), ShapeError,
           kName << ": layouts " << a.str() << " and " << b.str() << " must have one block size and out_features");
  detail::bsmm_check_2d(kName, in[0], "x_a", a.in_features(), "layout_a's in_features", a);
  detail::bsmm_check_2d(kName, in[1], "x_b", b.in_features(), "layout_b's in_features", b);
  detail::bsmm_check_2d(kName, in[2], "dy", a.out_features(), "out_features", a);
  check_same_dtype(kName, in[0], in[1]);
  check_same_dtype(kName, in[0], in[2]);
  const int64_t n = in[2].shape[0];
  TS_CHECK(attrs.shift >= 0 && in[0].shape[0] == n && in[1].shape[0] == n - attrs.shift, ShapeError,
           kName << ": x_a " << in[0] << " must have dy's " << n << " rows and x_b " << in[1] << " " << n
                 << " - shift (" << attrs.shift << ") rows, with shift >= 0");
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           kName << ": an f32 output needs bf16 or f16 inputs, got x_a " << in[0]);
  const int64_t bs = a.block_size();
  const DType out = attrs.f32_output ? DType::f32 : in[0].dtype;
  std::vector<TensorMeta> metas{TensorMeta{Shape({a.nnz(), bs, bs}), out, in[0].device},
                                TensorMeta{Shape({b.nnz(), bs, bs}), out, in[0].device}};
  if (attrs.column_sums)
    metas.push_back(TensorMeta{Shape({a.out_features()}), in[2].dtype == DType::f64 ? DType::f64 : DType::f32,
                               in[0].device});
  return metas;
}

void op::BsmmDwPair::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = in[2].size(0), k = in[2].size(1);
    cpu::block_weight_gradient<T>(in[0].data<T>(), in[2].data<T>(), out[0].data<T>(), n, *attrs.layout_a);
    cpu::block_weight_gradient<T>(in[1].data<T>(), in[2].data<T>() + attrs.shift * k, out[1].data<T>(),
                                  n - attrs.shift, *attrs.layout_b);
  });
  if (attrs.column_sums) op::ColSum::cpu({in[2]}, {out[2]}, {});  // in f64, as col_sum sums
}

}  // namespace tessera
