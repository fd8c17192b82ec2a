// The rendezvous file (see rendezvous.h).
#include "core/distributed/rendezvous.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace tessera {
namespace dist {
namespace {

constexpr const char* kMagic = "tessera-rendezvous 1";

std::string to_hex(const NcclId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (char c : id.bytes) {
    const unsigned char u = static_cast<unsigned char>(c);
    s += digits[u >> 4];
    s += digits[u & 15];
  }
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void write_file(const std::string& path, const WorldInfo& world, const NcclId& id) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::ostringstream text;
  text << kMagic << "\nworld_size " << world.size << "\nid " << to_hex(id) << "\n";
  const std::string s = text.str();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TS_CHECK(fd >= 0, IOError, "rendezvous: rank 0 cannot write " << tmp << " (does the folder exist?)");
  const bool ok = ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    TS_THROW(IOError, "rendezvous: rank 0 cannot write " << path);
  }
}

/// The id of a complete rendezvous file; ValueError for a foreign file or another world size.
NcclId parse_file(const std::string& path, const std::string& text, const WorldInfo& world) {
  std::istringstream in(text);
  std::string magic, key, hex;
  int size = 0;
  std::getline(in, magic);
  TS_CHECK(magic == kMagic, ValueError, "rendezvous: " << path << " is not a tessera rendezvous file");
  in >> key >> size;
  TS_CHECK(key == "world_size" && size >= 1, ValueError, "rendezvous: " << path << " is not a tessera rendezvous file");
  TS_CHECK(size == world.size, ValueError,
           "rendezvous: " << path << " was written by a rank 0 of world size " << size << ", this rank (" << world.rank
                          << ") has world size " << world.size
                          << " (ranks started with different sizes, or a stale file of another run: remove it)");
  in >> key >> hex;
  TS_CHECK(key == "id" && hex.size() == 256, ValueError, "rendezvous: " << path << " holds no complete id");
  NcclId id;
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    TS_CHECK(hi >= 0 && lo >= 0, ValueError, "rendezvous: " << path << " holds no complete id");
    id.bytes[i] = static_cast<char>(hi * 16 + lo);
  }
  return id;
}

}  // namespace

NcclId rendezvous_exchange(const std::string& path, const WorldInfo& world, const NcclId& mine) {
  TS_CHECK(!path.empty(), ValueError, "rendezvous: an empty path");
  if (world.rank == 0) {
    write_file(path, world, mine);
    return mine;
  }
  const double seconds = timeout_seconds();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::ifstream f(path);
    if (f) {
      std::stringstream text;
      text << f.rdbuf();
      return parse_file(path, text.str(), world);
    }
    TS_CHECK(std::chrono::steady_clock::now() < deadline, ValueError,
             "rendezvous: rank " << world.rank << " of " << world.size << " waited " << seconds << " s for rank 0 to write "
                                 << path << " (TESSERA_DIST_TIMEOUT_S; is rank 0 running, with the same path?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string rendezvous_path(const std::string& dist_init) {
  const std::string scheme = "file://";
  TS_CHECK(dist_init.compare(0, scheme.size(), scheme) == 0 && dist_init.size() > scheme.size() + 1 &&
               dist_init[scheme.size()] == '/',
           ValueError, "--dist-init '" << dist_init << "': expected file:///absolute/path (a file on a filesystem every rank sees)");
  return dist_init.substr(scheme.size());
}

}  // namespace dist
}  // namespace tessera
