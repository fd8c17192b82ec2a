// simple: one block-sparse layer against the dense matrix it stands for.
//
//   simple [--in 2048] [--out 2048] [--block 32] [--density 0.1] [--batch 64] [--seed 0]
//          [--runs 5] [--save FILE.h5]
//
// Builds an nn::BlockSparseLinear with a random layout, expands its stored blocks into the dense
// W [in, out] it represents (zeros elsewhere), checks that both give the same y = x·W + b and the
// same dX, and times forward and backward (dX, dW, db) of both: the median of --runs runs after a
// warm-up. The block-sparse layer does density × the dense work, so its speedup approaches
// 1/density for large layers. With --save the layer is written as a checkpoint
// (models/model_checkpoint.h); `inspect FILE.h5` prints it.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

using namespace tessera;

namespace {

// The dense W [in, out] of a layer: block k of weight [nnz, bs, bs] is
// W[r*bs : (r+1)*bs, c*bs : (c+1)*bs] with r = block_row[k], c = block_col[k].
Tensor dense_weight(const nn::BlockSparseLinear& fc) {
  const BlockLayout& l = *fc.layout();
  const int64_t bs = l.block_size(), out = l.out_features();
  const std::vector<float> blocks = fc.weight().to_vector<float>();
  std::vector<float> w(static_cast<size_t>(l.in_features() * out), 0.0f);
  for (int64_t k = 0; k < l.nnz(); ++k) {
    const int64_t r0 = l.block_row()[k] * bs, c0 = l.block_col()[k] * bs;
    for (int64_t i = 0; i < bs; ++i)
      for (int64_t j = 0; j < bs; ++j) w[(r0 + i) * out + c0 + j] = blocks[(k * bs + i) * bs + j];
  }
  return from_vector(w, {l.in_features(), out});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// Median over `runs` of what `timed` returns (milliseconds), after one untimed warm-up call.
double median_ms(int runs, const std::function<double()>& timed) {
  timed();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(timed());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Forward and backward times of y = forward(x) with the upstream gradient g; `zero` clears the
// gradients of the parameters (and x) between runs so that backward does not accumulate.
struct Timing {
  double forward_ms, backward_ms;
};
Timing time_layer(int runs, const std::function<Tensor()>& forward, const Tensor& g,
                  const std::function<void()>& zero) {
  Timing t{};
  t.forward_ms = median_ms(runs, [&] {
    NoGradGuard no_grad;  // the forward alone: no graph recorded
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y = forward();
    return ms_since(t0);
  });
  t.backward_ms = median_ms(runs, [&] {
    zero();
    Tensor y = forward();
    const auto t0 = std::chrono::steady_clock::now();
    y.backward(g);
    return ms_since(t0);
  });
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A block-sparse linear layer against its dense equivalent: agreement and speed"};
  int64_t in = 2048, out = 2048, block = 32, batch = 64;
  double density = 0.1;
  uint64_t seed = 0;
  int runs = 5;
  std::string save;
  app.add_option("--in", in, "input features (a multiple of --block)")->check(CLI::PositiveNumber);
  app.add_option("--out", out, "output features (a multiple of --block)")->check(CLI::PositiveNumber);
  app.add_option("--block", block, "block size")->check(CLI::IsMember({8, 16, 32, 64}));
  app.add_option("--density", density, "fraction of blocks stored")->check(CLI::Range(1e-6, 1.0));
  app.add_option("--batch", batch, "rows of x")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the layout, the weights and x");
  app.add_option("--runs", runs, "timed runs per measurement (the median is printed)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--save", save, "write the layer as a checkpoint to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "simple: " << e.what() << "\n";
    return 2;
  }

  try {
    Generator gen(seed);
    nn::BlockSparseLinear fc(nn::BlockSparseLinearOptions(in, out, block).density(density, seed), gen);
    std::cout << "block-sparse layer: " << fc.layout()->str() << ", " << fc.num_parameters()
              << " parameters\n";

    // The dense equivalent: W [in, out] with zeros outside the stored blocks, and the same bias.
    Tensor w = dense_weight(fc).requires_grad_();
    Tensor b = fc.bias().detach().clone().requires_grad_();
    std::cout << "dense layer:        W [" << in << ", " << out << "], " << w.numel() + b.numel()
              << " parameters\n";

    Tensor x = normal({batch, in}, 0, 1, gen).requires_grad_();
    Tensor g = normal({batch, out}, 0, 1, gen);  // upstream gradient dL/dy
    auto sparse_fwd = [&] { return fc.forward(x); };
    auto dense_fwd = [&] { return matmul(x, w) + b; };

    // Agreement: y, and dX of the loss sum(y ⊙ g).
    Tensor ys = sparse_fwd(), yd = dense_fwd();
    ys.backward(g);
    const Tensor dx_sparse = x.grad().clone();
    x.zero_grad();
    yd.backward(g);
    const double dy = max_abs_diff(ys, yd), ddx = max_abs_diff(dx_sparse, x.grad());
    std::cout << "max abs diff: y " << dy << ", dX " << ddx << "  (y [" << batch << ", " << out << "])\n";
    TS_CHECK(dy < 1e-3 && ddx < 1e-3, ValueError,
             "block-sparse and dense results differ (max abs diff y " << dy << ", dX " << ddx << ")");

    const Timing ts = time_layer(runs, sparse_fwd, g, [&] { fc.zero_grad(); x.zero_grad(); });
    const Timing td = time_layer(runs, dense_fwd, g, [&] { w.zero_grad(); b.zero_grad(); x.zero_grad(); });
    std::cout << std::fixed << std::setprecision(3) << "median of " << runs << " runs (ms):\n"
              << "               block-sparse      dense   speedup\n";
    auto row = [](const char* name, double s, double d) {
      std::cout << "  " << std::left << std::setw(10) << name << std::right << std::setw(14) << s
                << std::setw(11) << d << std::setw(9) << std::setprecision(2) << d / s << "x\n"
                << std::setprecision(3);
    };
    row("forward", ts.forward_ms, td.forward_ms);
    row("backward", ts.backward_ms, td.backward_ms);
    std::cout << "(the ideal speedup at density " << std::setprecision(3) << fc.layout()->density() << " is "
              << std::setprecision(1) << 1.0 / fc.layout()->density() << "x)\n";

    if (!save.empty()) {
      io::CheckpointData ck = io::capture(fc);
      ck.config = nlohmann::json{{"program", "simple"}, {"in", in}, {"out", out}, {"block", block},
                                 {"density", density}, {"seed", seed}}.dump();
      ck.rng["init"] = gen.state();
      io::save_checkpoint(save, ck);
      std::cout << "wrote the layer to " << save << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "simple: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
