// Attention layouts in checkpoints (/layout/<module path>, kind "attention", a u8 mask
// [heads, nb, nb]): every generator round trips exactly (kept blocks and kind()), capture/restore
// of a TransformerLM and a bare MultiHeadAttention, a restore into another layout names the path
// and both layouts, every corrupt group is one IOError naming it, old files (no attention
// layouts, block layouts without kind) still load, and the mask reads in h5py and h5dump.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/hdf5_file.h"
#include "models/model_checkpoint.h"
#include "gradcheck.h"
#include "io_test_util.h"
#include "layers/layers.h"
#include "models/transformer_lm.h"

namespace tessera {
namespace {

using Kind = nn::AttentionLayoutKind;

using testing::bit_equal;
using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

// T = 64 tokens in blocks of 8: nb = 8.
constexpr int64_t kT = 64, kBs = 8, kNb = kT / kBs;

// Two heads with different masks (from_masks): head 0 local (2 blocks), head 1 every other block.
AttentionLayoutPtr custom_layout() {
  std::vector<std::vector<uint8_t>> masks(2, std::vector<uint8_t>(kNb * kNb, 0));
  for (int64_t i = 0; i < kNb; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      masks[0][i * kNb + j] = i - j < 2;
      masks[1][i * kNb + j] = (i - j) % 2 == 0;
    }
  return AttentionLayout::from_masks(kT, kBs, masks);
}

std::map<std::string, AttentionLayoutPtr> every_generator() {
  return {{"dense", AttentionLayout::dense_causal(kT, kBs, 2)},
          {"local", AttentionLayout::local_window(kT, kBs, 3, 2)},
          {"strided", AttentionLayout::strided(kT, kBs, 2, 3)},
          {"fixed", AttentionLayout::fixed(kT, kBs, 4, 4, 2)},
          {"custom", custom_layout()}};
}

// Same kept blocks, same geometry and the same generator name.
::testing::AssertionResult same_layout(const AttentionLayoutPtr& a, const AttentionLayoutPtr& b) {
  if (!a || !b) return ::testing::AssertionFailure() << "null layout";
  if (!(*a == *b) || a->kind() != b->kind())
    return ::testing::AssertionFailure() << a->str() << " vs " << b->str();
  return ::testing::AssertionSuccess();
}

// Block-sparse weights (linear_block 8) unless `dense_weights`.
models::TransformerLMConfig tiny_lm(const std::string& attn_layout, int64_t layers = 2,
                                    bool dense_weights = false) {
  models::TransformerLMConfig c;
  c.vocab = 11;
  c.seq_len = kT;
  c.width = 16;
  c.layers = layers;
  c.heads = 2;
  c.mlp_ratio = 2;
  c.attn_block = kBs;
  c.attn_layout = attn_layout;
  c.stride = 2;
  c.window = 2;
  c.linear_block = dense_weights ? 0 : 8;
  c.density = dense_weights ? 1.0 : 0.5;
  c.seed = 1;
  return c;
}

TEST(AttentionLayoutCheckpoint, EveryGeneratorRoundTripsExactly) {
  TempDir dir;
  io::CheckpointData d;
  d.attention_layouts = every_generator();
  d.layouts["fc"] = BlockLayout::from_mask(16, 16, 8, {1, 0, 1, 1});
  io::save_checkpoint(dir.file("ck.h5"), d);
  const io::CheckpointData back = io::load_checkpoint(dir.file("ck.h5"));
  ASSERT_EQ(back.attention_layouts.size(), d.attention_layouts.size());
  for (const auto& [name, l] : d.attention_layouts) {
    ASSERT_EQ(back.attention_layouts.count(name), 1u) << name;
    EXPECT_TRUE(same_layout(back.attention_layouts.at(name), l)) << name;
    EXPECT_EQ(back.attention_layouts.at(name)->str(), l->str());
  }
  EXPECT_EQ(back.attention_layouts.at("strided")->kind(), "strided(stride_blocks=3)");
  EXPECT_EQ(back.attention_layouts.at("custom")->kind(), "from_masks");
  ASSERT_EQ(back.layouts.size(), 1u);  // the block layout stays a block layout
  EXPECT_TRUE(*back.layouts.at("fc") == *d.layouts.at("fc"));

  const auto index = io::inspect_checkpoint(dir.file("ck.h5"));
  ASSERT_EQ(index.count("/layout/fixed/mask"), 1u);
  EXPECT_EQ(index.at("/layout/fixed/mask").shape, (Shape{4, kNb, kNb}));
  EXPECT_EQ(index.at("/layout/fixed/mask").dtype, DType::u8);
}

TEST(AttentionLayoutCheckpoint, SaveRejectsNullAndDoublyUsedPaths) {
  TempDir dir;
  io::CheckpointData d;
  d.attention_layouts["attn"] = nullptr;
  expect_error<ValueError>([&] { io::save_checkpoint(dir.file("ck.h5"), d); },
                           {"attention layout 'attn'", "null"});
  d.attention_layouts["attn"] = custom_layout();
  d.layouts["attn"] = BlockLayout::from_mask(16, 16, 8, {1, 0, 1, 1});
  expect_error<ValueError>([&] { io::save_checkpoint(dir.file("ck.h5"), d); }, {"'attn'", "both"});
  d.layouts.clear();
  d.attention_layouts["a/b"] = custom_layout();
  expect_error<ValueError>([&] { io::save_checkpoint(dir.file("ck.h5"), d); }, {"'a/b'"});
  EXPECT_TRUE(dir.files().empty());
}

// ---- capture / restore ----

TEST(AttentionLayoutCheckpoint, TransformerLMRestoresWithItsLayouts) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  models::TransformerLM a(tiny_lm("strided"));
  const io::CheckpointData ck = io::capture(a);
  // One entry per attention module, all the model's one layout.
  ASSERT_EQ(ck.attention_layouts.size(), 2u);
  for (const char* p : {"blocks.0.attn", "blocks.1.attn"})
    EXPECT_EQ(ck.attention_layouts.at(p), a.attention_layout()) << p;
  io::save_checkpoint(path, ck);

