#include "data/text_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tessera {
namespace data {

const char* part_name(Part p) {
  switch (p) {
    case Part::train:
      return "train";
    case Part::val:
      return "val";
    case Part::test:
      return "test";
  }
  return "?";
}

namespace {

// A byte for messages: printable ASCII as 'c', the rest as 0xNN.
std::string show_byte(uint8_t c) {
  std::ostringstream os;
  if (c >= 0x20 && c < 0x7f) {
    os << '\'' << static_cast<char>(c) << '\'';
  } else {
    static const char* hex = "0123456789abcdef";
    os << "0x" << hex[c >> 4] << hex[c & 15];
  }
  return os.str();
}

}  // namespace

// ---- Vocabulary ----

Vocabulary::Vocabulary(std::vector<uint8_t> symbols) : symbols_(std::move(symbols)) {
  std::fill(std::begin(id_of_), std::end(id_of_), -1);
  for (size_t i = 0; i < symbols_.size(); ++i) id_of_[symbols_[i]] = static_cast<int32_t>(i);
}

Vocabulary Vocabulary::bytes() {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  return Vocabulary(std::move(all));
}

Vocabulary Vocabulary::from_text(std::string_view text) {
  TS_CHECK(!text.empty(), ValueError, "Vocabulary::from_text: the text is empty");
  bool seen[256] = {};
  for (char ch : text) seen[static_cast<uint8_t>(ch)] = true;
  std::vector<uint8_t> symbols;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) symbols.push_back(static_cast<uint8_t>(c));
  return Vocabulary(std::move(symbols));
}

Vocabulary Vocabulary::from_bytes(const std::vector<uint8_t>& symbols) {
  TS_CHECK(!symbols.empty(), ValueError, "Vocabulary::from_bytes: no symbols");
  for (size_t i = 1; i < symbols.size(); ++i)
    TS_CHECK(symbols[i - 1] < symbols[i], ValueError,
             "Vocabulary::from_bytes: symbols must be strictly increasing byte values, got "
                 << show_byte(symbols[i - 1]) << " then " << show_byte(symbols[i]) << " at index " << i);
  return Vocabulary(symbols);
}

Vocabulary Vocabulary::from_tensor(const Tensor& symbols) {
  TS_CHECK(symbols.defined() && symbols.dim() == 1 && !is_floating(symbols.dtype()), ValueError,
           "Vocabulary::from_tensor: need a 1-D integer tensor, got "
               << (symbols.defined() ? symbols.meta().str() : std::string("an undefined tensor")));
  std::vector<int32_t> v = symbols.to_vector<int32_t>();
  std::vector<uint8_t> bytes(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    TS_CHECK(v[i] >= 0 && v[i] < 256, ValueError,
             "Vocabulary::from_tensor: value " << v[i] << " at index " << i << " is not a byte");
    bytes[i] = static_cast<uint8_t>(v[i]);
  }
  return from_bytes(bytes);
}

Tensor Vocabulary::to_tensor() const {
  Tensor t = empty({size()}, DType::u8);
  std::memcpy(t.data_ptr(), symbols_.data(), symbols_.size());
  return t;
}

uint8_t Vocabulary::symbol(int32_t id) const {
  TS_CHECK(id >= 0 && id < size(), ValueError,
           "Vocabulary: id " << id << " is outside [0, " << size() << ")");
  return symbols_[id];
}

std::vector<int32_t> Vocabulary::encode(std::string_view text, std::optional<int32_t> unknown_id) const {
  if (unknown_id)
    TS_CHECK(*unknown_id >= 0 && *unknown_id < size(), ValueError,
             "Vocabulary::encode: unknown id " << *unknown_id << " is outside [0, " << size() << ")");
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t id = id_of_[static_cast<uint8_t>(text[i])];
    if (id < 0) {
      TS_CHECK(unknown_id.has_value(), ValueError,
               "Vocabulary::encode: byte " << show_byte(static_cast<uint8_t>(text[i])) << " at position " << i
                                           << " is not in the vocabulary of " << size() << " symbols");
      id = *unknown_id;
    }
    ids[i] = id;
  }
  return ids;
}

