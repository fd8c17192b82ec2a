// The MPI process group (CPU tensors), in the library tessera_mpi, built when CMake finds MPI
// (TESSERA_MPI: AUTO, ON or OFF). Programs started by mpirun link it and call
// mpi_process_group() once; see process_group.h for the collectives.
//
//   auto g = dist::mpi_process_group();   // MPI_COMM_WORLD; MPI initialized here if needed
//
// all_reduce takes f32 and f64 CPU tensors and gives every rank the same bits: a reduction to rank
// 0 (MPI_Reduce, whose order is fixed for a given process count) followed by a broadcast of the
// result, rather than MPI_Allreduce, whose ranks may add in different orders. Each call waits at
// most `timeout_s` seconds (TESSERA_DIST_TIMEOUT_S, default 600) for the other ranks; past that
// it prints one line naming the call and aborts every rank (MPI_Abort), so a rank that died or
// never came does not leave the others hanging.
#pragma once

#include <memory>

#include "core/distributed/init.h"
#include "core/distributed/process_group.h"

namespace tessera {
namespace dist {

/// The group over MPI_COMM_WORLD. Initializes MPI (MPI_Init_thread, funneled) unless the program
/// did, and finalizes it at exit in that case. A ValueError when the launcher's environment
/// (detect_world) gives another rank or size than MPI.
std::shared_ptr<ProcessGroup> mpi_process_group();

/// The NCCL group (nccl_group.h) of the MPI world, on GPU `device`: rank 0's NCCL id reaches the
/// other ranks by MPI broadcast (no rendezvous file). For programs under mpirun that train on GPUs.
std::shared_ptr<ProcessGroup> nccl_process_group_over_mpi(int device);

/// `options` with the MPI part of init_process_group (init.h) filled in: mpi_process_group and
/// nccl_process_group_over_mpi.
InitOptions with_mpi(InitOptions options);

}  // namespace dist
}  // namespace tessera
