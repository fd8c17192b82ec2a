// Data-parallel scaling: tokens/s of a compiled training step at world sizes 1…N, the scaling
// efficiency, and how much of the gradient all-reduce backward hides.
//
//   dp_scaling [--device cuda|cpu] [--models nanogpt,gpt2] [--world-sizes 1,2] [--batch 64]
//              [--gpt2-batch 16] [--steps 10] [--repeats 5] [--warmup 3] [--json FILE]
//   dp_scaling --check-steps 50 --world-sizes 2        # losses of 2 ranks vs 1 rank, doubled batch
//
// Each world size runs as that many worker processes of this program, one per GPU: started here
// with RANK / WORLD_SIZE / LOCAL_RANK and a rendezvous file in a fresh temporary folder (CUDA,
// the NCCL group), or under `mpirun -np N` (CPU, the MPI group; builds with tessera_mpi). A
// worker trains models::TransformerLM with AdamW (clipping at 1.0) under bf16 autocast (f32 on
// the CPU) through compile() with dist::DataParallelUpdater: each rank steps on --batch sequences
// of its own (rows r·B … (r+1)·B − 1 of the global batch), so the global batch is world × B.
//
// Figures, per model and world size (rank 0's clock; every round ends with a device sync):
//   step ms          the data-parallel step (all-reduces included, overlapped with backward);
//   local ms         the same step without the all-reduces (the compiled step over the bare
//                    optimizer), timed in alternation with it;
//   all-reduce ms    the step's bucket all-reduces alone, back to back on the group's stream;
//   tokens/s         world × B × T / step time; its baseline is world × the tokens/s of one GPU's
//                    plain compiled step (world size 1, no all-reduce), so the ratio is the scaling
//                    efficiency against not using data parallelism at all;
//   hidden           1 − (step − local) / all-reduce: the share of the all-reduce time that the
//                    step does not pay (world sizes above 1; at world size 1 NCCL's all-reduce
//                    is a local copy, and step − local is the cost of packing the buckets).
// Models: nanogpt (6 layers, 6 heads, width 384, T 256, vocab 65, dropout 0.2; --batch) and gpt2
// (12 layers, 12 heads, width 768, T 1024, vocab 50304, no dropout; --gpt2-batch), random tokens.
//
// --check-steps N: the nanogpt model without dropout, N steps at world size W (per-rank batch B)
// and at world size 1 (batch W·B) from the same initial weights and batches; prints both loss
// curves' largest relative difference (the global mean loss of each step) and exits 1 above
// --check-tol (1e-3).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/bench_report.h"
#include "common/random_tokens.h"
#include "core/autocast.h"
#include "core/cuda/runtime.h"
#include "core/distributed/data_parallel.h"
#include "core/distributed/nccl_group.h"
#include "core/graph/compile.h"
#include "data/sampler.h"
#include "kernels/ops.h"
#include "models/transformer_lm.h"
#include "optim/optim.h"
#ifdef TESSERA_BENCH_MPI
#include "core/distributed/mpi_group.h"
#endif

extern char** environ;

using namespace tessera;
using bench::BenchReport;
using Inputs = std::map<std::string, Tensor>;

