// train_lstm: a character-level language model (models::CharLSTMLM, a block-sparse (m)LSTM) on a
// text file, by default tinyshakespeare beside the checkout. The shared flags are
// examples/common/trainer.h, the loop (run folder, checkpoints, resume, SIGINT/SIGTERM) the
// library's models/train/trainer.h; `train_lstm --help` lists every flag.
//
//   train_lstm --steps 600 --out runs/lstm                  # compiled step (default)
//   train_lstm --steps 900 --resume runs/lstm/ckpt.h5 --out runs/lstm
//   train_lstm --eager --hidden 512 --density 0.125 --layout ba
//   train_lstm --data "$(data/fetch.sh gcide)" --split interleaved --out runs/gcide   # 40 MB, alphabetical
//
// Data order: truncated BPTT over contiguous lanes (data::SequentialSampler) with the LSTM state
// carried from batch to batch, in both modes; the compiled step takes the state as inputs and
// returns the final state as extra outputs (graph::mark_output). The carried state is saved in
// the checkpoint (/trainer/lstm_state.*), so a resumed run continues exactly where it stopped.
// Data parallel (mpirun -np N, or --dist-init file:///path with RANK / WORLD_SIZE / LOCAL_RANK):
// the sampler holds N·B lanes, rank r trains lanes r·B … (r+1)·B − 1 with their carried state, the
// gradients are averaged over the ranks (compiled: in the step's graph; --eager: during backward),
// and the checkpoint (rank 0's) holds every lane's state, so it resumes on any N with the same
// N·B, one process included.
// Model config: defaults below, then --config FILE, then the model flags given explicitly; a
// resumed run takes the checkpoint's model config unless --config or model flags are given.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <utility>

#include "core/distributed/data_parallel.h"
#include "core/graph/compile.h"
#include "data/sampler.h"
#include "data/text_dataset.h"
#include "examples/common/layout_check.h"
#include "examples/common/trainer.h"
#include "models/train/train.h"
#include "examples/sample/sampling.h"
#include "models/char_lstm_lm.h"

using namespace tessera;
using models::CharLSTMLM;

namespace {

// The demo model: a block-sparse LSTM of width 256 (blocks of 32, 25% dense) that trains visibly
// within minutes on two CPU cores.
nlohmann::json default_model() {
  return {{"embed", 64}, {"hidden", 256}, {"layers", 1}, {"block_size", 32}, {"density", 0.25},
          {"layout", "random"}, {"seed", 0}};
}

class LstmTask : public train::TrainTask {
 public:
  LstmTask(const examples::TrainerFlags& f, CharLSTMLM& model, optim::Optimizer& opt, const data::TextDataset& ds,
           int64_t sample_chars, double temperature)
      : f_(f), model_(model), opt_(opt), ds_(ds), sample_chars_(sample_chars), temperature_(temperature),
        sample_gen_(f.seed + 7), group_(examples::process_group(f)), world_(group_ ? group_->size() : 1),
        rank_(group_ ? group_->rank() : 0), lanes_(ds.tokens(data::Part::train), f.batch * world_, f.seq),
        dev_(examples::train_device(f)), precision_(examples::train_dtype(f)) {
    if (group_) {  // data parallel: rank 0's weights; lanes r·B … (r+1)·B − 1 of the W·B lanes are this rank's
      dist::broadcast_parameters(model.parameters(), *group_);
      if (f.eager) reducer_ = std::make_unique<dist::GradientReducer>(model.parameters(), group_);
    }
    if (f.eager) return;
    // The compiled step: inputs x, y [T, B] and the carried state h<l>, c<l> [B, H] of each
    // layer; outputs the loss and the final state (read back with fetch after each run).
    auto loss_fn = [this](const std::map<std::string, Tensor>& in) {
      CharLSTMLM::State st(model_.config().layers);
      for (size_t l = 0; l < st.size(); ++l) st[l] = {in.at(h_name(l)), in.at(c_name(l))};
      const auto amp = precision_.guard();
      CharLSTMLM::Output out = model_.loss(in.at("x"), in.at("y"), st);
      for (size_t l = 0; l < st.size(); ++l) {
        graph::mark_output(h_name(l), out.state[l].h);
        graph::mark_output(c_name(l), out.state[l].c);
      }
      return precision_.traced_loss(out.loss, in);
    };
    data::SequentialSampler peek = lanes_;  // a copy: the real sampler does not advance
    ParamUpdater* updater = precision_.updater(opt);
    if (group_) {
      dp_ = std::make_unique<dist::DataParallelUpdater>(*updater, group_);
      updater = dp_.get();
    }
    step_.emplace(compile(loss_fn, model.named_parameters(), updater, feeds(mine(peek.next()), zero_state())));
    if (!f.dump_graph.empty()) {
      std::ofstream d(f.dump_graph);
      d << step_->to_dot();
      TS_CHECK(d.good(), IOError, "cannot write '" << f.dump_graph << "'");
    }
  }

