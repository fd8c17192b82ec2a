// Text datasets for language models: a file read as bytes, split into train/val(/test) by
// fractions, by byte counts or interleaved in chunks, and encoded with a byte-level or
// character-level vocabulary.
//
//   using namespace tessera::data;
//   TextDataset ds = TextDataset::load("input.txt", TextDatasetOptions()
//                                          .level(Level::character).split(Split::fractions(0.9, 0.1)));
//   ds.vocab().size();                    // distinct bytes of the training split, e.g. 65
//   TokenArray train = ds.tokens(Part::train);   // shared, i32 ids
//   auto saved = ds.vocab().to_bytes();           // store in the checkpoint ...
//   // ... and later: TextDatasetOptions().vocab(Vocabulary::from_bytes(saved)) gives the same ids
//
//   enwik8 (the usual 90M/5M/5M bytes): Split::counts(90'000'000, 5'000'000, 5'000'000)
//   gcide (alphabetical, so not cut by position): Split::interleaved(1'000'000, 20)
//
// Fractions and counts are contiguous and in file order: train = [0, n_train),
// val = [n_train, n_train + n_val), test = the next n_test bytes. An interleaved split cuts the
// file into chunks of `chunk` bytes, chunk c = [c*chunk, min((c+1)*chunk, n)) (the last one may be
// partial), and deals them out by c mod period: period-2 to val, period-1 to test, the rest to
// train; each part is its chunks concatenated in file order. The vocabulary of a character-level
// dataset is built from the training part only; symbols of val/test that it lacks are errors
// unless an unknown id is set.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace tessera {
namespace data {

/// Token ids shared between a dataset and its samplers (no copies of large corpora).
using TokenArray = std::shared_ptr<const std::vector<int32_t>>;

/// byte: 256 ids, id = byte value. character: ids of the sorted distinct bytes of the training split.
enum class Level { byte, character };

/// The parts of a dataset.
enum class Part { train, val, test };
const char* part_name(Part p);

/// A map between bytes and ids: `symbols()[id]` is the byte of `id`, ids ordered by byte value.
class Vocabulary {
 public:
  /// Byte level: the identity on 0..255.
  static Vocabulary bytes();
  /// Character level: the sorted distinct bytes of `text` (ValueError when `text` is empty).
  static Vocabulary from_text(std::string_view text);
  /// The inverse of to_bytes(): strictly increasing byte values, 1..256 of them (ValueError otherwise).
  static Vocabulary from_bytes(const std::vector<uint8_t>& symbols);
  /// The same from a u8 (or any integer) 1-D tensor, e.g. read back from a checkpoint.
  static Vocabulary from_tensor(const Tensor& symbols);

  /// The symbols in id order: what a checkpoint stores (a 256-symbol vocabulary is the byte level).
  std::vector<uint8_t> to_bytes() const { return symbols_; }
  /// to_bytes() as a u8 tensor [size()].
  Tensor to_tensor() const;

  int64_t size() const { return static_cast<int64_t>(symbols_.size()); }
  /// True for the identity on all 256 bytes.
  bool is_identity() const { return symbols_.size() == 256; }
  const std::vector<uint8_t>& symbols() const { return symbols_; }
  bool contains(uint8_t c) const { return id_of_[c] >= 0; }
  /// The id of byte `c`, or -1 when the vocabulary lacks it.
  int32_t id(uint8_t c) const { return id_of_[c]; }
  /// The byte of `id` (ValueError outside [0, size())).
  uint8_t symbol(int32_t id) const;

  /// Ids of `text`. A byte the vocabulary lacks becomes `unknown_id` when that is set (it must be a
  /// valid id), else throws ValueError naming the byte and its position.
  std::vector<int32_t> encode(std::string_view text, std::optional<int32_t> unknown_id = std::nullopt) const;
  /// The bytes of `ids` (ValueError for an id outside the vocabulary).
  std::string decode(const std::vector<int32_t>& ids) const;
  /// The same for an i32 tensor (any shape, read in row-major order).
  std::string decode(const Tensor& ids) const;

