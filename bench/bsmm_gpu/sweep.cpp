// Rows, their rooflines, and the sweep over shapes, dtypes, block sizes and densities (bench/bsmm_gpu; see main.cpp).
#include "bsmm_gpu.h"

namespace tessera {
namespace bench {

Bound roofline(const ShapeSpec& s, const std::string& op, int64_t bs, int64_t nnz, size_t e, double dense_tflops,
               const Bandwidth& bw, size_t l2) {
  const double b = static_cast<double>(bs), flops = 2.0 * s.n * nnz * b * b;
  // dw: each block reads its X strip, and a run of 256/bs blocks of one block column shares its
  // dY strip (the sm_90a kernel's runs): 1 + bs/256 strips per block
  const double dw_strips = 1.0 + b / 256.0;
  if (!s.step) {
    const double m = kTileRows;
    const double ai = is_dw(op) ? 2.0 * b / (e * dw_strips) : 2.0 * m * b * b / (e * (m * b + b * b));  // flops/B
    const double mem = bw.l2_tbs * ai;                                               // TB/s x flop/B = TFLOP/s
    return mem < dense_tflops ? Bound{mem, "L2"} : Bound{dense_tflops, "dense"};
  }
  const double w = nnz * b * b * e, strips = nnz * s.n * b * e;
  const double x = s.n * s.c * e, y = s.n * s.k * e;  // y: [N, K] (fwd's output, dx's and dw's input)
  // Through L2: fwd W, X strips, Y; dx W, dY strips, dX; dw X and dY strips, dW. Distinct: W, X, Y.
  const double traffic = is_dw(op) ? dw_strips * strips + w : w + strips + (op == "fwd" ? y : x);
  const double distinct = w + x + y;
  double sec = bw.l2_tbs > 0 ? traffic / (bw.l2_tbs * 1e12) : 0;
  std::string kind = "L2";
  if (distinct > kL2ResidentFraction * l2 && bw.hbm_tbs > 0 && distinct / (bw.hbm_tbs * 1e12) > sec) {
    sec = distinct / (bw.hbm_tbs * 1e12);
    kind = "HBM";
  }
  return {sec > 0 ? flops / sec * 1e-12 : 0, kind};
}

std::string row_name(const Result& r) {
  return r.op + (r.mode == "graph" ? "/graph " : " ") + r.dtype + " bs" + std::to_string(r.bs) + " d" +
         fixed(r.density, 3) + (r.route == "auto" ? "" : " " + r.route) + (r.dense_route ? " [dense route]" : "");
}

std::string shape_label(const ShapeSpec& s) { return s.tag + " " + s.dims(); }

void add_row(BenchReport& report, const Result& r) {
  const std::string base = "dense " + fixed(r.dense_ms, 3) + " ms | bound " + fixed(r.bound_tflops, 1) + " (" +
                           fixed(r.bound_frac, 3) + ", " + r.bound_kind + ") | reached " + fixed(r.reached, 3) +
                           (std::isnan(r.check_err) ? "" : " | err " + sci(r.check_err));
  report.add({row_name(r), shape_label(*r.shape), r.ms, r.tflops, "TFLOP/s", r.dense_tflops, base});
}

json result_json(const Result& r) {
  json j{{"shape", r.shape->name},
         {"dims", r.shape->dims()},
         {"op", r.op},
         {"dtype", r.dtype},
         {"mode", r.mode},
         {"route", r.route},
         {"dense_route", r.dense_route},
         {"bs", r.bs},
         {"density_requested", r.density_req},
         {"density", r.density},
         {"nnz", r.nnz},
         {"median_ms", r.ms},
         {"tflops", r.tflops},
         {"dense_ms", r.dense_ms},
         {"dense_tflops", r.dense_tflops},
         {"useful_frac", r.useful},
         {"bound_tflops", r.bound_tflops},
         {"bound_useful_frac", r.bound_frac},
         {"bound_kind", r.bound_kind},
         {"reached", r.reached},
         {"rotate_sets", r.sets}};
  j["check_rel_err"] = std::isnan(r.check_err) ? json(nullptr) : json(r.check_err);
  return j;
}

double graph_ms(Run& run, const std::function<void()>& queue_one, std::string& failure) {
  queue_one();
  cuda::synchronize(kDevice);
  std::shared_ptr<void> graph;
  try {
    cuda::begin_capture(kDevice);
    for (int i = 0; i < run.o.graph_calls; ++i) queue_one();
    graph = cuda::end_capture(kDevice);
  } catch (const std::exception& e) {
    failure = e.what();
    if (cuda::is_capturing(kDevice)) {
      try {
        cuda::end_capture(kDevice);
      } catch (const std::exception&) {
      }
    }
    cudaGetLastError();
    return 0;
  }
  return run.timer.median_ms([&](int) { cuda::launch_graph(graph, kDevice); }, run.o.warmup, run.o.repeats,
                             run.o.graph_calls);
}

void bench_shape_dtype(Run& run, const ShapeSpec& s, const Bases& bases, const std::string& dtype_name_) {
  const Options& o = run.o;
  const DType dt = dtype_name_ == "bf16" ? DType::bf16 : DType::f32;
  const Tf32Scope tf32(dtype_name_ == "f32" ? true : dtype_name_ == "f32-exact" ? false : cuda::allow_tf32());
  std::string why;
  const int nsets = rotation_sets(o, s, dt, run.l2, why);
  std::cerr << "bsmm_gpu: " << s.name << " " << dtype_name_ << ": " << nsets << " input set(s) (" << why << ")"
            << std::endl;
  const Sets sets = make_sets(bases, dt, nsets);
  run.report.note("rotation " + s.name + " " + dtype_name_, std::to_string(nsets) + " input set(s): " + why);
  const size_t e = dtype_size(dt);
  const double dense_flops = 2.0 * s.n * s.c * s.k;
  const Device dev = Device::cuda(kDevice);

  // Dense baselines.
  std::map<std::string, Dense> dense;
  for (const std::string& op : all_ops()) {
    if (!has(o.ops, op)) continue;
    Dense& d = dense[op];
    d.ms = run.timer.median_ms(
        [&](int i) {
          const int k = i % nsets;
          dense_op(op, sets.x[k], sets.dy[k], sets.wd[k]);
        },
        o.warmup, 2 * o.repeats, 1, /*hide_host=*/!s.step);
    d.tflops = dense_flops / (d.ms * 1e9);
    run.report.add({"dense " + op + " " + dtype_name_, shape_label(s), d.ms, d.tflops, "TFLOP/s", d.tflops,
                    "itself: tessera matmul (cuBLAS)"});
    std::cerr << "bsmm_gpu: dense " << s.name << " " << op << " " << dtype_name_ << ": " << fixed(d.ms, 4) << " ms, "
              << fixed(d.tflops, 1) << " TFLOP/s" << std::endl;
    if (s.step && op == "fwd") {
      const Tensor y = empty({s.n, s.k}, TensorOptions(dt).device(dev));
      std::string failure;
      d.graph_ms = graph_ms(
          run,
          [&] {
            call_out<op::Matmul>({false, false, false}, {sets.x[0], sets.wd[0]}, {y});
          },
          failure);
      if (!failure.empty()) {
        run.failures.push_back("dense fwd graph " + s.name + " " + dtype_name_ + ": " + failure);
      } else {
        d.graph_tflops = dense_flops / (d.graph_ms * 1e9);
        run.report.add({"dense fwd/graph " + dtype_name_, shape_label(s), d.graph_ms, d.graph_tflops, "TFLOP/s",
                        d.graph_tflops,
                        "itself: tessera matmul (cuBLAS), " + std::to_string(o.graph_calls) + " calls per CUDA graph"});
      }
    }
  }

  for (int64_t bs : o.bs) {
    for (double dreq : o.density) {
      const bool all_blocks = dreq >= 1.0;
      // random_layout(.., 1.0, ..) stores every block too (nnz = min(R·Q, round(R·Q))); dense_layout says so.
      const LayoutPtr l = all_blocks ? dense_layout(s.c, s.k, bs) : random_layout(s.c, s.k, bs, dreq, 1234);
      TS_CHECK(!all_blocks || l->nnz() == l->block_rows() * l->block_cols(), ValueError,
               "density 1 layout is missing blocks: " << l->str());
      std::vector<Tensor> ws;
      for (int i = 0; i < nsets; ++i) ws.push_back(sparse_weight(sets.wd[i], *l));
      // dwg's gate: ones, so that its dW is the dense product's blocks for the check
      const Tensor gate = ones({l->nnz()}, TensorOptions(dt).device(dev));
      const double flops = 2.0 * s.n * l->nnz() * static_cast<double>(bs) * bs;
      for (const std::string& op : all_ops())
        for (const std::string& route : o.routes) {
          if (!has(o.ops, op)) continue;
          const RouteScope route_scope(route);
          ++run.done;
          Result r;
          r.route = route;
          r.shape = &s;
          r.op = op;
          r.dtype = dtype_name_;
          r.mode = "eager";
          r.bs = bs;
          r.nnz = l->nnz();
          r.density_req = dreq;
          r.density = l->density();
          r.sets = nsets;
          const std::string what = s.name + " " + op + " " + dtype_name_ + " bs" + std::to_string(bs) + " d" +
                                   fixed(r.density, 3) + (route == "auto" ? "" : " " + route);
          try {
            if (all_blocks) {
              // The sparse result against the dense matmul of the same blocks as W.
              const Tensor wfull = blocks_as_dense(ws[0], *l);
              const Tensor got = sparse_op(op, sets.x[0], sets.dy[0], ws[0], gate, l);
              const Tensor ref = dense_op(op, sets.x[0], sets.dy[0], wfull);
              r.check_err = relative_error(is_dw(op) ? blocks_as_dense(got, *l) : got, ref);
              const double tol = dt == DType::bf16 ? 2e-2 : 1e-2;
              if (!(r.check_err <= tol))
                run.mismatches.push_back(what + ": relative error " + sci(r.check_err) + " against the dense " +
                                         "matmul (over " + fixed(tol, 3) + ")");
            }
            const uint64_t dense_calls = cuda::dense_route_calls();
            r.ms = run.timer.median_ms(
                [&](int i) {
                  const int k = i % nsets;
                  sparse_op(op, sets.x[k], sets.dy[k], ws[k], gate, l);
                },
                o.warmup, o.repeats, 1, /*hide_host=*/!s.step);
            r.dense_route = cuda::dense_route_calls() != dense_calls;
            const Dense& d = dense.at(op);
            r.tflops = flops / (r.ms * 1e9);
            r.dense_ms = d.ms;
            r.dense_tflops = d.tflops;
            r.useful = r.tflops / d.tflops;  // = dense_ms · density / ms
            const Bound b = roofline(s, op, bs, l->nnz(), e, d.tflops, run.bw, run.l2);
            r.bound_tflops = b.tflops;
            r.bound_kind = b.kind;
            r.bound_frac = b.tflops / d.tflops;
            r.reached = b.tflops > 0 ? r.tflops / b.tflops : 0;
            run.results.push_back(r);
            add_row(run.report, r);
            std::cerr << "bsmm_gpu: [" << run.done << "/" << run.total << "] " << what << ": " << fixed(r.ms, 4)
                      << " ms, useful-frac " << fixed(r.useful, 3) << ", reached " << fixed(r.reached, 3) << " of "
                      << r.bound_kind << " bound" << std::endl;

            if (s.step && op == "fwd" && d.graph_ms > 0) {
              const Tensor y = empty({s.n, s.k}, TensorOptions(dt).device(dev));
              std::string failure;
              Result g = r;
              g.mode = "graph";
              g.check_err = std::numeric_limits<double>::quiet_NaN();
              g.ms = graph_ms(
                  run,
                  [&] {
                    call_out<op::Bsmm>({l, false}, {sets.x[0], ws[0]}, {y});
                  },
                  failure);
              if (!failure.empty()) {
                run.failures.push_back(what + " graph: " + failure);
              } else {
                g.tflops = flops / (g.ms * 1e9);
                g.dense_ms = d.graph_ms;
                g.dense_tflops = d.graph_tflops;
                g.useful = g.tflops / g.dense_tflops;
                g.bound_frac = g.bound_tflops / g.dense_tflops;
                g.reached = g.bound_tflops > 0 ? g.tflops / g.bound_tflops : 0;
                run.results.push_back(g);
                add_row(run.report, g);
                std::cerr << "bsmm_gpu:   graph: " << fixed(g.ms * 1e3, 2) << " us per call, reached "
                          << fixed(g.reached, 3) << " of " << g.bound_kind << " bound" << std::endl;
              }
            }
          } catch (const std::exception& ex) {
            run.failures.push_back(what + ": " + ex.what());
            std::cerr << "bsmm_gpu: [" << run.done << "/" << run.total << "] " << what << ": failed: " << ex.what()
                      << std::endl;
            cudaGetLastError();
          }
      }
    }
  }
}

}  // namespace bench
}  // namespace tessera