namespace {

struct Options {
  std::string device = "cuda", models = "nanogpt,gpt2", world_sizes = "1,2", json, quick_flag;
  int64_t batch = 64, gpt2_batch = 16;
  int steps = 10, repeats = 5, warmup = 3, check_steps = 0;
  double check_tol = 1e-3;
  bool quick = false;
  // worker side (set by the parent)
  bool worker = false;
  std::string model = "nanogpt", out, rendezvous;
  int64_t worker_batch = 0;
  bool no_dropout = false, timing = true;
};

models::TransformerLMConfig model_config(const std::string& name, bool quick, bool no_dropout) {
  models::TransformerLMConfig c;
  if (name == "gpt2") {
    c.vocab = 50304;
    c.seq_len = quick ? 64 : 1024;
    c.width = quick ? 64 : 768;
    c.layers = quick ? 2 : 12;
    c.heads = quick ? 2 : 12;
    c.activation = "gelu_tanh";
  } else {
    c.vocab = 65;
    c.seq_len = quick ? 32 : 256;
    c.width = quick ? 48 : 384;
    c.layers = quick ? 2 : 6;
    c.heads = quick ? 2 : 6;
    c.dropout = no_dropout ? 0.0 : 0.2;
    c.attention_dropout = no_dropout ? 0.0 : 0.2;
  }
  c.attn_block = quick ? 16 : 64;
  c.seed = 1;
  return c;
}

std::vector<int> parse_sizes(const std::string& s) {
  std::vector<int> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    TS_CHECK(end && *end == '\0' && n >= 1 && n <= 1024, ValueError, "--world-sizes: '" << item << "' is not a world size");
    v.push_back(static_cast<int>(n));
  }
  TS_CHECK(!v.empty(), ValueError, "--world-sizes: empty");
  return v;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    TS_CHECK(item == "nanogpt" || item == "gpt2", ValueError, "--models: '" << item << "' is not nanogpt or gpt2");
    v.push_back(item);
  }
  return v;
}

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// ---------------------------------------------------------------- worker

std::shared_ptr<dist::ProcessGroup> make_group(const Options& o, const dist::WorldInfo& w, Device dev) {
  if (dev.is_cuda()) return dist::nccl_process_group(w, dist::rendezvous_file(o.rendezvous, w), dev.index, o.rendezvous);
#ifdef TESSERA_BENCH_MPI
  if (w.size > 1) return dist::mpi_process_group();
#endif
  TS_CHECK(w.size == 1, ValueError, "dp_scaling: CPU runs of several ranks need tessera_mpi (MPI was not found at build time)");
  return dist::single_process_group();
}

