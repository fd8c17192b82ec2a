#include "models/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "core/distributed/data_parallel.h"
#include "core/error.h"
#include "core/graph/compile.h"
#include "models/model_checkpoint.h"
#include "models/train/run_folder.h"
#include "models/train/stop_signal.h"
#include "optim/clip_grad.h"

namespace fs = std::filesystem;

namespace tessera {
namespace train {

double last_step_grad_norm(const CompiledStep* step, const optim::Optimizer& opt) {
  if (step && step->has_output(optim::kGradNormOutput)) return step->fetch(optim::kGradNormOutput).item<double>();
  return opt.last_grad_norm();
}

double run_compiled_step(CompiledStep& step, const std::map<std::string, Tensor>& feeds, std::ostream* profile) {
  if (!profile) return step.run(feeds);
  std::vector<NodeTime> nodes;
  const std::vector<OpTime> times = step.profile(feeds, &nodes);
  *profile << format_profile(times) << "the same step's " << kProfileSignatureRows
           << " costliest op signatures (nodes of one op with equal operand and result shapes):\n"
           << format_profile_by_signature(nodes, kProfileSignatureRows) << std::flush;
  return step.fetch("loss").item<double>();
}

void TrainOptions::validate() const {
  TS_CHECK(!out.empty(), ValueError, "TrainOptions: out (the run folder) must not be empty");
  TS_CHECK(steps >= 1, ValueError, "TrainOptions: steps must be >= 1, got " << steps);
  TS_CHECK(eval_every >= 0, ValueError, "TrainOptions: eval_every must be >= 0, got " << eval_every);
  TS_CHECK(eval_batches >= 1, ValueError, "TrainOptions: eval_batches must be >= 1, got " << eval_batches);
  TS_CHECK(test_batches >= 0, ValueError, "TrainOptions: test_batches must be >= 0, got " << test_batches);
  TS_CHECK(ckpt_every >= 0, ValueError, "TrainOptions: ckpt_every must be >= 0, got " << ckpt_every);
  TS_CHECK(keep >= 0, ValueError, "TrainOptions: keep must be >= 0, got " << keep);
  TS_CHECK(log_every >= 1, ValueError, "TrainOptions: log_every must be >= 1, got " << log_every);
  TS_CHECK(profile_step >= 0, ValueError, "TrainOptions: profile_step must be >= 0, got " << profile_step);
  TS_CHECK(time_limit_s >= 0 && std::isfinite(time_limit_s), ValueError,
           "TrainOptions: time_limit_s must be finite and >= 0, got " << time_limit_s);
}

namespace {

std::string fmt_duration(double s) {
  const auto t = static_cast<int64_t>(std::max(0.0, s) + 0.5);
  std::ostringstream o;
  if (t >= 3600) o << t / 3600 << "h";
  if (t >= 60) o << (t / 60) % 60 << "m";
  o << t % 60 << "s";
  return o.str();
}

std::string fmt(double v, int prec) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(prec);
  o << v;
  return o.str();
}

constexpr const char* kBestValLoss = "best_val_loss";  // /trainer attribute: keep_best across a resume

// The loop's state and its pieces, one run.
class Loop {
 public:
  Loop(const TrainOptions& o, nn::Module& model, optim::Optimizer& opt, const nlohmann::json& config, TrainTask& task)
      : o_(o), model_(model), opt_(opt), config_(config.dump()), task_(task),
        lead_(!o.group || o.group->rank() == 0) {
    o_.validate();
    if (!lead_) o_.quiet = true;       // rank 0 speaks for the run
    if (!o_.resume.empty()) resume();  // validates everything before changing a tensor; reads only
    if (lead_) folder_.emplace(o_.out, config, step_);
    ckpt_ = (fs::path(o_.out) / "ckpt.h5").string();
    res_.checkpoint = ckpt_;
  }

