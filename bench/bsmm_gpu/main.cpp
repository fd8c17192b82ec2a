// Block-sparse matmul on the GPU (CUDA builds only) against tessera's dense matmul (cuBLAS) of
// the same shape and dtype, measured in the same run, with a roofline bound for every row.
//
//   bsmm_gpu [--shapes transformer,mlp,lstm] [--bs 8,16,32,64] [--density 0.05,0.1,0.25,0.5,1]
//            [--dtype bf16,f32] [--ops fwd,dx,dw,dwg,dwg-ops] [--route auto,sparse,dense]
//            [--repeats N] [--warmup N] [--rotate N]
//            [--graph-calls N] [--quick] [--json FILE]
//
// Shapes (N x C -> K): transformer 8192 x 4096 -> 4096, mlp 8192 x 1024 -> 4096, lstm (one step
// of a 4096-wide LSTM's four gates) 64 x 4096 -> 16384. For every shape, dtype, block size bs and
// density, a layout random_layout(C, K, bs, density) (density 1: dense_layout, every block) and
// the three ops through the public API (kernels/ops.h):
//   fwd  Y = X·W      bsmm(x, w, layout)       vs  matmul(x [N, C], W [C, K])
//   dx   dX = dY·Wᵀ   bsmm_dx(dy, w, layout)   vs  matmul(dy [N, K], W [C, K], false, true)
//   dw   dW = Xᵀ·dY   bsmm_dw(x, dy, layout)   vs  matmul(x, dy, true, false)      (on the layout's blocks)
//   dwg  dW = gate·Xᵀ·dY and dgate (the gated weight gradient, bsmm_dw_gated: the gate epilogue),
//        vs the same matmul; dwg-ops the same from bsmm_dw and elementwise ops (mul, mul, sum: the
//        composition before the epilogue), its in-run baseline. Only when asked for (--ops).
// Routes (--route): auto runs each op as the library would (its rule picks the block-sparse
// kernels or the dense route: kernels/common/cuda/bsmm_dense.h); sparse forces the block-sparse
// kernels (TESSERA_BSMM_DENSE=0), dense the dense route (=1). A row that ran the dense route says
// so ("[dense route]"). Default: auto and sparse, so that every row shows what a user gets
// beside what the block-sparse kernels alone do. The targets take the auto rows, except density 1
// at bs 64, which the issue asks of the block-sparse kernel itself: the sparse row there (the rule
// sends that layout to the dense route).
// dtypes: bf16, and f32 with TF32 tensor-core math (cuda::set_allow_tf32(true) around those rows,
// for tessera's bsmm kernels and cuBLAS alike; the previous setting is restored afterwards);
// f32-exact (only when asked for): f32 without TF32, the exact kernels against cuBLAS's f32 GEMM.
// Data: random normal (x, dy ~ N(0, 1), W ~ N(0, 0.02²)), drawn once per shape on the host; the
// sparse w [nnz, bs, bs] is the first nnz·bs² values of the dense W's buffer (a view).
//
// Timing: CUDA events on tessera's stream. --warmup untimed calls, then --repeats calls queued
// back to back with an event between consecutive calls (the host never waits in between) behind a
// short busy-wait kernel that holds the stream until they are all queued, so each interval is one
// call's device time even where a call is shorter than its host overhead; the figure is the
// median interval.
// Inputs are rotated between calls over --rotate sets (0, the default: enough sets that the
// inputs of the sets sum to over 3x the L2 cache, at least 2, at most 3 GB in all; sets are scaled
// copies of the first), so the L2 cache does not flatter the figures. The dense baseline of a
// (shape, dtype, op) is timed once, before its sparse rows, with 2x --repeats.
//
// The lstm shape is timed differently, as a recurrent step runs: its inputs fit in L2 on purpose
// (no rotation), and besides the eager calls (back to back without the busy-wait, as an eager loop
// runs: host overhead shows where it is longer than the kernel) its forward is captured
// --graph-calls times (20) into one CUDA graph (call_out into preallocated outputs, after one eager
// call that uploads the layout's tables and creates the cuBLAS handle); the graph row is the
// graph's replay time / --graph-calls, and its baseline the dense forward captured the same way.
//
// Figures per row: median ms; achieved TFLOP/s counting useful flops only (2·N·nnz·bs² for every
// op); useful-frac = achieved / dense TFLOP/s = dense_ms · density / sparse_ms (density = the
// layout's actual density()); the roofline bound; reached = achieved / bound. The bound:
//   transformer, mlp: the lower of the tensor-core peak (the dense matmul's TFLOP/s in this run,
//     same shape, op and dtype) and L2 bandwidth (measured) x arithmetic intensity, where a tile
//     of M = 128 rows and one bs x bs block does 2·M·bs² flops on e·(M·bs + bs²) bytes of L2
//     traffic for fwd/dx (e = bytes per element: 2·M·bs / (e·(M + bs)) flops per byte, about bs
//     for bf16) and on e·(1 + bs/256)·M·bs bytes for dw (its X strip, and the dY strip of its
//     block column shared by a run of 256/bs blocks, as the sm_90a kernel reads them: about
//     2·bs/e flops per byte);
//   lstm: memory: bytes through L2 per call = W (nnz·bs²·e) + the strips each block reads
//     (nnz·N·bs·e; dw 1 + bs/256 of them) + the output, over the measured L2 bandwidth; when the call's
//     distinct bytes exceed 80% of the L2 cache, also at least those bytes over the HBM bandwidth.
// The bound is printed in TFLOP/s and as a useful-frac (bound / dense TFLOP/s). The bandwidths
// come from bench/bsmm_gpu/stream.cu, run first: all SMs reading 16 bytes per load with
// ld.global.cg, a 4 GB buffer once (HBM) and its first 24 MB 50 times in one launch (L2), with a
// device-to-device copy of 2 GB as the HBM row's baseline.
//
// Reference rows (not measured here): PyTorch 2.11 on the same H200, bf16, N 8192 x 4096 x 4096:
// bsr_dense_mm (Triton BSR) at 10% blocks, bs 32 0.969 ms and bs 64 0.597 ms; dense cuBLAS 0.390 ms.
// Their ratio column is PyTorch's time / tessera's (the speedup). After the table, the issue's
// targets with the measured values, met or not.
//
// Correctness (cheap, once per shape, dtype, bs and op at density 1): the sparse result against
// the dense matmul of the same blocks laid out as W; relative Frobenius error over 2e-2 (bf16) or
// 1e-2 (TF32) is a mismatch: the program still times everything, then exits 1.
//
// Defaults: 20 timed calls after 3 warm-up ones (the full sweep, 720 configurations of two
// routes, took 23 s on an H200 on 2026-12-04, data and checks included).
//
// Exit codes: 0; 1 on an error, a failed configuration or a mismatch; 2 on a bad flag (one line
// on stderr). Without a CUDA device: "bsmm_gpu: no CUDA device" on stderr, exit 0 under --quick,
// else 1. --quick: bs 32 and 64, densities 0.1 and 1, 3 repeats after 1 warm-up, a 1 GB HBM
// probe (the flags given explicitly still apply). Progress goes to stderr.
#include <CLI/CLI.hpp>