int run_worker(const Options& o) {
  const dist::WorldInfo w = dist::detect_world();
  const Device dev = o.device == "cuda" ? Device::cuda(std::max(0, w.local_rank)) : Device::cpu();
  const DType amp = dev.is_cuda() ? DType::bf16 : DType::f32;
  auto group = make_group(o, w, dev);
  const int64_t B = o.worker_batch, W = group->size(), r = group->rank();
  const models::TransformerLMConfig cfg = model_config(o.model, o.quick, o.no_dropout);
  const int64_t T = cfg.seq_len;

  models::TransformerLM model(cfg);
  model.to(dev);
  dist::broadcast_parameters(model.parameters(), *group);
  optim::AdamW opt(optim::param_groups_default(model.named_parameters(), 0.1), optim::AdamWOptions(1e-3).betas(0.9, 0.99));
  opt.set_clip_norm(1.0);
  dist::DataParallelUpdater dp(opt, group);
  Generator dropout_gen(11);
  dropout_gen.set_share(static_cast<int>(r), static_cast<int>(W));  // each rank: its rows' part of the masks

  // The global batches (the same on every rank, as one process would draw them) and this rank's rows.
  const Tensor tokens = bench::random_tokens(std::max<int64_t>(1 << 20, 4 * W * B * (T + 1)),
                                             cfg.vocab == 50304 ? 50257 : cfg.vocab, /*seed=*/7);
  data::RandomWindowSampler sampler(data::make_tokens(tokens.to_vector<int32_t>()), W * B, T, /*seed=*/1,
                                    data::Layout::batch_major);
  std::vector<Inputs> feeds;
  for (int i = 0; i < 8; ++i) {
    const data::Batch b = sampler.next();
    feeds.push_back({{"x", slice(b.inputs, 0, r * B * T, (r + 1) * B * T).to(dev)},
                     {"y", slice(b.targets, 0, r * B * T, (r + 1) * B * T).to(dev)}});
  }
  auto loss_fn = [&](const Inputs& in) {
    autocast::Guard g(amp);
    return model.loss(in.at("x"), in.at("y"), B, dropout_gen);
  };
  CompiledStep step_dp = compile(loss_fn, model.named_parameters(), &dp, feeds[0], &dropout_gen);

  nlohmann::json out;
  out["world"] = W;
  out["batch"] = B;
  out["seq"] = T;
  out["buckets"] = dp.buckets().size();
  if (o.check_steps > 0) {  // the global mean loss of each step
    std::vector<double> losses;
    for (int s = 0; s < o.check_steps; ++s) {
      step_dp.launch(feeds[s % feeds.size()]);
      Tensor loss = step_dp.fetch("loss").to(dev);
      group->all_reduce(loss, dist::ReduceOp::average);
      losses.push_back(loss.to(Device::cpu()).item<double>());
    }
    out["losses"] = losses;
  }
  if (o.timing) {
    CompiledStep step_local = compile(loss_fn, model.named_parameters(), &opt, feeds[0], &dropout_gen);
    int k = 0;
    auto rounds = [&](CompiledStep& st) {
      return [&] {
        for (int i = 0; i < o.steps; ++i) st.launch(feeds[k++ % feeds.size()]);
        sync(dev);
      };
    };
    group->barrier();
    const std::vector<double> ms =
        bench::time_interleaved_median_ms({rounds(step_dp), rounds(step_local)}, o.warmup > 0 ? 1 : 0, o.repeats);
    // The bucket all-reduces alone, back to back (as the step issues them).
    std::vector<Tensor> bufs;
    for (const dist::GradientBucket& b : dp.buckets())
      bufs.push_back(zeros({b.elements}, TensorOptions(b.dtype).device(dev)));
    const int first = group->reserve_tickets(static_cast<int>(bufs.size()));
    group->barrier();
    const double comm_ms = bench::time_median_ms(
        [&] {
          for (size_t i = 0; i < bufs.size(); ++i) group->start_all_reduce(bufs[i], bufs[i], true, first + static_cast<int>(i));
          for (size_t i = 0; i < bufs.size(); ++i) group->join(first + static_cast<int>(i));
          sync(dev);
        },
        2, o.repeats);
    out["step_ms"] = ms[0] / o.steps;
    out["local_ms"] = ms[1] / o.steps;
    out["allreduce_ms"] = comm_ms;
    int64_t grad_bytes = 0;
    for (const dist::GradientBucket& b : dp.buckets()) grad_bytes += b.elements * static_cast<int64_t>(dtype_size(b.dtype));
    out["gradient_bytes"] = grad_bytes;
    out["graph"] = step_dp.executor().replays_cuda_graph();
    if (dev.is_cuda()) out["peak_bytes"] = cuda::peak_bytes(dev.index);
  }
  if (r == 0) {
    std::ofstream f(o.out);
    f << out.dump() << "\n";
    TS_CHECK(f.good(), IOError, "dp_scaling: cannot write " << o.out);
  }
  group->barrier();
  return 0;
}

