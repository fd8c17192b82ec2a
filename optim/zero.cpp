// ZeRO stage 1 (see zero.h).
#include "optim/zero.h"

#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "core/error.h"
#include "kernels/ops.h"
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
  first_ticket_ = group_->reserve_tickets(2 * static_cast<int>(buckets_.size()) + 1);
}

std::vector<ParamWrite> ZeroUpdater::update(size_t, const Tensor&, const Tensor&, const Tensor&) {
  TS_THROW(ValueError, "ZeroUpdater: a step updates every parameter together: call update_all (compiled steps do)");
}

namespace {

// Σ g² over the defined tensors of `grads` as a 0-d f64 tensor on `device` (0 when none is): one
// sum_squares per dtype, then f64 adds (as global_grad_norm, before its sqrt).
Tensor sum_of_squares(const std::vector<Tensor>& grads, Device device) {
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const std::vector<Tensor>& grp) { return grp[0].dtype() == g.dtype(); });
    if (it == groups.end()) groups.push_back({g});
    else it->push_back(g);
  }
  Tensor total;
  for (const std::vector<Tensor>& grp : groups) {
    const Tensor sq = sum_squares(grp);
    total = total.defined() ? add(total, sq) : sq;
  }
  return total.defined() ? total : fill(TensorMeta{Shape{}, DType::f64, device}, 0.0);
}

}  // namespace

std::vector<ParamWrite> ZeroUpdater::update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) {
  TS_CHECK(grads.size() == all_.size(), ValueError,
           "ZeroUpdater: " << grads.size() << " gradients for " << all_.size() << " parameters");
  const int rank = group_->rank();
  const int nb = static_cast<int>(buckets_.size());
  // Each bucket's parameters with a gradient this step (the same on every rank: one traced step),
  // as segments of its packed buffer with their owners.
  std::vector<std::vector<size_t>> members(buckets_.size());
  std::vector<std::vector<Collective::Segment>> segments(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t at = 0;
    for (size_t i : buckets_[b].params) {
      if (!grads[i].defined()) continue;  // no gradient: no update on any rank
      members[b].push_back(i);
      segments[b].push_back({at, grads[i].numel(), owners_[i]});
      at += grads[i].numel();
    }
  }
  auto pack = [](const std::vector<Tensor>& ts) {
    std::vector<Tensor> flat;
    for (const Tensor& t : ts) flat.push_back(reshape(t, {t.numel()}));
    return flat.size() == 1 ? flat[0] : concat(flat, 0);
  };
  // 1. each averaged gradient on its owner: segment_reduce (NCCL: ncclReduce to each owner)
  std::vector<Tensor> avg(all_.size());  // the owned parameters' averaged gradients
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (members[b].empty()) continue;
    std::vector<Tensor> gs;
    for (size_t i : members[b]) gs.push_back(grads[i]);
    const int ticket = first_ticket_ + static_cast<int>(b);
    Tensor r = segment_reduce(pack(gs), group_, segments[b], /*average=*/true, ticket);
    r = collective_wait(r, group_, ticket);  // after the last backward node (OpBase::kJoin)
    for (size_t k = 0; k < members[b].size(); ++k) {
      const size_t i = members[b][k];
      const Collective::Segment& g = segments[b][k];
      if (owners_[i] == rank) avg[i] = reshape(slice(r, 0, g.offset, g.offset + g.count), all_[i].shape());
    }
  }
  // 2. the clip factor from every rank's share of the squared norm (one rank: its own norm)
  Tensor factor;
  if (clip_norm_ > 0) {
    Tensor norm;
    if (group_->size() == 1) {
      norm = global_grad_norm(avg);
    } else {
      const int ticket = first_ticket_ + 2 * nb;
      Tensor sq = reshape(sum_of_squares(avg, group_->device()), {1});
      sq = collective_wait(all_reduce(sq, group_, /*average=*/false, ticket), group_, ticket);
      norm = sqrt(reshape(sq, std::vector<int64_t>{}));
    }
    report_grad_norm(norm, nullptr);  // ZeRO steps are compiled: the norm is the step's output
    factor = clip_factor(norm, clip_norm_);
  }
  // 3. the owned parameters' updates; their new values go out in step 4
  std::vector<ParamWrite> writes;
  std::vector<Tensor> value(all_.size());  // per parameter: its new value here (owned) or its current one
  for (size_t i = 0; i < all_.size(); ++i) {
    if (!grads[i].defined()) continue;
    if (inner_index_[i] < 0) {
      value[i] = all_[i];  // overwritten by the owner's value
      continue;
    }
    for (ParamWrite& w : inner_.update_scaled(static_cast<size_t>(inner_index_[i]), avg[i], lr, step, factor)) {
      if (w.target.same(all_[i])) {
        value[i] = w.value;
      } else {
        writes.push_back(std::move(w));  // the state
      }
    }
    TS_CHECK(value[i].defined(), ValueError, "ZeroUpdater: the optimizer's update does not write its parameter");
  }
  // 4. every new value on every rank: segment_broadcast from each owner (NCCL: ncclBroadcast)
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (members[b].empty()) continue;
    std::vector<Tensor> vs;
    for (size_t i : members[b]) vs.push_back(value[i]);
    const int ticket = first_ticket_ + nb + static_cast<int>(b);
    Tensor r = segment_broadcast(pack(vs), group_, segments[b], ticket);
    r = collective_wait(r, group_, ticket);
    for (size_t k = 0; k < members[b].size(); ++k) {
      const size_t i = members[b][k];
      const Collective::Segment& g = segments[b][k];
      writes.push_back({all_[i], reshape(slice(r, 0, g.offset, g.offset + g.count), all_[i].shape())});
    }
  }
  return writes;
}

int64_t ZeroUpdater::state_bytes() const {
  int64_t b = 0;
  for (const Tensor& t : inner_.state())
    if (t.defined()) b += static_cast<int64_t>(t.nbytes());
  return b;
}

int64_t ZeroUpdater::total_state_bytes() const {
  return static_cast<int64_t>(
      dist::all_reduce_values({static_cast<double>(state_bytes())}, *group_, dist::ReduceOp::sum)[0]);
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
