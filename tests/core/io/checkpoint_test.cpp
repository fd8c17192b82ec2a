// Checkpoints: every dtype bit-exact, every section round trip, a model + AdamW/SGD resumed
// bitwise, and the validating restore (wrong shape, dtype, missing, unexpected, layouts,
// optimizer type) leaving every tensor untouched.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/io/checkpoint.h"
#include "models/model_checkpoint.h"
#include "gradcheck.h"
#include "io_test_util.h"
#include "kernels/ops.h"
#include "layers/layers.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::bit_equal;
using testing::expect_error;
using testing::raw_tensor;
using testing::sample_checkpoint;
using testing::TempDir;

TEST(Checkpoint, EveryDtypeRoundTripsBitExact) {
  TempDir dir;
  io::CheckpointData d;
  d.model["f32"] = raw_tensor({3, 5}, DType::f32, 1);
  d.model["f64"] = raw_tensor({2, 3, 4}, DType::f64, 2);
  d.model["bf16"] = raw_tensor({7}, DType::bf16, 3);
  d.model["f16"] = raw_tensor({2, 3}, DType::f16, 4);
  d.model["i32"] = from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -1, 0, 7,
                                                    std::numeric_limits<int32_t>::max()},
                               {5});
  d.model["u8"] = raw_tensor({4, 4}, DType::u8, 5);
  d.model["scalar"] = full({}, -2.5, DType::f64);
  d.model["empty"] = zeros({0, 3});
  // Special float values: -0, inf, NaN with a payload, the smallest denormal.
  const float special[] = {-0.0f, std::numeric_limits<float>::infinity(), std::nanf("0x2a"),
                           std::numeric_limits<float>::denorm_min()};
  d.model["special"] = from_vector(std::vector<float>(std::begin(special), std::end(special)), {2, 2});
  io::save_checkpoint(dir.file("dtypes.h5"), d);

  const io::CheckpointData back = io::load_checkpoint(dir.file("dtypes.h5"));
  ASSERT_EQ(back.model.size(), d.model.size());
  for (const auto& [name, t] : d.model) EXPECT_TRUE(bit_equal(back.model.at(name), t)) << name;
  const auto index = io::inspect_checkpoint(dir.file("dtypes.h5"));
  EXPECT_EQ(index.at("/model/bf16").dtype, DType::bf16);
  EXPECT_EQ(index.at("/model/scalar").shape, Shape{});
  EXPECT_EQ(index.at("/model/empty").shape, Shape({0, 3}));
}

TEST(Checkpoint, EverySectionRoundTrips) {
  TempDir dir;
  const io::CheckpointData d = sample_checkpoint();
  io::save_checkpoint(dir.file("all.h5"), d);
  const io::CheckpointData b = io::load_checkpoint(dir.file("all.h5"));

  EXPECT_EQ(b.config, d.config);
  EXPECT_EQ(b.framework_version, std::string(io::framework_version()));
  for (const auto& [name, t] : d.model) EXPECT_TRUE(bit_equal(b.model.at(name), t)) << name;
  ASSERT_EQ(b.layouts.size(), 1u);
  EXPECT_TRUE(*b.layouts.at("sparse") == *d.layouts.at("sparse")) << b.layouts.at("sparse")->str();
  EXPECT_EQ(b.optimizer.type, "adamw");
  EXPECT_EQ(b.optimizer.step, 7);
  EXPECT_EQ(b.optimizer.hyperparameters, d.optimizer.hyperparameters);
  for (const auto& [param, states] : d.optimizer.state)
    for (const auto& [name, t] : states) EXPECT_TRUE(bit_equal(b.optimizer.state.at(param).at(name), t));
  EXPECT_EQ(b.trainer.step, 7);
  EXPECT_EQ(b.trainer.tokens_seen, 123456789012LL);
  EXPECT_EQ(b.trainer.loss_scale, 32768.0);
  EXPECT_EQ(b.trainer.vocabulary, d.trainer.vocabulary);  // NUL and 0xff bytes included
  EXPECT_EQ(b.trainer.ints, d.trainer.ints);
  EXPECT_EQ(b.trainer.reals, d.trainer.reals);
  EXPECT_EQ(b.trainer.strings, d.trainer.strings);
  EXPECT_TRUE(bit_equal(b.trainer.tensors.at("data.order"), d.trainer.tensors.at("data.order")));
  EXPECT_EQ(b.rng, d.rng);

  // Attributes over HDF5's 64 KiB compact limit (a big JSON config), and empty strings.
  io::CheckpointData big = d;
  big.config = "{\"pad\": \"" + std::string(200000, 'x') + "\"}";
  big.trainer.strings["empty"] = "";
  io::save_checkpoint(dir.file("big.h5"), big);
  const io::CheckpointData bb = io::load_checkpoint(dir.file("big.h5"));
  EXPECT_EQ(bb.config, big.config);
  EXPECT_EQ(bb.trainer.strings.at("empty"), "");
}

