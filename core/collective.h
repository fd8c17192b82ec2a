// What the collective ops (kernels/all_reduce, kernels/collective_wait) need from a process
// group: a reduction that may run asynchronously, and a join. dist::ProcessGroup
// (core/distributed/process_group.h) implements it for each transport: MPI (CPU tensors), NCCL
// (CUDA tensors), and the group of one process.
//
// On CUDA an all-reduce is queued on the group's own stream, after the work queued so far on the
// device's stream (an event between them), so that it overlaps what the device's stream does
// next; join(ticket) makes the device's stream wait for it (another event). Inside a CUDA-graph
// capture the two events become the fork and the join of a side branch of the graph. On the CPU
// the reduction is done when start_all_reduce returns and join does nothing.
//
// Tickets name the reductions in flight: each user (a gradient reducer, a compiled step) reserves
// its own range once and uses ticket t for one reduction at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// out = the sum (average) over the ranks of `in`, same meta, contiguous; `out` may be `in`
  /// itself. `in` is read before this returns (in the order of the device's stream); `out` must
  /// stay alive and unread until join(ticket). Every rank makes the same calls in the same order.
  virtual void start_all_reduce(const Tensor& in, const Tensor& out, bool average, int ticket) = 0;
  /// The device's stream waits for reduction `ticket` (nothing to do on the CPU); the group lets
  /// go of the tensors it held for it.
  virtual void join(int ticket) = 0;
  /// A part of a flat buffer and the rank it goes to (reduce) or comes from (broadcast).
  struct Segment {
    int64_t offset = 0;  ///< in elements
    int64_t count = 0;
    int root = 0;
  };
  /// For each segment: out[segment] on rank segment.root = the sum (average) over the ranks of
  /// in[segment]; elsewhere out is unspecified. Started and joined like start_all_reduce (ZeRO-1's
  /// gradients to their owners).
  virtual void start_reduce(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments, bool average,
                            int ticket) = 0;
  /// For each segment: out[segment] = rank segment.root's in[segment], on every rank. Started and
  /// joined like start_all_reduce (ZeRO-1's parameters from their owners).
  virtual void start_broadcast(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments,
                               int ticket) = 0;
  /// `count` consecutive tickets no other user of this group takes; returns the first.
  int reserve_tickets(int count);

 private:
  int next_ticket_ = 0;
};

}  // namespace tessera
