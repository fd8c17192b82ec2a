#include "core/storage.h"

#include <cstdlib>

#include "core/error.h"

namespace tessera {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    // aligned_alloc needs a size that is a multiple of the alignment, and not zero.
    size_t padded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    if (padded == 0) padded = kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, padded);
    TS_CHECK(p != nullptr, Error, "out of CPU memory: could not allocate " << nbytes << " bytes");
    return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [](void* q) { std::free(q); }));
  }
  TS_THROW(DeviceError, "cannot allocate " << nbytes << " bytes on " << device
                                           << ": CUDA tensors are not available in this build yet");
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(deleter)));
}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

}  // namespace tessera
