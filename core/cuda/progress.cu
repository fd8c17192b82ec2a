// Progress markers of a device's work (see progress.h).
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "core/cuda/progress.h"
#include "core/cuda/runtime.h"

namespace tessera {
namespace cuda {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxDevices = 64;
constexpr size_t kMaxPending = 256;  // enough to see a stall; more markers are not recorded

struct Marker {
  cudaEvent_t event = nullptr;
  Clock::time_point at;
};

struct Progress {
  std::atomic<bool> on{false};
  std::mutex m;                  // guards the rest
  std::vector<Marker> pending;   // in recording order
  std::vector<cudaEvent_t> spare;
  Clock::time_point last_done = Clock::now();
};

std::array<Progress, kMaxDevices> g_progress;

Progress* tracked(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_progress[device].on.load() ? &g_progress[device] : nullptr;
}

}  // namespace

void track_progress(int device, bool on) {
  if (device < 0 || device >= kMaxDevices) return;
  Progress& p = g_progress[device];
  std::lock_guard<std::mutex> lock(p.m);
  p.on = on;
  p.last_done = Clock::now();
}

void mark_progress(int device, void* stream) {
  Progress* p = tracked(device);
  if (!p || is_capturing(device)) return;
  cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : static_cast<cudaStream_t>(cuda::stream(device));
  std::lock_guard<std::mutex> lock(p->m);
  if (p->pending.size() >= kMaxPending) return;
  cudaEvent_t e = nullptr;
  if (!p->spare.empty()) {
    e = p->spare.back();
    p->spare.pop_back();
  } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    return;  // no marker this time: the measure only grows less
  }
  if (cudaEventRecord(e, s) != cudaSuccess) {
    p->spare.push_back(e);
    return;
  }
  p->pending.push_back({e, Clock::now()});
}

double seconds_without_progress(int device) {
  Progress* p = tracked(device);
  if (!p) return 0.0;
  std::lock_guard<std::mutex> lock(p->m);
  const Clock::time_point now = Clock::now();
  std::vector<Marker> still;
  for (const Marker& mk : p->pending) {
    if (cudaEventQuery(mk.event) == cudaSuccess) {
      p->last_done = now;
      p->spare.push_back(mk.event);
    } else {
      still.push_back(mk);
    }
  }
  p->pending.swap(still);
  if (p->pending.empty()) return 0.0;
  const Clock::time_point since = std::max(p->last_done, p->pending.front().at);
  return std::chrono::duration<double>(now - since).count();
}

}  // namespace cuda
}  // namespace tessera
