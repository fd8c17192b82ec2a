// cuDNN handles per device (see dnn.h). Compiled only with cuDNN (TESSERA_HAVE_CUDNN).
#ifdef TESSERA_HAVE_CUDNN

#include "kernels/common/cuda/dnn.h"

#include <array>
#include <atomic>
#include <mutex>

#include "core/cuda/check.cuh"

namespace tessera {
namespace cuda {
namespace {

constexpr int kMaxDevices = 64;

// Handles are created once and never destroyed, like the device streams they are bound to
// (static tensors may still run kernels while the process shuts down).
std::array<std::atomic<cudnnHandle_t>, kMaxDevices> g_handles{};
std::mutex g_create_mutex;

}  // namespace

cudnnHandle_t dnn_handle(int device) {
  TS_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "cuDNN: cuda:" << device << " is not a valid device");
  if (cudnnHandle_t h = g_handles[device].load(std::memory_order_acquire)) return h;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  if (cudnnHandle_t h = g_handles[device].load(std::memory_order_acquire)) return h;
  set_device(device);
  auto s = static_cast<cudaStream_t>(stream(device));
  TS_CHECK(!is_capturing(device), DeviceError,
           "cuDNN: the handle of cuda:" << device << " is created by the first cuDNN op on that device, which ran "
                                        << "during CUDA graph capture; run one step eagerly first");
  cudnnHandle_t h = nullptr;
  TS_CUDNN_CHECK(cudnnCreate(&h));
  TS_CUDNN_CHECK(cudnnSetStream(h, s));
  g_handles[device].store(h, std::memory_order_release);
  return h;
}

std::string dnn_status_string(cudnnStatus_t s) {
  std::string out = cudnnGetErrorString(s);
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);  // cuDNN >= 9.0: the detail of the last failure
  if (last[0] != '\0') out += std::string(": ") + last;
  return out;
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_HAVE_CUDNN
