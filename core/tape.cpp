#include "tape.hpp"

#include "debug.hpp"

#include <algorithm>
#include <stdexcept>

namespace tg {

Tape& Tape::current() {
  static thread_local Tape tape;
  return tape;
}

void Tape::append(const std::shared_ptr<Node>& node) {
  node->index = next_index_++;
  slots_.push_back({node->index, node});
  // Amortised clean-up: the tape never holds more than about twice its live
  // entries, however many forward passes run without a backward().
  if (slots_.size() >= prune_at_) prune();
}

void Tape::prune() {
  std::erase_if(slots_, [](const Slot& s) {
    auto n = s.node.lock();
    return !n || n->released;
  });
  prune_at_ = std::max<std::size_t>(64, 2 * slots_.size());
}

std::vector<std::shared_ptr<Node>> Tape::live_entries() {
  prune();
  std::vector<std::shared_ptr<Node>> out;
  for (const Slot& s : slots_) out.push_back(s.node.lock());
  return out;
}

Tensor record(std::string op, Array value, std::vector<Tensor> inputs, BackwardFn backward) {
  const bool recorded = is_grad_enabled() && std::any_of(inputs.begin(), inputs.end(),
                                                         [](const Tensor& t) { return t.requires_grad(); });
  if (debug::anomaly_enabled()) debug::check_forward(op, value, Tape::current().next_index_, recorded);
  Tensor out(std::move(value));
  if (!recorded) return out;

  auto node = std::make_shared<Node>();
  node->op = std::move(op);
  node->inputs = std::move(inputs);
  node->output = out.impl();
  node->output_shape = out.shape();
  node->backward = std::move(backward);
  out.impl()->requires_grad = true;
  out.impl()->creator = node;
  Tape::current().append(node);
  return out;
}

// Marks every node reachable from `root` with `mark`, and refuses to start if
// one of them was already released: then nothing has been touched yet.
static void mark_graph(const std::shared_ptr<Node>& root, std::size_t mark) {
  std::vector<Node*> stack{root.get()};
  root->visit = mark;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->released)
      throw std::logic_error("backward: op '" + n->op + "' (tape entry " + std::to_string(n->index) +
                             ") was already released by an earlier backward(); pass "
                             "retain_graph = true to the first backward() to go through a "
                             "graph twice");
    for (const Tensor& in : n->inputs) {
      Node* c = in.creator().get();
      if (c && c->visit != mark) {
        c->visit = mark;
        stack.push_back(c);
      }
    }
  }
}

static void release(Node& n) {
  n.inputs.clear();
  n.backward = nullptr;
  n.released = true;
}

void run_backward(const Tensor& root, Array seed, bool retain_graph) {
  if (root.is_leaf()) {  // nothing was recorded: the gradient of x w.r.t. x
    root.impl()->grad.add(std::move(seed), root.shape());
    return;
  }
  static thread_local std::size_t marks = 0;
  const std::size_t mark = ++marks;
  const std::shared_ptr<Node>& root_node = root.creator();
  mark_graph(root_node, mark);

  Tape& tape = Tape::current();
  // Start at the root's entry: nothing recorded after it can be part of its graph.
  auto start = std::upper_bound(tape.slots_.begin(), tape.slots_.end(), root_node->index,
                                [](std::size_t i, const Tape::Slot& s) { return i < s.index; });
  if (start == tape.slots_.begin() || std::prev(start)->index != root_node->index)
    throw std::logic_error("backward: op '" + root_node->op +
                           "' is not on this thread's tape (was it recorded on another thread?)");

  root.impl()->pending.add(std::move(seed), root.shape());
  NoGradGuard no_grad;  // a closure that runs an op must not grow the tape under our feet
  std::vector<std::shared_ptr<Node>> walked;
  try {
    for (auto it = std::make_reverse_iterator(start); it != tape.slots_.rend(); ++it) {
      std::shared_ptr<Node> n = it->node.lock();
      if (!n || n->visit != mark) continue;
      std::shared_ptr<TensorImpl> out = n->output.lock();
      if (!out || out->pending.empty()) continue;

      Array g = out->pending.to_dense(n->output_shape);
      out->pending.clear();
      if (out->retains_grad) out->grad.add(g, n->output_shape);
      auto trace = debug::before_step(*n);  // null unless tracing
      n->backward(g, out->value, n->inputs);
      if (trace || debug::anomaly_enabled()) debug::after_step(*n, g, trace);
      walked.push_back(std::move(n));
    }
  } catch (...) {
    // Leave no half-propagated gradient behind in intermediate tensors.
    for (auto& s : tape.slots_)
      if (auto n = s.node.lock(); n && n->visit == mark)
        if (auto out = n->output.lock()) out->pending.clear();
    throw;
  }
  // Release only now: dropping a node's inputs earlier could free an
  // intermediate tensor whose own entry, further down the tape, still waits.
  if (!retain_graph) {
    for (auto& n : walked) release(*n);
    tape.prune();
  }
}

}  // namespace tg
