#include "core/tape.hpp"

#include "core/debug.hpp"

#include <algorithm>
#include <queue>
#include <stdexcept>

namespace tg {

// One counter for every thread: an op that uses a tensor made on another thread
// gets a higher index than the op that made it, so the order stays topological.
static std::atomic<std::size_t> next_node_index = 0;

std::size_t Tape::next_index() {
  return next_node_index.load();
}

Tape& Tape::current() {
  static thread_local Tape tape;
  return tape;
}

void Tape::append(const std::shared_ptr<Node>& node) {
  node->index = next_node_index++;
  slots_.push_back(node);
  // Amortised clean-up: the tape never holds more than about twice its live
  // entries, however many forward passes run without a backward().
  if (slots_.size() >= prune_at_) prune();
}

void Tape::prune() {
  std::erase_if(slots_, [](const std::weak_ptr<Node>& s) {
    auto n = s.lock();
    return !n || n->released;
  });
  prune_at_ = std::max<std::size_t>(64, 2 * slots_.size());
}

std::vector<std::shared_ptr<Node>> Tape::live_entries() {
  prune();
  std::vector<std::shared_ptr<Node>> out;
  for (const auto& s : slots_)
    if (auto n = s.lock()) out.push_back(std::move(n));
  return out;
}

Tensor record(std::string op, Array value, std::vector<Tensor> inputs, Reads reads, BackwardFn backward) {
  const bool recorded = is_grad_enabled() && std::any_of(inputs.begin(), inputs.end(),
                                                         [](const Tensor& t) { return t.requires_grad(); });
  if (debug::anomaly_enabled()) debug::check_forward(op, value, Tape::next_index(), recorded);
  Tensor out(std::move(value));
  if (!recorded) return out;

  auto node = std::make_shared<Node>();
  node->op = std::move(op);
  node->seen.reserve(inputs.size());
  for (const Tensor& in : inputs) node->seen.push_back({in.version(), in.value().shape(), false});
  for (std::size_t i : reads.input_positions) node->seen.at(i).read = true;
  node->reads_output = reads.output_value;
  node->inputs = std::move(inputs);
  node->output = out.impl();
  node->output_shape = out.value().shape();
  node->backward = std::move(backward);
  out.impl()->requires_grad = true;
  out.impl()->creator = node;
  Tape::current().append(node);
  return out;
}

// ------------------------------------------------------------------ teardown

// Takes the inputs out of `inputs` one at a time; an input that nobody else
// holds is about to be destroyed, so its creator node is moved to `orphans`
// first, to be destroyed by the caller's loop rather than inside this one.
static void release_inputs(std::vector<Tensor>& inputs, std::vector<std::shared_ptr<Node>>& orphans) {
  while (!inputs.empty()) {
    Tensor t = std::move(inputs.back());
    inputs.pop_back();
    if (t.impl().use_count() == 1 && t.impl()->creator) orphans.push_back(std::move(t.impl()->creator));
  }
}

// Left to the destructors, freeing a chain of a million ops would nest a million
// calls (node -> input tensor -> its node -> ...) and overflow the stack. Here
// each node that would die inside another one's destructor is handed to this
// loop instead, so the stack depth stays the same whatever the graph's depth
// (PyTorch's deleteNode does the same).
Node::~Node() {
  std::vector<std::shared_ptr<Node>> orphans;
  release_inputs(inputs, orphans);
  while (!orphans.empty()) {
    std::shared_ptr<Node> n = std::move(orphans.back());
    orphans.pop_back();
    if (n.use_count() == 1) release_inputs(n->inputs, orphans);
  }  // n is destroyed here, with no inputs left to recurse into
}

// ------------------------------------------------------------------ backward

static std::string input_str(const Node& n, std::size_t i) {
  const Tensor& t = n.inputs[i];
  return "input " + std::to_string(i) + " of op '" + n.op + "' (tape entry " + std::to_string(n.index) +
         "), " + (t.name().empty() ? "a tensor" : "'" + t.name() + "'") + " of shape " + shape_str(t.shape());
}

// Throws, before anything is touched, if `n` cannot be run correctly: it was
// released, or a value its closure reads was written in place after the op ran.
static void check_runnable(const Node& n) {
  if (n.released)
    throw std::logic_error("backward: op '" + n.op + "' (tape entry " + std::to_string(n.index) +
                           ") was already released by an earlier backward(); pass "
                           "retain_graph = true to the first backward() to go through a "
                           "graph twice");
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const Node::Seen& seen = n.seen[i];
    const uint64_t now = n.inputs[i].version();
    if (now == seen.version) continue;
    if (seen.read)
      throw std::logic_error("backward: " + input_str(n, i) +
                             ", was modified in place after it was used by op '" + n.op + "' (tape entry " +
                             std::to_string(n.index) + "): version " + std::to_string(now) + ", expected " +
                             std::to_string(seen.version) +
                             ". Its backward needs the values the op saw: write after backward(), or "
                             "run the forward pass again after the write");
    if (n.inputs[i].value().shape() != seen.shape)
      throw std::logic_error("backward: " + input_str(n, i) + ", had shape " +
                             shape_str(Shape(seen.shape.begin(), seen.shape.end())) +
                             " when the op ran; an in-place write changed it");
  }
  auto out = n.output.lock();
  if (out && out->version != n.output_version && out->value.shape() != n.output_shape)
    throw std::logic_error("backward: the output of op '" + n.op + "' (tape entry " +
                           std::to_string(n.index) + ") had shape " +
                           shape_str(Shape(n.output_shape.begin(), n.output_shape.end())) +
                           " when the op ran; an in-place write "
                           "changed it to " +
                           shape_str(Shape(out->value.shape().begin(), out->value.shape().end())));
  if (n.reads_output && out && out->version != n.output_version)
    throw std::logic_error("backward: the output of op '" + n.op + "' (tape entry " +
                           std::to_string(n.index) + ") was modified in place after the op ran: version " +
                           std::to_string(out->version) + ", expected " + std::to_string(n.output_version) +
                           ". Its backward reads that output: write to a copy instead");
}