// ---------------------------------------------------------------- parent

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  TS_CHECK(n > 0, IOError, "dp_scaling: cannot find its own program (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

// Starts `world` workers and waits for them; returns rank 0's result.
nlohmann::json run_world(const Options& o, const std::string& model, int world, int64_t batch, bool no_dropout, bool timing,
                         int check_steps) {
  char tmpl[] = "/tmp/dp_scaling.XXXXXX";
  TS_CHECK(::mkdtemp(tmpl) != nullptr, IOError, "dp_scaling: cannot make a temporary folder in /tmp");
  const std::string dir = tmpl, result = dir + "/rank0.json";
  std::vector<std::string> args = {self_exe(), "--worker", "--device", o.device, "--model", model,
                                   "--worker-batch", std::to_string(batch), "--out", result,
                                   "--rendezvous", dir + "/rendezvous", "--steps", std::to_string(o.steps),
                                   "--repeats", std::to_string(o.repeats), "--warmup", std::to_string(o.warmup),
                                   "--check-steps", std::to_string(check_steps)};
  if (o.quick) args.push_back("--quick");
  if (no_dropout) args.push_back("--no-dropout");
  if (!timing) args.push_back("--no-timing");
  std::vector<pid_t> pids;
  const bool use_mpirun = o.device == "cpu" && world > 1;
  const int processes = use_mpirun ? 1 : world;
  for (int r = 0; r < processes; ++r) {
    std::vector<std::string> argv_s = args, env_s;
    if (use_mpirun) {
      argv_s.insert(argv_s.begin(), {"mpirun", "-np", std::to_string(world), "--oversubscribe", "--bind-to", "none",
                                     "-x", "OMP_NUM_THREADS=1"});
    }
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (kv.rfind("RANK=", 0) == 0 || kv.rfind("WORLD_SIZE=", 0) == 0 || kv.rfind("LOCAL_RANK=", 0) == 0) continue;
      env_s.push_back(kv);
    }
    if (!use_mpirun) {
      env_s.push_back("RANK=" + std::to_string(r));
      env_s.push_back("WORLD_SIZE=" + std::to_string(world));
      env_s.push_back("LOCAL_RANK=" + std::to_string(r));
    }
    env_s.push_back("NCCL_NVLS_ENABLE=0");
    std::vector<char*> argv_c, env_c;
    for (std::string& a : argv_s) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    for (std::string& e : env_s) env_c.push_back(e.data());
    env_c.push_back(nullptr);
    pid_t pid = 0;
    const int rc = use_mpirun ? ::posix_spawnp(&pid, "mpirun", nullptr, nullptr, argv_c.data(), env_c.data())
                              : ::posix_spawn(&pid, argv_c[0], nullptr, nullptr, argv_c.data(), env_c.data());
    TS_CHECK(rc == 0, IOError, "dp_scaling: cannot start " << (use_mpirun ? "mpirun" : "a worker") << " (error " << rc << ")");
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  TS_CHECK(ok, IOError, "dp_scaling: a worker of world size " << world << " (" << model << ") failed (its message is above)");
  std::ifstream f(result);
  TS_CHECK(f, IOError, "dp_scaling: the workers of world size " << world << " wrote no result");
  nlohmann::json j = nlohmann::json::parse(f);
  std::remove(result.c_str());
  ::rmdir(dir.c_str());
  return j;
}

std::string fmt(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

int run_check(const Options& o) {
  const std::vector<int> sizes = parse_sizes(o.world_sizes);
  const int W = *std::max_element(sizes.begin(), sizes.end());
  TS_CHECK(W > 1, ValueError, "--check-steps: give a world size above 1 in --world-sizes");
  const nlohmann::json one = run_world(o, "nanogpt", 1, W * o.batch, true, false, o.check_steps);
  const nlohmann::json many = run_world(o, "nanogpt", W, o.batch, true, false, o.check_steps);
  const std::vector<double> a = one["losses"], b = many["losses"];
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(a[i]));
  std::cout << "check: nanogpt without dropout, " << a.size() << " steps; world 1 batch " << W * o.batch << " vs world " << W
            << " batch " << o.batch << " per rank\n";
  std::cout << "  loss at step 1: " << fmt(a.front(), 6) << " / " << fmt(b.front(), 6) << ", at step " << a.size() << ": "
            << fmt(a.back(), 6) << " / " << fmt(b.back(), 6) << "\n";
  std::cout << "  largest relative difference " << worst << " (tolerance " << o.check_tol << ")\n";
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << nlohmann::json{{"program", "dp_scaling"}, {"check", {{"world", W}, {"losses_world1", a}, {"losses_worldN", b},
                                                              {"max_rel_diff", worst}}}}
             .dump(1)
      << "\n";
  }
  if (!(worst <= o.check_tol)) {
    std::cerr << "dp_scaling: the losses of world size " << W << " differ from world size 1 by " << worst << "\n";
    return 1;
  }
  return 0;
}

