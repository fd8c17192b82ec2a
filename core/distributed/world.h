// Who this process is in a data-parallel run, read from its launcher's environment.
//
//   const dist::WorldInfo w = dist::detect_world();   // rank 1 of 4, local rank 1, "mpirun"
//
// Launchers, in the order they are looked for (the first whose rank or size variable is set):
//   mpirun (Open MPI)   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   env (torchrun-like, or set by hand)   RANK, WORLD_SIZE, LOCAL_RANK
//   slurm (srun)        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// and none of them: one process (rank 0 of 1). A launcher's rank and size come as a pair; its
// local rank (the process's index on its node, which picks its GPU) may be missing: -1, "not
// known" (a caller then takes rank % devices on one node).
#pragma once

#include <functional>
#include <string>

namespace tessera {
namespace dist {

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;            ///< -1 when the launcher did not say
  std::string launcher = "none"; ///< "mpirun", "env", "slurm" or "none"
};

/// The world from this process's environment (see above). A ValueError naming the variables for
/// a half-set group (a rank without a size or the reverse), a value that is not a whole number,
/// a size below 1, or a rank or local rank outside [0, size).
WorldInfo detect_world();

/// detect_world with `lookup` in place of std::getenv (null: the variable is not set).
WorldInfo detect_world(const std::function<const char*(const char*)>& lookup);

/// Seconds a rank waits for the others (a collective, a rendezvous) before it gives up:
/// TESSERA_DIST_TIMEOUT_S, default 600. ValueError naming the variable unless a positive number.
double timeout_seconds();

}  // namespace dist
}  // namespace tessera
