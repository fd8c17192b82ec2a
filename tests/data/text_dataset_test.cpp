#include "data/text_dataset.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace tessera {
namespace data {
namespace {

// Writes `text` to a fresh file under the gtest temp dir and returns its path.
std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "tessera_text_dataset_" + name;
  std::ofstream out(path, std::ios::binary);
  out << text;
  return path;
}

TEST(Vocabulary, ByteLevelIsTheIdentity) {
  Vocabulary v = Vocabulary::bytes();
  EXPECT_EQ(v.size(), 256);
  EXPECT_TRUE(v.is_identity());
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  std::vector<int32_t> ids = v.encode(all);
  for (int c = 0; c < 256; ++c) EXPECT_EQ(ids[c], c);
  EXPECT_EQ(v.decode(ids), all);
}

TEST(Vocabulary, CharLevelIsSortedDistinctBytes) {
  Vocabulary v = Vocabulary::from_text("hello, world\n");
  // Sorted distinct bytes: '\n' ' ' ',' 'd' 'e' 'h' 'l' 'o' 'r' 'w'.
  std::vector<uint8_t> want = {'\n', ' ', ',', 'd', 'e', 'h', 'l', 'o', 'r', 'w'};
  EXPECT_EQ(v.symbols(), want);
  EXPECT_EQ(v.size(), 10);
  EXPECT_FALSE(v.is_identity());
  EXPECT_EQ(v.encode("hold"), (std::vector<int32_t>{5, 7, 6, 3}));
  EXPECT_EQ(v.id('h'), 5);
  EXPECT_EQ(v.id('z'), -1);
  EXPECT_EQ(v.symbol(9), 'w');
  EXPECT_EQ(v.decode(v.encode("world, hello\n")), "world, hello\n");
}

TEST(Vocabulary, RoundTripThroughBytesAndTensor) {
  Vocabulary v = Vocabulary::from_text(std::string("\xff\x01zebra\x80", 8));
  Vocabulary back = Vocabulary::from_bytes(v.to_bytes());
  EXPECT_EQ(back, v);
  Tensor t = v.to_tensor();
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.numel(), v.size());
  EXPECT_EQ(Vocabulary::from_tensor(t), v);
  EXPECT_EQ(Vocabulary::from_bytes(Vocabulary::bytes().to_bytes()), Vocabulary::bytes());
  // Ids decoded by the restored vocabulary are the same bytes.
  auto ids = v.encode(std::string("brazer\x80", 7));
  EXPECT_EQ(back.decode(ids), std::string("brazer\x80", 7));
}

TEST(Vocabulary, BadInputsThrow) {
  EXPECT_THROW(Vocabulary::from_text(""), ValueError);
  EXPECT_THROW(Vocabulary::from_bytes({}), ValueError);
  EXPECT_THROW(Vocabulary::from_bytes({'b', 'a'}), ValueError);           // not increasing
  EXPECT_THROW(Vocabulary::from_bytes({'a', 'a'}), ValueError);           // duplicate
  EXPECT_THROW(Vocabulary::from_tensor(tensor({1.0, 2.0})), ValueError);  // floating
  Vocabulary v = Vocabulary::from_text("abc");
  EXPECT_THROW(v.symbol(3), ValueError);
  EXPECT_THROW(v.decode(std::vector<int32_t>{0, -1}), ValueError);
  try {
    v.encode("abxc");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'x' at position 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(v.encode("abxc", 1), (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_THROW(v.encode("a", 3), ValueError);  // unknown id outside the vocabulary
}

TEST(TextDataset, SplitByFractions) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + (i * 7) % 26));
  auto ds = TextDataset::from_text(text, TextDatasetOptions().split(Split::fractions(0.9, 0.05, 0.05)));
  EXPECT_EQ(ds.level(), Level::byte);
  EXPECT_EQ(ds.vocab().size(), 256);
  EXPECT_EQ(ds.total_bytes(), 1000);
  EXPECT_EQ(ds.size(Part::train), 900);
  EXPECT_EQ(ds.size(Part::val), 50);
  EXPECT_EQ(ds.size(Part::test), 50);
  // Contiguous, in file order: byte ids are the bytes.
  EXPECT_EQ((*ds.tokens(Part::train))[0], text[0]);
  EXPECT_EQ((*ds.tokens(Part::val))[0], text[900]);
  EXPECT_EQ((*ds.tokens(Part::test))[49], text[999]);
  // Odd length: cumulative rounding uses every byte when the fractions sum to 1.
  auto odd =
      TextDataset::from_text(text.substr(0, 333), TextDatasetOptions().split(Split::fractions(0.9, 0.1)));
  EXPECT_EQ(odd.size(Part::train), 300);  // round(299.7)
  EXPECT_EQ(odd.size(Part::val), 33);
  EXPECT_EQ(odd.size(Part::test), 0);
  // Fractions below 1 leave the tail unused.
  auto part = TextDataset::from_text(text, TextDatasetOptions().split(Split::fractions(0.5, 0.25)));
  EXPECT_EQ(part.size(Part::train) + part.size(Part::val) + part.size(Part::test), 750);
}