TEST(Checkpoint, BadNamesAreRejectedBeforeWriting) {
  TempDir dir;
  io::CheckpointData d;
  d.model["a/b"] = zeros({2});
  expect_error<ValueError>([&] { io::save_checkpoint(dir.file("x.h5"), d); }, {"a/b", "'/'"});
  d.model.clear();
  d.trainer.ints["step"] = 3;
  expect_error<ValueError>([&] { io::save_checkpoint(dir.file("x.h5"), d); }, {"step", "reserved"});
  EXPECT_TRUE(dir.files().empty());  // no temp file left behind
}

// ---- a model and its optimizer ----

class TinyNet : public nn::Module {
 public:
  explicit TinyNet(uint64_t init_seed, uint64_t layout_seed = 3) {
    Generator gen(init_seed);
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(nn::LinearOptions(6, 16), gen));
    sparse_ = register_module("sparse", std::make_shared<nn::BlockSparseLinear>(
                                            nn::BlockSparseLinearOptions(16, 24, 8).density(0.5, layout_seed), gen));
    ln_ = register_module("ln", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(24)));
    drop_ = register_module("drop", std::make_shared<nn::Dropout>(nn::DropoutOptions(0.25)));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(24, 3), gen));
  }
  nn::BlockSparseLinear& sparse() { return *sparse_; }
  Tensor forward(const Tensor& x, Generator& gen) const {
    Tensor h = ln_->forward(sparse_->forward(relu(fc1_->forward(x))));
    return fc2_->forward(drop_->forward(h, gen));
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
  std::shared_ptr<nn::BlockSparseLinear> sparse_;
  std::shared_ptr<nn::LayerNorm> ln_;
  std::shared_ptr<nn::Dropout> drop_;
};

// One step on a batch drawn from `gen` (which also drives dropout).
void train_step(const TinyNet& net, optim::Optimizer& opt, Generator& gen) {
  Tensor x = normal({5, 6}, 0.0, 1.0, gen);
  Tensor y = net.forward(x, gen);
  opt.zero_grad();
  mean(mul(y, y)).backward();
  opt.step();
}

void expect_same_training_state(const TinyNet& a, const optim::Optimizer& oa, const TinyNet& b,
                                const optim::Optimizer& ob) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(bit_equal(pa[i].tensor, pb[i].tensor)) << pa[i].name;
  const auto sa = oa.state(), sb = ob.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(bit_equal(sa[i], sb[i])) << "state " << i;
  EXPECT_EQ(oa.step_count(), ob.step_count());
  EXPECT_EQ(oa.lr(), ob.lr());
}

template <class Opt, class Options>
void check_resume(const Options& options, const std::vector<std::string>& state_names) {
  TempDir dir;
  TinyNet a(1);
  Opt opt_a(a.parameters(), options);
  Generator gen_a(11);
  for (int s = 0; s < 3; ++s) train_step(a, opt_a, gen_a);

  io::CheckpointData ck = io::capture(a, &opt_a);
  ck.trainer.step = 3;
  ck.rng["data"] = gen_a.state();
  EXPECT_EQ(ck.optimizer.state.at("fc1.weight").size(), state_names.size());
  io::save_checkpoint(dir.file("ckpt.h5"), ck);

  TinyNet b(2);  // other initial weights, same layout
  Opt opt_b(b.parameters(), options);
  EXPECT_FALSE(bit_equal(a.named_parameters()[0].tensor, b.named_parameters()[0].tensor));
  const io::CheckpointData back = io::restore(dir.file("ckpt.h5"), b, &opt_b);
  Generator gen_b(0);
  gen_b.set_state(back.rng.at("data"));
  EXPECT_EQ(back.trainer.step, 3);
  expect_same_training_state(a, opt_a, b, opt_b);

  train_step(a, opt_a, gen_a);
  train_step(b, opt_b, gen_b);
  expect_same_training_state(a, opt_a, b, opt_b);
  EXPECT_EQ(opt_b.step_count(), 4);
}

