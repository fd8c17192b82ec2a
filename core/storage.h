// A reference-counted block of device memory. Tensors hold it through std::shared_ptr.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"

namespace tessera {

/// Alignment of every CPU allocation (cache line, AVX-512 loads).
constexpr size_t kCpuAlignment = 64;

/// Owns `nbytes` of memory on `device` and frees it when the last owner goes.
class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  /// Allocates nbytes on `device` (CPU: 64-byte aligned; CUDA: from the stream-ordered pool,
  /// OutOfMemoryError when it does not fit; zero bytes allowed).
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  /// Wraps memory owned elsewhere; `deleter` runs when the Storage dies (may be empty).
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, Deleter deleter);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device, Deleter deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
};

/// Bytes of tensor storage allocated by tessera on a device: now, and the most at any time
/// since the last reset_peak_memory().
struct MemoryStats {
  size_t current = 0;
  size_t peak = 0;
};
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);

}  // namespace tessera
