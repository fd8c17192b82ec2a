// models::ConvLM: config JSON (round trip, errors naming the field), the receptive field, causality
// (a token changes no logit before its position, and none beyond the receptive field), the
// parameter count, and load_model rebuilding it from a checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "core/io/checkpoint.h"
#include "models/models.h"

namespace tessera {
namespace {

using models::ConvLM;
using models::ConvLMConfig;
using nlohmann::json;
using testing::expect_error;

TEST(ConvLMConfig, JsonRoundTripAndErrors) {
  const ConvLMConfig c = ConvLMConfig::from_json(
      {{"vocab", 20}, {"seq_len", 16}, {"width", 32}, {"layers", 3}, {"kernel", 2}, {"block_size", 8}, {"density", 0.5}});
  EXPECT_EQ(ConvLMConfig::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(c.receptive_field(), 1 + 1 + 2 + 4);  // kernel 2, dilations 1, 2, 4
  expect_error<ValueError>([] { ConvLMConfig::from_json({{"seq_len", 16}}); }, {"ConvLM", "vocab", "required"});
  expect_error<ValueError>([] { ConvLMConfig::from_json({{"vocab", 5}, {"widht", 3}}); }, {"unknown field", "widht"});
  expect_error<ValueError>([] { ConvLMConfig::from_json({{"vocab", 5}, {"kernel", 1}}); }, {"kernel", "at least 2"});
  expect_error<ValueError>([] { ConvLMConfig::from_json({{"vocab", 5}, {"width", 40}}); }, {"width", "block_size=32"});
  expect_error<ValueError>([] { ConvLMConfig::from_json({{"vocab", 5}, {"density", 0.0}}); }, {"density"});
  expect_error<ValueError>([] { ConvLMConfig::from_json({{"vocab", 5}, {"block_size", 12}}); }, {"block_size"});
}

// Position t's logits depend on tokens t - receptive_field + 1 … t only.
TEST(ConvLM, CausalWithinItsReceptiveField) {
  const ConvLMConfig c = ConvLMConfig::from_json({{"vocab", 11}, {"seq_len", 24}, {"width", 16}, {"layers", 3},
                                                  {"block_size", 8}, {"density", 0.5}, {"seed", 3}});
  ConvLM model(c);
  const int64_t T = 24, V = 11, R = model.receptive_field();  // 1 + 2·(1 + 2 + 4) = 15
  ASSERT_EQ(R, 15);
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7 + 3) % V);
  const std::vector<float> base = model.logits(from_vector(ids, {T}), 1).to_vector<float>();
  const int64_t changed = 5;
  ids[changed] = (ids[changed] + 1) % V;
  const std::vector<float> after = model.logits(from_vector(ids, {T}), 1).to_vector<float>();
  for (int64_t t = 0; t < T; ++t) {
    bool same = true;
    for (int64_t v = 0; v < V; ++v) same = same && base[t * V + v] == after[t * V + v];
    const bool sees = t >= changed && t < changed + R;
    EXPECT_EQ(same, !sees) << "position " << t;
  }
  expect_error<ShapeError>([&] { model.logits(from_vector(ids, {T}), 2); }, {"ConvLM", "seq_len 24"});
}

TEST(ConvLM, ParameterCountAndLoadModel) {
  const ConvLMConfig c = ConvLMConfig::from_json({{"vocab", 13}, {"seq_len", 16}, {"width", 32}, {"layers", 2},
                                                  {"kernel", 3}, {"block_size", 16}, {"density", 0.5}});
  auto model = std::make_shared<ConvLM>(c);
  int64_t want = 13 * 32 + 13 * 32 + 13 + 2 * 32;  // embedding, out weight and bias, final norm
  for (int64_t l = 0; l < 2; ++l) {
    const BlockLayout& layout = *model->conv(static_cast<size_t>(l)).layout();
    want += layout.nnz() * 3 * 16 * 16 + 32 + 32;  // weight, bias, gain
    want += 2 * 32;                                 // its layer norm
    want += 2 * 2 * 32;                             // edge gain and bias: kernel 3 gives two groups
  }
  EXPECT_EQ(model->num_parameters(), want);

  const std::string path = (std::filesystem::temp_directory_path() / "tessera_conv_lm_test.h5").string();
  std::remove(path.c_str());
  io::CheckpointData ck = io::capture(*model);
  ck.config = models::checkpoint_config("conv_lm", c.to_json()).dump();
  io::save_checkpoint(path, ck);
  models::LoadedModel m = models::load_model(path);
  EXPECT_EQ(m.type, "conv_lm");
  std::vector<int32_t> ids(16, 2);
  EXPECT_EQ(m.as<ConvLM>().logits(from_vector(ids, {16}), 1).to_vector<float>(),
            model->logits(from_vector(ids, {16}), 1).to_vector<float>());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera
