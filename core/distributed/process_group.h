// The collectives of a data-parallel run, behind one interface with a backend per transport:
// MPI for CPU tensors (core/distributed/mpi_group.h, built when MPI is found), NCCL for CUDA
// tensors (core/distributed/nccl_group.h, CUDA builds). A run of one process uses
// single_process_group().
//
//   std::shared_ptr<dist::ProcessGroup> g = dist::mpi_process_group();   // under mpirun
//   g->all_reduce(t, dist::ReduceOp::average);   // t [..] the same on every rank afterwards
//
// Every rank must make the same calls in the same order with tensors of the same shape and
// dtype. all_reduce, broadcast and barrier return when this rank's part is done (NCCL: queued on
// the device's stream, in its order). A group is also a tessera::Collective (core/collective.h),
// the asynchronous all-reduce that the all_reduce op and GradientReducer use: on the CPU
// backends it runs at once, NCCL queues it on a stream of its own.
#pragma once

#include <memory>
#include <string>

#include "core/collective.h"
#include "core/tensor.h"

namespace tessera {
namespace dist {

enum class ReduceOp { sum, average };

class ProcessGroup : public Collective {
 public:
  virtual std::string backend() const = 0;
  /// Where the group's tensors live: the CPU (MPI, one process) or its GPU (NCCL).
  virtual Device device() const { return Device::cpu(); }
  /// t = the sum (or mean) of t over the ranks, in place; every rank gets the same bits. t
  /// contiguous; which dtypes and devices a backend takes is its own (an error names the rest).
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  /// t = root's t on every rank, in place.
  virtual void broadcast(Tensor& t, int root) = 0;
  /// Returns on each rank once every rank has called it.
  virtual void barrier() = 0;

  /// Collective: out = in (a copy unless the same buffer), then all_reduce(out), synchronously.
  /// Backends that can run it beside the device's stream (NCCL) override both.
  void start_all_reduce(const Tensor& in, const Tensor& out, bool average, int ticket) override;
  /// Collective: out = in, then each segment all-reduced (every rank gets it, the root included),
  /// synchronously. NCCL overrides it with grouped ncclReduce calls on its stream.
  void start_reduce(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments, bool average,
                    int ticket) override;
  /// Collective: out = in, then each segment broadcast from its root, synchronously. NCCL overrides
  /// it with grouped ncclBroadcast calls on its stream.
  void start_broadcast(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments, int ticket) override;
  void join(int ticket) override;
};

/// The group of this process alone: rank 0 of 1, every collective leaves its tensor as it is.
std::shared_ptr<ProcessGroup> single_process_group();

}  // namespace dist
}  // namespace tessera