  const io::CheckpointData back = io::load_checkpoint(path);
  for (const char* p : {"blocks.0.attn", "blocks.1.attn"})
    EXPECT_TRUE(same_layout(back.attention_layouts.at(p), a.attention_layout())) << p;

  models::TransformerLM b(tiny_lm("strided"));
  Tensor w = b.named_parameters()[0].tensor;
  std::memset(w.data_ptr(), 0, w.nbytes());
  io::restore(path, b);
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(bit_equal(pa[i].tensor, pb[i].tensor)) << pa[i].name;
}

TEST(AttentionLayoutCheckpoint, RestoreIntoAnotherLayoutNamesThePathAndBothLayouts) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  models::TransformerLM a(tiny_lm("strided"));
  io::save_checkpoint(path, io::capture(a));

  models::TransformerLM local(tiny_lm("local"));
  const Tensor before = local.named_parameters()[0].tensor.clone();
  expect_error<IOError>(
      [&] { io::restore(path, local); },
      {path, "attention layout /layout/blocks.0.attn is AttentionLayout(strided(stride_blocks=2)",
       "model has AttentionLayout(local_window(window_blocks=2)", "(and 1 more problem)"});
  EXPECT_TRUE(bit_equal(local.named_parameters()[0].tensor, before));  // untouched

  // Other layer counts (dense weights: no block layouts to differ first).
  io::save_checkpoint(path,
                      io::capture(models::TransformerLM(tiny_lm("strided", 2, /*dense_weights=*/true))));
  models::TransformerLM one_layer(tiny_lm("strided", /*layers=*/1, true));
  expect_error<IOError>([&] { io::restore(path, one_layer); },
                        {"unexpected attention layout /layout/blocks.1.attn", "no attention module there"});
  models::TransformerLM three_layers(tiny_lm("strided", /*layers=*/3, true));
  expect_error<IOError>([&] { io::restore(path, three_layers); },
                        {"missing attention layout /layout/blocks.2.attn"});
}

