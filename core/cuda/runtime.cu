// The CUDA runtime (see runtime.h): per-device stream, pool allocator, copies, error checks.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/cuda/index_errors.cuh"
#include "core/cuda/progress.h"
#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/error.h"

namespace tessera {

int cuda_device_count() {
  int n = 0;
  // No driver or no GPU is not an error here: it means zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace cuda {
namespace {

constexpr int kMaxDevices = 64;
constexpr double kMiB = 1024.0 * 1024.0;

// A pinned host buffer that host-to-device copies go through, and the event recorded on the
// stream after the last copy out of it: the buffer may be rewritten once that event completed.
struct Staging {
  void* host = nullptr;
  size_t bytes = 0;
  cudaEvent_t copied = nullptr;
  uint64_t last_use = 0;  // copy number of its last copy (the least recent busy one is waited for)
};

// The staging ring: up to kStagingSlots buffers, so that a copy rarely waits for earlier ones
// (a step's feeds are queued behind the previous step's kernels: with one buffer, the second
// feed would wait for that whole step). New buffers are added while the pinned total stays
// within kStagingBudget; past that, or with every slot busy, the least recently used one is
// waited for.
constexpr size_t kStagingSlots = 8;
constexpr size_t kStagingBudget = size_t{256} << 20;
constexpr size_t kStagingMinBytes = size_t{4} << 10;

// Everything tessera keeps per device. Created on first use and never destroyed: tensors held in
// static objects may be freed after main returns, when the CUDA runtime may be gone already.
struct DeviceState {
  cudaStream_t stream = nullptr;
  std::atomic<size_t> current{0}, peak{0};
  std::mutex staging_mutex;       // guards staging and staging_uses
  std::vector<Staging> staging;   // the ring, grown on demand
  uint64_t staging_uses = 0;
  // Bad indices recorded by kernels (index_errors.cuh), read back before every host wait.
  std::mutex index_errors_mutex;  // guards index_errors_host
  IndexErrorRecord* index_errors = nullptr;       // device memory
  IndexErrorRecord* index_errors_host = nullptr;  // pinned copy
};

std::array<std::atomic<DeviceState*>, kMaxDevices> g_devices{};
std::mutex g_init_mutex;

DeviceState& state(int device) {
  TS_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "cuda:" << device << " is not a valid device index");
  if (DeviceState* s = g_devices[device].load(std::memory_order_acquire)) return *s;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (DeviceState* s = g_devices[device].load(std::memory_order_acquire)) return *s;
  const int count = cuda_device_count();
  TS_CHECK(device < count, DeviceError,
           "cuda:" << device << " is not available (" << count << " GPU" << (count == 1 ? "" : "s") << " visible)");
  TS_CUDA_CHECK(cudaSetDevice(device));
  auto* s = new DeviceState();
  TS_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  s->staging.reserve(kStagingSlots);
  TS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s->index_errors), sizeof(IndexErrorRecord)));
  TS_CUDA_CHECK(cudaMemset(s->index_errors, 0, sizeof(IndexErrorRecord)));
  TS_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s->index_errors_host), sizeof(IndexErrorRecord),
                              cudaHostAllocDefault));
  *s->index_errors_host = IndexErrorRecord{};
  // Keep freed blocks in the pool (no release to the driver at synchronization points).
  cudaMemPool_t pool;
  TS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep_all = UINT64_MAX;
  TS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  g_devices[device].store(s, std::memory_order_release);
  return *s;
}

thread_local int t_current_device = -1;

