// Where a tensor's memory lives.
#pragma once

#include <ostream>
#include <string>

#include "tessera/build_config.h"  // the build's CUDA switches, for every header that includes this one

namespace tessera {

enum class DeviceType { CPU, CUDA };

/// A device: CPU, or CUDA with an ordinal. Device::cpu(), Device::cuda(0), Device::parse("cuda:1").
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  /// "cpu", "cuda", "cuda:N"; ValueError otherwise.
  static Device parse(const std::string& s);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  ///< "cpu" or "cuda:N"

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

/// True when this build has CUDA and at least one GPU is visible.
bool cuda_available();
/// Number of visible GPUs (0 in a CPU-only build).
int cuda_device_count();

}  // namespace tessera
