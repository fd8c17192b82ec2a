// dist::detect_world: each launcher's variables, the order they are looked for in, and one clear
// error for every half-set or out-of-range group.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/distributed/world.h"
#include "core/error.h"

namespace tessera {
namespace {

dist::WorldInfo detect(const std::map<std::string, std::string>& env) {
  return dist::detect_world([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The ValueError's message for `env`, or "" when there is none.
std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    detect(env);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(DetectWorld, NoLauncherIsOneProcess) {
  const dist::WorldInfo w = detect({});
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.launcher, "none");
}

TEST(DetectWorld, EachLauncher) {
  dist::WorldInfo w = detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  EXPECT_EQ(w.launcher, "mpirun");
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_rank, 0);
  w = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(w.launcher, "env");
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.local_rank, 1);
  w = detect({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(w.launcher, "slurm");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 8);
  EXPECT_EQ(w.local_rank, -1) << "not given: not known";
}

TEST(DetectWorld, MpirunComesFirstThenTheEnvironmentThenSlurm) {
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}})
                .launcher,
            "mpirun");
  EXPECT_EQ(detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).launcher,
            "env");
}

TEST(DetectWorld, HalfSetOrOutOfRangeGroupsAreOneClearError) {
  EXPECT_NE(error_of({{"RANK", "0"}}).find("RANK is set but WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_NTASKS", "4"}}).find("SLURM_NTASKS is set but SLURM_PROCID is not"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is outside 0..1"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0 is not a process count"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}}).find("RANK='one' is not a whole number"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2x"}}).find("WORLD_SIZE='2x' is not a whole number"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "7"}}).find("LOCAL_RANK=7 is outside"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", ""}, {"WORLD_SIZE", "2"}}).find("is not a whole number"), std::string::npos);
}

}  // namespace
}  // namespace tessera