std::string Vocabulary::decode(const std::vector<int32_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) out[i] = static_cast<char>(symbol(ids[i]));
  return out;
}

std::string Vocabulary::decode(const Tensor& ids) const {
  TS_CHECK(ids.defined() && ids.dtype() == DType::i32, DTypeError,
           "Vocabulary::decode: ids must be i32, got "
               << (ids.defined() ? ids.meta().str() : std::string("an undefined tensor")));
  return decode(ids.to_vector<int32_t>());
}

// ---- Split ----

Split Split::fractions(double train, double val, double test) {
  TS_CHECK(train >= 0 && val >= 0 && test >= 0 && train + val + test <= 1.0 + 1e-9 && train + val + test > 0,
           ValueError,
           "Split::fractions: need fractions >= 0 with 0 < sum <= 1, got train " << train << ", val " << val
                                                                                 << ", test " << test);
  Split s;
  s.kind = Kind::fractions;
  s.frac[0] = train;
  s.frac[1] = val;
  s.frac[2] = test;
  return s;
}

Split Split::counts(int64_t train, int64_t val, int64_t test) {
  TS_CHECK(train >= 0 && val >= 0 && test >= 0 && train + val + test > 0, ValueError,
           "Split::counts: need byte counts >= 0 with a positive sum, got train " << train << ", val " << val
                                                                                  << ", test " << test);
  Split s;
  s.kind = Kind::counts;
  s.count[0] = train;
  s.count[1] = val;
  s.count[2] = test;
  return s;
}

Split Split::interleaved(int64_t chunk_bytes, int64_t period) {
  TS_CHECK(chunk_bytes >= 1 && period >= 3, ValueError,
           "Split::interleaved: need chunk_bytes >= 1 and period >= 3 (each period holds train, val and test "
           "chunks), got chunk_bytes "
               << chunk_bytes << ", period " << period);
  Split s;
  s.kind = Kind::interleaved;
  s.chunk = chunk_bytes;
  s.period = period;
  return s;
}

Part Split::part_of_chunk(int64_t c) const {
  const int64_t r = c % period;
  return r == period - 2 ? Part::val : r == period - 1 ? Part::test : Part::train;
}

// ---- TextDataset ----

namespace {

// A half-open byte range [begin, end) of the file.
struct ByteRange {
  int64_t begin, end;
};

// The byte ranges of part p (0 train, 1 val, 2 test) of an n-byte text under split s, in file order.
std::vector<ByteRange> part_ranges(const Split& s, int64_t n, const std::string& name, int p) {
  if (s.kind == Split::Kind::interleaved) {
    std::vector<ByteRange> r;
    for (int64_t c = 0; c * s.chunk < n; ++c)
      if (static_cast<int>(s.part_of_chunk(c)) == p) r.push_back({c * s.chunk, std::min(n, (c + 1) * s.chunk)});
    return r;
  }
  // Contiguous parts: ends[q] is where part q stops; part q starts where q-1 stopped.
  int64_t ends[3];
  if (s.kind == Split::Kind::fractions) {
    double acc = 0;
    for (int q = 0; q < 3; ++q) {
      acc += s.frac[q];
      ends[q] = std::min<int64_t>(n, static_cast<int64_t>(std::llround(acc * static_cast<double>(n))));
    }
  } else {
    const int64_t want = s.count[0] + s.count[1] + s.count[2];
    TS_CHECK(want <= n, ValueError,
             "TextDataset: split of train " << s.count[0] << " + val " << s.count[1] << " + test "
                                            << s.count[2] << " = " << want << " bytes is more than the " << n
                                            << " bytes of '" << name << "'");
    ends[0] = s.count[0];
    ends[1] = ends[0] + s.count[1];
    ends[2] = ends[1] + s.count[2];
  }
  return {{p == 0 ? 0 : ends[p - 1], ends[p]}};
}

int64_t bytes_in(const std::vector<ByteRange>& ranges) {
  int64_t b = 0;
  for (const ByteRange& r : ranges) b += r.end - r.begin;
  return b;
}

// The sorted distinct bytes of `ranges` of `text` as a character vocabulary.
Vocabulary vocabulary_of(std::string_view text, const std::vector<ByteRange>& ranges) {
  bool seen[256] = {};
  for (const ByteRange& r : ranges)
    for (int64_t i = r.begin; i < r.end; ++i) seen[static_cast<uint8_t>(text[static_cast<size_t>(i)])] = true;
  std::vector<uint8_t> symbols;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) symbols.push_back(static_cast<uint8_t>(c));
  return Vocabulary::from_bytes(symbols);
}

}  // namespace

