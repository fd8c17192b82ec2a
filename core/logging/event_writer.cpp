#include "core/logging/event_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace tessera {
namespace logging {

namespace {

// Byte-at-a-time table of the reflected CRC-32C: entry b is the CRC register after shifting
// the byte b through 8 rounds of "shift right, xor the polynomial when the low bit was set".
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[b] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

constexpr size_t kAutoFlushBytes = size_t(1) << 20;

// ---- little-endian and protobuf wire encoding ----

void put_le(std::string& out, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7fu) | 0x80u));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Field key: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

// int64 fields are varints of the two's-complement value (10 bytes when negative).
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return ~c;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double EventWriter::now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventWriter::EventWriter(const std::string& dir, const std::string& run_name) {
  const std::string folder = run_name.empty() ? dir : dir + "/" + run_name;
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  TS_CHECK(!ec, IOError, "EventWriter: cannot create the folder '" << folder << "': " << ec.message());
  const double t = now();
  // TensorFlow's name: events.out.tfevents.<10-digit seconds>.<host>; a numbered suffix when
  // another writer took that name in the same second.
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(t));
  const std::string base = folder + "/events.out.tfevents." + stamp + "." + hostname();
  for (int attempt = 0; fd_ < 0; ++attempt) {
    path_ = attempt == 0 ? base : base + "." + std::to_string(attempt);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    TS_CHECK(fd_ >= 0 || (errno == EEXIST && attempt < 1000), IOError,
             "EventWriter: cannot create '" << path_ << "': " << std::strerror(errno));
  }
  std::string header;
  put_double(header, 1, t);
  put_int64(header, 2, 0);
  put_bytes(header, 3, "brain.Event:2");
  append_record(header);
  flush();
}

EventWriter::~EventWriter() {
  try {
    flush();
  } catch (const IOError&) {
    // Destructors cannot throw; callers that care call flush() themselves.
  }
  ::close(fd_);
}

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  TS_CHECK(!tag.empty(), ValueError, "EventWriter::add_scalar: empty tag (file '" << path_ << "')");
  std::string summary_value;  // Summary.Value
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, static_cast<float>(value));
  std::string summary;  // Summary
  put_bytes(summary, 1, summary_value);
  std::string event;  // Event
  put_double(event, 1, wall_time);
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  append_record(event);
  if (buffer_.size() >= kAutoFlushBytes) flush();
}

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now());
}

void EventWriter::append_record(const std::string& payload) {
  std::string len;
  put_le(len, payload.size(), 8);
  buffer_ += len;
  put_le(buffer_, masked_crc32c(len.data(), len.size()), 4);
  buffer_ += payload;
  put_le(buffer_, masked_crc32c(payload.data(), payload.size()), 4);
}

void EventWriter::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t w = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      buffer_.erase(0, done);  // keep what was not written for a later attempt
      TS_THROW(IOError, "EventWriter: cannot write '" << path_ << "': " << std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  buffer_.clear();
}

}  // namespace logging
}  // namespace tessera
