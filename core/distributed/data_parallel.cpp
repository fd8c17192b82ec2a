// Gradient buckets and their average over the ranks (see data_parallel.h).
#include "core/distributed/data_parallel.h"

#include <cstring>

#include "core/autograd.h"
#include "core/error.h"
#include "kernels/all_reduce/all_reduce.h"
#include "kernels/collective_wait/collective_wait.h"
#include "kernels/concat/concat.h"
#include "kernels/copy/copy.h"
#include "kernels/reshape/reshape.h"
#include "kernels/slice/slice.h"

namespace tessera {
namespace dist {

std::vector<GradientBucket> plan_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes, int64_t first_bytes) {
  TS_CHECK(bucket_bytes >= 1 && first_bytes >= 1, ValueError,
           "plan_buckets: byte limits " << first_bytes << " and " << bucket_bytes << " must be positive");
  std::vector<GradientBucket> buckets;
  int64_t bytes = 0;  // in the open bucket (the last of `buckets`)
  for (size_t i = params.size(); i-- > 0;) {
    const Tensor& p = params[i];
    TS_CHECK(p.defined(), ValueError, "plan_buckets: parameter " << i << " is undefined");
    const int64_t size = static_cast<int64_t>(p.nbytes());
    const int64_t limit = buckets.size() == 1 ? first_bytes : bucket_bytes;  // of the open bucket
    const bool fits = !buckets.empty() && buckets.back().dtype == p.dtype() && bytes + size <= limit;
    if (!fits) {
      buckets.push_back(GradientBucket{});
      buckets.back().dtype = p.dtype();
      bytes = 0;
    }
    buckets.back().params.push_back(i);
    buckets.back().elements += p.numel();
    bytes += size;
  }
  return buckets;
}

namespace {

/// The bucket's gradients flattened one after another (one [elements] tensor); each must exist,
/// of the bucket's dtype, on one device.
Tensor pack_bucket(const std::vector<Tensor>& params, const GradientBucket& b, const char* who) {
  std::vector<Tensor> flat;
  for (size_t i : b.params) {
    TS_CHECK(i < params.size(), ValueError, who << ": a bucket names parameter " << i << " of " << params.size());
    const Tensor g = params[i].grad();
    TS_CHECK(g.defined(), ValueError,
             who << ": parameter " << i << " " << params[i].shape() << " has no gradient (every rank must reduce the same tensors)");
    TS_CHECK(g.dtype() == b.dtype, ValueError,
             who << ": parameter " << i << "'s gradient is " << g.dtype() << "; its bucket holds " << b.dtype);
    TS_CHECK(flat.empty() || g.device() == flat[0].device(), DeviceError,
             who << ": parameter " << i << "'s gradient is on " << g.device() << ", the bucket's first on " << flat[0].device());
    flat.push_back(reshape(g, {g.numel()}));
  }
  return flat.size() == 1 ? flat[0] : concat(flat, 0);
}

/// Copies the reduced bucket back into its gradients.
void unpack_bucket(const std::vector<Tensor>& params, const GradientBucket& b, const Tensor& reduced) {
  int64_t at = 0;
  for (size_t i : b.params) {
    const Tensor g = params[i].grad();
    copy_into(reshape(slice(reduced, 0, at, at + g.numel()), g.shape()), g);
    at += g.numel();
  }
}

}  // namespace

void average_gradients(const std::vector<Tensor>& params, const std::vector<GradientBucket>& buckets,
                       ProcessGroup& group) {
  if (group.size() == 1) return;
  for (const GradientBucket& b : buckets) {
    if (b.params.empty()) continue;
    Tensor buffer = copy(pack_bucket(params, b, "average_gradients"));
    group.all_reduce(buffer, ReduceOp::average);
    unpack_bucket(params, b, buffer);
  }
}

GradientReducer::GradientReducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                 int64_t bucket_bytes, int64_t first_bytes)
    : params_(std::move(params)), group_(std::move(group)) {
  TS_CHECK(group_ != nullptr, ValueError, "GradientReducer: no process group");
  buckets_ = plan_buckets(params_, bucket_bytes, first_bytes);
  first_ticket_ = group_->reserve_tickets(static_cast<int>(buckets_.size()));
  waiting_.resize(buckets_.size());
  in_flight_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    waiting_[b] = static_cast<int>(buckets_[b].params.size());
    for (size_t i : buckets_[b].params) params_[i].add_grad_ready_hook([this, b] { ready(b); });
  }
}

GradientReducer::~GradientReducer() {
  for (Tensor& p : params_) p.clear_grad_ready_hooks();
  try {
    join_all();  // nothing may stay in flight on the group's stream
  } catch (...) {
  }
}

void GradientReducer::ready(size_t bucket) {
  if (--waiting_[bucket] != 0 || !enabled_) return;
  NoGradGuard no_grad;
  in_flight_[bucket] = all_reduce(pack_bucket(params_, buckets_[bucket], "GradientReducer"), group_, /*average=*/true,
                                  first_ticket_ + static_cast<int>(bucket));
  reduced_.push_back(bucket);
}

void GradientReducer::join_all() {
  NoGradGuard no_grad;
  for (size_t b : reduced_) {
    if (!in_flight_[b].defined()) continue;
    const Tensor r = collective_wait(in_flight_[b], group_, first_ticket_ + static_cast<int>(b));
    in_flight_[b] = Tensor();
    unpack_bucket(params_, buckets_[b], r);
  }
}

