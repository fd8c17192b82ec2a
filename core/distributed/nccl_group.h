// The NCCL process group (CUDA tensors), one process per GPU. Built in CUDA builds that find NCCL
// (the toolkit ships it); elsewhere nccl_process_group raises NotImplementedError.
//
// Start-up: rank 0 makes an NCCL unique id and the other ranks get it, either through a
// rendezvous file on a filesystem they share (below; for GPU nodes without MPI) or through MPI
// (tessera_mpi's nccl_process_group_over_mpi, core/distributed/mpi_group.h); then every rank
// joins the communicator on its GPU.
//
//   const dist::WorldInfo w = dist::detect_world();                  // RANK, WORLD_SIZE, LOCAL_RANK
//   auto g = dist::nccl_process_group(w, dist::rendezvous_file("/shared/run1.id", w), w.local_rank);
//
// all_reduce, broadcast and start_all_reduce take contiguous f32, f64, bf16 and f16 tensors on the
// group's GPU. start_all_reduce (core/collective.h) queues ncclAllReduce on the group's own stream
// behind an event on the device's stream, and join makes the device's stream wait for it: the
// reduction overlaps what the device does meanwhile, and inside a CUDA-graph capture the pair is
// a side branch of the graph. Every rank gets the same bits (NCCL's ring and tree all-reduces
// reduce each element once and then send that sum to every rank). all_reduce and broadcast run
// on the device's stream itself; barrier waits for the device.
//
// Timeouts (TESSERA_DIST_TIMEOUT_S seconds, default 600): the rendezvous and the joining of the
// communicator wait at most that long (past it, a rank that cannot read the file gets a ValueError,
// and a rank whose peers never join prints one line naming the wait and exits with status 3: NCCL's
// init cannot be interrupted). After start-up a watchdog thread of the group ends the process the
// same way when NCCL reports an asynchronous error, or when the GPU has completed none of its work
// markers (core/cuda/progress.h: every CUDA-graph launch and every collective started here) for that
// long while one is pending: a collective whose peer died never completes. A step that runs longer
// than the timeout on its own would be taken for a hang: raise TESSERA_DIST_TIMEOUT_S then.
#pragma once

#include <memory>
#include <string>

#include "core/distributed/process_group.h"
#include "core/distributed/rendezvous.h"
#include "core/distributed/world.h"

namespace tessera {
namespace dist {

/// A fresh NCCL unique id (rank 0 calls it). NotImplementedError without NCCL.
NcclId nccl_new_id();

/// The rendezvous through a file (rendezvous.h) with a fresh id made by rank 0.
NcclId rendezvous_file(const std::string& path, const WorldInfo& world);

/// Joins the communicator of `world` with id `id` on GPU `device` (made current for this thread).
/// `rendezvous` (the file the id came through, if any) is removed by rank 0 once every rank has
/// joined. NotImplementedError without NCCL; DeviceError for a device that does not exist.
std::shared_ptr<ProcessGroup> nccl_process_group(const WorldInfo& world, const NcclId& id, int device,
                                                 const std::string& rendezvous = {});

}  // namespace dist
}  // namespace tessera
