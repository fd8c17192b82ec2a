// ZeRO stage 1 (see zero.h).
#include "optim/zero.h"

#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "core/error.h"
#include "kernels/fill/fill.h"
#include "optim/clip_grad.h"

namespace tessera {
namespace optim {

std::vector<int> shard_owners(const std::vector<Tensor>& params, int world) {
  TS_CHECK(world >= 1, ValueError, "shard_owners: world size " << world);
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].nbytes() > params[b].nbytes(); });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  std::vector<int> owners(params.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[i] = r;
    load[static_cast<size_t>(r)] += static_cast<int64_t>(params[i].nbytes());
  }
  return owners;
}

std::vector<Tensor> owned(const std::vector<Tensor>& params, const std::vector<int>& owners, int rank) {
  TS_CHECK(owners.size() == params.size(), ValueError,
           "owned: " << owners.size() << " owners for " << params.size() << " parameters");
  std::vector<Tensor> mine;
  for (size_t i = 0; i < params.size(); ++i)
    if (owners[i] == rank) mine.push_back(params[i]);
  return mine;
}

ZeroUpdater::ZeroUpdater(Optimizer& inner, std::vector<graph::NamedParam> params,
                         std::shared_ptr<dist::ProcessGroup> group, double clip_norm, int64_t bucket_bytes,
                         int64_t first_bytes)
    : inner_(inner), named_(std::move(params)), group_(std::move(group)), clip_norm_(clip_norm) {
  TS_CHECK(group_ != nullptr, ValueError, "ZeroUpdater: no process group");
  TS_CHECK(clip_norm_ >= 0, ValueError, "ZeroUpdater: clip_norm " << clip_norm_ << " is negative");
  const std::string type = inner_.name();
  TS_CHECK(type == "adam" || type == "adamw" || type == "sgd", ValueError,
           "ZeroUpdater: ZeRO-1 shards Adam, AdamW and SGD (states of their parameter's shape), not " << type);
  TS_CHECK(inner_.clip_norm() == 0, ValueError,
           "ZeroUpdater: clipping needs every gradient: give the clip norm to ZeroUpdater, not to the optimizer");
  for (const graph::NamedParam& p : named_) all_.push_back(p.tensor);
  owners_ = shard_owners(all_, group_->size());
  const std::vector<Tensor> mine = owned(all_, owners_, group_->rank());
  const std::vector<Tensor>& theirs = inner_.params();
  bool same = mine.size() == theirs.size();
  for (size_t k = 0; same && k < mine.size(); ++k) same = mine[k].same(theirs[k]);
  TS_CHECK(same, ValueError,
           "ZeroUpdater: the optimizer must hold exactly this rank's parameters (optim::owned(params, "
           "shard_owners(params, world), rank), in order): it holds "
               << theirs.size() << ", rank " << group_->rank() << " owns " << mine.size());
  inner_index_.assign(all_.size(), -1);
  for (size_t i = 0, k = 0; i < all_.size(); ++i)
    if (owners_[i] == group_->rank()) inner_index_[i] = static_cast<int>(k++);
  buckets_ = dist::plan_buckets(all_, bucket_bytes, first_bytes);
  first_ticket_ = group_->reserve_tickets(2 * static_cast<int>(buckets_.size()));
}

std::vector<ParamWrite> ZeroUpdater::update(size_t, const Tensor&, const Tensor&, const Tensor&) {
  TS_THROW(ValueError, "ZeroUpdater: a step updates every parameter together: call update_all (compiled steps do)");
}

std::vector<ParamWrite> ZeroUpdater::update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) {
  TS_CHECK(grads.size() == all_.size(), ValueError,
           "ZeroUpdater: " << grads.size() << " gradients for " << all_.size() << " parameters");
  // 1-2. the averaged gradients and the clip factor over all of them (every rank alike)
  const std::vector<Tensor> avg = dist::reduce_in_step(grads, buckets_, group_, first_ticket_, /*average=*/true);
  const bool any = std::any_of(avg.begin(), avg.end(), [](const Tensor& g) { return g.defined(); });
  const Tensor factor = clip_norm_ > 0 && any ? clip_factor(global_grad_norm(avg), clip_norm_) : Tensor();
  // 3. the owned parameters' updates; their new values are kept for step 4
  std::vector<ParamWrite> writes;
  std::vector<Tensor> contribution(all_.size());  // per parameter: its new value here, or zeros
  for (size_t i = 0; i < all_.size(); ++i) {
    if (!avg[i].defined()) continue;  // no gradient: no update on any rank
    if (inner_index_[i] < 0) {
      contribution[i] = fill(all_[i].meta(), 0.0);
      continue;
    }
    for (ParamWrite& w : inner_.update_scaled(static_cast<size_t>(inner_index_[i]), avg[i], lr, step, factor)) {
      if (w.target.same(all_[i])) {
        contribution[i] = w.value;
      } else {
        writes.push_back(std::move(w));  // the state
      }
    }
    TS_CHECK(contribution[i].defined(), ValueError, "ZeroUpdater: the optimizer's update does not write its parameter");
  }
  // 4. every new value on every rank: the sum of the owner's value and the others' zeros
  const std::vector<Tensor> gathered = dist::reduce_in_step(contribution, buckets_, group_,
                                                            first_ticket_ + static_cast<int>(buckets_.size()),
                                                            /*average=*/false);
  for (size_t i = 0; i < all_.size(); ++i)
    if (gathered[i].defined()) writes.push_back({all_[i], gathered[i]});
  return writes;
}

int64_t ZeroUpdater::state_bytes() const {
  int64_t b = 0;
  for (const Tensor& t : inner_.state())
    if (t.defined()) b += static_cast<int64_t>(t.nbytes());
  return b;
}

int64_t ZeroUpdater::total_state_bytes() const {
  Tensor t = from_vector<double>({static_cast<double>(state_bytes())}, {1}).to(group_->device());
  group_->all_reduce(t, dist::ReduceOp::sum);
  return static_cast<int64_t>(t.to(Device::cpu()).item<double>());
}

void ZeroUpdater::gather_state(io::OptimizerState& opt) const {
  NoGradGuard no_grad;
  const std::vector<std::string> names = inner_.state_names();
  const std::vector<Tensor> mine = inner_.state();
  const size_t n_owned = inner_.params().size();
  for (size_t i = 0; i < all_.size(); ++i) {
    for (size_t k = 0; k < names.size(); ++k) {
      // the owner's state tensor, the others' zeros: their sum is the owner's on every rank
      Tensor t;
      if (inner_index_[i] >= 0) {
        const Tensor& s = mine[k * n_owned + static_cast<size_t>(inner_index_[i])];
        if (s.defined()) t = s.clone().detach();
      }
      // a state the owner has not made yet (SGD's momentum before the first step) is zeros
      if (!t.defined()) t = zeros(all_[i].shape(), TensorOptions(all_[i].dtype()).device(all_[i].device()));
      Tensor on_group = t.to(group_->device());
      group_->all_reduce(on_group, dist::ReduceOp::sum);
      if (group_->rank() == 0) opt.state[named_[i].name][names[k]] = on_group.to(all_[i].device());
    }
  }
}

void ZeroUpdater::keep_owned(io::OptimizerState& opt) const {
  for (size_t i = 0; i < all_.size(); ++i)
    if (inner_index_[i] < 0) opt.state.erase(named_[i].name);
}

}  // namespace optim
}  // namespace tessera
