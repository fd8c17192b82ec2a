#include "core/engine/backward.h"

#include <unordered_map>
#include <unordered_set>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op.h"
#include "kernels/add/add.h"
#include "kernels/cast/cast.h"
#include "kernels/copy/copy.h"
#include "kernels/fill/fill.h"

namespace tessera {

namespace {

// Reverse topological order of the nodes reachable from `root` (consumers before producers).
// Iterative DFS: LSTMs unrolled over long sequences make graphs far deeper than the stack.
std::vector<Node*> reverse_topological(Node* root) {
  std::vector<Node*> postorder;
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next_edge] = stack.back();
    if (next_edge < node->next.size()) {
      Node* child = node->next[next_edge++].node.get();
      if (child && seen.insert(child).second) stack.push_back({child, 0});
    } else {
      postorder.push_back(node);
      stack.pop_back();
    }
  }
  return {postorder.rbegin(), postorder.rend()};
}

// grad += g into a leaf's .grad. The first gradient is copied so that no two leaves (or a
// leaf and a live intermediate) ever share one buffer; later ones are added in place.
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g) {
  if (g.is_symbolic()) {  // tracing a graph: values are immutable, so no copies and no in-place adds
    leaf.grad = leaf.grad ? add(Tensor(leaf.grad), g).impl_ptr() : g.impl_ptr();
    return;
  }
  if (!leaf.grad) {
    leaf.grad = copy(g).impl_ptr();
    return;
  }
  Tensor acc(leaf.grad);
  static const detail::OpInstanceT<op::Add> add_op({});
  detail::run_op_into(add_op, {acc, g}, {acc});
}

// slot += g; a bf16/f16 gradient meeting an f32 one (BackwardContext::input_grad_may_be_f32) is
// widened first, so the sum is f32.
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else if (slot.dtype() == g.dtype()) {
    slot = add(slot, g);
  } else {
    auto wide = [](const Tensor& t) { return t.dtype() == DType::f32 ? t : cast(t, DType::f32); };
    slot = add(wide(slot), wide(g));
  }
}

// The grad-ready hooks of one backward pass (TensorImpl::grad_ready_hooks): for each leaf with
// hooks, the edges into it from the pass's nodes; once the last of them is settled (its node ran
// or got no gradient), the leaf's gradient is final and its hooks run. Leaves without hooks cost
// one look at each edge.
class LeafHooks {
 public:
  explicit LeafHooks(const std::vector<Node*>& order) {
    for (Node* node : order)
      for (const Edge& e : node->next)
        if (e.leaf && !e.leaf->grad_ready_hooks.empty()) ++pending_[e.leaf.get()];
  }
  // Every edge of `node` is settled: its gradients (if any) were added.
  void settled(const Node& node) {
    if (pending_.empty()) return;
    for (const Edge& e : node.next) {
      if (!e.leaf) continue;
      auto it = pending_.find(e.leaf.get());
      if (it == pending_.end() || --it->second > 0) continue;
      pending_.erase(it);
      for (const auto& hook : e.leaf->grad_ready_hooks) hook();
    }
  }

 private:
  std::unordered_map<TensorImpl*, int> pending_;
};

// Whether `g`, the gradient that a backward rule returned for input i of `node`, is that input's
// meta, or the f32 form the rule may return (BackwardContext::input_grad_may_be_f32).
bool gradient_fits(const Tensor& g, const Node& node, size_t i, const BackwardContext& ctx) {
  const TensorMeta& want = node.input_metas[i];
  if (g.meta() == want) return true;
  return g.dtype() == DType::f32 && g.shape() == want.shape && g.device() == want.device &&
         ctx.input_grad_may_be_f32(static_cast<int>(i));
}

}  // namespace

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward(*this, grad, retain_graph); }

// Declared with the op machinery (core/op.h); the zeros it makes are the fill op's.
const Tensor& BackwardContext::grad_output(int i) const {
  TS_CHECK(i >= 0 && i < static_cast<int>(grad_outputs_.size()), ValueError,
           node_.op->name() << " backward: no output " << i);
  if (!grad_outputs_[i].defined()) grad_outputs_[i] = fill(node_.output_metas[i], 0.0);
  return grad_outputs_[i];
}

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  TS_CHECK(root.requires_grad(), ValueError,
           "backward(): tensor " << root.meta() << " does not require grad (no input of it has requires_grad)");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    TS_CHECK(root.numel() == 1, ShapeError,
             "backward(): a gradient can be implied only for a one-element output, got shape " << root.shape());
    grad = fill(root.meta(), 1.0);
  }
  TS_CHECK(grad.meta() == root.meta(), ShapeError,
           "backward(): gradient " << grad.meta() << " does not match output " << root.meta());

  NoGradGuard no_grad;  // backward rules build no graph of their own
  const autocast::Guard no_autocast(DType::f32);  // gradients in the dtypes the forward used
  TensorImpl* root_impl = root.impl();
  if (!root_impl->grad_fn) {
    accumulate_into_leaf(*root_impl, grad);
    for (const auto& hook : root_impl->grad_ready_hooks) hook();
    return;
  }

  std::unordered_map<Node*, std::vector<Tensor>> grads;  // per node: gradients of its outputs
  Node* root_node = root_impl->grad_fn.get();
  grads[root_node].resize(root_node->output_metas.size());
  grads[root_node][root_impl->output_nr] = grad;

  const std::vector<Node*> order = reverse_topological(root_node);
  LeafHooks hooks(order);
  for (Node* node : order) {
    auto it = grads.find(node);
    if (it == grads.end()) {  // no gradient reached this node
      hooks.settled(*node);
      continue;
    }
    std::vector<Tensor> gouts = std::move(it->second);
    grads.erase(it);
    gouts.resize(node->output_metas.size());
    TS_CHECK(!node->released, ValueError,
             "backward(): trying to go through " << node->op->name()
                 << " a second time, but its saved tensors were freed; call backward(grad, /*retain_graph=*/true) the first time");
    for (size_t i = 0; i < gouts.size(); ++i)
      if (auto out = node->outputs[i].lock(); out && out->retains_grad && gouts[i].defined())
        accumulate_into_leaf(*out, gouts[i]);

    const BackwardContext ctx(*node, gouts);
    std::vector<Tensor> gins = node->op->backward(ctx);
    TS_CHECK(gins.size() == node->next.size(), ValueError,
             node->op->name() << " backward returned " << gins.size() << " gradients for " << node->next.size() << " inputs");
    for (size_t i = 0; i < gins.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.defined() || !gins[i].defined()) continue;
      TS_CHECK(gradient_fits(gins[i], *node, i, ctx), ShapeError,
               node->op->name() << " backward: gradient of input " << i << " is " << gins[i].meta()
                                << ", expected " << node->input_metas[i]);
      if (e.node) {
        auto& slot = grads[e.node.get()];
        slot.resize(e.node->output_metas.size());
        accumulate(slot[e.output_nr], gins[i]);
      } else {
        accumulate_into_leaf(*e.leaf, gins[i]);
      }
    }
    hooks.settled(*node);
    if (!retain_graph) node->release_saved();
  }
}

}  // namespace tessera
