// The CUDA runtime in builds without CUDA: no GPUs; every other call is a DeviceError.
#include <cstring>

#include "core/cuda/progress.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace tessera {

int cuda_device_count() { return 0; }
bool cuda_available() { return false; }

namespace cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  TS_THROW(DeviceError, what << ": this build of tessera has no CUDA backend (configure with -DTESSERA_CUDA=ON)");
}
}  // namespace

void set_device(int) { unavailable("cuda::set_device"); }
void* stream(int) { unavailable("cuda::stream"); }
void synchronize(int) { unavailable("cuda::synchronize"); }
void* allocate(size_t, int) { unavailable("CUDA allocation"); }
void deallocate(void*, size_t, int) {}
size_t current_bytes(int) { return 0; }
size_t peak_bytes(int) { return 0; }
void reset_peak(int) {}
void mem_info(int, size_t*, size_t*) { unavailable("cuda::mem_info"); }
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (!dst_device.is_cpu() || !src_device.is_cpu()) unavailable("copy to or from a CUDA device");
  if (nbytes > 0) std::memcpy(dst, src, nbytes);
}
void zero(void*, size_t, int) { unavailable("cuda::zero"); }
void check_op(const char*, int) {}
bool sync_each_op() { return false; }
void begin_capture(int) { unavailable("cuda::begin_capture"); }
bool is_capturing(int) { return false; }
std::shared_ptr<void> end_capture(int) { unavailable("cuda::end_capture"); }
void launch_graph(const std::shared_ptr<void>&, int) { unavailable("cuda::launch_graph"); }
std::shared_ptr<void> record_event(int) { unavailable("cuda::record_event"); }
double event_ms(const std::shared_ptr<void>&, const std::shared_ptr<void>&) { unavailable("cuda::event_ms"); }
std::vector<float> smoke_test(int) { unavailable("cuda::smoke_test"); }
void track_progress(int, bool) {}
void mark_progress(int, void*) {}
double seconds_without_progress(int) { return 0.0; }

}  // namespace cuda
}  // namespace tessera