TEST(AttentionLayoutCheckpoint, BareAttentionModuleIsTheRoot) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  Generator gen(0);
  nn::MultiHeadAttention a(
      nn::AttentionOptions(16, 4, kT).block_size(kBs).layout(Kind::fixed).stride(4).summary(2), gen);
  const io::CheckpointData ck = io::capture(a);
  ASSERT_EQ(ck.attention_layouts.size(), 1u);
  EXPECT_EQ(ck.attention_layouts.at(io::kRootModulePath), a.layout());
  io::save_checkpoint(path, ck);
  EXPECT_TRUE(same_layout(io::load_checkpoint(path).attention_layouts.at("(root)"), a.layout()));

  // Built from the file's layout (e.g. one edited by hand): restores.
  nn::MultiHeadAttention b(nn::AttentionOptions(16, 4, kT).block_size(kBs).layout(
                               io::load_checkpoint(path).attention_layouts.at("(root)")),
                           gen);
  io::restore(path, b);
  EXPECT_TRUE(bit_equal(b.named_parameters()[0].tensor, a.named_parameters()[0].tensor));

  nn::MultiHeadAttention dense(nn::AttentionOptions(16, 4, kT).block_size(kBs), gen);
  expect_error<IOError>([&] { io::restore(path, dense); },
                        {"/layout/(root)", "fixed(stride_blocks=4", "dense_causal"});
}

// Files written before attention layouts were saved: no attention groups, block layout groups
// without the kind attribute. They load and restore (the attention layouts are not checked).
TEST(AttentionLayoutCheckpoint, OldFilesWithoutAttentionLayoutsStillRestore) {
  TempDir dir;
  const std::string path = dir.file("old.h5");
  models::TransformerLM a(tiny_lm("strided"));
  const io::CheckpointData ck = io::capture(a);
  ASSERT_FALSE(ck.layouts.empty());
  {
    // The old writer's file: like save_checkpoint without attention layouts and kind attributes.
    std::lock_guard<std::recursive_mutex> lock(io::hdf5_mutex());
    io::H5File f = io::H5File::create(path);
    f.set_attr("/", "format", io::kCheckpointFormat);
    f.set_attr("/", "format_version", io::kCheckpointFormatVersion);
    f.set_attr("/", "framework_version", "0.1.0");
    f.set_attr("/", "config", "{}");
    for (const auto& [name, t] : ck.model) f.write_tensor("/model/" + name, t);
    f.create_group("/layout");
    for (const auto& [name, l] : ck.layouts) {
      const std::string g = "/layout/" + name;
      f.create_group(g);
      f.set_attr(g, "block_size", static_cast<int64_t>(l->block_size()));
      f.set_attr(g, "in_features", l->in_features());
      f.set_attr(g, "out_features", l->out_features());
      f.set_attr(g, "nnz", l->nnz());
      f.write_tensor(g + "/block_row", from_vector(l->block_row(), Shape{l->nnz()}));
      f.write_tensor(g + "/block_col", from_vector(l->block_col(), Shape{l->nnz()}));
    }
    f.create_group("/trainer");
    f.set_attr("/trainer", "step", int64_t(5));
    f.set_attr("/trainer", "tokens_seen", int64_t(0));
    f.set_attr("/trainer", "loss_scale", 1.0);
    f.create_group("/rng");
    f.close();
  }
  const io::CheckpointData back = io::load_checkpoint(path);
  EXPECT_TRUE(back.attention_layouts.empty());
  EXPECT_EQ(back.layouts.size(), ck.layouts.size());
  models::TransformerLM b(tiny_lm("strided"));
  Tensor w = b.named_parameters()[0].tensor;
  std::memset(w.data_ptr(), 0, w.nbytes());
  EXPECT_EQ(io::restore(path, b).trainer.step, 5);
  EXPECT_TRUE(bit_equal(w, a.named_parameters()[0].tensor));
}

