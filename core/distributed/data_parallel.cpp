// Gradient buckets and their average over the ranks (see data_parallel.h).
#include "core/distributed/data_parallel.h"

#include <cstring>

#include "core/error.h"

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

void average_gradients(const std::vector<Tensor>& params, const std::vector<GradientBucket>& buckets,
                       ProcessGroup& group) {
  if (group.size() == 1) return;
  for (const GradientBucket& b : buckets) {
    const size_t e = dtype_size(b.dtype);
    // Pack: the bucket's gradients one after another, in the bucket's order.
    Tensor buffer;
    int64_t at = 0;
    for (size_t i : b.params) {
      TS_CHECK(i < params.size(), ValueError,
               "average_gradients: a bucket names parameter " << i << " of " << params.size());
      const Tensor g = params[i].grad();
      TS_CHECK(g.defined(), ValueError,
               "average_gradients: parameter " << i << " " << params[i].shape()
                                               << " has no gradient (every rank must reduce the same tensors)");
      TS_CHECK(g.dtype() == b.dtype && g.device().is_cpu(), ValueError,
               "average_gradients: parameter " << i << "'s gradient is " << g.dtype() << " on " << g.device()
                                               << "; the bucket holds " << b.dtype << " on the CPU");
      if (!buffer.defined()) buffer = empty({b.elements}, TensorOptions(b.dtype));
      std::memcpy(static_cast<char*>(buffer.data_ptr()) + at * e, g.data_ptr(), g.nbytes());
      at += g.numel();
    }
    if (!buffer.defined()) continue;
    group.all_reduce(buffer, ReduceOp::average);
    at = 0;
    for (size_t i : b.params) {
      const Tensor g = params[i].grad();
      std::memcpy(g.data_ptr(), static_cast<const char*>(buffer.data_ptr()) + at * e, g.nbytes());
      at += g.numel();
    }
  }
}

GradientReducer::GradientReducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                 int64_t bucket_bytes, int64_t first_bytes)
    : params_(std::move(params)), group_(std::move(group)) {
  TS_CHECK(group_ != nullptr, ValueError, "GradientReducer: no process group");
  buckets_ = plan_buckets(params_, bucket_bytes, first_bytes);
  waiting_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    waiting_[b] = static_cast<int>(buckets_[b].params.size());
    for (size_t i : buckets_[b].params) params_[i].add_grad_ready_hook([this, b] { ready(b); });
  }
}

GradientReducer::~GradientReducer() {
  for (Tensor& p : params_) p.clear_grad_ready_hooks();
}

void GradientReducer::ready(size_t bucket) {
  if (--waiting_[bucket] != 0 || !enabled_) return;
  average_gradients(params_, {buckets_[bucket]}, *group_);
  reduced_.push_back(bucket);
}

void GradientReducer::finish() {
  const bool was_enabled = enabled_;
  size_t missing = buckets_.size();
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (waiting_[b] > 0 && missing == buckets_.size()) missing = b;
  for (size_t b = 0; b < buckets_.size(); ++b) waiting_[b] = static_cast<int>(buckets_[b].params.size());
  reduced_.clear();
  TS_CHECK(!was_enabled || missing == buckets_.size(), ValueError,
           "GradientReducer: bucket " << missing << " (parameter " << buckets_[missing].params.front()
                                      << " first) was not reduced: this backward never made its gradients final");
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
    const bool same = std::memcmp(root.data_ptr(), params[i].data_ptr(), params[i].nbytes()) == 0;
    // every rank learns how many differ, so that all of them raise (and none waits in the next call)
    Tensor differing = from_vector<double>({same ? 0.0 : 1.0}, {1});
    group.all_reduce(differing, ReduceOp::sum);
    const int count = static_cast<int>(differing.item<double>());
    TS_CHECK(count == 0, ValueError,
             "check_parameters_equal: parameter " << i << " " << params[i].shape() << " differs from rank 0's on "
                                                  << count << " rank(s)" << (same ? "" : ", this one among them"));
  }
}

}  // namespace dist
}  // namespace tessera