TextDataset TextDataset::load(const std::string& path, const TextDatasetOptions& opts) {
  std::error_code ec;
  TS_CHECK(!std::filesystem::is_directory(path, ec), IOError, "TextDataset: '" << path << "' is a directory");
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), IOError, "TextDataset: cannot open '" << path << "': " << std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TS_CHECK(!in.bad(), IOError, "TextDataset: cannot read '" << path << "': " << std::strerror(errno));
  TS_CHECK(!text.empty(), IOError, "TextDataset: '" << path << "' is empty");
  return from_text(text, opts, path);
}

TextDataset TextDataset::from_text(std::string_view text, const TextDatasetOptions& opts,
                                   const std::string& name) {
  const int64_t n = static_cast<int64_t>(text.size());
  TS_CHECK(n > 0, IOError, "TextDataset: '" << name << "' is empty");
  std::vector<ByteRange> ranges[3];
  for (int p = 0; p < 3; ++p) ranges[p] = part_ranges(opts.split_, n, name, p);
  TS_CHECK(bytes_in(ranges[0]) > 0, ValueError,
           "TextDataset: the training split of '" << name << "' (" << n << " bytes) is empty");

  TextDataset ds;
  ds.name_ = name;
  ds.total_bytes_ = n;
  if (opts.vocab_) {
    ds.vocab_ = *opts.vocab_;
  } else {
    ds.vocab_ = opts.level_ == Level::byte ? Vocabulary::bytes() : vocabulary_of(text, ranges[0]);
  }
  // A given vocabulary decides the level: all 256 bytes is the byte level.
  ds.level_ = !opts.vocab_ ? opts.level_ : ds.vocab_.is_identity() ? Level::byte : Level::character;

  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> ids;
    ids.reserve(static_cast<size_t>(bytes_in(ranges[p])));
    for (const ByteRange& r : ranges[p]) {
      std::string_view part = text.substr(static_cast<size_t>(r.begin), static_cast<size_t>(r.end - r.begin));
      try {
        // The training split always fits a vocabulary built from it; a given one must cover it.
        std::vector<int32_t> more = ds.vocab_.encode(part, p == 0 ? std::nullopt : opts.unknown_id_);
        ids.insert(ids.end(), more.begin(), more.end());
      } catch (const ValueError& e) {
        TS_THROW(ValueError, "TextDataset: '" << name << "' " << part_name(static_cast<Part>(p))
                                              << " split (bytes " << r.begin << ".." << r.end << "): " << e.what());
      }
    }
    ds.parts_[p] = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  }
  return ds;
}

Tensor TextDataset::tensor(Part p) const {
  const auto& ids = *tokens(p);
  Tensor t = empty({static_cast<int64_t>(ids.size())}, DType::i32);
  if (!ids.empty()) std::memcpy(t.data_ptr(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

}  // namespace data
}  // namespace tessera
