#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tessera {
namespace io {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  TS_THROW(IOError, "cannot save '" << path << "': " << what << ": " << std::strerror(err));
}

// fsync of a file or a folder; 0 or the errno.
int sync_path(const std::string& p, bool dir) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0) return errno;
  int r = ::fsync(fd) == 0 ? 0 : errno;
  if (::close(fd) != 0 && r == 0) r = errno;
  return r;
}

// Copies src to the new file dst and fsyncs it; 0 or the errno.
int copy_file(const std::string& src, const std::string& dst) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    return e;
  }
  std::vector<char> buf(1 << 20);
  int err = 0;
  for (;;) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) err = errno;
      break;
    }
    for (ssize_t done = 0; done < n && !err;) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno != EINTR) err = errno;
      if (w > 0) done += w;
    }
    if (err) break;
  }
  if (!err && ::fsync(out) != 0) err = errno;
  if (::close(out) != 0 && !err) err = errno;
  ::close(in);
  return err;
}

// Gives the finished file `tmp` the name `dest` as well: a hard link (or a copy) under a
// staging name, renamed over `dest`.
void link_as(const std::string& tmp, const std::string& dest, const std::string& path) {
  const std::string staging = dest + ".tmp-" + std::to_string(::getpid());
  ::unlink(staging.c_str());
  if (::link(tmp.c_str(), staging.c_str()) != 0) {
    int e = errno;
    if (e == EPERM || e == EXDEV || e == ENOTSUP || e == EOPNOTSUPP || e == EMLINK) e = copy_file(tmp, staging);
    if (e) {
      ::unlink(staging.c_str());
      fail(path, "cannot create '" + staging + "'", e);
    }
  }
  if (::rename(staging.c_str(), dest.c_str()) != 0) {
    const int e = errno;
    ::unlink(staging.c_str());
    fail(path, "cannot rename '" + staging + "' to '" + dest + "'", e);
  }
}

}  // namespace

void write_file(const std::string& path, const void* data, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TS_CHECK(fd >= 0, IOError, "cannot create '" << path << "': " << std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  int err = 0;
  for (size_t done = 0; done < n && !err;) {
    const ssize_t w = ::write(fd, p + done, std::min<size_t>(n - done, size_t(1) << 30));
    if (w < 0 && errno != EINTR) err = errno;
    if (w > 0) done += static_cast<size_t>(w);
  }
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  TS_CHECK(err == 0, IOError, "cannot write '" << path << "': " << std::strerror(err));
}

std::string parent_dir(const std::string& path) {
  const size_t pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

void atomic_write(const std::string& path, const std::function<void(const std::string& tmp_path)>& write,
                  const std::string& also_as) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const std::string prefix = "cannot save '" + path + "'";
  // Creating the file ourselves first gives the OS reason (no such folder, read-only, ...).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create '" + tmp + "'", errno);
  ::close(fd);
  try {
    write(tmp);
    if (const int e = sync_path(tmp, false)) fail(path, "cannot fsync '" + tmp + "'", e);
    if (!also_as.empty()) link_as(tmp, also_as, path);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "cannot rename '" + tmp + "' over it", errno);
  } catch (const IOError& e) {
    ::unlink(tmp.c_str());
    if (std::string(e.what()).rfind(prefix, 0) == 0) throw;
    TS_THROW(IOError, prefix << ": " << e.what());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename durable. (Some file systems cannot fsync folders: EINVAL.)
  const std::string dir = parent_dir(path);
  const int e = sync_path(dir, true);
  if (e && e != EINVAL) fail(path, "saved, but cannot fsync the folder '" + dir + "'", e);
}

}  // namespace io
}  // namespace tessera