void GradientReducer::finish() {
  const bool was_enabled = enabled_;
  size_t missing = buckets_.size();
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (waiting_[b] > 0 && missing == buckets_.size()) missing = b;
  for (size_t b = 0; b < buckets_.size(); ++b) waiting_[b] = static_cast<int>(buckets_[b].params.size());
  join_all();
  reduced_.clear();
  TS_CHECK(!was_enabled || missing == buckets_.size(), ValueError,
           "GradientReducer: bucket " << missing << " (parameter " << buckets_[missing].params.front()
                                      << " first) was not reduced: this backward never made its gradients final");
}

DataParallelUpdater::DataParallelUpdater(ParamUpdater& inner, std::shared_ptr<ProcessGroup> group, int64_t bucket_bytes,
                                         int64_t first_bytes)
    : inner_(inner), group_(std::move(group)) {
  TS_CHECK(group_ != nullptr, ValueError, "DataParallelUpdater: no process group");
  buckets_ = plan_buckets(inner_.params(), bucket_bytes, first_bytes);
  first_ticket_ = group_->reserve_tickets(static_cast<int>(buckets_.size()));
}

std::vector<ParamWrite> DataParallelUpdater::update(size_t, const Tensor&, const Tensor&, const Tensor&) {
  TS_THROW(ValueError, "DataParallelUpdater: gradients are averaged by bucket: call update_all (compiled steps do)");
}

std::vector<Tensor> reduce_in_step(const std::vector<Tensor>& tensors, const std::vector<GradientBucket>& buckets,
                                   const std::shared_ptr<ProcessGroup>& group, int first_ticket, bool average) {
  std::vector<Tensor> reduced(tensors.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    // The bucket's tensors that this step has (a parameter the loss does not reach has no
    // gradient, on every rank alike: the same traced step).
    std::vector<size_t> members;
    std::vector<Tensor> flat;
    for (size_t i : buckets[b].params) {
      TS_CHECK(i < tensors.size(), ValueError, "reduce_in_step: a bucket names tensor " << i << " of " << tensors.size());
      if (!tensors[i].defined()) continue;
      TS_CHECK(tensors[i].dtype() == buckets[b].dtype, ValueError,
               "reduce_in_step: tensor " << i << " is " << tensors[i].dtype() << ", its bucket holds " << buckets[b].dtype);
      members.push_back(i);
      flat.push_back(reshape(tensors[i], {tensors[i].numel()}));
    }
    if (members.empty()) continue;
    const int ticket = first_ticket + static_cast<int>(b);
    Tensor r = all_reduce(flat.size() == 1 ? flat[0] : concat(flat, 0), group, average, ticket);
    r = collective_wait(r, group, ticket);  // placed after the last backward node (OpBase::kJoin)
    int64_t at = 0;
    for (size_t i : members) {
      reduced[i] = reshape(slice(r, 0, at, at + tensors[i].numel()), tensors[i].shape());
      at += tensors[i].numel();
    }
  }
  return reduced;
}

std::vector<ParamWrite> DataParallelUpdater::update_all(const std::vector<Tensor>& grads, const Tensor& lr,
                                                        const Tensor& step) {
  TS_CHECK(grads.size() == inner_.params().size(), ValueError,
           "DataParallelUpdater: " << grads.size() << " gradients for " << inner_.params().size() << " parameters");
  return inner_.update_all(reduce_in_step(grads, buckets_, group_, first_ticket_, /*average=*/true), lr, step);
}

std::vector<double> all_reduce_values(std::vector<double> values, ProcessGroup& group, ReduceOp op) {
  if (values.empty()) return values;
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor t = from_vector<double>(values, {n}).to(group.device());
  group.all_reduce(t, op);
  return t.to(Device::cpu()).to_vector<double>();
}

void broadcast_parameters(const std::vector<Tensor>& params, ProcessGroup& group) {
  for (size_t i = 0; i < params.size(); ++i) {
    TS_CHECK(params[i].defined(), ValueError, "broadcast_parameters: parameter " << i << " is undefined");
    Tensor p = params[i];  // the same storage: the broadcast writes the parameter itself
    group.broadcast(p, 0);
  }
}

void check_parameters_equal(const std::vector<Tensor>& params, ProcessGroup& group) {
  for (size_t i = 0; i < params.size(); ++i) {
    TS_CHECK(params[i].defined(), ValueError, "check_parameters_equal: parameter " << i << " is undefined");
    Tensor root = params[i].clone().detach();
    group.broadcast(root, 0);
    const Tensor mine_host = params[i].to(Device::cpu()), root_host = root.to(Device::cpu());
    const bool same = std::memcmp(root_host.data_ptr(), mine_host.data_ptr(), mine_host.nbytes()) == 0;
    // every rank learns how many differ, so that all of them raise (and none waits in the next call)
    const int count = static_cast<int>(all_reduce_values({same ? 0.0 : 1.0}, group, ReduceOp::sum)[0]);
    TS_CHECK(count == 0, ValueError,
             "check_parameters_equal: parameter " << i << " " << params[i].shape() << " differs from rank 0's on "
                                                  << count << " rank(s)" << (same ? "" : ", this one among them"));
  }
}

}  // namespace dist
}  // namespace tessera
