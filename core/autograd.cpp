// Grad mode and the nodes ops record (core's base: no op runs here). The backward pass that
// walks the nodes runs ops and lives above them, in core/engine/backward.cpp.
#include "core/autograd.h"

namespace tessera {

namespace {
thread_local bool g_grad_enabled = true;
}  // namespace

bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool enabled) { g_grad_enabled = enabled; }

Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack;
  for (Edge& e : next)
    if (e.node) stack.push_back(std::move(e.node));
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    // Last owner: take over its producers before it dies, so its destructor has nothing to recurse into.
    if (n.use_count() == 1)
      for (Edge& e : n->next)
        if (e.node) stack.push_back(std::move(e.node));
  }
}

void Node::release_saved() {
  // Only a node that saved something loses what backward needs; others can be revisited.
  for (Tensor& t : saved_inputs) released |= t.defined(), t = Tensor();
  for (Tensor& t : saved_outputs) released |= t.defined(), t = Tensor();
}

}  // namespace tessera
