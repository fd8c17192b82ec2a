#include "models/train/window_task.h"

#include <fstream>
#include <limits>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"

namespace tessera {
namespace train {

namespace {

std::string data_words(const std::string& data_name) {
  return data_name.empty() ? std::string("the training data") : "'" + data_name + "'";
}

}  // namespace

data::Vocabulary require_vocabulary(const io::CheckpointData& ck, const std::string& path, const std::string& data_name) {
  TS_CHECK(!ck.trainer.vocabulary.empty(), IOError,
           "checkpoint '" << path << "' has no /trainer/vocabulary, so its token ids cannot be matched to the "
                          << "characters of " << data_words(data_name)
                          << "; a character-level run resumes only with its vocabulary");
  return data::Vocabulary::from_bytes({ck.trainer.vocabulary.begin(), ck.trainer.vocabulary.end()});
}

void check_vocabulary(const io::CheckpointData& ck, const std::string& path, const data::Vocabulary& vocab,
                      const std::string& data_name) {
  require_vocabulary(ck, path, data_name);
  const std::string data = data_words(data_name);
  const std::vector<uint8_t> mine = vocab.to_bytes();
  TS_CHECK(ck.trainer.vocabulary == std::string(mine.begin(), mine.end()), ValueError,
           "checkpoint '" << path << "' was trained with a " << ck.trainer.vocabulary.size()
                          << "-character vocabulary that differs from the " << mine.size() << " characters of "
                          << data);
}

namespace {

// Eval mode (no dropout) for a scope; training mode again after it.
struct EvalMode {
  explicit EvalMode(nn::Module& m) : m_(m) { m_.eval(); }
  ~EvalMode() { m_.train(); }
  nn::Module& m_;
};

}  // namespace

WindowTask::WindowTask(nn::Module& model, optim::Optimizer& opt, LossFn loss, data::RandomWindowSampler train,
                       data::TokenArray val, data::Vocabulary vocab, WindowTaskOptions options)
    : model_(model), opt_(opt), loss_(std::move(loss)), sampler_(std::move(train)), val_(std::move(val)),
      vocab_(std::move(vocab)), options_(std::move(options)), precision_(options_.autocast),
      params_(model_.named_parameters()) {
  TS_CHECK(loss_, ValueError, "WindowTask: the loss function is empty");
  TS_CHECK(options_.micro_batches >= 1, ValueError,
           "WindowTask: micro_batches must be >= 1, got " << options_.micro_batches);
  if (options_.zero) {
    TS_CHECK(options_.group && options_.compiled && options_.micro_batches == 1 && options_.autocast != DType::f16,
             ValueError,
             "WindowTask: ZeRO-1 runs compiled data-parallel steps without micro-batches in f32 or bf16 (with a group)");
  }
  if (options_.group) {
    const int64_t world = options_.group->size();
    if (world > 1) {  // the batch one process would draw: W·B windows, the same on every rank
      const auto st = sampler_.state();
      data::RandomWindowSampler global(sampler_.tokens(), sampler_.batch() * world, sampler_.seq(), st.seed,
                                       sampler_.layout());
      global.set_state(st);
      sampler_ = std::move(global);
    }
    // dropout: each rank draws its rows' part of the global batch's masks (Generator::set_share)
    if (options_.dropout_gen) options_.dropout_gen->set_share(options_.group->rank(), static_cast<int>(world));
    std::vector<Tensor> ps;
    for (const graph::NamedParam& p : params_) ps.push_back(p.tensor);
    dist::broadcast_parameters(ps, *options_.group);
    if (options_.micro_batches > 1) buckets_ = dist::plan_buckets(ps);
    else if (!options_.compiled) reducer_ = std::make_unique<dist::GradientReducer>(ps, options_.group);
  }
  if (!options_.compiled) return;
  const bool accumulate = options_.micro_batches > 1;
  const double k = static_cast<double>(options_.micro_batches);
  // The traced step: the loss of one batch (over k micro-batches: loss / k, gradients only).
  auto loss_fn = [this, accumulate, k](const std::map<std::string, Tensor>& in) {
    const auto amp = precision_.guard();
    Tensor l = loss_(in.at("x"), in.at("y"));
    if (accumulate) l = div(l, k);
    return precision_.traced_loss(l, in, /*own_scale=*/accumulate);
  };
  data::RandomWindowSampler peek = sampler_;  // a copy: the real sampler does not advance
  ParamUpdater* updater = accumulate ? nullptr : precision_.updater(opt_);
  if (updater && options_.zero) {
    updater = options_.zero.get();
  } else if (updater && options_.group) {
    dp_ = std::make_unique<dist::DataParallelUpdater>(*updater, options_.group);
    updater = dp_.get();
  }
  step_.emplace(compile(loss_fn, params_, updater, feeds(local(peek.next())), options_.dropout_gen));
  if (!options_.dump_graph.empty()) {
    std::ofstream d(options_.dump_graph);
    d << step_->to_dot();
    TS_CHECK(d.good(), IOError, "cannot write '" << options_.dump_graph << "'");
  }
}

std::map<std::string, Tensor> WindowTask::feeds(const data::Batch& b) const {
  std::map<std::string, Tensor> in{{"x", b.inputs}, {"y", b.targets}};
  precision_.add_feeds(in);  // f16: the loss scale
  return in;
}

data::Batch WindowTask::local(const data::Batch& b) const {
  if (!options_.group || options_.group->size() == 1) return b;
  const int64_t world = options_.group->size(), rows = b.batch / world, r = options_.group->rank(), seq = b.seq;
  auto mine = [&](const Tensor& t) {
    if (b.layout == data::Layout::batch_major) return slice(t, 0, r * rows * seq, (r + 1) * rows * seq).clone();
    return reshape(slice(reshape(t, {seq, b.batch}), 1, r * rows, (r + 1) * rows), {seq * rows});  // time-major: a copy
  };
  data::Batch out = b;
  out.inputs = mine(b.inputs);
  out.targets = mine(b.targets);
  out.batch = rows;
  return out;
}

double WindowTask::global_mean(double loss) const {
  if (!options_.group || options_.group->size() == 1) return loss;
  return dist::all_reduce_values({loss}, *options_.group, dist::ReduceOp::average)[0];
}

int64_t WindowTask::tokens_per_step() const {
  return options_.micro_batches * sampler_.batch() * sampler_.seq();  // every rank's (the global batch)
}

bool WindowTask::profile_next_step(std::ostream& out) {
  if (!step_) return false;
  profile_ = &out;
  return true;
}

double WindowTask::last_grad_norm() const { return last_step_grad_norm(step_ ? &*step_ : nullptr, opt_); }

double WindowTask::train_step() {
  if (options_.micro_batches > 1) return global_mean(accumulate_step());
  const data::Batch b = local(sampler_.next());
  if (step_) {
    const double loss = run_compiled_step(*step_, feeds(b), std::exchange(profile_, nullptr));
    return global_mean(precision_.after_run(*step_, loss));
  }
  Tensor loss;
  {
    const auto amp = precision_.guard();
    loss = loss_(b.inputs.to(options_.device), b.targets.to(options_.device));
  }
  if (reducer_) {
    precision_.eager_loss(loss).backward();
    reducer_->finish();  // the averaged gradients, before the (f16: finiteness-checked) update
    precision_.eager_step(opt_);
  } else {
    precision_.eager_update(loss, opt_);
  }
  return global_mean(loss.item<float>());
}

// k micro-batches of gradients, summed into the parameters' .grad, then one update.
double WindowTask::accumulate_step() {
  const int64_t k = options_.micro_batches;
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const data::Batch b = local(sampler_.next());
    if (step_) {
      // loss / k (f16: times the scale); a profile asked for covers the first micro-batch
      sum += precision_.unscaled(run_compiled_step(*step_, feeds(b), std::exchange(profile_, nullptr)));
      for (const graph::NamedParam& p : params_) {
        if (!p.tensor.requires_grad()) continue;
        const Tensor g = step_->fetch("grad/" + p.name);
        if (!g.defined()) continue;
        Tensor param = p.tensor, acc = param.grad();  // handles share the parameter's impl
        if (!acc.defined()) param.set_grad(g);
        else call_out<op::Add>({}, {acc, g}, {acc});  // acc += g in its own buffer
      }
      continue;
    }
    Tensor loss;
    {
      const auto amp = precision_.guard();
      loss = div(loss_(b.inputs.to(options_.device), b.targets.to(options_.device)), static_cast<double>(k));
    }
    precision_.eager_loss(loss).backward();  // accumulates into .grad
    sum += loss.item<float>();
  }
  if (options_.group) {  // one all-reduce of the summed gradients, after the last micro-step
    std::vector<Tensor> ps;
    for (const graph::NamedParam& p : params_) ps.push_back(p.tensor);
    dist::average_gradients(ps, buckets_, *options_.group);
  }
  precision_.eager_step(opt_);
  return sum;  // the mean of the k losses
}

double WindowTask::evaluate(int64_t batches) {
  const bool enough = static_cast<int64_t>(val_ ? val_->size() : 0) > sampler_.seq();
  return mean_loss(enough ? val_ : sampler_.tokens(), batches);
}

double WindowTask::evaluate_test(int64_t batches) {
  if (static_cast<int64_t>(options_.test ? options_.test->size() : 0) <= sampler_.seq())
    return std::numeric_limits<double>::quiet_NaN();
  return mean_loss(options_.test, batches);
}

double WindowTask::mean_loss(const data::TokenArray& tokens, int64_t batches) {
  data::RandomWindowSampler s(tokens, sampler_.batch(), sampler_.seq(), options_.eval_seed, sampler_.layout());
  EvalMode em(model_);
  NoGradGuard ng;
  const auto amp = precision_.guard();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const data::Batch b = local(s.next());  // data parallel: this rank's rows of the global windows
    sum += loss_(b.inputs.to(options_.device), b.targets.to(options_.device)).item<float>();
  }
  return global_mean(sum / static_cast<double>(batches));
}