TEST(Checkpoint, ModelAndAdamWResumeBitwise) {
  check_resume<optim::AdamW>(optim::AdamWOptions(1e-2).weight_decay(0.1), {"exp_avg", "exp_avg_sq"});
}

TEST(Checkpoint, ModelAndSGDResumeBitwise) {
  check_resume<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).nesterov(true), {"momentum_buffer"});
}

TEST(Checkpoint, CaptureNamesEverything) {
  TinyNet net(1);
  optim::AdamW opt(net.parameters());
  const io::CheckpointData ck = io::capture(net, &opt);
  EXPECT_EQ(ck.model.count("sparse.weight"), 1u);
  EXPECT_EQ(ck.model.count("ln.gamma"), 1u);
  ASSERT_EQ(ck.layouts.count("sparse"), 1u);
  EXPECT_EQ(ck.layouts.size(), 1u);
  EXPECT_EQ(ck.optimizer.type, "adamw");
  EXPECT_EQ(ck.optimizer.hyperparameters.at("beta2"), 0.999);
  EXPECT_TRUE(ck.optimizer.state.at("fc2.bias").at("exp_avg_sq").same(opt.state()[2 * net.parameters().size() - 1]));
  // An optimizer over a tensor the model does not have.
  optim::SGD other({zeros({2}).requires_grad_()}, optim::SGDOptions(0.1));
  expect_error<ValueError>([&] { io::capture(net, &other); }, {"optimizer parameter 0", "not a parameter"});
}

// ---- validation ----

// Every problem names the dataset path and both shapes/dtypes, and no target changes.
TEST(Checkpoint, RestoreValidatesBeforeTouchingAnything) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, sample_checkpoint());  // fc.weight f32[3, 4], fc.bias f32[4]

  Tensor w = full({3, 4}, 7.0), b = full({4}, 7.0);
  auto untouched = [&] {
    EXPECT_EQ(w.to_vector<float>(), std::vector<float>(12, 7.0f));
    EXPECT_EQ(b.to_vector<float>(), std::vector<float>(4, 7.0f));
  };
  Tensor wrong_shape = full({4, 4}, 7.0);
  expect_error<ShapeError>([&] { io::restore_params(path, {{"fc.bias", b}, {"fc.weight", wrong_shape}}); },
                           {path, "/model/fc.weight", "f32[3, 4]", "f32[4, 4]"});
  untouched();
  Tensor wrong_dtype = full({3, 4}, 7.0, DType::f64);
  expect_error<DTypeError>([&] { io::restore_params(path, {{"fc.bias", b}, {"fc.weight", wrong_dtype}}); },
                           {"/model/fc.weight", "f32[3, 4]", "f64[3, 4]"});
  untouched();
  expect_error<IOError>(
      [&] { io::restore_params(path, {{"fc.weight", w}, {"fc.bias", b}, {"fc.gain", zeros({4})}}); },
      {"missing dataset /model/fc.gain", "f32[4]"});
  untouched();
  // Unexpected datasets: an error when strict (the default), ignored otherwise.
  expect_error<IOError>([&] { io::restore_params(path, {{"fc.weight", w}}); },
                        {"unexpected dataset /model/fc.bias", "f32[4]"});
  untouched();
  // Several problems: one error, the first named, the rest counted.
  expect_error<ShapeError>([&] { io::restore_params(path, {{"fc.weight", wrong_shape}}); },
                           {"/model/fc.weight", "and 1 more problem)"});
  io::restore_params(path, {{"fc.weight", w}}, /*strict=*/false);
  EXPECT_EQ(w.to_vector<float>()[11], 12.0f);
  io::restore_params(path, {{"fc.weight", w}, {"fc.bias", b}});
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0.5f, -0.25f, 0.125f, -1}));
}

