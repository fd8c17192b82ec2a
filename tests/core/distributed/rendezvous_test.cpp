// The rendezvous file (core/distributed/rendezvous.h): rank 0's id reaches another rank through the
// file; a file of another world size, a file that is not a rendezvous file and a wait past
// TESSERA_DIST_TIMEOUT_S are one clear ValueError each; --dist-init values are parsed; and
// init_process_group's rules: alone without a launcher, one clear line for each start-up that
// cannot work (several ranks and no way to meet, a rendezvous for CPU ranks, MPI without MPI).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "core/distributed/init.h"
#include "core/distributed/rendezvous.h"
#include "core/error.h"

namespace tessera {
namespace {

std::string temp_path(const std::string& name) {
  return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "tessera_rdv_" +
         std::to_string(::getpid()) + "_" + name;
}

dist::WorldInfo rank(int r, int size) {
  dist::WorldInfo w;
  w.rank = r;
  w.size = size;
  w.local_rank = r;
  w.launcher = "env";
  return w;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

struct TimeoutEnv {
  explicit TimeoutEnv(const char* v) { ::setenv("TESSERA_DIST_TIMEOUT_S", v, 1); }
  ~TimeoutEnv() { ::unsetenv("TESSERA_DIST_TIMEOUT_S"); }
};

TEST(Rendezvous, RankZerosIdReachesTheOthers) {
  const std::string path = temp_path("ok");
  std::remove(path.c_str());
  dist::NcclId id;
  for (size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<char>(i * 37 + 1);
  dist::NcclId got;
  std::thread reader([&] { got = dist::rendezvous_exchange(path, rank(1, 2), dist::NcclId{}); });  // waits for the file
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dist::rendezvous_exchange(path, rank(0, 2), id).bytes, id.bytes);
  reader.join();
  EXPECT_EQ(got.bytes, id.bytes);
  std::remove(path.c_str());
}

TEST(Rendezvous, AnotherWorldSizeAForeignFileAndATimeoutAreOneClearError) {
  const std::string path = temp_path("bad");
  dist::rendezvous_exchange(path, rank(0, 4), dist::NcclId{});
  std::string e = error_of([&] { dist::rendezvous_exchange(path, rank(1, 2), dist::NcclId{}); });
  EXPECT_NE(e.find("world size 4"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;
  { std::ofstream(path) << "hello\n"; }
  e = error_of([&] { dist::rendezvous_exchange(path, rank(1, 2), dist::NcclId{}); });
  EXPECT_NE(e.find("not a tessera rendezvous file"), std::string::npos) << e;
  std::remove(path.c_str());
  TimeoutEnv env("0.1");
  e = error_of([&] { dist::rendezvous_exchange(path, rank(1, 2), dist::NcclId{}); });
  EXPECT_NE(e.find("rank 1 of 2 waited"), std::string::npos) << e;
  EXPECT_NE(e.find("TESSERA_DIST_TIMEOUT_S"), std::string::npos) << e;
}

TEST(Rendezvous, DistInitValues) {
  EXPECT_EQ(dist::rendezvous_path("file:///shared/run1.id"), "/shared/run1.id");
  for (const char* bad : {"", "file://", "file://relative/x", "tcp://host:1234", "/shared/x"})
    EXPECT_NE(error_of([&] { dist::rendezvous_path(bad); }).find("--dist-init"), std::string::npos) << bad;
}

struct EnvWorld {  // RANK / WORLD_SIZE for the scope
  EnvWorld(const char* r, const char* n) {
    ::setenv("RANK", r, 1);
    ::setenv("WORLD_SIZE", n, 1);
  }
  ~EnvWorld() {
    ::unsetenv("RANK");
    ::unsetenv("WORLD_SIZE");
  }
};

TEST(InitProcessGroup, AloneOrOneClearLine) {
  dist::InitOptions o;
  EXPECT_EQ(dist::init_process_group(o), nullptr) << "no launcher, no --dist-init: alone";
  EnvWorld env("1", "2");
  std::string e = error_of([&] { dist::init_process_group(o); });
  EXPECT_NE(e.find("give --dist-init file:///shared/path"), std::string::npos) << e;
  o.dist_init = "file:///tmp/x";
  e = error_of([&] { dist::init_process_group(o); });
  EXPECT_NE(e.find("CPU ranks meet through MPI"), std::string::npos) << e;
  o.dist_init = "mpi";
  e = error_of([&] { dist::init_process_group(o); });
  EXPECT_NE(e.find("this program has no MPI"), std::string::npos) << e;
  o.dist_init = "tcp://host";
  o.cuda = true;
  e = error_of([&] { dist::init_process_group(o); });
  EXPECT_NE(e.find("expected file:///absolute/path"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
