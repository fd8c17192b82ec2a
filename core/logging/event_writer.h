// TensorBoard event files without TensorFlow: scalar summaries (loss curves) a stock
// `tensorboard --logdir runs` shows.
//
//   logging::EventWriter tb("runs", "tiny-gpt");              // runs/tiny-gpt/events.out.tfevents.<time>.<host>
//   tb.add_scalar("loss/train", loss, step, wall_time);   // wall_time: seconds since the epoch
//   tb.flush();                                           // now visible to TensorBoard
//
// File format (TFRecord framing, as TensorFlow's RecordWriter writes it), one record per event:
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | payload | uint32 masked_crc32c(payload)
// The payload is a serialized tensorflow.Event protobuf (encoded by hand):
//   Event   { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first record is the header event {wall_time, step 0, file_version "brain.Event:2"}
// (file_version and summary share a oneof, so the header cannot also carry a scalar).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {
namespace logging {

/// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, as in iSCSI, ext4 and TFRecord).
/// `crc` continues a running checksum: crc32c(b, n2, crc32c(a, n1)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (rotated, so a CRC of
/// data that itself holds CRCs does not degenerate).
uint32_t masked_crc32c(const void* data, size_t n);

/// Appends scalar events to one new event file (see the top of this header). Not thread-safe.
/// Records are buffered: flush() hands them to the OS (also done when the buffer passes 1 MiB
/// and by the destructor, which cannot report errors: call flush() to see them).
class EventWriter {
 public:
  /// Creates `dir/run_name/` (or `dir/` when run_name is empty) and a new event file there,
  /// starting with the header event. IOError naming the folder or file when that fails.
  explicit EventWriter(const std::string& dir, const std::string& run_name = "");
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// One scalar point of the curve `tag` (e.g. "loss/train"); the value is stored as a float
  /// (simple_value). `wall_time` is in seconds since the epoch. ValueError for an empty tag.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  /// Same, at the current wall-clock time.
  void add_scalar(const std::string& tag, double value, int64_t step);

  /// Writes the buffered records to the file. IOError naming the file on failure.
  void flush();

  /// The event file's path.
  const std::string& path() const { return path_; }

  /// Seconds since the epoch, as TensorBoard expects in wall_time.
  static double now();

 private:
  void append_record(const std::string& payload);

  std::string path_;
  int fd_ = -1;
  std::string buffer_;  // framed records not yet written
};

}  // namespace logging
}  // namespace tessera
