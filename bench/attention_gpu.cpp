// Block-sparse attention on the GPU (CUDA builds only): block_attention forward and forward +
// backward for dense causal and sparse layouts, against the dense-layout kernel and the cuBLAS +
// causal-softmax path of the same shape, measured in the same run.
//
//   attention_gpu [--shapes b16h12t1024,b64h6t256,b8h16t4096,b2h16t16384] [--head-dims 64,128]
//                 [--layouts dense,local,fixed,strided] [--block 64] [--repeats N] [--quick]
//                 [--json FILE]
//
// Per shape (B, H, T), head dim D and layout (block --block; local: window 8 blocks, fixed and
// strided: stride 8 blocks, fixed summary 1), bf16 q, k, v ~ N(0, 1) and dO ~ N(0, 1):
//   fwd      block_attention's op (o and lse), the layout's kernel (kernels/block_attention/)
//   fwd+bwd  that, then block_attention_backward's op from its o and lse; and both with dropout 0.1
//            on the probabilities (inside the kernels)
//   cuBLAS   (dense causal only, T <= 4096) the dense path of MultiHeadAttention: s = q·kᵀ,
//            causal_softmax, p·v, and its backward by autograd
// Figures: median ms over --repeats calls (each call synchronized; every call here takes far
// longer than a launch); useful TFLOP/s counting the causal (query, key) pairs of the visited
// blocks only (bs² per off-diagonal block, bs(bs+1)/2 per diagonal one): fwd 4·D flops per pair,
// fwd+bwd 3.5x that (FlashAttention's convention: the backward is 2.5 forwards). Ratios: the
// dense-layout kernel row against the cuBLAS path (time), a sparse layout's row against the
// dense-layout kernel's TFLOP/s (the "≥ 0.85 of the dense kernel per visited block").
// The PyTorch 2.11 figures of the issue (same H200) are reference rows, not measured here.
// Exit codes: 0; 1 on an error; 2 on a bad flag or value. Without a CUDA device: one line, exit 1
// (exit 0 under --quick).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/bench_report.h"
#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/random.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/ops.h"

#ifndef TESSERA_WITH_CUDA
#error "attention_gpu needs tessera's CUDA backend (bench/CMakeLists.txt builds it only when TESSERA_WITH_CUDA is on)"
#endif

using namespace tessera;