  double train_step() override {
    data::Batch b = mine(lanes_.next());
    if (b.lane_start || state_.empty()) state_ = zero_state();
    if (step_) {
      const double run_loss = train::run_compiled_step(*step_, feeds(b, state_), std::exchange(profile_, nullptr));
      const double loss = precision_.after_run(*step_, run_loss);
      for (size_t l = 0; l < state_.size(); ++l) state_[l] = {step_->fetch(h_name(l)), step_->fetch(c_name(l))};
      return global_mean(loss);
    }
    CharLSTMLM::Output out;
    {
      const auto amp = precision_.guard();
      out = model_.loss(reshape(b.inputs, {b.seq, b.batch}).to(dev_), b.targets.to(dev_), state_);
    }
    if (reducer_) {
      precision_.eager_loss(out.loss).backward();
      reducer_->finish();  // the gradients averaged over the ranks
      precision_.eager_step(opt_);
    } else {
      precision_.eager_update(out.loss, opt_);
    }
    state_ = CharLSTMLM::detach(out.state);
    return global_mean(out.loss.item<float>());
  }

  int64_t tokens_per_step() const override { return world_ * f_.batch * f_.seq; }
  bool profile_next_step(std::ostream& out) override {
    if (!step_) return false;
    profile_ = &out;
    return true;
  }
  double last_grad_norm() const override { return train::last_step_grad_norm(step_ ? &*step_ : nullptr, opt_); }

  // Random validation windows from a fixed seed (the same windows at every evaluation), zero state.
  double evaluate(int64_t batches) override {
    return mean_loss(ds_.size(data::Part::val) > f_.seq ? ds_.tokens(data::Part::val) : ds_.tokens(data::Part::train),
                     batches);
  }
  // The same over the test split (--test-batches at the end of the run); NaN without one.
  double evaluate_test(int64_t batches) override {
    if (ds_.size(data::Part::test) <= f_.seq) return std::numeric_limits<double>::quiet_NaN();
    return mean_loss(ds_.tokens(data::Part::test), batches);
  }

  double mean_loss(const data::TokenArray& tokens, int64_t batches) {
    data::RandomWindowSampler s(tokens, world_ * f_.batch, f_.seq, /*seed=*/12345);  // data parallel: split over the ranks
    NoGradGuard ng;
    const auto amp = precision_.guard();
    double sum = 0;
    for (int64_t i = 0; i < batches; ++i) {
      data::Batch b = mine(s.next());
      sum += model_.loss(reshape(b.inputs, {b.seq, b.batch}).to(dev_), b.targets.to(dev_)).loss.item<float>();
    }
    return global_mean(sum / static_cast<double>(batches));
  }

  // sample_chars characters after a newline, drawn at `temperature` (0: greedy).
  std::string sample() override {
    const data::Vocabulary& v = ds_.vocab();
    NoGradGuard ng;
    CharLSTMLM::State st;
    int32_t id = v.contains('\n') ? v.id('\n') : 0;
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < sample_chars_; ++i) {
      auto out = model_.forward(from_vector(std::vector<int32_t>{id}, {1, 1}).to(dev_), st);
      st = out.state;
      const std::vector<float> logits = out.logits.to_vector<float>();
      id = examples::sample_token(logits, {temperature_, /*top_k=*/0}, sample_gen_);
      ids.push_back(id);
    }
    return v.decode(ids);
  }

  void save_state(io::CheckpointData& ck) const override {
    const std::vector<uint8_t> voc = ds_.vocab().to_bytes();
    ck.trainer.vocabulary.assign(voc.begin(), voc.end());
    ck.trainer.strings["data.sampler"] = "sequential";
    ck.trainer.ints["data.cursor"] = lanes_.state().cursor;
    ck.trainer.ints["data.epoch"] = lanes_.state().epoch;
    for (size_t l = 0; l < state_.size(); ++l) {  // the state the next batch continues from, every lane's
      ck.trainer.tensors["lstm_state." + h_name(l)] = gather_lanes(state_[l].h);
      ck.trainer.tensors["lstm_state." + c_name(l)] = gather_lanes(state_[l].c);
    }
    ck.rng["sample"] = sample_gen_.state();
    precision_.save(ck);
  }