// Gathers every node reachable from `root`, claiming each for backward() call
// `call`, and checks that each can run. Throws with nothing touched (and every
// claim dropped) if one cannot, or if another thread's backward() holds one.
static std::vector<std::shared_ptr<Node>> claim_graph(const std::shared_ptr<Node>& root, uint64_t call) {
  std::vector<std::shared_ptr<Node>> graph;  // also the work list: graph[k] is checked in turn
  auto claim = [&](const std::shared_ptr<Node>& n) {
    uint64_t free = 0;
    if (n->walker.compare_exchange_strong(free, call)) {
      graph.push_back(n);
      return;
    }
    if (free == call) return;  // already gathered (a tensor used twice)
    throw std::logic_error("backward: op '" + n->op + "' (tape entry " + std::to_string(n->index) +
                           ") is being walked by a backward() on another thread; graphs that run "
                           "backward() at the same time may share leaves, not recorded ops");
  };
  try {
    claim(root);
    for (std::size_t k = 0; k < graph.size(); ++k) {
      check_runnable(*graph[k]);
      for (const Tensor& in : graph[k]->inputs)
        if (const auto& c = in.creator()) {
          claim(c);
          ++c->uses;  // one per edge: x * x counts twice
        }
    }
  } catch (...) {
    for (auto& n : graph) n->walker = 0, n->uses = 0;
    throw;
  }
  return graph;
}

static void release(Node& n) {
  n.inputs.clear();  // flat: every node of the graph is still held by the caller's list
  n.backward = nullptr;
  n.released = true;
}

void run_backward(const Tensor& root, Array seed, bool retain_graph) {
  if (root.is_leaf()) {  // nothing was recorded: the gradient of x w.r.t. x
    Tensor(root).accumulate_grad(std::move(seed));
    return;
  }
  static std::atomic<uint64_t> calls = 0;
  const uint64_t call = ++calls;
  std::vector<std::shared_ptr<Node>> graph = claim_graph(root.creator(), call);

  // A node runs once every op that used its output has run (its `uses` reach 0).
  // Of the nodes ready, the one recorded last runs first, so gradients add up in
  // reverse recording order, as in PyTorch's engine; that is the order of the
  // whole graph by index, highest first, without sorting it.
  auto later = [](const Node* a, const Node* b) { return a->index < b->index; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  ready.push(graph.front().get());

  root.impl()->pending.add(std::move(seed), root.shape());
  NoGradGuard no_grad;  // a closure that runs an op must not grow the tape under our feet
  try {
    while (!ready.empty()) {
      Node* n = ready.top();
      ready.pop();
      for (const Tensor& in : n->inputs)
        if (const auto& c = in.creator(); c && --c->uses == 0) ready.push(c.get());
      std::shared_ptr<TensorImpl> out = n->output.lock();
      if (!out || out->pending.empty()) continue;

      const Shape shape(n->output_shape.begin(), n->output_shape.end());
      Array g = out->pending.to_dense(shape);
      out->pending.clear();
      if (out->retains_grad || debug::retain_all_grads()) out->grad.add(g, shape);
      auto trace = debug::before_step(*n);  // null unless tracing
      n->backward(g, out->value, n->inputs);
      if (trace || debug::anomaly_enabled()) debug::after_step(*n, g, trace);
    }
  } catch (...) {
    // Leave no half-propagated gradient behind in intermediate tensors.
    for (const auto& n : graph) {
      if (auto out = n->output.lock()) out->pending.clear();
      n->walker = 0, n->uses = 0;
    }
    throw;
  }
  // Release only now: dropping a node's inputs earlier could free an
  // intermediate tensor whose own node, further down the list, still waits.
  for (const auto& n : graph) {
    if (!retain_graph) release(*n);
    n->walker = 0;
  }
  if (!retain_graph) Tape::current().prune();
}

}  // namespace tg
