// models::layout_report: every layout of a model with its real density, and the layouts that
// degenerate (a sparse attention kind keeping every causal block, block-sparse weights storing
// every block), as report lines, grouped summary lines and one-line problems.
#include "models/layout_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "layers/layers.h"
#include "models/models.h"

namespace tessera {
namespace {

using models::LayoutInfo;

models::TransformerLMConfig tiny_transformer(int64_t seq_len, const std::string& attn_layout) {
  models::TransformerLMConfig c;
  c.vocab = 11;
  c.seq_len = seq_len;
  c.width = 16;
  c.layers = 2;
  c.heads = 2;
  c.mlp_ratio = 2;
  c.attn_block = 32;
  c.attn_layout = attn_layout;
  c.stride = 2;
  return c;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(LayoutReport, StridedAttentionOfOneBlockPerSequenceIsDenseCausal) {
  // seq 32 with attn_block 32: nb = 1, so strided keeps the one causal block of each head.
  models::TransformerLM model(tiny_transformer(32, "strided"));
  const std::vector<LayoutInfo> report = models::layout_report(model);
  ASSERT_EQ(report.size(), 2u);  // blocks.0.attn, blocks.1.attn; dense weights have no layout
  for (const LayoutInfo& e : report) {
    EXPECT_TRUE(e.is_attention());
    EXPECT_EQ(e.requested, "strided(stride_blocks=2)");
    EXPECT_EQ(e.kept, 2);   // 2 heads x 1 block
    EXPECT_EQ(e.total, 2);  // causal blocks: heads · nb(nb+1)/2
    EXPECT_DOUBLE_EQ(e.density, 1.0);
    EXPECT_TRUE(e.degenerate);
    EXPECT_EQ(e.effective, "dense causal attention");
  }
  EXPECT_EQ(models::format_layout_report(report)[0],
            "blocks.0.attn  attention strided(stride_blocks=2)  T=32 bs=32 heads=2  2/2 causal blocks, density 1.000 "
            "of causal blocks (dense causal: degenerate)");
  // The two blocks share one layout: one summary line and one problem line for both.
  const std::vector<std::string> summary = models::summarize_layouts(report);
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0],
            "blocks.{0,1}.attn  attention strided(stride_blocks=2)  T=32 bs=32 heads=2  density 1.000 of causal "
            "blocks (dense causal: degenerate) (one layout shared by 2 modules)");
  const std::vector<std::string> problems = models::degenerate_layouts(report);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "blocks.{0,1}.attn: attention strided(stride_blocks=2) with T=32 and bs=32 (1 block per sequence) keeps "
            "every causal block (1 of 1 per head): the effective layout is dense causal attention");
}

TEST(LayoutReport, StridedAttentionOfALongSequenceIsSparse) {
  // seq 256: nb = 8, stride 2 keeps per query block i: j = i, i - 1 and every j with i - j even.
  models::TransformerLM model(tiny_transformer(256, "strided"));
  const std::vector<LayoutInfo> report = models::layout_report(model);
  ASSERT_EQ(report.size(), 2u);
  const AttentionLayout& l = *model.attention_layout();
  EXPECT_EQ(report[0].kept, l.nnz());
  EXPECT_EQ(report[0].total, 2 * 8 * 9 / 2);
  EXPECT_LT(report[0].density, 1.0);
  EXPECT_DOUBLE_EQ(report[0].density, static_cast<double>(l.nnz()) / 72.0);
  EXPECT_FALSE(report[0].degenerate);
  EXPECT_TRUE(models::degenerate_layouts(report).empty());
  EXPECT_TRUE(contains(models::summarize_layouts(report).at(0), "density 0.")) << models::summarize_layouts(report)[0];
}

TEST(LayoutReport, DenseAttentionIsNotDegenerate) {
  models::TransformerLM model(tiny_transformer(32, "dense"));
  const std::vector<LayoutInfo> report = models::layout_report(model);
  ASSERT_EQ(report.size(), 2u);
  EXPECT_DOUBLE_EQ(report[0].density, 1.0);
  EXPECT_FALSE(report[0].degenerate);
  EXPECT_TRUE(models::degenerate_layouts(report).empty());
}