  void restore_state(const io::CheckpointData& ck, const std::string& path) override {
    train::check_vocabulary(ck, path, ds_.vocab(), f_.data);
    const auto& t = ck.trainer;
    auto it = t.strings.find("data.sampler");
    TS_CHECK(it != t.strings.end(), IOError, "checkpoint lacks /trainer attribute data.sampler");
    TS_CHECK(it->second == "sequential", ValueError,
             "checkpoint's data sampler is '" << it->second << "', this trainer resumes only 'sequential' ones");
    TS_CHECK(t.ints.count("data.cursor") && t.ints.count("data.epoch"), IOError,
             "checkpoint lacks /trainer attributes data.cursor and data.epoch");
    lanes_.set_state({t.ints.at("data.cursor"), t.ints.at("data.epoch")});
    state_.clear();
    const CharLSTMLM::State zeros = zero_state();
    const Tensor all_lanes = ::tessera::zeros({world_ * f_.batch, model_.config().hidden});  // the saved state: every lane's
    for (size_t l = 0; l < zeros.size(); ++l) {
      auto h = t.tensors.find("lstm_state." + h_name(l)), c = t.tensors.find("lstm_state." + c_name(l));
      if (h == t.tensors.end() || c == t.tensors.end()) break;  // none saved: start from zeros
      const auto same = [](const Tensor& a, const Tensor& b) {
        return a.shape() == b.shape() && a.dtype() == b.dtype();
      };
      TS_CHECK(same(h->second, all_lanes) && same(c->second, all_lanes), ShapeError,
               "checkpoint's carried LSTM state of layer " << l << " is " << h->second.meta() << ", this run needs "
                                                           << all_lanes.meta()
                                                           << " (the same --batch times ranks as the saved run)");
      state_.push_back({my_lanes(h->second).to(dev_), my_lanes(c->second).to(dev_)});
    }
    if (state_.size() != zeros.size()) state_.clear();
    if (ck.rng.count("sample")) sample_gen_.set_state(ck.rng.at("sample"));
    precision_.restore(ck);
  }

 private:
  static std::string h_name(size_t l) { return "h" + std::to_string(l); }
  static std::string c_name(size_t l) { return "c" + std::to_string(l); }

  // Data parallel: this rank's lanes of a time-major batch of all ranks' lanes (the batch itself
  // in one process).
  data::Batch mine(const data::Batch& b) const {
    if (world_ == 1) return b;
    const int64_t rows = b.batch / world_;
    auto part = [&](const Tensor& t) {
      return reshape(slice(reshape(t, {b.seq, b.batch}), 1, rank_ * rows, (rank_ + 1) * rows), {b.seq * rows});
    };
    data::Batch out = b;
    out.inputs = part(b.inputs);
    out.targets = part(b.targets);
    out.batch = rows;
    return out;
  }

  // This rank's rows of a state of every lane [W·B, H] (CPU).
  Tensor my_lanes(const Tensor& all) const {
    return world_ == 1 ? all : slice(all, 0, rank_ * f_.batch, (rank_ + 1) * f_.batch).clone();
  }

  // Every lane's state [W·B, H] on the CPU from each rank's [B, H] (an all-reduce of zero-padded
  // parts: every rank calls it, at each checkpoint).
  Tensor gather_lanes(const Tensor& part) const {
    if (world_ == 1) return part;
    Tensor all = zeros({world_ * f_.batch, part.shape()[1]}, TensorOptions(part.dtype()).device(group_->device()));
    copy_into(part.to(group_->device()), slice(all, 0, rank_ * f_.batch, (rank_ + 1) * f_.batch));
    group_->all_reduce(all, dist::ReduceOp::sum);
    return all.to(Device::cpu());
  }

  // The mean of a loss over the ranks.
  double global_mean(double loss) const {
    if (world_ == 1) return loss;
    return dist::all_reduce_values({loss}, *group_, dist::ReduceOp::average)[0];
  }

  CharLSTMLM::State zero_state() const {
    const int64_t H = model_.config().hidden;
    const Tensor z = zeros({f_.batch, H}, TensorOptions().device(dev_));
    return CharLSTMLM::State(model_.config().layers, nn::LSTMState{z, z});
  }

  // The compiled step's inputs for batch b continuing from state st.
  std::map<std::string, Tensor> feeds(const data::Batch& b, const CharLSTMLM::State& st) const {
    std::map<std::string, Tensor> in{{"x", reshape(b.inputs, {b.seq, b.batch})}, {"y", b.targets}};
    for (size_t l = 0; l < st.size(); ++l) {
      in[h_name(l)] = st[l].h;
      in[c_name(l)] = st[l].c;
    }
    precision_.add_feeds(in);  // f16: the loss scale
    return in;
  }

  const examples::TrainerFlags& f_;
  CharLSTMLM& model_;
  optim::Optimizer& opt_;
  const data::TextDataset& ds_;
  int64_t sample_chars_;
  double temperature_;
  Generator sample_gen_;
  std::shared_ptr<dist::ProcessGroup> group_;  // data parallel (mpirun, --dist-init); null: one process
  int64_t world_, rank_;
  data::SequentialSampler lanes_;             // all ranks' lanes (world_ · --batch)
  Device dev_;                        // --device: where the model, batches and state live
  train::MixedPrecision precision_;  // --dtype
  std::optional<CompiledStep> step_;  // unset with --eager
  std::ostream* profile_ = nullptr;   // profile_next_step's stream, until the next step takes it
  std::unique_ptr<dist::DataParallelUpdater> dp_;   // compiled data-parallel steps
  std::unique_ptr<dist::GradientReducer> reducer_;  // eager data-parallel steps
  CharLSTMLM::State state_;           // carried between batches; empty: zeros at the next step
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a character-level block-sparse LSTM language model"};
  examples::TrainerFlags f;
  f.data = TESSERA_EXAMPLE_DATA;
  f.out = "runs/lstm";
  f.steps = 600;
  f.eval_every = 100;
  f.ckpt_every = 200;
  examples::add_trainer_flags(app, f);
  int64_t hidden = 0, layers = 0, block = 0, sample_chars = 300;
  double density = 0, temperature = 0.8;
  std::string layout;
  bool mlstm = false, cudnn = false;
  CLI::Option_group* m = app.add_option_group("Model");
  m->add_option("--hidden", hidden, "LSTM width (default 256)");
  m->add_option("--layers", layers, "stacked LSTM layers (default 1)");
  m->add_option("--block", block, "block size 8/16/32/64, 0 = dense weights (default 32)");
  m->add_option("--density", density, "block density (default 0.25)");
  m->add_option("--layout", layout, "random | ba | ws | balanced | dense (default random)")
      ->check(CLI::IsMember({"random", "ba", "ws", "balanced", "dense"}));
  m->add_flag("--mlstm", mlstm, "multiplicative LSTM");
  m->add_flag("--cudnn", cudnn,
              "run each layer's sequence as one cuDNN LSTM (dense plain LSTMs: --block 0; the same parameters)");
  m->add_option("--sample-chars", sample_chars, "characters per sample")->check(CLI::Range(0, 100000))
      ->capture_default_str();
  m->add_option("--temperature", temperature, "sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  if (int rc = examples::parse_flags(app, argc, argv, "train_lstm"); rc >= 0) return rc;

  try {
    examples::check_supported(f);
    TS_CHECK(!f.zero1, ValueError, "--zero1: train_transformer shards its optimizer state; train_lstm does not yet");
    TS_CHECK(f.micro_batches == 1, ValueError,
             "--micro-batches " << f.micro_batches << ": train_lstm carries the LSTM state from batch to batch, "
                                << "so it takes one batch per update (use a larger --batch)");
    // The model config: defaults < checkpoint (resume) or --config < explicit flags.
    std::optional<io::CheckpointData> ck;
    if (!f.resume.empty()) ck = io::load_checkpoint(f.resume);
    nlohmann::json cfg = examples::base_model_config(f, default_model(), "char_lstm", ck ? &*ck : nullptr);
    if (app.count("--hidden")) cfg["hidden"] = hidden;
    if (app.count("--layers")) cfg["layers"] = layers;
    if (app.count("--block")) cfg["block_size"] = block;
    if (app.count("--density")) cfg["density"] = density;
    if (app.count("--layout")) cfg["layout"] = layout;
    if (mlstm) cfg["multiplicative"] = true;
    if (cudnn) cfg["cudnn"] = true;
    if (cfg.value("block_size", 1) == 0 && !app.count("--layout")) cfg["layout"] = "dense", cfg["density"] = 1.0;

    const data::TextDataset ds = examples::load_text(f, ck ? &*ck : nullptr);
    cfg["vocab"] = ds.vocab().size();
    const models::CharLSTMLMConfig mc = models::CharLSTMLMConfig::from_json(cfg);
    CharLSTMLM model(mc);
    // Each layout's real density; a warning when the block-sparse weights store every block.
    examples::check_layouts(models::layout_report(model), "train_lstm",
                            {"", "use --density < 1 for sparse weights, or --layout dense for dense ones in blocks"});
    model.to(examples::train_device(f));  // before the optimizer: its state is made where the parameters are
    std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer(f, model.parameters());
    std::cout << "train_lstm: " << ds.name() << " (" << ds.size(data::Part::train) << " train / "
              << ds.size(data::Part::val) << " val chars, vocab " << ds.vocab().size() << "), "
              << model.num_parameters() << " parameters, " << (f.eager ? "eager" : "compiled") << " step\n";
    LstmTask task(f, model, *opt, ds, sample_chars, temperature);

    const nlohmann::json config = examples::run_config(f, "char_lstm", mc.to_json());
    return train::run_training(examples::train_options(f, "train_lstm", argc, argv), model, *opt, config, task)
        .exit_code();  // 130 / 143 after SIGINT / SIGTERM (a checkpoint was written)
  } catch (const std::exception& e) {
    std::cerr << "train_lstm: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