TEST(TextDataset, SplitByByteCounts) {
  std::string text = "0123456789abcdefghij";  // 20 bytes, like enwik8's 90M/5M/5M scaled down
  auto ds = TextDataset::from_text(text, TextDatasetOptions().split(Split::counts(12, 5, 3)));
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::train)), "0123456789ab");
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::val)), "cdefg");
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::test)), "hij");
  auto fewer = TextDataset::from_text(text, TextDatasetOptions().split(Split::counts(10, 4)));
  EXPECT_EQ(fewer.size(Part::test), 0);
  EXPECT_THROW(TextDataset::from_text(text, TextDatasetOptions().split(Split::counts(15, 5, 1))), ValueError);
  EXPECT_THROW(Split::counts(-1, 5), ValueError);
  EXPECT_THROW(Split::fractions(0.9, 0.2), ValueError);
  EXPECT_THROW(Split::fractions(-0.1, 0.5), ValueError);
  EXPECT_THROW(TextDataset::from_text(text, TextDatasetOptions().split(Split::counts(0, 5))), ValueError);
}

// Chunks of 2 bytes, period 4: c % 4 == 2 to val, == 3 to test, the rest to train; the last
// chunk ("w", c = 11) is partial and goes to test.
TEST(TextDataset, SplitInterleavedAssignsEveryChunk) {
  const std::string text = "abcdefghijklmnopqrstuvw";  // 23 bytes, chunks ab cd ef gh ij kl mn op qr st uv w
  auto ds = TextDataset::from_text(text, TextDatasetOptions().split(Split::interleaved(2, 4)));
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::train)), "abcdijklqrst");
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::val)), "efmnuv");
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::test)), "ghopw");
  EXPECT_EQ(ds.total_bytes(), 23);
  // One byte fewer: the partial last chunk "u" (c = 10) goes to val; test ends with "op".
  auto shorter = TextDataset::from_text(text.substr(0, 21), TextDatasetOptions().split(Split::interleaved(2, 4)));
  EXPECT_EQ(shorter.vocab().decode(*shorter.tokens(Part::val)), "efmnu");
  EXPECT_EQ(shorter.vocab().decode(*shorter.tokens(Part::test)), "ghop");
  // Period 3: train, val, test, train, ...
  auto three = TextDataset::from_text(text, TextDatasetOptions().split(Split::interleaved(5, 3)));
  EXPECT_EQ(three.vocab().decode(*three.tokens(Part::train)), "abcdepqrst");
  EXPECT_EQ(three.vocab().decode(*three.tokens(Part::val)), "fghijuvw");
  EXPECT_EQ(three.vocab().decode(*three.tokens(Part::test)), "klmno");
  // Shorter than the training chunks of one period: all of it is train.
  auto tiny = TextDataset::from_text("abc", TextDatasetOptions().split(Split::interleaved(2, 4)));
  EXPECT_EQ(tiny.size(Part::train), 3);
  EXPECT_EQ(tiny.size(Part::val), 0);
  EXPECT_EQ(tiny.size(Part::test), 0);
  Split s = Split::interleaved(2, 4);
  EXPECT_EQ(s.part_of_chunk(0), Part::train);
  EXPECT_EQ(s.part_of_chunk(6), Part::val);
  EXPECT_EQ(s.part_of_chunk(11), Part::test);
}

