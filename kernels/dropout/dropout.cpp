#include "kernels/dropout/dropout.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/common/dispatch.h"

namespace tessera {

namespace {
void check_p(double p) {
  TS_CHECK(p >= 0.0 && p < 1.0, ValueError, "dropout: p must be in [0, 1), got " << p);
}
}  // namespace

Tensor dropout(const Tensor& x, double p, Generator& gen, bool training) {
  check_p(p);  // also in eval, where the op is not run: a bad p is a caller mistake either way
  if (!training || p == 0.0) return x;
  const uint64_t seed = gen.seed();
  const uint64_t start = gen.reserve(philox::blocks_for_uniform_f32(static_cast<uint64_t>(x.numel())));
  return call<Dropout>({p, seed, start}, {x})[0];
}

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, default_generator(), training);
}

std::vector<TensorMeta> Dropout::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  check_p(attrs.p);
  return {in[0]};
}

void Dropout::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].numel();
  const int64_t nblocks = static_cast<int64_t>(philox::blocks_for_uniform_f32(static_cast<uint64_t>(n)));
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - attrs.p));
    // Element i uses word i%4 of block start + i/4 (philox::uniform_f32's layout): one block per
    // 4 elements. Keep iff u >= p (u promoted exactly to double).
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t b = 0; b < nblocks; ++b) {
      const philox::Block blk = philox::block(attrs.seed, attrs.start + static_cast<uint64_t>(b));
      for (int64_t k = 0; k < 4 && 4 * b + k < n; ++k) {
        const int64_t i = 4 * b + k;
        const bool keep = static_cast<double>(philox::to_unit_f32(blk.w[k])) >= attrs.p;
        y[i] = keep ? x[i] * scale : T(0);
      }
    }
  });
}

std::vector<Tensor> Dropout::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {call<Dropout>(attrs, {ctx.grad_output()})[0]};
}

}  // namespace tessera