  TrainResult run() {
    std::optional<StopSignals> stop;
    if (o_.handle_signals) stop.emplace();
    const bool tty = !o_.quiet && isatty(fileno(stdout));
    if (step_ >= o_.steps && !o_.quiet)
      std::cout << "checkpoint is at step " << step_ << " >= --steps " << o_.steps << ": nothing to do\n";
    if (!o_.resume.empty() && !o_.quiet)
      std::cout << o_.program << ": resumed from " << o_.resume << " at step " << step_ << "\n";
    const int64_t first = step_;
    if (o_.eval_first && first == 0 && o_.steps > 0) {
      const double v = evaluate();
      if (folder_) {
        folder_->log({{"step", 0}, {"val_loss", v}});
        folder_->flush();
      }
      if (!o_.quiet) std::cout << "step 0  val_loss " << fmt(v, 4) << "\n" << std::flush;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    double smooth = NAN, last_log_t = 0.0;
    double eval_s = 0;  // time spent evaluating, not counted against time_limit_s
    int64_t last_log_step = step_;
    bool out_of_time = false;
    while (step_ < o_.steps && !out_of_time) {
      if (o_.schedule) o_.schedule->apply(opt_);
      const double lr = opt_.lr();
      if (o_.profile_step == step_ + 1) profile_next();
      const double loss = task_.train_step();
      TS_CHECK(std::isfinite(loss), ValueError,
               "training loss became " << loss << " at step " << step_ + 1 << " (try a lower --lr or --clip); "
                                       << last_good());
      res_.train_loss = loss;
      ++step_;
      tokens_seen_ += task_.tokens_per_step();
      if (o_.test_signal_step > 0 && step_ == o_.test_signal_step &&
          (o_.test_signal_rank < 0 || !o_.group || o_.group->rank() == o_.test_signal_rank))
        for (int i = 0; i < o_.test_signal_count; ++i) std::raise(o_.test_signal);
      smooth = std::isnan(smooth) ? loss : 0.9 * smooth + 0.1 * loss;

      out_of_time = o_.time_limit_s > 0 && elapsed() - eval_s >= o_.time_limit_s;
      const int signal = agree_on_stop(stop ? stop->signal() : 0, out_of_time);
      const bool last = step_ == o_.steps || out_of_time;
      const bool eval = last || (o_.eval_every > 0 && step_ % o_.eval_every == 0);
      const bool log = eval || step_ % o_.log_every == 0 || step_ == first + 1;
      const double now = elapsed();
      const double tok_s = now > 0 ? (step_ - first) * task_.tokens_per_step() / now : 0.0;
      if (tty) {
        const double eta = (o_.steps - step_) * now / static_cast<double>(step_ - first);
        std::cout << "\rstep " << step_ << "/" << o_.steps << "  loss " << fmt(smooth, 3) << "  " << fmt(tok_s, 0)
                  << " tok/s  ETA " << fmt_duration(eta) << "    " << std::flush;
      }
      if (!last && o_.ckpt_every > 0 && step_ % o_.ckpt_every == 0) save(ckpt_, o_.keep);
      if (o_.on_step) o_.on_step({step_, loss, lr, now});
      if (log) {
        nlohmann::json row = {{"step", step_}, {"train_loss", loss}, {"lr", lr},
                              {"tokens_per_s", (step_ - last_log_step) * task_.tokens_per_step() /
                                                   std::max(1e-9, now - last_log_t)},
                              {"elapsed_s", now}, {"train_s", now - eval_s}};
        const double grad_norm = task_.last_grad_norm();
        if (std::isfinite(grad_norm)) row["grad_norm"] = grad_norm;
        last_log_step = step_;
        last_log_t = now;
        if (eval) {
          const double e0 = elapsed();
          row["val_loss"] = evaluate();
          eval_s += elapsed() - e0;
        }
        if (folder_) {
          folder_->log(row);
          if (eval) folder_->flush();
        }
        if (eval && tty) std::cout << "\n" << "step " << step_ << "  val_loss " << fmt(res_.val_loss, 4) << "\n";
        if (!tty && !o_.quiet) {
          std::cout << "step " << step_ << "/" << o_.steps << "  loss " << fmt(loss, 4) << "  lr " << lr << "  "
                    << fmt(tok_s, 0) << " tok/s  " << fmt(now, 1) << "s";
          if (row.contains("grad_norm")) std::cout << "  grad_norm " << fmt(row["grad_norm"].get<double>(), 3);
          if (eval) std::cout << "  val_loss " << fmt(res_.val_loss, 4);
          std::cout << "\n" << std::flush;
        }
      }
      if (signal) {
        save(ckpt_, o_.keep);
        if (tty) std::cout << "\n";
        res_.step = step_;
        res_.signal = signal;
        if (lead_)
          std::cout << o_.program << ": stopped by " << StopSignals::name(res_.signal) << " after step " << step_
                  << "; checkpoint " << ckpt_ << "; resume with: " << resume_command() << "\n"
                  << std::flush;
        return res_;
      }
    }
    if (step_ > first || !fs::exists(ckpt_)) save(ckpt_, o_.keep);
    if (tty && step_ > first) std::cout << "\n";
    if (std::isnan(res_.val_loss)) evaluate();
    if (o_.test_batches > 0) {
      res_.test_loss = task_.evaluate_test(o_.test_batches);
      if (std::isfinite(res_.test_loss) && folder_) {
        folder_->log({{"step", step_}, {"test_loss", res_.test_loss}});
        folder_->flush();
      }
    }
    res_.step = step_;
    if (out_of_time && !o_.quiet)
      std::cout << o_.program << ": time limit of " << fmt(o_.time_limit_s, 4) << " s of training reached after step "
                << step_ << "\n";
    if (!o_.quiet)
      std::cout << "done: step " << step_ << "  train_loss "
                << (std::isnan(res_.train_loss) ? "-" : fmt(res_.train_loss, 4)) << "  val_loss "
                << fmt(res_.val_loss, 4)
                << (o_.test_batches == 0             ? std::string()
                    : std::isfinite(res_.test_loss) ? "  test_loss " + fmt(res_.test_loss, 4)
                                                     : std::string("  (no test split)"))
                << "  (" << fmt_duration(elapsed()) << ", run folder " << o_.out << ")\n";
    return res_;
  }

 private:
  void resume() {
    io::CheckpointData ck;
    if (o_.zero) {  // ZeRO-1: the file holds every parameter's state; this rank's optimizer its own
      ck = io::load_checkpoint(o_.resume);
      o_.zero->keep_owned(ck.optimizer);
      ck = io::restore(std::move(ck), o_.resume, model_, &opt_);
    } else {
      ck = io::restore(o_.resume, model_, &opt_);
    }
    task_.restore_state(ck, o_.resume);
    step_ = ck.trainer.step;
    tokens_seen_ = ck.trainer.tokens_seen;
    TS_CHECK(opt_.step_count() == step_, IOError,
             "checkpoint '" << o_.resume << "' is inconsistent: optimizer step " << opt_.step_count()
                            << " but trainer step " << step_);
    auto best = ck.trainer.reals.find(kBestValLoss);
    if (best != ck.trainer.reals.end()) res_.best_val_loss = best->second;
    last_saved_step_ = step_;
    last_saved_path_ = o_.resume;
  }

  // TESSERA_DIST_CHECK=1: at every checkpoint the ranks check that their parameters are still
  // rank 0's, bit for bit (dist::check_parameters_equal: one ValueError naming the first that is not).
  static bool debug_check() {
    const char* e = std::getenv("TESSERA_DIST_CHECK");
    return e && std::string(e) == "1";
  }

  // Data parallel: the ranks' stop requests summed, so that all stop after the same step. Returns
  // the signal to stop with (SIGINT before SIGTERM) or 0, and sets out_of_time when any rank's
  // time limit is reached. One process: its own signal.
  int agree_on_stop(int own_signal, bool& out_of_time) {
    if (!o_.group || o_.group->size() == 1) return own_signal;
    const std::vector<double> any = dist::all_reduce_values(
        {own_signal == SIGINT ? 1.0 : 0.0, own_signal == SIGTERM ? 1.0 : 0.0, out_of_time ? 1.0 : 0.0}, *o_.group,
        dist::ReduceOp::sum);
    out_of_time = any[2] > 0;
    return any[0] > 0 ? SIGINT : any[1] > 0 ? SIGTERM : 0;
  }

  // Evaluates, appends the sample, and keeps best.h5 when asked. Returns the val loss.
  double evaluate() {
    res_.val_loss = task_.evaluate(o_.eval_batches);
    const std::string text = lead_ ? task_.sample() : std::string();
    if (!text.empty()) folder_->add_sample(step_, res_.val_loss, text);
    if (std::isnan(res_.best_val_loss) || res_.val_loss < res_.best_val_loss) {
      res_.best_val_loss = res_.val_loss;
      if (o_.keep_best) save((fs::path(o_.out) / "best.h5").string(), 0);
    }
    if (o_.on_eval) o_.on_eval(step_, res_.val_loss);
    return res_.val_loss;
  }

  void save(const std::string& path, int keep) {
    if (o_.group && o_.group->size() > 1 && debug_check()) dist::check_parameters_equal(model_.parameters(), *o_.group);
    if (!lead_) {  // rank 0 writes; the others take part in the collectives and follow its bookkeeping
      io::CheckpointData unused;
      if (o_.zero) o_.zero->gather_state(unused.optimizer);
      task_.save_state(unused);
      if (path == ckpt_) last_saved_step_ = step_, last_saved_path_ = ckpt_;
      return;
    }
    io::CheckpointData ck = io::capture(model_, &opt_);
    if (o_.zero) o_.zero->gather_state(ck.optimizer);  // ZeRO-1: every parameter's state, from its owner
    ck.config = config_;
    ck.trainer.step = step_;
    ck.trainer.tokens_seen = tokens_seen_;
    if (!std::isnan(res_.best_val_loss)) ck.trainer.reals[kBestValLoss] = res_.best_val_loss;
    task_.save_state(ck);
    io::save_checkpoint(path, ck, keep);
    if (path == ckpt_) last_saved_step_ = step_, last_saved_path_ = ckpt_;
  }

  // Asks the task to run the next step op by op; its table goes to stdout (rank 0's; the other
  // ranks run the same step, their tables discarded).
  void profile_next() {
    discard_.str("");
    std::ostream& out = lead_ ? static_cast<std::ostream&>(std::cout) : discard_;
    out << "\nprofile of step " << step_ + 1 << ", op by op (run plainly, not replayed as a CUDA graph: short ops "
        << "also hold the host's launch gaps):\n";
    TS_CHECK(task_.profile_next_step(out), ValueError,
             o_.program << ": step " << step_ + 1 << " cannot be profiled: the task's steps are eager "
                        << "(profiling needs the compiled step)");
  }

  std::string last_good() const {
    if (last_saved_step_ < 0) return "no checkpoint was written in this run";
    return "the last good checkpoint is " + last_saved_path_ + " at step " + std::to_string(last_saved_step_);
  }

  std::string resume_command() const {
    if (!o_.resume_command.empty()) return o_.resume_command;
    return o_.program + " ... --resume " + ckpt_;
  }

  TrainOptions o_;
  nn::Module& model_;
  optim::Optimizer& opt_;
  std::string config_;
  TrainTask& task_;
  bool lead_;  // rank 0 (or the only process): writes the run folder and checkpoints
  std::optional<RunFolder> folder_;
  std::string ckpt_, last_saved_path_;
  int64_t step_ = 0, tokens_seen_ = 0, last_saved_step_ = -1;
  std::ostringstream discard_;  // the profile table of ranks other than 0
  TrainResult res_{0, NAN, NAN, NAN, 0, {}, NAN};
};

}  // namespace

TrainResult run_training(const TrainOptions& options, nn::Module& model, optim::Optimizer& opt,
                         const nlohmann::json& config, TrainTask& task) {
  Loop loop(options, model, opt, config, task);
  return loop.run();
}

}  // namespace train
}  // namespace tessera