// gcide's split scaled down by 1000: 39,952 bytes in chunks of 1,000, period 20 (the real one is
// 39,952,321 bytes in chunks of 1,000,000: 36,000,000 / 2,000,000 / 1,952,321).
TEST(TextDataset, SplitInterleavedSizes) {
  std::string text(39952, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i / 1000);  // byte = chunk index
  auto ds = TextDataset::from_text(text, TextDatasetOptions().split(Split::interleaved(1000, 20)));
  EXPECT_EQ(ds.size(Part::train), 36000);
  EXPECT_EQ(ds.size(Part::val), 2000);   // chunks 18 and 38
  EXPECT_EQ(ds.size(Part::test), 1952);  // chunk 19 and the partial chunk 39
  EXPECT_EQ((*ds.tokens(Part::val))[0], 18);
  EXPECT_EQ((*ds.tokens(Part::val))[1999], 38);
  EXPECT_EQ((*ds.tokens(Part::test))[0], 19);
  EXPECT_EQ((*ds.tokens(Part::test))[1951], 39);
  EXPECT_EQ((*ds.tokens(Part::train))[18000], 20);  // chunks 0..17, then 20
}

TEST(TextDataset, SplitInterleavedBadArgumentsAndVocabulary) {
  for (auto [chunk, period] : {std::pair<int64_t, int64_t>{0, 20}, {-1, 20}, {1000, 2}, {1000, 0}}) {
    try {
      Split::interleaved(chunk, period);
      FAIL() << "expected ValueError for chunk " << chunk << ", period " << period;
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("Split::interleaved: need chunk_bytes >= 1 and period >= 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("got chunk_bytes " + std::to_string(chunk) + ", period " + std::to_string(period)),
                std::string::npos)
          << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // The character vocabulary comes from the training chunks: 'X' only in a val chunk is an error
  // naming the part and the chunk's bytes, unless an unknown id is set.
  const std::string text = "aaaaXbbbccccddddeeee";  // chunks of 4, period 3: train aaaa dddd, val Xbbb eeee
  auto opts = TextDatasetOptions().level(Level::character).split(Split::interleaved(4, 3));
  try {
    TextDataset::from_text(text, opts);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("val split (bytes 4..8)"), std::string::npos) << e.what();
  }
  auto ds = TextDataset::from_text(text, TextDatasetOptions(opts).unknown_id(0));
  EXPECT_EQ(ds.vocab().symbols(), (std::vector<uint8_t>{'a', 'd'}));
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::train)), "aaaadddd");
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::val)), "aaaaaaaa");  // "Xbbbeeee": none in the vocabulary, all id 0
}