TEST(LayoutReport, BlockSparseLinearThatStoresEveryBlockIsFlagged) {
  Generator gen(3);
  nn::BlockSparseLinear full(nn::BlockSparseLinearOptions(64, 64, 16).density(1.0), gen);
  const std::vector<LayoutInfo> report = models::layout_report(full);
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].path, "(root)");
  EXPECT_FALSE(report[0].is_attention());
  EXPECT_EQ(report[0].kept, 16);
  EXPECT_EQ(report[0].total, 16);
  EXPECT_TRUE(report[0].degenerate);
  EXPECT_EQ(models::format_layout_report(report)[0],
            "(root)  block-sparse  [64, 64] bs=16  16/16 blocks, density 1.000 of all blocks (every block stored: "
            "degenerate)");
  EXPECT_EQ(models::degenerate_layouts(report),
            std::vector<std::string>{"(root): block-sparse [64, 64] in 16x16 blocks stores all 16 blocks (density 1): "
                                     "the effective layout is a dense [64, 64] weight"});
  // Meant dense (a dense weight in block form on purpose): reported, not flagged.
  const std::vector<LayoutInfo> dense = models::layout_report(full, /*sparse_weights=*/false);
  EXPECT_FALSE(dense[0].degenerate);
  EXPECT_TRUE(contains(models::format_layout_report(dense)[0], "(dense, as configured)"));

  nn::BlockSparseLinear half(nn::BlockSparseLinearOptions(64, 64, 16).density(0.5), gen);
  const std::vector<LayoutInfo> sparse = models::layout_report(half);
  EXPECT_EQ(sparse[0].kept, 8);
  EXPECT_DOUBLE_EQ(sparse[0].density, 0.5);
  EXPECT_FALSE(sparse[0].degenerate);
}

TEST(LayoutReport, TransformerWeightsOfDensityOneAreFlaggedPerGroup) {
  models::TransformerLMConfig c = tiny_transformer(64, "dense");
  c.attn_block = 16;
  c.linear_block = 8;
  c.density = 1.0;
  models::TransformerLM model(c);
  const std::vector<LayoutInfo> report = models::layout_report(model);
  ASSERT_EQ(report.size(), 2u * 4 + 2);  // qkv, proj, fc, fc2 per block; the attention layouts
  // One problem per weight kind (the two blocks' weights grouped), none for the dense attention.
  const std::vector<std::string> problems = models::degenerate_layouts(report);
  ASSERT_EQ(problems.size(), 4u);
  for (const std::string& p : problems) EXPECT_TRUE(contains(p, "blocks.{0,1}.")) << p;
  EXPECT_TRUE(contains(problems[0], "the effective layout is a dense [")) << problems[0];
  EXPECT_EQ(models::summarize_layouts(report).size(), 5u);
}

TEST(LayoutReport, LstmDenseLayoutInBlocksIsAsConfiguredRandomDensityOneIsNot) {
  models::CharLSTMLMConfig c;
  c.vocab = 11;
  c.embed = 16;
  c.hidden = 32;
  c.layers = 2;
  c.block_size = 8;
  c.layout = "dense";
  const std::vector<LayoutInfo> dense = models::layout_report(models::CharLSTMLM(c));
  ASSERT_FALSE(dense.empty());
  for (const LayoutInfo& e : dense) EXPECT_FALSE(e.degenerate) << e.path;
  c.layout = "random";
  const std::vector<LayoutInfo> full = models::layout_report(models::CharLSTMLM(c));
  for (const LayoutInfo& e : full) EXPECT_TRUE(e.degenerate) << e.path;
  EXPECT_FALSE(models::degenerate_layouts(full).empty());
  c.density = 0.5;
  for (const LayoutInfo& e : models::layout_report(models::CharLSTMLM(c))) EXPECT_FALSE(e.degenerate) << e.path;
}

TEST(LayoutReport, SparseWeightsRequestedReadsTheConfigsLayout) {
  using nlohmann::json;
  EXPECT_FALSE(models::sparse_weights_requested(json{{"model", {{"layout", "dense"}, {"block_size", 16}}}}));
  EXPECT_FALSE(models::sparse_weights_requested(json{{"layout", "dense"}}));
  EXPECT_TRUE(models::sparse_weights_requested(json{{"model", {{"layout", "random"}}}}));
  EXPECT_TRUE(models::sparse_weights_requested(json{{"model", {{"attn_layout", "dense"}, {"linear_block", 16}}}}));
  EXPECT_TRUE(models::sparse_weights_requested(json()));
}

}  // namespace
}  // namespace tessera