namespace {

struct Shape3 {
  std::string name;
  int64_t B, H, T;
};

struct Options {
  std::vector<std::string> shapes{"b16h12t1024", "b64h6t256", "b8h16t4096", "b2h16t16384"};
  std::vector<int64_t> head_dims{64, 128};
  std::vector<std::string> layouts{"dense", "local", "fixed", "strided"};
  int64_t block = 64;
  int repeats = 10;
  bool quick = false;
  std::string json;
};

// "b16h12t1024" -> {16, 12, 1024}; ValueError otherwise.
Shape3 parse_shape(const std::string& s) {
  long long b = 0, h = 0, t = 0;
  char tail = 0;
  TS_CHECK(std::sscanf(s.c_str(), "b%lldh%lldt%lld%c", &b, &h, &t, &tail) == 3 && b > 0 && h > 0 && t > 0,
           ValueError, "--shapes: '" << s << "' is not of the form b16h12t1024");
  return {s, b, h, t};
}

AttentionLayoutPtr make_layout(const std::string& kind, int64_t T, int64_t bs, int64_t H) {
  if (kind == "dense") return AttentionLayout::dense_causal(T, bs, H);
  if (kind == "local") return AttentionLayout::local_window(T, bs, H, 8);
  if (kind == "fixed") return AttentionLayout::fixed(T, bs, H, 8, 1);
  if (kind == "strided") return AttentionLayout::strided(T, bs, H, 8);
  TS_THROW(ValueError, "--layouts: unknown layout '" << kind << "' (dense, local, fixed, strided)");
}

// Causal (query, key) pairs the layout visits, over all heads.
double visited_pairs(const AttentionLayout& l) {
  const double bs = static_cast<double>(l.block_size());
  double pairs = 0;
  for (int64_t h = 0; h < l.heads(); ++h)
    for (int64_t i = 0; i < l.blocks(); ++i)
      for (int32_t p = l.row_ptr()[h * l.blocks() + i]; p < l.row_ptr()[h * l.blocks() + i + 1]; ++p)
        pairs += l.key_blocks()[p] == i ? bs * (bs + 1) / 2 : bs * bs;
  return pairs;
}

// Median ms of fn() over `repeats` calls after one warm-up, each call synchronized.
double time_ms(const std::function<void()>& fn, int repeats) {
  return bench::time_median_ms(
      [&] {
        fn();
        cuda::synchronize(0);
      },
      1, repeats);
}

struct PytorchRef {
  const char* shape;
  const char* what;
  double fwd_ms, fwdbwd_ms;
};
// The figures (PyTorch 2.11 on the same H200, bf16, head dim 64).
const PytorchRef kPytorch[] = {{"b16h12t1024", "SDPA dense causal", 0.160, 0.689},
                               {"b64h6t256", "SDPA dense causal", 0.061, 0.300},
                               {"b8h16t4096", "SDPA dense causal", 1.037, 4.168},
                               {"b8h16t4096", "FlexAttention dense causal", 0.930, 3.731},
                               {"b8h16t4096", "FlexAttention local 512 (block 128)", 0.414, 1.619},
                               {"b8h16t4096", "FlexAttention strided 512 (block 128)", 1.587, 4.242}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera block-sparse attention GPU benchmark: block_attention against its dense layout and cuBLAS"};
  Options o;
  app.add_option("--shapes", o.shapes, "b<B>h<H>t<T> (comma-separated)")->delimiter(',');
  app.add_option("--head-dims", o.head_dims, "head dims (comma-separated)")->delimiter(',');
  app.add_option("--layouts", o.layouts, "dense, local, fixed, strided (comma-separated)")->delimiter(',');
  app.add_option("--block", o.block, "attention block size")->check(CLI::IsMember({8, 16, 32, 64, 128}));
  app.add_option("--repeats", o.repeats, "timed calls per figure (median)")->check(CLI::Range(1, 10000));
  app.add_flag("--quick", o.quick, "b2h2t512, head dim 64, dense and strided, 2 repeats (a smoke run)");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--shapes")) o.shapes = {"b2h2t512"};
    if (!app.count("--head-dims")) o.head_dims = {64};
    if (!app.count("--layouts")) o.layouts = {"dense", "strided"};
    if (!app.count("--repeats")) o.repeats = 2;
  }
  std::vector<Shape3> shapes;
  try {  // bad values first, with or without a GPU
    for (const std::string& s : o.shapes) shapes.push_back(parse_shape(s));
    for (const std::string& kind : o.layouts) make_layout(kind, o.block, o.block, 1);
  } catch (const std::exception& e) {
    std::cerr << "attention_gpu: " << e.what() << "\n";
    return 2;
  }
  if (!cuda_available()) {
    std::cerr << "attention_gpu: no CUDA device\n";
    return o.quick ? 0 : 1;
  }
  try {
    const Device dev = Device::cuda(0);
    bench::BenchReport report("attention_gpu");
    report.note("dtype", "bf16");
    report.note("block", std::to_string(o.block));
    for (const Shape3& sh : shapes)
      for (int64_t D : o.head_dims) {
        TS_CHECK(sh.T % o.block == 0, ValueError, "T " << sh.T << " of " << sh.name << " is not a multiple of --block");
        const Shape s{sh.B, sh.H, sh.T, D};
        Generator gen(7);
        auto draw = [&] { return cast(normal(s, 0.0, 1.0, gen), DType::bf16).to(dev); };
        const Tensor q = draw(), k = draw(), v = draw(), g = draw();
        const std::string label = sh.name + " d" + std::to_string(D);
        double dense_fwd_tflops = 0, dense_fb_tflops = 0;
        for (const std::string& kind : o.layouts) {
          const AttentionLayoutPtr l = make_layout(kind, sh.T, o.block, sh.H);
          const double pairs = visited_pairs(*l) * sh.B, fwd_flops = 4.0 * D * pairs;
          std::vector<Tensor> fwd;
          const double fwd_ms = time_ms([&] { fwd = call<op::BlockAttention>({l, 0}, {q, k, v}); }, o.repeats);
          const double fb_ms = time_ms(
              [&] {
                fwd = call<op::BlockAttention>({l, 0}, {q, k, v});
                block_attention_backward(g, q, k, v, fwd[0], fwd[1], l);
              },
              o.repeats);
          // With dropout 0.1 on the probabilities, inside the kernels (forward and backward).
          const op::BlockAttention::Attrs fa{l, 0, 0.1, 1, 0};
          const op::BlockAttentionBackward::Attrs ba{l, 0, 0.1, 1, 0};
          const double drop_ms = time_ms(
              [&] {
                fwd = call<op::BlockAttention>(fa, {q, k, v});
                call<op::BlockAttentionBackward>(ba, {g, q, k, v, fwd[0], fwd[1]});
              },
              o.repeats);
          const double fwd_tflops = fwd_flops / fwd_ms * 1e-9, fb_tflops = 3.5 * fwd_flops / fb_ms * 1e-9;
          const std::string name = kind == "dense" ? "dense causal" : kind;
          report.add({name + " fwd+bwd, dropout 0.1", label, drop_ms, 3.5 * fwd_flops / drop_ms * 1e-9, "TFLOP/s",
                      fb_tflops, "the same without dropout (this run)"});
          if (kind == "dense") {
            dense_fwd_tflops = fwd_tflops;
            dense_fb_tflops = fb_tflops;
            // The cuBLAS path (MultiHeadAttention's dense path), where S [B·H, T, T] fits (T <= 4096).
            double cublas_fwd = 0, cublas_fb = 0;
            if (sh.T <= 4096) {
              const int64_t BH = sh.B * sh.H;
              const double scale = 1.0 / std::sqrt(static_cast<double>(D));
              const Tensor q3 = reshape(q, {BH, sh.T, D}), k3 = reshape(k, {BH, sh.T, D}), v3 = reshape(v, {BH, sh.T, D});
              cublas_fwd = time_ms([&] { matmul(causal_softmax(matmul(q3, k3, false, true), scale), v3); }, o.repeats);
              // (q, k, v do not require grad: the forward records no graph)
              cublas_fb = time_ms(
                  [&] {
                    const Tensor qg = q3.detach().requires_grad_(), kg = k3.detach().requires_grad_(),
                                 vg = v3.detach().requires_grad_();
                    matmul(causal_softmax(matmul(qg, kg, false, true), scale), vg).backward(reshape(g, {BH, sh.T, D}));
                  },
                  o.repeats);
            }
            report.add({"dense causal fwd", label, fwd_ms, fwd_tflops, "TFLOP/s",
                        cublas_fwd > 0 ? fwd_flops / cublas_fwd * 1e-9 : fwd_tflops,
                        cublas_fwd > 0 ? "cuBLAS + causal_softmax (this run)" : "itself (cuBLAS path not run: T > 4096)"});
            report.add({"dense causal fwd+bwd", label, fb_ms, fb_tflops, "TFLOP/s",
                        cublas_fb > 0 ? 3.5 * fwd_flops / cublas_fb * 1e-9 : fb_tflops,
                        cublas_fb > 0 ? "cuBLAS + causal_softmax (this run)" : "itself (cuBLAS path not run: T > 4096)"});
            continue;
          }
          const std::string base = dense_fwd_tflops > 0 ? "dense-layout kernel (this run)" : "itself (dense not run)";
          report.add({kind + " fwd (" + std::to_string(l->nnz()) + " blocks)", label, fwd_ms, fwd_tflops, "TFLOP/s",
                      dense_fwd_tflops > 0 ? dense_fwd_tflops : fwd_tflops, base});
          report.add({kind + " fwd+bwd", label, fb_ms, fb_tflops, "TFLOP/s",
                      dense_fb_tflops > 0 ? dense_fb_tflops : fb_tflops, base});
        }
      }
    for (const PytorchRef& p : kPytorch) {
      report.add({std::string("pytorch ") + p.what + " fwd (ref)", p.shape, p.fwd_ms, p.fwd_ms, "ms", p.fwd_ms,
                  "reference row (issue 13), not measured"});
      report.add({std::string("pytorch ") + p.what + " fwd+bwd (ref)", p.shape, p.fwdbwd_ms, p.fwdbwd_ms, "ms",
                  p.fwdbwd_ms, "reference row (issue 13), not measured"});
    }
    report.print(std::cout);
    if (!o.json.empty()) report.write_json(o.json);
  } catch (const std::exception& e) {
    std::cerr << "attention_gpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
