// The library's training loop (models/train): run_training with WindowTask, gradient accumulation,
// best checkpoints, a non-finite loss, the stop signals, the vocabulary check on resume, and
// models::load_model.
#include <gtest/gtest.h>

#include <cmath>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "../core/io/io_test_util.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "models/models.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::expect_error;
using testing::TempDir;

// A token stream over a small alphabet with structure (a repeating phrase), so losses fall.
data::TextDataset tiny_text(const TempDir& dir) {
  std::ofstream f(dir.file("text.txt"));
  for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog " << (i % 7) << "\n";
  f.close();
  return data::TextDataset::load(dir.file("text.txt"), data::TextDatasetOptions().level(data::Level::character));
}

models::TransformerLMConfig tiny_transformer(int64_t vocab) {
  return models::TransformerLMConfig::from_json(
      {{"vocab", vocab}, {"seq_len", 16}, {"width", 32}, {"layers", 1}, {"heads", 2}, {"attn_block", 8}});
}

// A transformer, its optimizer and a window task over the tiny text.
struct Rig {
  explicit Rig(const TempDir& dir, int64_t batch = 4, train::WindowTaskOptions o = {}, uint64_t seed = 3)
      : ds(tiny_text(dir)), model(tiny_transformer(ds.vocab().size())),
        opt(model.parameters(), optim::AdamOptions(1e-2)),
        task(model, opt, [this, batch](const Tensor& x, const Tensor& y) { return model.loss(x, y, batch); },
             data::RandomWindowSampler(ds.tokens(data::Part::train), batch, 16, seed, data::Layout::batch_major),
             ds.tokens(data::Part::val), ds.vocab(), o) {}
  data::TextDataset ds;
  models::TransformerLM model;
  optim::Adam opt;
  train::WindowTask task;
};

train::TrainOptions quiet_options(const TempDir& dir, int64_t steps) {
  train::TrainOptions o;
  o.out = dir.file("run");
  o.steps = steps;
  o.eval_every = 0;
  o.eval_batches = 1;
  o.ckpt_every = 0;
  o.log_every = 1;
  o.quiet = true;
  return o;
}

nlohmann::json tiny_config(int64_t vocab) {
  return models::checkpoint_config("transformer", tiny_transformer(vocab).to_json());
}

std::vector<double> losses_of(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("train_loss")) out.push_back(j["train_loss"].get<double>());
  }
  return out;
}

TEST(TrainLoop, TrainsWritesTheRunFolderAndResumesExactly) {
  TempDir dir;
  std::vector<double> straight;
  {
    Rig s(dir);
    const train::TrainResult r = train::run_training(quiet_options(dir, 6), s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
    EXPECT_EQ(r.step, 6);
    EXPECT_EQ(r.exit_code(), 0);
    straight = losses_of(dir.file("run/metrics.jsonl"));
    ASSERT_EQ(straight.size(), 6u);
    for (const char* f : {"config.json", "ckpt.h5", "loss.svg", "samples.txt"})
      EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("run/") + f))) << f;
  }
  TempDir dir2;
  {
    Rig s(dir2);
    train::run_training(quiet_options(dir2, 3), s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  }
  {
    Rig s(dir2);
    train::TrainOptions o = quiet_options(dir2, 6);
    o.resume = dir2.file("run/ckpt.h5");
    train::run_training(o, s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  }
  EXPECT_EQ(losses_of(dir2.file("run/metrics.jsonl")), straight);  // bitwise on the CPU
}

TEST(TrainLoop, TwoMicroBatchesEqualOneBatchOfBoth) {
  // A sampler of batch 8 draws the windows of two batch-4 draws (the same Philox blocks, in
  // order), so one update over 2 micro-batches of 4 is one update over the batch of 8.
  TempDir a, b;
  train::WindowTaskOptions eager;
  eager.compiled = false;
  train::WindowTaskOptions acc = eager;
  acc.micro_batches = 2;
  train::WindowTaskOptions acc_compiled;
  acc_compiled.micro_batches = 2;
  Rig one(a, 8, eager), two(b, 4, acc), two_c(b, 4, acc_compiled);
  const double l1 = one.task.train_step(), l2 = two.task.train_step(), l3 = two_c.task.train_step();
  EXPECT_NEAR(l1, l2, 1e-5);
  EXPECT_NEAR(l1, l3, 1e-5);
  EXPECT_EQ(two.task.tokens_per_step(), 2 * 4 * 16);
  const auto p1 = one.model.named_parameters(), p2 = two.model.named_parameters(), p3 = two_c.model.named_parameters();
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_TRUE(testing::all_close(p2[i].tensor, p1[i].tensor, 1e-5, 1e-6)) << p1[i].name;
    EXPECT_TRUE(testing::all_close(p3[i].tensor, p1[i].tensor, 1e-5, 1e-6)) << p1[i].name;
  }
}

