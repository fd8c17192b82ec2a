// cuDNN for tessera's CUDA kernels (CUDA builds with cuDNN, TESSERA_HAVE_CUDNN): one handle per
// device, bound to the device's stream so cuDNN's kernels queue behind every other kernel and can
// be captured in a CUDA graph; the status check.
//
//   cudnnHandle_t h = cuda::dnn_handle(device);            // created on first use
//   TS_CUDNN_CHECK(cudnnRNNForward(h, ...));
//
// The first cuDNN call on a device creates its handle (cudnnCreate loads cuDNN's sub-libraries:
// slow, once); do that outside stream capture (any eager op or warm-up step does): creating it
// while the stream is being captured is a DeviceError that says so. A handle is used by one host
// thread at a time, as the rest of the per-device runtime is. Temporary memory (workspaces) is
// never cuDNN's own: callers pass tessera tensors from the device's pool.
//
// cuDNN version: the build machines compile against cuDNN 9.19 headers, the GPU machine runs 9.14;
// code here uses nothing newer than 9.0.
#pragma once

#include <cudnn.h>

#include <string>

#include "core/error.h"
#include "tessera/build_config.h"

namespace tessera {
namespace cuda {

/// The cuDNN handle of `device`, bound to cuda::stream(device). Created on first use and kept
/// for the life of the process.
cudnnHandle_t dnn_handle(int device);

/// "CUDNN_STATUS_BAD_PARAM" plus cuDNN's own last error message, when it has one.
std::string dnn_status_string(cudnnStatus_t s);

}  // namespace cuda
}  // namespace tessera

/// Throws DeviceError naming the call and the status when a cuDNN call fails.
#define TS_CUDNN_CHECK(expr)                                                                        \
  do {                                                                                              \
    const cudnnStatus_t ts_dnn_status_ = (expr);                                                    \
    TS_CHECK(ts_dnn_status_ == CUDNN_STATUS_SUCCESS, DeviceError,                                   \
             #expr << " failed: " << ::tessera::cuda::dnn_status_string(ts_dnn_status_));           \
  } while (0)