// ---- corrupt files ----

// A checkpoint written by hand whose only content is /layout/attn, as `edit` leaves the group a
// correct writer makes for local_window(T=64, bs=8, heads=2, window=2).
struct AttentionGroup {
  std::string kind = "attention";
  int64_t seq_len = kT, block_size = kBs, heads = 2, nnz = 0;
  std::string generator = "local_window(window_blocks=2)";
  bool has_generator = true, generator_is_int = false;
  std::vector<uint8_t> mask;  // [heads, nb, nb]
  Shape mask_shape{2, kNb, kNb};
  DType mask_dtype = DType::u8;  // or i32
  bool has_mask = true;
};

AttentionGroup good_group() {
  AttentionGroup g;
  const AttentionLayoutPtr l = AttentionLayout::local_window(kT, kBs, 2, 2);
  for (int64_t h = 0; h < 2; ++h) {
    const std::vector<uint8_t> m = l->mask(h);
    g.mask.insert(g.mask.end(), m.begin(), m.end());
  }
  g.nnz = l->nnz();
  return g;
}

void write_group_file(const std::string& path, const AttentionGroup& a) {
  std::lock_guard<std::recursive_mutex> lock(io::hdf5_mutex());
  io::H5File f = io::H5File::create(path);
  f.set_attr("/", "format", io::kCheckpointFormat);
  f.set_attr("/", "format_version", io::kCheckpointFormatVersion);
  f.set_attr("/", "framework_version", io::framework_version());
  f.set_attr("/", "config", "{}");
  for (const char* g : {"/model", "/trainer", "/rng"}) f.create_group(g);
  f.set_attr("/trainer", "step", int64_t(0));
  f.set_attr("/trainer", "tokens_seen", int64_t(0));
  f.set_attr("/trainer", "loss_scale", 1.0);
  const std::string g = "/layout/attn";
  f.create_group(g);
  f.set_attr(g, "kind", a.kind);
  f.set_attr(g, "seq_len", a.seq_len);
  f.set_attr(g, "block_size", a.block_size);
  f.set_attr(g, "heads", a.heads);
  f.set_attr(g, "nnz", a.nnz);
  if (a.generator_is_int) {
    f.set_attr(g, "generator", int64_t(2));
  } else if (a.has_generator) {
    f.set_attr(g, "generator", a.generator);
  }
  if (a.has_mask) {
    const bool u8 = a.mask_dtype == DType::u8;
    f.write_tensor(g + "/mask",
                   u8 ? from_vector(a.mask, a.mask_shape)
                      : from_vector(std::vector<int32_t>(a.mask.begin(), a.mask.end()), a.mask_shape));
  }
  f.close();
}

TEST(AttentionLayoutCheckpoint, HandWrittenGroupLoads) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  write_group_file(path, good_group());
  EXPECT_TRUE(same_layout(io::load_checkpoint(path).attention_layouts.at("attn"),
                          AttentionLayout::local_window(kT, kBs, 2, 2)));
  // The mask is the layout; a generator that does not reproduce it is only a wrong name.
  for (const char* wrong :
       {"strided(stride_blocks=2)", "local_window(window_blocks=3)", "local_window(window_blocks=0)",
        "local_window(window_blocks=99999999999999999999)", "rotary", ""}) {
    AttentionGroup g = good_group();
    g.generator = wrong;
    write_group_file(path, g);
    const AttentionLayoutPtr l = io::load_checkpoint(path).attention_layouts.at("attn");
    EXPECT_TRUE(*l == *AttentionLayout::local_window(kT, kBs, 2, 2)) << wrong;
    EXPECT_EQ(l->kind(), "from_masks") << wrong;
  }
  // The generator is optional (e.g. a layout written by another tool).
  AttentionGroup unnamed = good_group();
  unnamed.has_generator = false;
  write_group_file(path, unnamed);
  EXPECT_EQ(io::load_checkpoint(path).attention_layouts.at("attn")->kind(), "from_masks");
}

