// Helpers of the checkpoint tests: scratch folders, file bytes, small checkpoints.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"

namespace tessera {
namespace testing {

/// A fresh folder under the temp dir, removed (made writable first) when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera_ckpt_XXXXXX").string();
    path_ = ::mkdtemp(&tmpl[0]) ? tmpl : std::string();
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed: " << std::strerror(errno);
  }
  ~TempDir() {
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(path_, ec))
      if (e.is_directory(ec)) ::chmod(e.path().c_str(), 0755);
    ::chmod(path_.c_str(), 0755);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of the files in the folder, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A tensor of `dtype` and `shape` holding raw bit patterns (bytes cycling through `seed`...).
inline Tensor raw_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  uint32_t s = seed;
  for (size_t i = 0; i < t.nbytes(); ++i) {
    s = s * 1664525u + 1013904223u;  // LCG: arbitrary bytes, NaN/inf/denormal patterns included
    p[i] = static_cast<uint8_t>(s >> 24);
  }
  return t;
}

/// Same dtype, shape and bytes.
inline ::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << a.meta() << " vs " << b.meta();
  if (std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) != 0)
    return ::testing::AssertionFailure() << a.meta() << ": bytes differ";
  return ::testing::AssertionSuccess();
}

/// A small checkpoint with every section filled.
inline io::CheckpointData sample_checkpoint() {
  io::CheckpointData d;
  d.config = R"({"model": {"kind": "mlp", "hidden": 32}, "train": {"lr": 0.001}})";
  d.model["fc.weight"] = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  d.model["fc.bias"] = from_vector(std::vector<float>{0.5f, -0.25f, 0.125f, -1}, {4});
  std::vector<uint8_t> mask = {1, 0, 1, 1, 0, 1};  // 2 x 3 blocks of 8
  d.layouts["sparse"] = BlockLayout::from_mask(16, 24, 8, mask);
  d.optimizer.type = "adamw";
  d.optimizer.step = 7;
  d.optimizer.hyperparameters = {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}};
  d.optimizer.state["fc.weight"]["exp_avg"] = raw_tensor({3, 4}, DType::f32, 5);
  d.optimizer.state["fc.bias"]["exp_avg"] = raw_tensor({4}, DType::f32, 6);
  d.trainer.step = 7;
  d.trainer.tokens_seen = 123456789012LL;
  d.trainer.loss_scale = 32768.0;
  d.trainer.vocabulary = std::string("ab\0c\xff\n", 6);
  d.trainer.ints["data.epoch"] = 2;
  d.trainer.reals["best_loss"] = 1.25;
  d.trainer.strings["run"] = "tiny run";
  d.trainer.tensors["data.order"] = from_vector(std::vector<int32_t>{3, 1, 2, 0}, {4});
  d.rng["data"] = Generator::State{42, 1000};
  d.rng["dropout"] = Generator::State{~uint64_t(0), 3};
  return d;
}

}  // namespace testing
}  // namespace tessera