void note_alloc(DeviceState& s, size_t n) {
  const size_t now = s.current.fetch_add(n, std::memory_order_relaxed) + n;
  size_t peak = s.peak.load(std::memory_order_relaxed);
  while (now > peak && !s.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Whether the last copy out of `st` has finished (never used: yes). Does not wait.
bool staging_idle(const Staging& st) {
  const cudaError_t e = cudaEventQuery(st.copied);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is no error: clear it so later launch checks do not see it
    return false;
  }
  TS_CUDA_CHECK(e);
  return true;
}

// A staging buffer of at least `nbytes` that no queued copy reads any more (s.staging_mutex held):
// the smallest idle one that is big enough; else a new one while the ring and the pinned budget
// allow; else the largest idle one, grown; else the least recently used one, once its copy finished.
Staging& staging_for(DeviceState& s, size_t nbytes) {
  Staging *fit = nullptr, *largest_idle = nullptr, *oldest = nullptr;
  size_t total = 0;
  for (Staging& st : s.staging) {
    total += st.bytes;
    if (!oldest || st.last_use < oldest->last_use) oldest = &st;
    if (!staging_idle(st)) continue;
    if (st.bytes >= nbytes && (!fit || st.bytes < fit->bytes)) fit = &st;
    if (!largest_idle || st.bytes > largest_idle->bytes) largest_idle = &st;
  }
  Staging* st = fit;
  if (!st && s.staging.size() < kStagingSlots && (s.staging.empty() || total + nbytes <= kStagingBudget)) {
    cudaEvent_t copied = nullptr;
    TS_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    s.staging.push_back(Staging{nullptr, 0, copied, 0});
    st = &s.staging.back();
  }
  if (!st) st = largest_idle;
  if (!st) {
    st = oldest;
    TS_CUDA_CHECK(cudaEventSynchronize(st->copied));
  }
  if (st->bytes < nbytes) {
    // Idle, so nothing reads the old buffer any more. Sizes are powers of two (fewer regrowths).
    if (st->host) TS_CUDA_CHECK(cudaFreeHost(st->host));
    st->host = nullptr;
    st->bytes = 0;
    size_t bytes = kStagingMinBytes;
    while (bytes < nbytes) bytes *= 2;
    TS_CUDA_CHECK(cudaHostAlloc(&st->host, bytes, cudaHostAllocDefault));
    st->bytes = bytes;
  }
  st->last_use = ++s.staging_uses;
  return *st;
}

// Waits for `device`'s stream, with the index-error record copied back first, and throws the
// ValueError of a recorded bad index (clearing the record). `op`: the op whose kernels were just
// queued (TESSERA_CUDA_SYNC=1), named when the wait itself fails.
void wait_and_check_indices(DeviceState& s, int device, const char* op = nullptr) {
  std::lock_guard<std::mutex> lock(s.index_errors_mutex);
  TS_CUDA_CHECK(cudaMemcpyAsync(s.index_errors_host, s.index_errors, sizeof(IndexErrorRecord), cudaMemcpyDeviceToHost,
                                s.stream));
  const cudaError_t e = cudaStreamSynchronize(s.stream);
  TS_CHECK(e == cudaSuccess, DeviceError,
           (op ? op : "cuda::synchronize") << ": CUDA error" << (op ? " after the op (TESSERA_CUDA_SYNC=1)" : "")
                                           << ": " << cudaGetErrorName(e) << ": " << cudaGetErrorString(e));
  const IndexErrorRecord r = *s.index_errors_host;
  if (r.site == 0) return;
  *s.index_errors_host = IndexErrorRecord{};
  TS_CUDA_CHECK(cudaMemsetAsync(s.index_errors, 0, sizeof(IndexErrorRecord), s.stream));
  TS_THROW(ValueError, reinterpret_cast<const char*>(static_cast<uintptr_t>(r.site))
                           << ": " << (r.what == kBadTarget ? "target" : "index") << " " << r.value
                           << " at position " << r.position << " is out of range [0, " << r.limit
                           << ") (found by the op's kernel on cuda:" << device
                           << " and reported at the next wait for the device; results that depend on it are NaN "
                              "or incomplete; with TESSERA_CUDA_SYNC=1 the op itself reports it)");
}

__global__ void iota_squared(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(i) * static_cast<float>(i);
}

}  // namespace

void set_device(int device) {
  if (t_current_device == device) return;
  state(device);
  TS_CUDA_CHECK(cudaSetDevice(device));
  t_current_device = device;
}

void* stream(int device) { return state(device).stream; }

void synchronize(int device) {
  set_device(device);
  wait_and_check_indices(state(device), device);
}

IndexErrorRecord* index_error_record(int device) { return state(device).index_errors; }

void mem_info(int device, size_t* free_bytes, size_t* total_bytes) {
  set_device(device);
  TS_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

void* allocate(size_t nbytes, int device) {
  DeviceState& s = state(device);
  if (nbytes == 0) return nullptr;
  set_device(device);
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, nbytes, s.stream);
  if (e == cudaErrorMemoryAllocation) {
    // Blocks freed on the stream but not yet returned may make room: wait for them, retry once.
    cudaGetLastError();
    cudaStreamSynchronize(s.stream);
    e = cudaMallocAsync(&p, nbytes, s.stream);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an allocation failure is not sticky: the process goes on
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    TS_THROW(OutOfMemoryError, "CUDA out of memory on cuda:" << device << ": asked for " << nbytes << " bytes ("
                                   << nbytes / kMiB << " MiB), " << free_b / kMiB << " MiB free of "
                                   << total_b / kMiB << " MiB; tessera holds " << s.current.load() / kMiB << " MiB");
  }
  TS_CUDA_CHECK(e);
  note_alloc(s, nbytes);
  return p;
}

void deallocate(void* ptr, size_t nbytes, int device) {
  if (!ptr) return;
  DeviceState* s = g_devices[device].load(std::memory_order_acquire);
  if (!s) return;
  // Called from destructors: never throws. After the runtime has shut down (static tensors
  // freed after main) the call fails harmlessly.
  if (cudaSetDevice(device) == cudaSuccess && cudaFreeAsync(ptr, s->stream) != cudaSuccess) cudaGetLastError();
  t_current_device = -1;
  s->current.fetch_sub(nbytes, std::memory_order_relaxed);
}