  bool operator==(const Vocabulary& o) const { return symbols_ == o.symbols_; }
  bool operator!=(const Vocabulary& o) const { return !(*this == o); }

 private:
  explicit Vocabulary(std::vector<uint8_t> symbols);
  std::vector<uint8_t> symbols_;
  int32_t id_of_[256];
};

/// How to cut the text: fractions of its length, byte counts, or interleaved chunks.
struct Split {
  enum class Kind { fractions, counts, interleaved };
  Kind kind = Kind::fractions;
  double frac[3] = {0.9, 0.1, 0.0};  ///< train, val, test; each >= 0, sum <= 1
  int64_t count[3] = {0, 0, 0};      ///< train, val, test bytes; sum <= file size
  int64_t chunk = 0;                 ///< interleaved: bytes per chunk (>= 1)
  int64_t period = 0;                ///< interleaved: chunks per period (>= 3)

  /// Cumulative rounding: train ends at round(f_train n), val at round((f_train + f_val) n),
  /// test at round((f_train + f_val + f_test) n); fractions summing to 1 use every byte.
  static Split fractions(double train, double val, double test = 0.0);
  /// Exact byte counts; bytes after train + val + test are unused.
  static Split counts(int64_t train, int64_t val, int64_t test = 0);
  /// Chunks of `chunk_bytes` dealt out by index c: c % period == period-2 to val, == period-1 to
  /// test, else train; every byte is used. With n bytes and C = ceil(n / chunk_bytes) chunks, val
  /// and test get about n/period bytes each (chunk 0 is always train). Deterministic: the same
  /// file and arguments give the same parts. ValueError unless chunk_bytes >= 1 and period >= 3.
  /// gcide: interleaved(1'000'000, 20) gives 36,000,000 / 2,000,000 / 1,952,321 bytes.
  static Split interleaved(int64_t chunk_bytes, int64_t period);
  /// The part chunk `c` of an interleaved split goes to.
  Part part_of_chunk(int64_t c) const;
};

/// Options with chainable setters.
struct TextDatasetOptions {
  Level level_ = Level::byte;
  Split split_ = Split::fractions(0.9, 0.1, 0.0);
  std::optional<Vocabulary> vocab_;    ///< a given vocabulary (restored from a checkpoint)
  std::optional<int32_t> unknown_id_;  ///< id for val/test bytes missing from the vocabulary

  TextDatasetOptions& level(Level l) { level_ = l; return *this; }
  TextDatasetOptions& split(const Split& s) { split_ = s; return *this; }
  /// Use this vocabulary instead of building one (the training split must fit it too).
  TextDatasetOptions& vocab(const Vocabulary& v) { vocab_ = v; return *this; }
  /// Map unknown val/test bytes to `id` instead of throwing (ids in the training split never are).
  TextDatasetOptions& unknown_id(int32_t id) { unknown_id_ = id; return *this; }
};

/// A text corpus encoded into train/val/test token arrays.
class TextDataset {
 public:
  /// Reads `path` whole. IOError naming the path when it is missing, unreadable or empty.
  static TextDataset load(const std::string& path, const TextDatasetOptions& opts = {});
  /// The same from text in memory (`name` appears in error messages).
  static TextDataset from_text(std::string_view text, const TextDatasetOptions& opts = {},
                               const std::string& name = "<text>");

  const Vocabulary& vocab() const { return vocab_; }
  Level level() const { return level_; }
  const std::string& name() const { return name_; }
  /// Bytes in the file (used or not).
  int64_t total_bytes() const { return total_bytes_; }
  /// The ids of a part (empty when the split gives it no bytes).
  const TokenArray& tokens(Part p) const { return parts_[static_cast<int>(p)]; }
  int64_t size(Part p) const { return static_cast<int64_t>(tokens(p)->size()); }
  /// A part's ids as an i32 tensor [size(p)] (a copy).
  Tensor tensor(Part p) const;

 private:
  TextDataset() = default;
  std::string name_;
  Level level_ = Level::byte;
  int64_t total_bytes_ = 0;
  Vocabulary vocab_ = Vocabulary::bytes();
  TokenArray parts_[3];
};

}  // namespace data
}  // namespace tessera
