// Crash-safe file replacement: a file is either the complete old version or the complete new one.
//
//   io::atomic_write("run/ckpt.h5", [&](const std::string& tmp) { write_everything_to(tmp); });
//
// `write` fills `<path>.tmp-<pid>` in the same folder; that file is fsynced, renamed over `path`
// (rename(2) is atomic within a folder) and the folder is fsynced so the rename is durable.
// When anything fails (folder missing or read-only, disk full, `write` throwing), the temporary
// file is removed, `path` is left as it was, and an IOError names `path` and the OS reason.
// (A temporary file left by a process that was killed mid-write keeps its pid in its name.)
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace tessera {
namespace io {

/// Replaces `path` atomically with the file `write(tmp_path)` produces (see above). When
/// `also_as` is not empty the new file is also given that name (a hard link, or a copy where
/// the file system has none), atomically as well, before `path` is replaced.
void atomic_write(const std::string& path, const std::function<void(const std::string& tmp_path)>& write,
                  const std::string& also_as = "");

/// Writes `n` bytes to `path` (created or truncated) and fsyncs it; IOError with the OS reason.
void write_file(const std::string& path, const void* data, size_t n);

/// The folder part of `path` ("." when it has none).
std::string parent_dir(const std::string& path);

}  // namespace io
}  // namespace tessera