int run_parent(const Options& o) {
  TS_CHECK(o.device == "cpu" || cuda_available(), DeviceError, "--device cuda: no GPU is visible to this process");
  if (o.check_steps > 0) return run_check(o);
  const std::vector<int> sizes = parse_sizes(o.world_sizes);
  BenchReport report("dp_scaling");
  report.note("device", o.device == "cuda" ? "CUDA, one GPU per rank, NCCL group (rendezvous file)" : "CPU, MPI group");
  report.note("step", "compiled TransformerLM step, AdamW with clipping, bf16 autocast on CUDA, DataParallelUpdater");
  nlohmann::json figures = nlohmann::json::array();
  for (const std::string& model : split_list(o.models)) {
    const int64_t B = model == "gpt2" ? o.gpt2_batch : o.batch;
    double base_tok = 0;
    for (int w : sizes) {
      const nlohmann::json j = run_world(o, model, w, B, false, true, 0);
      const int64_t T = j["seq"];
      const double step_ms = j["step_ms"], local_ms = j["local_ms"], ar_ms = j["allreduce_ms"];
      const double tok = static_cast<double>(w * B * T) / step_ms * 1e3;
      // the baseline: one GPU's plain compiled step (no data parallelism at all)
      if (w == 1) base_tok = static_cast<double>(B * T) / local_ms * 1e3;
      const double hidden = ar_ms > 0 ? std::clamp(1.0 - (step_ms - local_ms) / ar_ms, 0.0, 1.0) : 0.0;
      const std::string shape = model + " w" + std::to_string(w) + " B" + std::to_string(B) + " T" + std::to_string(T);
      report.add({"dp step", shape, step_ms, step_ms, "ms", local_ms, "step, no all-reduce"});
      report.add({"all-reduces alone", shape, ar_ms, ar_ms, "ms", step_ms, "dp step"});
      if (w > 1) report.add({"hidden under backward", shape, 0, hidden, "share", 1.0, "all hidden"});
      if (base_tok > 0) report.add({"tokens/s", shape, step_ms, tok, "tok/s", w * base_tok, "world x 1-GPU plain step"});
      nlohmann::json row = j;
      row["model"] = model;
      row["tokens_per_s"] = tok;
      row["efficiency"] = base_tok > 0 ? tok / (w * base_tok) : 0.0;
      row["hidden"] = hidden;
      figures.push_back(row);
    }
  }
  report.print(std::cout);
  if (!o.json.empty()) report.write_json(o.json, nlohmann::json{{"runs", figures}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dp_scaling: data-parallel training throughput at several world sizes"};
  app.add_option("--device", o.device, "cuda (NCCL, one GPU per rank) or cpu (MPI)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--models", o.models, "nanogpt,gpt2");
  app.add_option("--world-sizes", o.world_sizes, "comma-separated world sizes");
  app.add_option("--batch", o.batch, "sequences per rank (nanogpt; and the --check-steps run)")->check(CLI::PositiveNumber);
  app.add_option("--gpt2-batch", o.gpt2_batch, "sequences per rank (gpt2)")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "steps per timed round")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "timed rounds (median)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed rounds")->check(CLI::NonNegativeNumber);
  app.add_option("--check-steps", o.check_steps, "compare losses over this many steps instead of timing")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--check-tol", o.check_tol, "largest relative loss difference --check-steps accepts");
  app.add_flag("--quick", o.quick, "tiny models (smoke test)");
  app.add_option("--json", o.json, "write the figures to FILE");
  // the workers' flags (set by the parent)
  app.add_flag("--worker", o.worker)->group("");
  app.add_option("--model", o.model)->group("");
  app.add_option("--worker-batch", o.worker_batch)->group("");
  app.add_option("--out", o.out)->group("");
  app.add_option("--rendezvous", o.rendezvous)->group("");
  app.add_flag("--no-dropout", o.no_dropout)->group("");
  bool no_timing = false;
  app.add_flag("--no-timing", no_timing)->group("");
  if (int rc = bench::parse_flags(app, argc, argv); rc >= 0) return rc;
  o.timing = !no_timing;
  try {
    return o.worker ? run_worker(o) : run_parent(o);
  } catch (const std::exception& e) {
    std::cerr << "dp_scaling: " << e.what() << "\n";
    return 1;
  }
}
