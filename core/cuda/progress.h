// Progress of a device's work, for watchdogs (the NCCL group's, core/distributed/nccl_group.cpp):
// markers (events) recorded after the work a program queues (every CUDA-graph launch, and what a
// caller marks, e.g. a collective on a stream of its own), and how long the device has gone
// without completing one while one is pending. A collective whose peer died never completes, and
// nothing queued behind it does either: the measure then grows until the watchdog acts.
//
//   cuda::track_progress(0, true);               // from now on graph launches on cuda:0 are marked
//   if (cuda::seconds_without_progress(0) > 600) ...   // another thread polls
//
// Marks are not recorded while the device's stream is being captured. In builds without CUDA
// these do nothing (and the measure is 0).
#pragma once

namespace tessera {
namespace cuda {

/// Starts (or stops) marking `device`'s work.
void track_progress(int device, bool on);
/// A marker after the work queued so far on `stream` (a cudaStream_t of `device`; null: the
/// device's own stream), when `device` is tracked and its stream is not being captured.
void mark_progress(int device, void* stream = nullptr);
/// Seconds since a marker of `device` last completed (or, if later, since the oldest pending one
/// was recorded), while a marker is pending; 0 when none is. Safe from any thread.
double seconds_without_progress(int device);

}  // namespace cuda
}  // namespace tessera
