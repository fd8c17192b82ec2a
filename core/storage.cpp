#include "core/storage.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cuda/runtime.h"
#include "core/error.h"

namespace tessera {

namespace {

std::atomic<size_t> g_cpu_current{0};
std::atomic<size_t> g_cpu_peak{0};

void note_cpu_alloc(size_t n) {
  size_t now = g_cpu_current.fetch_add(n, std::memory_order_relaxed) + n;
  size_t peak = g_cpu_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// glibc serves blocks above its mmap threshold (at most 32 MiB by default) with fresh mmap()s,
// so every large tensor an eager op makes costs a page fault per 4 KiB and the kernel's zeroing,
// often more than the op itself (an 8192x1024 f32 add: ~10 ms instead of ~1.5 ms). Raising the
// thresholds keeps freed tensor memory in the heap for reuse. Set once, on the first CPU
// allocation; TESSERA_CPU_MALLOC_TUNING=0 leaves the host program's malloc settings alone.
void tune_malloc_once() {
  static const bool done = [] {
    const char* env = std::getenv("TESSERA_CPU_MALLOC_TUNING");
    if (env && std::strcmp(env, "0") == 0) return true;
    mallopt(M_MMAP_THRESHOLD, 512 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    tune_malloc_once();
    // aligned_alloc needs a size that is a multiple of the alignment, and not zero.
    size_t padded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    if (padded == 0) padded = kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, padded);
    TS_CHECK(p != nullptr, Error, "out of CPU memory: could not allocate " << nbytes << " bytes");
    note_cpu_alloc(nbytes);
    return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [nbytes](void* q) {
      std::free(q);
      g_cpu_current.fetch_sub(nbytes, std::memory_order_relaxed);
    }));
  }
  const int index = device.index;
  void* p = cuda::allocate(nbytes, index);
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [nbytes, index](void* q) {
    cuda::deallocate(q, nbytes, index);
  }));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(deleter)));
}

MemoryStats memory_stats(Device device) {
  if (device.is_cuda()) return {cuda::current_bytes(device.index), cuda::peak_bytes(device.index)};
  return {g_cpu_current.load(std::memory_order_relaxed), g_cpu_peak.load(std::memory_order_relaxed)};
}

void reset_peak_memory(Device device) {
  if (device.is_cuda()) return cuda::reset_peak(device.index);
  if (device.is_cpu()) g_cpu_peak.store(g_cpu_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

}  // namespace tessera