TEST(TextDataset, CharLevelVocabularyComesFromTheTrainingSplit) {
  std::string text = "abcabcabcabcabcabcXd";  // 'X' and 'd' appear only after the training split
  auto opts = TextDatasetOptions().level(Level::character).split(Split::counts(18, 1, 1));
  EXPECT_THROW(TextDataset::from_text(text, opts), ValueError);  // 'X' in val is unknown
  auto ds = TextDataset::from_text(text, TextDatasetOptions(opts).unknown_id(0));
  EXPECT_EQ(ds.level(), Level::character);
  EXPECT_EQ(ds.vocab().size(), 3);
  EXPECT_EQ(*ds.tokens(Part::train),
            (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(*ds.tokens(Part::val), std::vector<int32_t>{0});
  EXPECT_EQ(*ds.tokens(Part::test), std::vector<int32_t>{0});
  Tensor t = ds.tensor(Part::train);
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.to_vector<int32_t>(), *ds.tokens(Part::train));
}

TEST(TextDataset, GivenVocabularyReproducesIds) {
  std::string text = "the quick brown fox jumps over the lazy dog, again and again";
  auto opts = TextDatasetOptions().level(Level::character).split(Split::fractions(0.8, 0.2));
  auto first = TextDataset::from_text(text, opts);
  auto restored = TextDataset::from_text(
      text, TextDatasetOptions(opts).vocab(Vocabulary::from_bytes(first.vocab().to_bytes())));
  EXPECT_EQ(restored.vocab(), first.vocab());
  EXPECT_EQ(*restored.tokens(Part::train), *first.tokens(Part::train));
  EXPECT_EQ(*restored.tokens(Part::val), *first.tokens(Part::val));
  // A vocabulary that lacks bytes of the training split is an error, unknown id or not.
  auto small = TextDatasetOptions(opts).vocab(Vocabulary::from_text("the")).unknown_id(0);
  EXPECT_THROW(TextDataset::from_text(text, small), ValueError);
}

TEST(TextDataset, LoadsFilesAndNamesThePathOnErrors) {
  std::string path = write_temp("ok.txt", "First Citizen:\nBefore we proceed any further, hear me speak.\n");
  auto ds =
      TextDataset::load(path, TextDatasetOptions().level(Level::character).split(Split::fractions(1.0, 0.0)));
  EXPECT_EQ(ds.name(), path);
  EXPECT_EQ(ds.vocab().decode(*ds.tokens(Part::train)),
            "First Citizen:\nBefore we proceed any further, hear me speak.\n");
  std::remove(path.c_str());

  std::string missing = ::testing::TempDir() + "tessera_no_such_file.txt";
  std::string empty = write_temp("empty.txt", "");
  for (const std::string& p : {missing, empty, ::testing::TempDir()}) {
    try {
      TextDataset::load(p);
      FAIL() << "expected IOError for " << p;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  std::remove(empty.c_str());
}

// The real corpus when the shared/data folder beside the checkout has it (see data/fetch.sh).
TEST(TextDataset, TinyShakespeareFromSharedData) {
  namespace fs = std::filesystem;
  fs::path file = fs::path(__FILE__).parent_path() / "../../../shared/data/tinyshakespeare/input.txt";
  if (!fs::exists(file)) GTEST_SKIP() << "no " << file;
  auto ds = TextDataset::load(
      file.string(), TextDatasetOptions().level(Level::character).split(Split::fractions(0.9, 0.05, 0.05)));
  EXPECT_EQ(ds.total_bytes(), 1115394);
  EXPECT_EQ(ds.size(Part::train) + ds.size(Part::val) + ds.size(Part::test), 1115394);
  EXPECT_EQ(ds.vocab().size(), 65);  // the well-known 65 characters of tinyshakespeare
  EXPECT_EQ(ds.vocab().decode(
                std::vector<int32_t>(ds.tokens(Part::train)->begin(), ds.tokens(Part::train)->begin() + 14)),
            "First Citizen:");
}

// The real gcide (data/fetch.sh gcide) when $TESSERA_DATA_MIRROR/gcide or the shared/data folder
// beside the checkout has it unpacked.
TEST(TextDataset, GcideInterleavedFromSharedData) {
  namespace fs = std::filesystem;
  fs::path file = fs::path(__FILE__).parent_path() / "../../../shared/data/gcide/gcide.txt";
  const char* mirror = std::getenv("TESSERA_DATA_MIRROR");
  if (mirror && fs::exists(fs::path(mirror) / "gcide/gcide.txt")) file = fs::path(mirror) / "gcide/gcide.txt";
  if (!fs::exists(file)) GTEST_SKIP() << "no " << file;
  auto ds = TextDataset::load(
      file.string(), TextDatasetOptions().level(Level::character).split(Split::interleaved(1000000, 20)));
  EXPECT_EQ(ds.total_bytes(), 39952321);
  EXPECT_EQ(ds.size(Part::train), 36000000);
  EXPECT_EQ(ds.size(Part::val), 2000000);
  EXPECT_EQ(ds.size(Part::test), 1952321);
  EXPECT_EQ(ds.vocab().size(), 99);  // every byte of val and test is in the training chunks
}

}  // namespace
}  // namespace data
}  // namespace tessera
