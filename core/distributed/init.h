// How a program's ranks meet: the process group of a data-parallel run from the launcher's
// environment (world.h) and a --dist-init value, or null for a process that runs alone. What the
// trainers' --dist-init does (examples/common/trainer.h), for programs of one's own.
//
//   dist::InitOptions o;
//   o.dist_init = "file:///shared/run1.id";     // or "mpi", or "" (mpirun's world, else alone)
//   o.cuda = true;                              // NCCL, one GPU per local rank; false: CPU ranks (MPI)
//   o = dist::with_mpi(o);                      // programs that link tessera_mpi (mpi_group.h)
//   std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(o);
//   task_options.group = group;  train_options.group = group;   // models/train: the rest is done
//
// The rules: a world of one rank and no dist_init is a run alone (null). "file:///path": the NCCL
// group through that rendezvous file (CUDA only; rank and size from the launcher's environment,
// which must have them). "mpi", or "" under mpirun: MPI's world (the CPU group, or NCCL with its id
// broadcast by MPI), which needs the MPI part (with_mpi). Every other case is one ValueError line
// saying what to give. A CUDA rank takes GPU local_rank (rank when the launcher gives none) modulo
// the node's GPUs.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/distributed/process_group.h"
#include "core/distributed/world.h"

namespace tessera {
namespace dist {

struct InitOptions {
  std::string dist_init;  ///< "", "mpi" or "file:///shared/path"
  bool cuda = false;      ///< GPU ranks (NCCL) instead of CPU ranks (MPI)
  /// The MPI part (set by with_mpi in tessera_mpi): the CPU group of MPI's world, and the NCCL
  /// group of MPI's world on a GPU with its id broadcast by MPI. Empty: no MPI in this program.
  std::function<std::shared_ptr<ProcessGroup>()> mpi_group;
  std::function<std::shared_ptr<ProcessGroup>(int device)> nccl_group_over_mpi;
};

/// The group (see above), or null for a run alone.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options);

/// The GPU of this process's rank: local_rank (else rank) modulo the node's GPUs.
int local_device(const WorldInfo& world);

}  // namespace dist
}  // namespace tessera
