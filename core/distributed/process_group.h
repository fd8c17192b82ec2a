// The collectives of a data-parallel run, behind one interface with a backend per transport:
// MPI for CPU tensors (core/distributed/mpi_group.h, built when MPI is found); NCCL for CUDA
// tensors is not built yet. A run of one process uses single_process_group().
//
//   std::shared_ptr<dist::ProcessGroup> g = dist::mpi_process_group();   // under mpirun
//   g->all_reduce(t, dist::ReduceOp::average);   // t [..] the same on every rank afterwards
//
// Every rank must make the same calls in the same order with tensors of the same shape and
// dtype; a call returns when this rank's part is done.
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"

namespace tessera {
namespace dist {

enum class ReduceOp { sum, average };

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  /// t = the sum (or mean) of t over the ranks, in place; every rank gets the same bits. t
  /// contiguous; which dtypes and devices a backend takes is its own (an error names the rest).
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  /// t = root's t on every rank, in place.
  virtual void broadcast(Tensor& t, int root) = 0;
  /// Returns on each rank once every rank has called it.
  virtual void barrier() = 0;
};

/// The group of this process alone: rank 0 of 1, every collective leaves its tensor as it is.
std::shared_ptr<ProcessGroup> single_process_group();

}  // namespace dist
}  // namespace tessera
