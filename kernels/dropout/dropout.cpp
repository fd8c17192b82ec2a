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
  return call<op::Dropout>({p, seed, start}, {x})[0];
}

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, default_generator(), training);
}

Tensor philox_base(uint64_t offset, Device device) {
  const std::vector<int32_t> words{static_cast<int32_t>(static_cast<uint32_t>(offset)),
                                   static_cast<int32_t>(static_cast<uint32_t>(offset >> 32))};
  return from_vector(words, {2}).to(device);
}

std::vector<TensorMeta> op::Dropout::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  TS_CHECK(in.size() == 1 || in.size() == 2, ValueError,
           kName << ": expected 1 or 2 inputs (x, optional Philox base), got " << in.size());
  check_floating(kName, in[0]);
  if (in.size() == 2) {
    // The base: i32[2] = the low and high words of a block offset, on x's device.
    TS_CHECK(in[1].dtype == DType::i32, DTypeError,
             kName << ": the Philox base must be i32[2] (low, high words of a block offset), got " << in[1]);
    TS_CHECK(in[1].shape == Shape{2}, ShapeError,
             kName << ": the Philox base must be i32[2] (low, high words of a block offset), got " << in[1]);
    TS_CHECK(in[1].device == in[0].device, DeviceError,
             kName << ": the Philox base " << in[1] << " is not on x's device (x is " << in[0] << ")");
  }
  check_p(attrs.p);
  return {in[0]};
}

void op::Dropout::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].numel();
  const int64_t nblocks = static_cast<int64_t>(philox::blocks_for_uniform_f32(static_cast<uint64_t>(n)));
  uint64_t first = attrs.start;  // + the Philox base, read here on the host
  if (in.size() == 2) {
    const int32_t* w = in[1].data<int32_t>();
    first += philox::join_words(static_cast<uint32_t>(w[0]), static_cast<uint32_t>(w[1]));
  }
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - attrs.p));
    // Element i uses word i%4 of block first + i/4 (philox::uniform_f32's layout): one block per
    // 4 elements. Keep iff u >= p (u promoted exactly to double).
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t b = 0; b < nblocks; ++b) {
      const philox::Block blk = philox::block(attrs.seed, first + static_cast<uint64_t>(b));
      for (int64_t k = 0; k < 4 && 4 * b + k < n; ++k) {
        const int64_t i = 4 * b + k;
        const bool keep = static_cast<double>(philox::to_unit_f32(blk.w[k])) >= attrs.p;
        y[i] = keep ? x[i] * scale : T(0);
      }
    }
  });
}

std::vector<Tensor> op::Dropout::backward(const BackwardContext& ctx, const Attrs& attrs) {
  if (ctx.num_inputs() == 1) return {call<op::Dropout>(attrs, {ctx.grad_output()})[0]};
  return {call<op::Dropout>(attrs, {ctx.grad_output(), ctx.input(1)})[0], Tensor()};  // no gradient for the base
}

}  // namespace tessera
