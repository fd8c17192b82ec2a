// A program's process group from its launcher and --dist-init (see init.h).
#include "core/distributed/init.h"

#include "core/device.h"
#include "core/distributed/nccl_group.h"
#include "core/distributed/world.h"
#include "core/error.h"

namespace tessera {
namespace dist {

int local_device(const WorldInfo& w) {
  const int gpus = cuda_device_count();
  return gpus > 0 ? (w.local_rank >= 0 ? w.local_rank : w.rank) % gpus : 0;
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& o) {
  const WorldInfo w = detect_world();
  if (w.size == 1 && o.dist_init.empty()) return nullptr;
  const bool mpi = o.dist_init == "mpi" || (o.dist_init.empty() && w.launcher == "mpirun");
  if (!mpi) {
    TS_CHECK(!o.dist_init.empty(), ValueError,
             "the " << w.launcher << " environment starts " << w.size << " ranks: give --dist-init file:///shared/path "
                    << "(a rendezvous file every rank sees), or start the ranks with mpirun");
    const std::string path = rendezvous_path(o.dist_init);
    TS_CHECK(o.cuda, ValueError,
             "--dist-init " << o.dist_init << " starts an NCCL group (GPUs); CPU ranks meet through MPI (mpirun)");
    TS_CHECK(w.launcher != "none", ValueError,
             "--dist-init " << o.dist_init << ": no rank and world size in the environment (set RANK, WORLD_SIZE and "
                            << "LOCAL_RANK, or run under Slurm or mpirun)");
    return nccl_process_group(w, rendezvous_file(path, w), local_device(w), path);
  }
  TS_CHECK(o.mpi_group && o.nccl_group_over_mpi, ValueError,
           "this program has no MPI (it does not link tessera_mpi, or MPI was not found when it was built): "
               << (o.cuda ? "give --dist-init file:///shared/path" : "CPU ranks need MPI"));
  return o.cuda ? o.nccl_group_over_mpi(local_device(w)) : o.mpi_group();
}

}  // namespace dist
}  // namespace tessera
