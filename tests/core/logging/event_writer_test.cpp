// EventWriter: CRC-32C against published vectors, and the event file parsed back record by record
// (framing, both CRCs, the hand-encoded protobuf). TensorBoard's own reader is checked by the
// ctest `tensorboard_reader` (read_events.py).
#include "core/logging/event_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "../io/io_test_util.h"

namespace tessera {
namespace {

using testing::read_bytes;
using testing::TempDir;

uint64_t get_le(const std::string& s, size_t pos, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= uint64_t(static_cast<unsigned char>(s.at(pos + i))) << (8 * i);
  return v;
}

uint64_t get_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(pos++));
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

// A decoded protobuf message: field number -> raw values (varint / fixed as integers, bytes as strings).
struct Message {
  std::map<uint32_t, uint64_t> ints;
  std::map<uint32_t, std::string> bytes;
};

Message decode(const std::string& s) {
  Message m;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = get_varint(s, pos);
    const auto field = static_cast<uint32_t>(key >> 3);
    switch (key & 7) {
      case 0: m.ints[field] = get_varint(s, pos); break;
      case 1: m.ints[field] = get_le(s, pos, 8); pos += 8; break;
      case 5: m.ints[field] = get_le(s, pos, 4); pos += 4; break;
      case 2: {
        const size_t n = get_varint(s, pos);
        m.bytes[field] = s.substr(pos, n);
        pos += n;
        break;
      }
      default: ADD_FAILURE() << "wire type " << (key & 7); return m;
    }
  }
  EXPECT_EQ(pos, s.size());
  return m;
}

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

float as_float(uint64_t bits) {
  const auto b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Splits a TFRecord file into payloads, checking each record's length and CRCs.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < file.size()) {
    EXPECT_GE(file.size() - pos, 12u) << "truncated record header at " << pos;
    const uint64_t len = get_le(file, pos, 8);
    EXPECT_EQ(get_le(file, pos + 8, 4), logging::masked_crc32c(file.data() + pos, 8)) << "length CRC at " << pos;
    EXPECT_GE(file.size() - pos - 12, len + 4) << "truncated record at " << pos;
    const std::string payload = file.substr(pos + 12, len);
    EXPECT_EQ(get_le(file, pos + 12 + len, 4), logging::masked_crc32c(payload.data(), payload.size()))
        << "payload CRC at " << pos;
    out.push_back(payload);
    pos += 12 + len + 4;
  }
  return out;
}

TEST(Crc32c, KnownVectors) {
  const std::string digits = "123456789";
  EXPECT_EQ(logging::crc32c(digits.data(), digits.size()), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, incrementing and decrementing.
  std::vector<unsigned char> b(32, 0);
  EXPECT_EQ(logging::crc32c(b.data(), b.size()), 0x8A9136AAu);
  std::fill(b.begin(), b.end(), 0xff);
  EXPECT_EQ(logging::crc32c(b.data(), b.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(logging::crc32c(b.data(), b.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(logging::crc32c(b.data(), b.size()), 0x113FDB5Cu);
  EXPECT_EQ(logging::crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ContinuesAndMasks) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(logging::crc32c(s.data() + 10, s.size() - 10, logging::crc32c(s.data(), 10)), logging::crc32c(s.data(), s.size()));
  const uint32_t c = 0xE3069283u;  // crc32c("123456789")
  EXPECT_EQ(logging::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(EventWriter, RecordsParseBack) {
  TempDir dir;
  std::string path;
  {
    logging::EventWriter w(dir.path(), "run-a");
    path = w.path();
    w.add_scalar("loss/train", 2.5, 0, 1700000000.25);
    w.add_scalar("loss/train", 0.1, 1234567890123LL, 1700000001.5);  // multi-byte varint step
    w.add_scalar("loss/val", -3.75, -7, 1700000002.0);                // negative step: 10-byte varint
    w.flush();
  }
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(std::filesystem::path(path).parent_path().string(), dir.path() + "/run-a");
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_NE(name.find(std::string(".") + host), std::string::npos) << name;

  const std::vector<std::string> records = read_records(read_bytes(path));
  ASSERT_EQ(records.size(), 4u);
  const Message header = decode(records[0]);
  EXPECT_EQ(header.bytes.at(3), "brain.Event:2");
  EXPECT_EQ(header.ints.at(2), 0u);
  EXPECT_NEAR(as_double(header.ints.at(1)), logging::EventWriter::now(), 60.0);
  EXPECT_EQ(header.bytes.count(5), 0u);

  struct Expect { const char* tag; float value; int64_t step; double wall_time; };
  const Expect expect[] = {{"loss/train", 2.5f, 0, 1700000000.25},
                           {"loss/train", 0.1f, 1234567890123LL, 1700000001.5},
                           {"loss/val", -3.75f, -7, 1700000002.0}};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const Message ev = decode(records[i + 1]);
    EXPECT_EQ(as_double(ev.ints.at(1)), expect[i].wall_time);
    EXPECT_EQ(static_cast<int64_t>(ev.ints.at(2)), expect[i].step);
    EXPECT_EQ(ev.bytes.count(3), 0u);
    const Message summary = decode(ev.bytes.at(5));
    const Message value = decode(summary.bytes.at(1));
    EXPECT_EQ(value.bytes.at(1), expect[i].tag);
    EXPECT_EQ(as_float(value.ints.at(2)), expect[i].value);
  }
}

TEST(EventWriter, FlushAndDestructorWrite) {
  TempDir dir;
  std::string path;
  {
    logging::EventWriter w(dir.path());
    path = w.path();
    EXPECT_EQ(read_records(read_bytes(path)).size(), 1u);  // header written at once
    w.add_scalar("a", 1.0, 1);
    EXPECT_EQ(read_records(read_bytes(path)).size(), 1u);  // buffered
    w.flush();
    EXPECT_EQ(read_records(read_bytes(path)).size(), 2u);
    w.add_scalar("a", 2.0, 2);
  }
  EXPECT_EQ(read_records(read_bytes(path)).size(), 3u);
}

TEST(EventWriter, TwoWritersGetTwoFiles) {
  TempDir dir;
  logging::EventWriter a(dir.path()), b(dir.path());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(dir.files().size(), 2u);
}

TEST(EventWriter, Errors) {
  TempDir dir;
  testing::write_bytes(dir.file("plain"), "x");
  try {
    logging::EventWriter w(dir.file("plain"), "run");
    FAIL() << "no IOError";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("plain")), std::string::npos) << e.what();
  }
  logging::EventWriter w(dir.path());
  try {
    w.add_scalar("", 1.0, 0, 0.0);
    FAIL() << "no ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("empty tag"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