size_t current_bytes(int device) { return state(device).current.load(std::memory_order_relaxed); }
size_t peak_bytes(int device) { return state(device).peak.load(std::memory_order_relaxed); }
void reset_peak(int device) {
  DeviceState& s = state(device);
  s.peak.store(s.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
  } else if (dst_device.is_cuda() && src_device.is_cpu()) {
    // Through a pinned staging buffer of the ring: a true asynchronous copy, and the caller's host
    // memory is free to change once this returns. Each buffer is reused after its own last copy
    // finished, so back-to-back copies do not wait for the work queued before them.
    DeviceState& s = state(dst_device.index);
    set_device(dst_device.index);
    std::lock_guard<std::mutex> lock(s.staging_mutex);
    Staging& st = staging_for(s, nbytes);
    std::memcpy(st.host, src, nbytes);
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, st.host, nbytes, cudaMemcpyHostToDevice, s.stream));
    TS_CUDA_CHECK(cudaEventRecord(st.copied, s.stream));
  } else if (dst_device.is_cpu()) {
    DeviceState& s = state(src_device.index);
    set_device(src_device.index);
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s.stream));
    wait_and_check_indices(s, src_device.index);  // a host wait: bad indices found so far are reported here
  } else if (dst_device == src_device) {
    set_device(dst_device.index);
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, state(dst_device.index).stream));
  } else {
    synchronize(src_device.index);  // the source is complete before the other device reads it
    set_device(dst_device.index);
    TS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes,
                                      state(dst_device.index).stream));
  }
}

void zero(void* ptr, size_t nbytes, int device) {
  if (nbytes == 0) return;
  set_device(device);
  TS_CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, state(device).stream));
}

bool sync_each_op() {
  static const bool on = [] {
    const char* e = std::getenv("TESSERA_CUDA_SYNC");
    return e && std::strcmp(e, "0") != 0 && *e != '\0';
  }();
  return on;
}

void check_op(const char* op, int device) {
  TS_CUDA_LAUNCH_CHECK(op);
  if (!sync_each_op()) return;
  if (is_capturing(device)) return;  // a graph being recorded: nothing ran yet
  wait_and_check_indices(state(device), device, op);
}

bool is_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TS_CUDA_CHECK(cudaStreamIsCapturing(state(device).stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void begin_capture(int device) {
  set_device(device);
  // Thread-local mode: other threads' unrelated CUDA calls do not invalidate the capture.
  TS_CUDA_CHECK(cudaStreamBeginCapture(state(device).stream, cudaStreamCaptureModeThreadLocal));
}

std::shared_ptr<void> end_capture(int device) {
  set_device(device);
  cudaGraph_t graph = nullptr;
  TS_CUDA_CHECK(cudaStreamEndCapture(state(device).stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TS_CUDA_CHECK(e);
  return std::shared_ptr<void>(exec, [](void* p) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p)); });
}

void launch_graph(const std::shared_ptr<void>& graph, int device) {
  set_device(device);
  TS_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), state(device).stream));
  mark_progress(device);  // a watchdog's marker (core/cuda/progress.h), when one tracks this device
}

std::shared_ptr<void> record_event(int device) {
  set_device(device);
  TS_CHECK(!is_capturing(device), ValueError, "cuda::record_event: the stream of GPU " << device << " is being captured");
  cudaEvent_t e = nullptr;
  TS_CUDA_CHECK(cudaEventCreate(&e));
  std::shared_ptr<void> event(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  TS_CUDA_CHECK(cudaEventRecord(e, state(device).stream));
  return event;
}

double event_ms(const std::shared_ptr<void>& start, const std::shared_ptr<void>& stop) {
  TS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop.get())));
  float ms = 0.f;
  TS_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.get()), static_cast<cudaEvent_t>(stop.get())));
  return ms;
}

std::vector<float> smoke_test(int n) {
  TS_CHECK(cuda_available(), DeviceError, "smoke_test: no GPU visible");
  set_device(0);
  float* d = static_cast<float*>(allocate(sizeof(float) * n, 0));
  iota_squared<<<(n + 255) / 256, 256, 0, state(0).stream>>>(d, n);
  cudaError_t launch = cudaGetLastError();
  std::vector<float> h(n);
  if (launch == cudaSuccess) copy(h.data(), Device::cpu(), d, Device::cuda(0), sizeof(float) * n);
  deallocate(d, sizeof(float) * n, 0);
  TS_CHECK(launch == cudaSuccess, DeviceError, "smoke_test: kernel launch failed: " << cudaGetErrorString(launch));
  return h;
}

}  // namespace cuda
}  // namespace tessera
