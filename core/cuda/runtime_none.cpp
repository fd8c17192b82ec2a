// Device discovery in builds without CUDA: no GPUs.
#include "core/device.h"

namespace tessera {

int cuda_device_count() { return 0; }
bool cuda_available() { return false; }

}  // namespace tessera
