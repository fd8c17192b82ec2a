// CUDA runtime helpers (CUDA builds only).
#pragma once

#include <vector>

namespace tessera {
namespace cuda {

/// Launches a kernel writing i*i for i < n on the current GPU and returns the values.
/// DeviceError when no GPU is usable.
std::vector<float> smoke_test(int n);

}  // namespace cuda
}  // namespace tessera