TEST(Checkpoint, RestoreChecksLayoutsAndOptimizerType) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  TinyNet a(1);
  optim::AdamW opt_a(a.parameters());
  io::save_checkpoint(path, io::capture(a, &opt_a));

  TinyNet other_layout(1, /*layout_seed=*/4);
  ASSERT_FALSE(*io::collect_layouts(other_layout).at("sparse") == *io::collect_layouts(a).at("sparse"));
  const Tensor before = other_layout.named_parameters()[0].tensor.clone();
  expect_error<IOError>([&] { io::restore(path, other_layout); }, {"/layout/sparse", "BlockLayout(C=16, K=24"});
  EXPECT_TRUE(bit_equal(other_layout.named_parameters()[0].tensor, before));

  TinyNet b(2);
  optim::SGD sgd(b.parameters(), optim::SGDOptions(0.1));
  expect_error<IOError>([&] { io::restore(path, b, &sgd); }, {"type is 'adamw'", "'sgd'"});
  // Weights only (no optimizer): fine.
  io::restore(path, b);
  EXPECT_TRUE(bit_equal(b.named_parameters()[0].tensor, a.named_parameters()[0].tensor));
  // A checkpoint without an optimizer cannot restore one.
  io::save_checkpoint(path, io::capture(a));
  optim::AdamW opt_b(b.parameters());
  expect_error<IOError>([&] { io::restore(path, b, &opt_b); }, {"no /optimizer group"});
}

// A run whose block-sparse layer switched layouts (set_layout: the same block count) resumes into
// a freshly built model with adopt_layouts; without it the mismatch is refused as before, and a
// file layout of another block count is not adoptable. Nothing changes before the checks pass.
TEST(Checkpoint, RestoreAdoptsSwitchedLayoutsWhenAsked) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  TinyNet a(1);
  const LayoutPtr original = a.sparse().layout();
  std::vector<uint8_t> mask = original->mask();  // 2x3 blocks, 3 stored
  std::reverse(mask.begin(), mask.end());
  if (BlockLayout::from_mask(16, 24, 8, mask)->mask() == original->mask())
    for (uint8_t& m : mask) m = m ? 0 : 1;  // a palindrome: its complement (also 3 blocks)
  const LayoutPtr switched = BlockLayout::from_mask(16, 24, 8, mask);
  ASSERT_FALSE(*switched == *original);
  a.sparse().set_layout(switched);
  optim::AdamW opt_a(a.parameters());
  Generator gen_a(5);
  train_step(a, opt_a, gen_a);
  io::CheckpointData ck = io::capture(a, &opt_a);
  ck.rng["data"] = gen_a.state();
  io::save_checkpoint(path, ck);

  TinyNet b(2);
  optim::AdamW opt_b(b.parameters());
  const Tensor before = b.named_parameters()[0].tensor.clone();
  expect_error<IOError>([&] { io::restore(path, b, &opt_b); }, {"/layout/sparse"});
  EXPECT_TRUE(*b.sparse().layout() == *original);
  EXPECT_TRUE(bit_equal(b.named_parameters()[0].tensor, before));
  const io::CheckpointData back = io::restore(path, b, &opt_b, /*adopt_layouts=*/true);
  EXPECT_TRUE(*b.sparse().layout() == *switched);
  expect_same_training_state(a, opt_a, b, opt_b);
  Generator gen_b(0);
  gen_b.set_state(back.rng.at("data"));
  train_step(a, opt_a, gen_a);
  train_step(b, opt_b, gen_b);
  expect_same_training_state(a, opt_a, b, opt_b);

  // A file layout of another block count: refused even with adopt_layouts, the model untouched.
  ck.layouts["sparse"] = BlockLayout::from_mask(16, 24, 8, {1, 1, 1, 1, 0, 0});
  io::save_checkpoint(path, ck);
  TinyNet c(3);
  optim::AdamW opt_c(c.parameters());
  expect_error<IOError>([&] { io::restore(path, c, &opt_c, true); }, {"/layout/sparse", "not adoptable"});
  EXPECT_TRUE(*c.sparse().layout() == *original);
}

}  // namespace
}  // namespace tessera