#include "bsmm_gpu.h"

using namespace tessera;
using namespace tessera::bench;

namespace {

template <class T>
std::string join(const std::vector<T>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera block-sparse matmul GPU benchmark: bsmm, bsmm_dx, bsmm_dw against cuBLAS and a roofline"};
  Options o;
  const CLI::Validator density_check(
      [](std::string& s) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(s, &used);
          if (used != s.size()) return "density '" + s + "' is not a number";
        } catch (const std::exception&) {
          return "density '" + s + "' is not a number";
        }
        return v > 0 && v <= 1 ? std::string() : "density " + s + " is outside (0, 1]";
      },
      "in (0, 1]");
  app.add_option("--shapes", o.shapes, "transformer, mlp, lstm (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"transformer", "mlp", "lstm"}));
  app.add_option("--bs", o.bs, "block sizes: 8, 16, 32, 64 (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({8, 16, 32, 64}));
  app.add_option("--density", o.density, "layout densities in (0, 1] (comma-separated)")
      ->delimiter(',')
      ->check(density_check);
  app.add_option("--dtype", o.dtypes, "bf16, f32 (f32 runs with TF32), f32-exact (without; comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "f32", "f32-exact"}));
  app.add_option("--ops", o.ops, "fwd, dx, dw, dwg, dwg-ops (comma-separated; default fwd,dx,dw)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "dx", "dw", "dwg", "dwg-ops"}));
  app.add_option("--route", o.routes,
                 "auto (the library's rule), sparse (the block-sparse kernels), dense (the dense route); "
                 "comma-separated, each row per route (default auto,sparse)")
      ->delimiter(',')
      ->check(CLI::IsMember({"auto", "sparse", "dense"}));
  app.add_option("--repeats", o.repeats, "timed calls per figure (median reported)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed calls first")->check(CLI::Range(0, 100000));
  app.add_option("--rotate", o.rotate, "input sets rotated between calls (0: enough to exceed 3x L2; lstm: 1)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--graph-calls", o.graph_calls, "lstm shape: forward calls per CUDA graph")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--quick", o.quick, "bs 32/64, densities 0.1/1, 3 repeats (a smoke run)");
  app.add_option("--json", o.json, "also write the figures to this JSON file");
  if (const int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (o.quick) {
    if (!app.count("--bs")) o.bs = {32, 64};
    if (!app.count("--density")) o.density = {0.1, 1.0};
    if (!app.count("--repeats")) o.repeats = 3;
    if (!app.count("--warmup")) o.warmup = 1;
    o.hbm_probe_bytes = size_t{1} << 30;
  }
  std::sort(o.bs.begin(), o.bs.end());
  o.bs.erase(std::unique(o.bs.begin(), o.bs.end()), o.bs.end());
  std::sort(o.density.begin(), o.density.end());
  o.density.erase(std::unique(o.density.begin(), o.density.end()), o.density.end());

  if (!cuda_available()) {
    std::cerr << "bsmm_gpu: no CUDA device\n";
    return o.quick ? 0 : 1;
  }

  const auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  try {
    NoGradGuard no_grad;
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, kDevice), "cudaGetDeviceProperties");
    BenchReport report("bsmm_gpu");
    EventTimer timer;
    Run run(o, report, timer);
    run.l2 = prop.l2CacheSize > 0 ? static_cast<size_t>(prop.l2CacheSize) : size_t{60} << 20;
    report.note("device", std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, L2 " +
                              std::to_string(run.l2 >> 20) + " MB, " + std::to_string(prop.totalGlobalMem >> 30) +
                              " GB");
    const char* path = std::getenv("TESSERA_BSMM_PATH");
    report.note("bsmm kernels", std::string("TESSERA_BSMM_PATH=") + (path ? path : "(unset: the default path)"));
    report.note("dtypes", "bf16; f32 = f32 operands with TF32 tensor-core math (set_allow_tf32(true), restored after)");
    report.note("timing", std::to_string(o.repeats) + " calls after " + std::to_string(o.warmup) +
                              " warm-up, back to back, CUDA events between calls on tessera's stream; median " +
                              "(dense baselines: " + std::to_string(2 * o.repeats) +
                              " calls, once per shape/dtype/op)");
    report.note("value / ratio", "useful TFLOP/s (2*N*nnz*bs^2) / dense matmul TFLOP/s = useful-frac");
    report.note("bound",
                "TFLOP/s (as useful-frac, limit) : transformer/mlp min(dense TFLOP/s, L2 TB/s x intensity: "
                "fwd/dx 2*M*bs^2 / (e*(M*bs+bs^2)), dw bs/e, M=128); lstm bytes (W + strips + output) / L2 "
                "TB/s, or HBM when over 80% of L2; reached = achieved / bound");
    report.note("lstm shape",
                "eager: back-to-back calls (host overhead included); graph: " + std::to_string(o.graph_calls) +
                    " forward calls per CUDA graph, replay time / " + std::to_string(o.graph_calls));
    report.note("references (not measured here)",
                "PyTorch 2.11, same H200, bf16 8192x4096x4096: bsr_dense_mm (Triton) 10% blocks bs32 0.969 ms, "
                "bs64 0.597 ms; dense cuBLAS 0.390 ms");

    std::cerr << "bsmm_gpu: bandwidth probe (" << (o.hbm_probe_bytes >> 20) << " MB HBM, " << (kL2ProbeBytes >> 20)
              << " MB L2)" << std::endl;
    run.bw = probe_bandwidth(timer, o, prop.multiProcessorCount);
    report.add({"HBM read (16B ld.cg)", std::to_string(run.bw.hbm_bytes >> 20) + " MB", run.bw.hbm_ms, run.bw.hbm_tbs,
                "TB/s", run.bw.copy_tbs, "device-to-device copy (read + write), this run"});
    report.add({"L2 read (16B ld.cg)", std::to_string(run.bw.l2_bytes >> 20) + " MB x" + std::to_string(kL2ProbePasses),
                run.bw.l2_ms, run.bw.l2_tbs, "TB/s", run.bw.hbm_tbs, "HBM read, this run"});
    report.add({"D2D copy (read + write)", std::to_string(run.bw.hbm_bytes >> 21) + " MB", run.bw.copy_ms,
                run.bw.copy_tbs, "TB/s", run.bw.copy_tbs, "itself"});
    std::cerr << "bsmm_gpu: HBM read " << fixed(run.bw.hbm_tbs, 2) << " TB/s, L2 read " << fixed(run.bw.l2_tbs, 2)
              << " TB/s, copy " << fixed(run.bw.copy_tbs, 2) << " TB/s" << std::endl;

    std::vector<const ShapeSpec*> shapes;
    for (const ShapeSpec& s : all_shapes())
      if (has(o.shapes, s.name)) shapes.push_back(&s);
    int nops = 0;
    for (const std::string& op : all_ops()) nops += has(o.ops, op);
    nops *= static_cast<int>(o.routes.size());
    int ndtypes = 0;
    for (const char* dt : {"bf16", "f32", "f32-exact"}) ndtypes += has(o.dtypes, std::string(dt));
    run.total = static_cast<int>(shapes.size()) * ndtypes * static_cast<int>(o.bs.size() * o.density.size()) * nops;
    report.note("sweep", "shapes " + join(o.shapes) + "; bs " + join(o.bs) + "; densities " + join(o.density) +
                             "; dtypes " + join(o.dtypes) + "; ops " + join(o.ops) + "; routes " + join(o.routes));

    for (const ShapeSpec* s : shapes) {
      std::cerr << "bsmm_gpu: " << s->name << " " << s->dims() << ": drawing the data" << std::endl;
      const Bases bases = make_bases(*s);
      for (const char* dt : {"bf16", "f32", "f32-exact"})
        if (has(o.dtypes, std::string(dt))) bench_shape_dtype(run, *s, bases, dt);
    }

    add_reference_rows(report, run.results);
    report.note("peak GPU memory (tessera)", fixed(cuda::peak_bytes(kDevice) / 1073741824.0, 2) + " GB");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.note("run time", fixed(secs, 1) + " s");
    for (const std::string& f : run.failures) report.note("failed", f);
    for (const std::string& m : run.mismatches) report.note("MISMATCH", m);
    report.print(std::cout);
    const json targets = print_targets(run.results, std::cout);
    if (!o.json.empty()) {
      report.write_json(o.json, figures_json(run.results, run.bw, targets));
    }
    for (const std::string& f : run.failures) std::cerr << "bsmm_gpu: failed: " << f << "\n";
    for (const std::string& m : run.mismatches) std::cerr << "bsmm_gpu: MISMATCH: " << m << "\n";
    ok = run.failures.empty() && run.mismatches.empty();
  } catch (const std::exception& e) {
    std::cerr << "bsmm_gpu: " << e.what() << "\n";
    return 1;
  }
  return ok ? 0 : 1;
}