TEST(AttentionLayoutCheckpoint, CorruptGroupsAreClearErrors) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  struct Case {
    const char* what;
    std::function<void(AttentionGroup&)> edit;
    std::vector<std::string> words;
  };
  const int64_t nb = kNb;
  const std::vector<Case> cases = {
      {"block above the diagonal",
       [&](AttentionGroup& g) { g.mask[0 * nb + 1] = 1, ++g.nnz; },
       {"/layout/attn/mask", "head 0 keeps block (query 0, key 1) above the diagonal"}},
      {"diagonal dropped",
       [&](AttentionGroup& g) { g.mask[nb * nb + 3 * nb + 3] = 0, --g.nnz; },
       {"/layout/attn/mask", "head 1, query block 3 does not keep its diagonal block (3, 3)"}},
      {"entry not 0/1",
       [&](AttentionGroup& g) { g.mask[nb + 1] = 7; },
       {"/layout/attn/mask", "entry [0, 1, 1] is 7, expected 0 or 1"}},
      {"nnz",
       [](AttentionGroup& g) { g.nnz += 5; },
       {"/layout/attn/mask", "keeps 30 blocks, attribute nnz says 35"}},
      {"heads",
       [](AttentionGroup& g) { g.heads = 3; },
       {"/layout/attn/mask", "expected u8[3, 8, 8]", "got u8[2, 8, 8]"}},
      {"mask shape",
       [](AttentionGroup& g) { g.mask_shape = Shape{2, 4, 16}; },
       {"/layout/attn/mask", "got u8[2, 4, 16]"}},
      {"mask dtype",
       [](AttentionGroup& g) { g.mask_dtype = DType::i32; },
       {"/layout/attn/mask", "got i32[2, 8, 8]"}},
      {"no mask", [](AttentionGroup& g) { g.has_mask = false; }, {"/layout/attn/mask", "missing dataset"}},
      {"seq_len", [](AttentionGroup& g) { g.seq_len = 60; }, {"/layout/attn", "bad sizes seq_len=60"}},
      {"block_size", [](AttentionGroup& g) { g.block_size = 4; }, {"/layout/attn", "block_size=4"}},
      {"no heads", [](AttentionGroup& g) { g.heads = 0; }, {"/layout/attn", "heads=0"}},
      {"huge seq_len",
       [](AttentionGroup& g) { g.seq_len = int64_t(1) << 62; },
       {"/layout/attn/mask", "expected u8[2, "}},
      {"kind", [](AttentionGroup& g) { g.kind = "rotary"; }, {"/layout/attn", "kind is 'rotary'"}},
      {"generator not a string",
       [](AttentionGroup& g) { g.generator_is_int = true; },
       {"/layout/attn", "'generator'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    AttentionGroup g = good_group();
    c.edit(g);
    write_group_file(path, g);
    std::vector<std::string> words = c.words;
    words.push_back(path);
    expect_error<IOError>([&] { io::load_checkpoint(path); }, words);
    Generator gen(0);
    nn::MultiHeadAttention m(nn::AttentionOptions(16, 2, kT).block_size(kBs).layout(Kind::local).window(2), gen);
    expect_error<IOError>([&] { io::restore(path, m); }, words);
  }
}

// ---- other tools ----

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

io::CheckpointData tool_checkpoint() {
  io::CheckpointData d;
  d.attention_layouts["blocks.0.attn"] = AttentionLayout::strided(kT, kBs, 2, 3);
  d.layouts["fc"] = BlockLayout::from_mask(16, 16, 8, {1, 0, 1, 1});
  return d;
}

TEST(AttentionLayoutCheckpoint, MaskReadsInH5dump) {
  int status = 0;
  run("h5dump --version", &status);
  if (status != 0) GTEST_SKIP() << "h5dump is not installed (Debian: hdf5-tools)";
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, tool_checkpoint());
  const std::string out = run("h5dump -g /layout/blocks.0.attn " + path, &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* s :
       {"ATTRIBUTE \"kind\"", "\"attention\"", "ATTRIBUTE \"generator\"", "\"strided(stride_blocks=3)\"",
        "DATASET \"mask\"", "H5T_STD_U8LE", "DATASPACE  SIMPLE { ( 2, 8, 8 ) / ( 2, 8, 8 ) }",
        // strided(3), query block 7: key blocks 1, 4 (stride), 5, 6, 7 (local).
        "(0,7,0): 0, 1, 0, 0, 1, 1, 1, 1"})
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
}