void WindowTask::save_state(io::CheckpointData& ck) const {
  const std::vector<uint8_t> voc = vocab_.to_bytes();
  ck.trainer.vocabulary.assign(voc.begin(), voc.end());
  ck.trainer.strings["data.sampler"] = "random";
  const auto s = sampler_.state();
  ck.rng["data"] = Generator::State{s.seed, s.offset};
  ck.trainer.ints["data.steps"] = s.steps;
  if (options_.dropout_gen) ck.rng["dropout"] = options_.dropout_gen->state();
  precision_.save(ck);
}

void WindowTask::restore_state(const io::CheckpointData& ck, const std::string& path) {
  check_vocabulary(ck, path, vocab_, options_.data_name);
  const auto& t = ck.trainer;
  auto it = t.strings.find("data.sampler");
  TS_CHECK(it != t.strings.end() && it->second == "random" && ck.rng.count("data") && t.ints.count("data.steps"),
           IOError, "checkpoint '" << path << "' lacks the random-window sampler state (/trainer data.sampler = "
                                   << "\"random\", data.steps and /rng/data)");
  const Generator::State g = ck.rng.at("data");
  sampler_.set_state({g.seed, g.offset, t.ints.at("data.steps")});
  if (options_.dropout_gen && ck.rng.count("dropout")) options_.dropout_gen->set_state(ck.rng.at("dropout"));
  precision_.restore(ck);
}

}  // namespace train
}  // namespace tessera
