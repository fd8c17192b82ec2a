// An environment variable set for a scope (the kernels' switches, in tests), and restored however
// the scope ends: to its earlier value, or unset if it had none.
//
//   const testing::ScopedEnv forced("TESSERA_LSTM_RESIDENT_STAGES", "0");
//   const testing::ScopedEnv unset("TESSERA_LSTM_WGMMA", nullptr);   // unset for the scope
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tessera {
namespace testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (before_) {
      setenv(name_.c_str(), before_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> before_;
};

}  // namespace testing
}  // namespace tessera
