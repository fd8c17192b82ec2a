// The bandwidth probe and the input sets (bench/bsmm_gpu; see main.cpp).
#include "bsmm_gpu.h"

namespace tessera {
namespace bench {

Bandwidth probe_bandwidth(EventTimer& timer, const Options& o, int sms) {
  Bandwidth b;
  b.hbm_bytes = o.hbm_probe_bytes;
  b.l2_bytes = kL2ProbeBytes;
  const Device dev = Device::cuda(kDevice);
  const int blocks = sms * bench::stream_blocks_per_sm();
  Tensor buf = empty({static_cast<int64_t>(b.hbm_bytes / 4)}, TensorOptions(DType::i32).device(dev));
  Tensor sums = empty({blocks}, TensorOptions(DType::i32).device(dev));
  auto* out = static_cast<uint32_t*>(sums.data_ptr());
  const cudaStream_t s = timer.stream();
  check_cuda(bench::stream_fill(buf.data_ptr(), b.hbm_bytes, 0x9e3779b9u, s), "stream_fill");
  const int reps = std::max(5, o.repeats);
  b.hbm_ms = timer.median_ms(
      [&](int) { check_cuda(bench::stream_read(buf.data_ptr(), b.hbm_bytes, 1, out, blocks, s), "stream_read"); }, 2,
      reps);
  b.l2_ms = timer.median_ms(
      [&](int) {
        check_cuda(bench::stream_read(buf.data_ptr(), b.l2_bytes, kL2ProbePasses, out, blocks, s), "stream_read");
      },
      2, reps);
  const size_t half = b.hbm_bytes / 2;
  char* base = static_cast<char*>(buf.data_ptr());
  b.copy_ms = timer.median_ms(
      [&](int) {
        check_cuda(cudaMemcpyAsync(base + half, base, half, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      },
      2, reps);
  b.hbm_tbs = b.hbm_bytes / (b.hbm_ms * 1e9);
  b.l2_tbs = static_cast<double>(b.l2_bytes) * kL2ProbePasses / (b.l2_ms * 1e9);
  b.copy_tbs = 2.0 * half / (b.copy_ms * 1e9);
  return b;
}

// ---- data ----
// The f32 data of a shape on the GPU, drawn once on the host.

Bases make_bases(const ShapeSpec& s) {
  const Device dev = Device::cuda(kDevice);
  Generator gen(20261201 + static_cast<uint64_t>(s.n + s.c + s.k));
  Bases b;
  b.x = normal({s.n, s.c}, 0.0, 1.0, gen).to(dev);
  b.dy = normal({s.n, s.k}, 0.0, 1.0, gen).to(dev);
  b.wd = normal({s.c, s.k}, 0.0, 0.02, gen).to(dev);
  return b;
}

Sets make_sets(const Bases& b, DType dt, int count) {
  Sets s;
  for (int i = 0; i < count; ++i) {
    auto scaled = [&](const Tensor& base, std::vector<Tensor>& into) {
      if (i == 0) {
        into.push_back(dt == DType::f32 ? base : cast(base, dt));
      } else {
        into.push_back(mul(into[0], 1.0 + i / 8.0));
      }
    };
    scaled(b.x, s.x);
    scaled(b.dy, s.dy);
    scaled(b.wd, s.wd);
  }
  return s;
}

int rotation_sets(const Options& o, const ShapeSpec& s, DType dt, size_t l2, std::string& why) {
  if (s.step) {
    why = "none (the step's inputs fit in L2 on purpose)";
    return 1;
  }
  const size_t e = dtype_size(dt);
  const size_t x = s.n * s.c * e, dy = s.n * s.k * e, wd = s.c * s.k * e, per_set = x + dy + wd;
  // The smallest inputs a row reads per call: fwd x + w, dx dy + w, dw x + dy (w >= 0).
  const size_t smallest = std::min(x, dy);
  int sets = o.rotate > 0 ? o.rotate : std::max<int>(2, static_cast<int>((3 * l2 + smallest - 1) / smallest));
  const int cap = std::max<int>(1, static_cast<int>(kRotateBudget / per_set));
  why = o.rotate > 0 ? "--rotate" : "3x L2 / " + fixed(smallest / 1048576.0, 0) + " MB";
  if (sets > cap) {
    sets = cap;
    why += ", capped at 3 GB";
  }
  return sets;
}

Tensor sparse_weight(const Tensor& wd, const BlockLayout& l) {
  const int64_t bs = l.block_size();
  return reshape(slice(reshape(wd, {-1}), 0, 0, l.nnz() * bs * bs), {l.nnz(), bs, bs});
}

Tensor blocks_as_dense(const Tensor& w, const BlockLayout& l) {
  const int64_t bs = l.block_size(), r = l.block_rows(), q = l.block_cols();
  return reshape(permute(reshape(w, {r, q, bs, bs}), {0, 2, 1, 3}), {r * bs, q * bs});
}

double relative_error(const Tensor& a, const Tensor& ref) {
  const Tensor af = cast(a, DType::f32), rf = cast(ref, DType::f32);
  const double num = sum_squares({sub(af, rf)}).item<double>(), den = sum_squares({rf}).item<double>();
  return std::sqrt(num / std::max(den, 1e-300));
}

Tensor dense_op(const std::string& op, const Tensor& x, const Tensor& dy, const Tensor& wd) {
  if (op == "fwd") return matmul(x, wd);
  if (op == "dx") return matmul(dy, wd, false, true);
  return matmul(x, dy, true, false);  // dw, dwg, dwg-ops
}

Tensor sparse_op(const std::string& op, const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& gate,
                 const LayoutPtr& l) {
  if (op == "fwd") return bsmm(x, w, l);
  if (op == "dx") return bsmm_dx(dy, w, l);
  if (op == "dwg") return bsmm_dw_gated(x, dy, w, gate, l, false).first;
  if (op == "dwg-ops") {  // the composition of ops the gated backward ran before the gate epilogue
    const int64_t nnz = l->nnz(), bs = l->block_size();
    const Tensor p = bsmm_dw(x, dy, l);
    const Tensor dw = mul(p, reshape(gate, {nnz, 1, 1}));
    const Tensor dgate = sum(reshape(mul(p, w), {nnz, bs * bs}), 1);
    (void)dgate;
    return dw;
  }
  return bsmm_dw(x, dy, l);
}

bool is_dw(const std::string& op) { return op.rfind("dw", 0) == 0; }

// ---- results ----

}  // namespace bench
}  // namespace tessera
