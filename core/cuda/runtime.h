// The CUDA runtime as the rest of tessera sees it: devices, the stream every kernel runs on,
// the stream-ordered pool allocator, copies, and the per-op error check. Host code includes
// only this header (no CUDA headers); kernels (.cu files) also include core/cuda/check.cuh.
//
//   void* p = cuda::allocate(bytes, 0);          // from device 0's memory pool, stream-ordered
//   cuda::copy(p, Device::cuda(0), host, Device::cpu(), bytes);
//   cuda::deallocate(p, bytes, 0);
//
// One stream per device (created non-blocking, so a step can be captured as a CUDA graph):
// every kernel, copy and allocation of that device is ordered on it. Host reads (copies to the
// CPU) wait for it. Memory comes from the device's default memory pool (cudaMallocAsync) with a
// release threshold of "keep everything", so freed blocks are reused without driver calls.
//
// Environment: TESSERA_CUDA_SYNC=1 synchronizes after every op and checks for errors, so that a
// faulting kernel is named by the op that launched it (slow; for debugging).
// In builds without CUDA these functions throw DeviceError (device_count() is 0).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/device.h"

namespace tessera {
namespace cuda {

/// Makes `device` current for this thread (cudaSetDevice when it changes).
void set_device(int device);
/// The stream of `device` (a cudaStream_t, as void* to keep CUDA headers out of host code).
void* stream(int device);
/// Waits for everything queued on `device`'s stream. This and device-to-host copies (the host
/// waits) throw the ValueError of a bad index that kernels recorded meanwhile (index_select ids,
/// cross_entropy targets: core/cuda/index_errors.cuh), naming the op.
void synchronize(int device);

/// `nbytes` from `device`'s memory pool, ordered on its stream. OutOfMemoryError (with the bytes
/// asked and free) when it does not fit; the process can continue.
void* allocate(size_t nbytes, int device);
/// Returns memory from allocate() to the pool, ordered on the device's stream.
void deallocate(void* ptr, size_t nbytes, int device);
/// Bytes tessera holds on `device` now and at most since reset_peak().
size_t current_bytes(int device);
size_t peak_bytes(int device);
void reset_peak(int device);
/// Free and total bytes of the device (cudaMemGetInfo).
void mem_info(int device, size_t* free_bytes, size_t* total_bytes);

/// Copies `nbytes` between any two of CPU / CUDA memory, ordered on the CUDA side's stream.
/// Host to device goes through a pinned staging buffer (the host memory may be reused as soon as
/// this returns) taken from a small per-device ring, so that back-to-back copies (a step's feeds)
/// do not wait for the kernels queued before them; device to host waits for the copy.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
/// Sets `nbytes` at `ptr` on `device` to zero, ordered on its stream.
void zero(void* ptr, size_t nbytes, int device);

/// After an op's kernels were queued: throws DeviceError naming `op` if a launch failed, and with
/// TESSERA_CUDA_SYNC=1 synchronizes first so that a fault inside a kernel is reported here too.
void check_op(const char* op, int device);
/// Whether TESSERA_CUDA_SYNC=1 (read once).
bool sync_each_op();

/// CUDA graphs: everything queued on `device`'s stream between begin_capture and end_capture is
/// recorded (not run); end_capture returns the instantiated graph, launch_graph replays it on
/// the stream. The handle frees the graph when it dies.
void begin_capture(int device);
/// Whether `device`'s stream is being captured now: nothing queued runs, the host must not wait
/// for it, and one-time set-up (library handles, tables) must not happen then.
bool is_capturing(int device);
std::shared_ptr<void> end_capture(int device);
void launch_graph(const std::shared_ptr<void>& graph, int device);

/// Timing on the GPU: an event recorded on `device`'s stream now (not while capturing), and the
/// milliseconds between two of them (waits for the later one).
std::shared_ptr<void> record_event(int device);
double event_ms(const std::shared_ptr<void>& start, const std::shared_ptr<void>& stop);

/// Launches a kernel writing i*i for i < n on the current GPU and returns the values.
/// DeviceError when no GPU is usable.
std::vector<float> smoke_test(int n);

}  // namespace cuda
}  // namespace tessera