TEST(AttentionLayoutCheckpoint, MaskReadsAndEditsInH5py) {
  int status = 0;
  run("/usr/bin/python3 -c 'import h5py'", &status);
  if (status != 0) GTEST_SKIP() << "python3 with h5py is not installed (Debian: python3-h5py)";
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, tool_checkpoint());
  write_bytes(dir.file("check.py"), R"py(import sys
import h5py, numpy as np
def s(v):  # fixed-length string attributes read as bytes
    return v.decode() if isinstance(v, bytes) else v
f = h5py.File(sys.argv[1], "r")
g = f["layout/blocks.0.attn"]
assert s(g.attrs["kind"]) == "attention" and s(g.attrs["generator"]) == "strided(stride_blocks=3)"
T, bs, H = (int(g.attrs[k]) for k in ("seq_len", "block_size", "heads"))
assert (T, bs, H) == (64, 8, 2)
nb = T // bs
m = g["mask"][...]
assert m.dtype == np.uint8 and m.shape == (H, nb, nb), (m.dtype, m.shape)
i, j = np.indices((nb, nb))
want = ((j <= i) & (((i - j) < 3) | ((i - j) % 3 == 0))).astype(np.uint8)
assert (m == want).all(), m
assert int(g.attrs["nnz"]) == int(m.sum())
assert s(f["layout/fc"].attrs["kind"]) == "block"
print("h5py ok")
)py");
  std::string out = run("/usr/bin/python3 " + dir.file("check.py") + " " + path, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("h5py ok"), std::string::npos) << out;

  // Pruned by hand (block (7, 1) of head 1 dropped, nnz updated): loads as that layout.
  // edit + "<statements>' " + path: runs the statements in python3 with g the layout group (writable).
  const std::string edit =
      "/usr/bin/python3 -c 'import h5py, sys; g = h5py.File(sys.argv[1], \"r+\")[\"layout/blocks.0.attn\"]; ";
  out = run(edit + "m = g[\"mask\"]; m[1, 7, 1] = 0; g.attrs[\"nnz\"] = int(m[...].sum())' " + path, &status);
  ASSERT_EQ(status, 0) << out;
  const AttentionLayoutPtr l = io::load_checkpoint(path).attention_layouts.at("blocks.0.attn");
  EXPECT_FALSE(l->has(1, 7, 1));
  EXPECT_TRUE(l->has(0, 7, 1));
  EXPECT_EQ(l->nnz(), AttentionLayout::strided(kT, kBs, 2, 3)->nnz() - 1);
  EXPECT_EQ(l->kind(), "from_masks");  // no longer what the generator makes

  // A block above the diagonal set by hand: an IOError naming the dataset.
  out = run(edit + "m = g[\"mask\"]; m[0, 2, 5] = 1; g.attrs[\"nnz\"] = int(m[...].sum())' " + path, &status);
  ASSERT_EQ(status, 0) << out;
  expect_error<IOError>([&] { io::load_checkpoint(path); },
                        {"/layout/blocks.0.attn/mask", "query 2, key 5) above the diagonal"});
}

}  // namespace
}  // namespace tessera
