#include "kernels/adafactor_factored_update/adafactor_factored_update.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/dispatch.h"
#include "kernels/common/update_args.h"

namespace tessera {

std::vector<Tensor> adafactor_factored_update(const Tensor& p, const Tensor& g, const Tensor& s, const Tensor& lr,
                                              const Tensor& step, const AdafactorAttrs& attrs) {
  return call<op::AdafactorFactoredUpdate>(attrs, {p, g, s, lr, step});
}

std::vector<TensorMeta> op::AdafactorFactoredUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 5);
  detail::check_update_args(kName, {in[0], in[1], in[3], in[4]}, {"param", "grad"});
  const TensorMeta& p = in[0];
  TS_CHECK(p.shape.ndim() >= 2, ShapeError, kName << ": param must have 2 or more dims, got " << p);
  TensorMeta state = p;
  state.shape = detail::adafactor_factored_shape(p.shape);
  TS_CHECK(in[2].dtype == p.dtype, DTypeError,
           kName << ": factored state " << in[2] << " does not match param " << p << " (expected " << state << ")");
  TS_CHECK(in[2] == state, ShapeError,
           kName << ": factored state " << in[2] << " does not fit param " << p << " (expected " << state
                 << ": row then column averages)");
  detail::check_adafactor_attrs(kName, a);
  return {p, state};
}

void op::AdafactorFactoredUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const double lr = detail::read_update_scalar(in[3]), t = detail::read_update_scalar(in[4]);
  TS_CHECK(t >= 1, ValueError, kName << ": step must be >= 1 (1-based), got " << t);
  const Shape& shape = out[0].shape();
  const int64_t n = shape[-2], m = shape[-1], numel = out[0].numel();
  if (numel == 0) {  // nothing to average: the state stays as it is
    if (out[1].data_ptr() != in[2].data_ptr()) std::memcpy(out[1].data_ptr(), in[2].data_ptr(), out[1].nbytes());
    return;
  }
  const int64_t batches = out[1].numel() / (n + m), rows = batches * n;
  const double beta_d = detail::adafactor_beta2(t, a.decay_rate);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(in[0].data_ptr());
    const T* g = static_cast<const T*>(in[1].data_ptr());
    const T* s = static_cast<const T*>(in[2].data_ptr());
    T* p_out = static_cast<T*>(out[0].data_ptr());
    T* s_out = static_cast<T*>(out[1].data_ptr());
    // Matrix b's row averages are s[b·(n+m) + i], its column averages s[b·(n+m) + n + j].
    auto row_at = [&](int64_t b) { return b * (n + m); };
    auto col_at = [&](int64_t b) { return b * (n + m) + n; };
    const T beta = static_cast<T>(beta_d), one_minus_beta = static_cast<T>(1.0 - beta_d);
    const T eps1 = static_cast<T>(a.eps1);
    const double inv_numel = numel > 0 ? 1.0 / static_cast<double>(numel) : 0.0;
    // RMS(p) of the old parameter, before anything is written (p_out may alias p).
    const double rms_p = a.scale_parameter ? std::sqrt(detail::chunked_sum(numel, [&](int64_t k) {
                                               return static_cast<double>(p[k]) * static_cast<double>(p[k]);
                                             }) * inv_numel)
                                           : 0.0;
    // Row averages. Each state element is read before it is written, so s_out may alias s.
#pragma omp parallel for if (numel > kParallelGrain)
    for (int64_t ri = 0; ri < rows; ++ri) {
      const T* gr = g + ri * m;
      double acc = 0;
      for (int64_t j = 0; j < m; ++j) acc += static_cast<double>(gr[j] * gr[j] + eps1);
      const int64_t k = row_at(ri / n) + ri % n;
      s_out[k] = beta * s[k] + one_minus_beta * static_cast<T>(acc / static_cast<double>(m));
    }
    // Column averages: per matrix b, blocks of columns walked row by row (contiguous reads).
    constexpr int64_t kCols = 64;
    const int64_t col_blocks = (m + kCols - 1) / kCols;
#pragma omp parallel for if (numel > kParallelGrain)
    for (int64_t bb = 0; bb < batches * col_blocks; ++bb) {
      const int64_t b = bb / col_blocks, j0 = (bb % col_blocks) * kCols, j1 = std::min(m, j0 + kCols);
      double acc[kCols] = {};
      for (int64_t i = 0; i < n; ++i) {
        const T* gr = g + (b * n + i) * m;
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<double>(gr[j] * gr[j] + eps1);
      }
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t k = col_at(b) + j;
        s_out[k] = beta * s[k] + one_minus_beta * static_cast<T>(acc[j - j0] / static_cast<double>(n));
      }
    }
    // v̂[b, i, j] = row'[b, i]/mean_i row'[b, i] · col'[b, j]; u = g·rf[b, i]·cf[b, j] with
    // rf = rsqrt(row'/mean row') and cf = rsqrt(col') (no product of two tiny averages, which
    // could underflow in f32).
    std::vector<T> rf(static_cast<size_t>(rows)), cf(static_cast<size_t>(batches * m));
    for (int64_t b = 0; b < batches; ++b) {
      const T* row = s_out + row_at(b);
      const T* col = s_out + col_at(b);
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(row[i]);
      const T mean_row = static_cast<T>(acc / static_cast<double>(n));
      for (int64_t i = 0; i < n; ++i) rf[b * n + i] = T(1) / std::sqrt(row[i] / mean_row);
      for (int64_t j = 0; j < m; ++j) cf[b * m + j] = T(1) / std::sqrt(col[j]);
    }
    // u[b, i, j] for row ri = b·n + i.
    auto u_at = [&](int64_t ri, int64_t j) { return g[ri * m + j] * rf[ri] * cf[(ri / n) * m + j]; };
    const double sum_u2 = detail::chunked_sum(
        rows,
        [&](int64_t ri) {
          double acc = 0;
          for (int64_t j = 0; j < m; ++j) {
            const double u = static_cast<double>(u_at(ri, j));
            acc += u * u;
          }
          return acc;
        },
        m);
    // û = u / max(1, RMS(u)/d), p' = p - α·wd·p - α·û.
    const double clip = std::max(1.0, std::sqrt(sum_u2 * inv_numel) / a.clip_threshold);
    const double alpha = detail::adafactor_alpha(a, lr, t, rms_p);
    const T step_size = static_cast<T>(alpha / clip), decay = static_cast<T>(alpha * a.weight_decay);
#pragma omp parallel for if (numel > kParallelGrain)
    for (int64_t ri = 0; ri < rows; ++ri)
      for (int64_t j = 0; j < m; ++j) {
        const T pk = p[ri * m + j];
        p_out[ri * m + j] = pk - decay * pk - step_size * u_at(ri, j);
      }
  });
}

}  // namespace tessera