TEST(TrainLoop, KeepsTheBestCheckpointByValLoss) {
  TempDir dir;
  Rig s(dir);
  train::TrainOptions o = quiet_options(dir, 8);
  o.eval_every = 2;
  o.keep_best = true;
  std::vector<std::pair<int64_t, double>> evals;
  o.on_eval = [&](int64_t step, double v) { evals.push_back({step, v}); };
  const train::TrainResult r = train::run_training(o, s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  ASSERT_EQ(evals.size(), 4u);
  auto best = std::min_element(evals.begin(), evals.end(), [](auto& x, auto& y) { return x.second < y.second; });
  EXPECT_EQ(r.best_val_loss, best->second);
  const io::CheckpointData ck = io::load_checkpoint(dir.file("run/best.h5"));
  EXPECT_EQ(ck.trainer.step, best->first);
  EXPECT_EQ(ck.trainer.reals.at("best_val_loss"), best->second);
}

// A task whose loss becomes NaN at step `bad` (the model is not touched).
class NanTask : public train::TrainTask {
 public:
  explicit NanTask(int64_t bad) : bad_(bad) {}
  double train_step() override { return ++n_ == bad_ ? NAN : 1.0 / static_cast<double>(n_); }
  int64_t tokens_per_step() const override { return 1; }
  double evaluate(int64_t) override { return 1.0; }
  void save_state(io::CheckpointData& ck) const override { ck.trainer.ints["n"] = n_; }
  void restore_state(const io::CheckpointData& ck, const std::string&) override { n_ = ck.trainer.ints.at("n"); }

 private:
  int64_t bad_, n_ = 0;
};

TEST(TrainLoop, ANonFiniteLossStopsWithTheLastGoodCheckpointKept) {
  TempDir dir;
  Rig s(dir);
  NanTask task(5);
  train::TrainOptions o = quiet_options(dir, 10);
  o.ckpt_every = 2;
  expect_error<ValueError>([&] { train::run_training(o, s.model, s.opt, tiny_config(s.ds.vocab().size()), task); },
                           {"nan", "step 5", "last good checkpoint", "ckpt.h5", "step 4"});
  EXPECT_EQ(io::load_checkpoint(dir.file("run/ckpt.h5")).trainer.step, 4);
}

TEST(TrainLoop, SigtermFinishesTheStepWritesACheckpointAndResumesExactly) {
  TempDir dir, dir2;
  std::vector<double> straight;
  {
    Rig s(dir);
    train::run_training(quiet_options(dir, 6), s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
    straight = losses_of(dir.file("run/metrics.jsonl"));
  }
  {
    Rig s(dir2);
    train::TrainOptions o = quiet_options(dir2, 6);
    o.test_signal_step = 4;
    o.test_signal = SIGTERM;
    const train::TrainResult r = train::run_training(o, s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
    EXPECT_EQ(r.signal, SIGTERM);
    EXPECT_EQ(r.exit_code(), 143);
    EXPECT_EQ(r.step, 4);
    EXPECT_EQ(io::load_checkpoint(dir2.file("run/ckpt.h5")).trainer.step, 4);
  }
  {
    Rig s(dir2);
    train::TrainOptions o = quiet_options(dir2, 6);
    o.resume = dir2.file("run/ckpt.h5");
    EXPECT_EQ(train::run_training(o, s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task).exit_code(), 0);
  }
  EXPECT_EQ(losses_of(dir2.file("run/metrics.jsonl")), straight);
}

TEST(TrainLoop, ResumeChecksTheVocabulary) {
  TempDir dir;
  {
    Rig s(dir);
    train::run_training(quiet_options(dir, 2), s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  }
  io::CheckpointData ck = io::load_checkpoint(dir.file("run/ckpt.h5"));
  const data::Vocabulary v = data::Vocabulary::from_bytes({ck.trainer.vocabulary.begin(), ck.trainer.vocabulary.end()});
  EXPECT_NO_THROW(train::check_vocabulary(ck, "a.h5", v, "text.txt"));
  io::CheckpointData none = ck;
  none.trainer.vocabulary.clear();
  expect_error<IOError>([&] { train::check_vocabulary(none, "a.h5", v, "text.txt"); },
                        {"a.h5", "no /trainer/vocabulary", "text.txt"});
  expect_error<ValueError>(
      [&] { train::check_vocabulary(ck, "a.h5", data::Vocabulary::from_bytes({'a', 'b'}), "other.txt"); },
      {"a.h5", "differs", "other.txt"});
}

TEST(TrainLoop, OptionsAreChecked) {
  TempDir dir;
  Rig s(dir);
  train::TrainOptions o = quiet_options(dir, 0);
  expect_error<ValueError>([&] { train::run_training(o, s.model, s.opt, {}, s.task); }, {"steps", ">= 1"});
  o = quiet_options(dir, 5);
  o.time_limit_s = -1;
  expect_error<ValueError>([&] { train::run_training(o, s.model, s.opt, {}, s.task); }, {"time_limit_s", ">= 0"});
  o = quiet_options(dir, 5);
  o.test_batches = -1;
  expect_error<ValueError>([&] { train::run_training(o, s.model, s.opt, {}, s.task); }, {"test_batches", ">= 0"});
}

// The last metrics row of a run folder (JSON).
nlohmann::json last_row(const std::string& metrics) {
  std::ifstream in(metrics);
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) last = nlohmann::json::parse(line);
  return last;
}

// test_batches > 0: the run's last act is the test split's loss, in the result and a metrics row;
// a task without a test split gives NaN and no row.
TEST(TrainLoop, TestBatchesEvaluateTheTestSplitAtTheEnd) {
  TempDir dir;
  const data::TextDataset ds = tiny_text(dir);
  models::TransformerLM model(tiny_transformer(ds.vocab().size()));
  optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
  train::WindowTaskOptions wo;
  wo.test = ds.tokens(data::Part::val);  // stands in for a test split
  train::WindowTask task(model, opt, [&model](const Tensor& x, const Tensor& y) { return model.loss(x, y, 4); },
                         data::RandomWindowSampler(ds.tokens(data::Part::train), 4, 16, 3, data::Layout::batch_major),
                         ds.tokens(data::Part::val), ds.vocab(), wo);
  train::TrainOptions o = quiet_options(dir, 2);
  o.test_batches = 3;
  const train::TrainResult r = train::run_training(o, model, opt, tiny_config(ds.vocab().size()), task);
  ASSERT_TRUE(std::isfinite(r.test_loss));
  EXPECT_EQ(r.test_loss, task.evaluate_test(3));  // the same windows of the trained model
  EXPECT_EQ(r.test_loss, task.evaluate(3));       // here the test tokens are the val tokens
  const nlohmann::json row = last_row(dir.file("run/metrics.jsonl"));
  EXPECT_EQ(row["step"].get<int64_t>(), 2);
  EXPECT_EQ(row["test_loss"].get<double>(), r.test_loss);

  TempDir dir2;
  Rig s(dir2);  // no test split
  train::TrainOptions o2 = quiet_options(dir2, 2);
  o2.test_batches = 3;
  const train::TrainResult r2 = train::run_training(o2, s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  EXPECT_TRUE(std::isnan(r2.test_loss));
  EXPECT_FALSE(last_row(dir2.file("run/metrics.jsonl")).contains("test_loss"));
}

// A time limit ends the run after the first step that reaches it: evaluated and checkpointed as
// a last step, and resumable; without a limit the same run goes to --steps.
TEST(TrainLoop, TimeLimitEndsTheRunAsItsLastStep) {
  TempDir dir;
  Rig s(dir);
  train::TrainOptions o = quiet_options(dir, 50);
  o.time_limit_s = 1e-9;  // every step takes longer
  const train::TrainResult r = train::run_training(o, s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  EXPECT_EQ(r.step, 1);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_TRUE(std::isfinite(r.val_loss));
  EXPECT_EQ(losses_of(dir.file("run/metrics.jsonl")).size(), 1u);
  const models::LoadedModel m = models::load_model(dir.file("run/ckpt.h5"));
  EXPECT_EQ(m.step, 1);
  Rig s2(dir);
  train::TrainOptions o2 = quiet_options(dir, 3);
  o2.resume = dir.file("run/ckpt.h5");
  EXPECT_EQ(train::run_training(o2, s2.model, s2.opt, tiny_config(s2.ds.vocab().size()), s2.task).step, 3);
}

TEST(LoadModel, GivesBackTheTrainedModelItsVocabularyAndConfig) {
  TempDir dir;
  Rig s(dir);
  train::run_training(quiet_options(dir, 2), s.model, s.opt, tiny_config(s.ds.vocab().size()), s.task);
  const models::LoadedModel m = models::load_model(dir.file("run/ckpt.h5"));
  EXPECT_EQ(m.type, "transformer");
  EXPECT_EQ(m.step, 2);
  EXPECT_TRUE(m.has_vocab);
  EXPECT_EQ(m.vocab.to_bytes(), s.ds.vocab().to_bytes());
  EXPECT_FALSE(m.module->is_training());
  EXPECT_EQ(m.config["constants"]["layer_norm_eps"].get<double>(), 1e-5);
  EXPECT_EQ(m.config["constants"]["biases"]["qkv"].get<bool>(), true);
  const auto want = s.model.named_parameters(), got = m.as<models::TransformerLM>().named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i].tensor.to_vector<float>(), want[i].tensor.to_vector<float>()) << want[i].name;
  expect_error<ValueError>([&] { m.as<models::CharLSTMLM>(); }, {"transformer"});
}

TEST(LoadModel, ReadsNoOptimizerStateAndBuildsRegisteredTypes) {
  TempDir dir;
  nn::Linear fc(nn::LinearOptions(3, 2));
  io::CheckpointData ck = io::capture(fc);
  ck.optimizer.type = "sgd";
  ck.optimizer.state["weight"]["momentum"] = zeros({3, 2});
  expect_error<ValueError>([&] { models::checkpoint_config("no_such_type", {}); }, {"no_such_type"});
  models::register_model_type("train_test_linear", {[](const nlohmann::json& m) {
    return std::make_shared<nn::Linear>(nn::LinearOptions(m.at("in").get<int64_t>(), m.at("out").get<int64_t>()));
  }, /*constants=*/nullptr});
  ck.config = models::checkpoint_config("train_test_linear", {{"in", 3}, {"out", 2}}).dump();
  io::save_checkpoint(dir.file("fc.h5"), ck);
  io::CheckpointParts parts;
  parts.optimizer = false;
  EXPECT_TRUE(io::load_checkpoint(dir.file("fc.h5"), parts).optimizer.state.empty());
  EXPECT_FALSE(io::load_checkpoint(dir.file("fc.h5")).optimizer.state.empty());
  const models::LoadedModel m = models::load_model(dir.file("fc.h5"));
  EXPECT_EQ(m.type, "train_test_linear");
  EXPECT_FALSE(m.has_vocab);
  EXPECT_EQ(m.as<nn::Linear>().weight().to_vector<float>(), fc.weight().to_vector<float>());
  ck.config = R"({"model_type": "unheard_of", "model": {}})";
  io::save_checkpoint(dir.file("other.h5"), ck);
  expect_error<IOError>([&] { models::load_model(dir.file("other.h5")); },
                        {"other.h5", "unheard_of", "not registered", "char_lstm", "transformer"});
}

}  // namespace
}  // namespace tessera
