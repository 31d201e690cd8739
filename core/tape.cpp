// The engine: record() puts an op on the tape, run_backward() walks it back.
#include "tape.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "check.hpp"
#include "kernels/reduce.hpp"

namespace tg {

// One counter for every thread: an op that uses a tensor made on another thread
// gets a higher index than the op that made it, so the order stays topological.
static std::atomic<std::size_t> node_counter = 0;

std::size_t next_node_index() {
  return node_counter.load();
}

static std::atomic<StepHook*> default_hook = nullptr;

StepHook*& step_hook() {
  thread_local StepHook* hook = default_hook.load();
  return hook;
}

void set_default_step_hook(StepHook* hook) {
  default_hook = hook;
}

Tape& Tape::current() {
  static thread_local Tape tape;
  return tape;
}

void Tape::append(const std::shared_ptr<Node>& node) {
  slots_.push_back(node);
  // Amortised clean-up: the list never holds more than about twice its live
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

static thread_local const char* current_group = nullptr;

OpGroup::OpGroup(const char* name) : ScopedSetting(current_group, current_group ? current_group : name) {}

Tensor record(std::string op, Array value, std::vector<Tensor> inputs, BackwardFn backward) {
  const bool recorded = is_grad_enabled() && std::ranges::any_of(inputs, &Tensor::requires_grad);
  if (StepHook* hook = step_hook()) hook->forward(op, value, node_counter.load(), recorded);
  Tensor out(std::move(value));
  if (!recorded) return out;

  auto node = std::make_shared<Node>();
  node->op = std::move(op);
  if (current_group) node->group = current_group;
  node->inputs.reserve(inputs.size());
  for (Tensor& t : inputs) node->inputs.push_back({t, t.version(), t.value().shape(), t.requires_grad()});
  node->output = out.impl();
  node->output_shape = out.value().shape();
  node->backward = std::move(backward);
  out.impl()->requires_grad = true;
  out.impl()->creator = node;
  node->index = node_counter++;
  Tape::current().append(node);  // the listing print_tape() shows (inspect/debug.hpp)
  return out;
}

// ------------------------------------------------------------ saved values

static std::string entry_str(const Node& n) {
  return message("op '", n.op, "' (tape entry ", n.index, ")");
}
static std::string input_str(const Node& n, std::size_t i) {
  const Tensor& t = n.inputs[i].tensor;
  return message("input ", i, " of ", entry_str(n), ", ",
                 t.name().empty() ? "a tensor" : "'" + t.name() + "'", " of shape ", t.value().shape());
}

const Array& Node::input(std::size_t i) const {
  const Input& in = inputs.at(i);
  if (in.tensor.version() != in.version)
    throw std::logic_error(
        message("backward: ", input_str(*this, i), ", was modified in place after it was used by ",
                entry_str(*this), ": version ", in.tensor.version(), ", expected ", in.version,
                ". Its backward needs the values the op saw: write after backward(), or run "
                "the forward pass again after the write"));
  return in.tensor.value();
}

const Array& Node::output_value() const {
  const std::shared_ptr<TensorImpl> out = output.lock();  // alive: backward() holds it while this node runs
  if (out->version != output_version)
    throw std::logic_error(message("backward: the output of ", entry_str(*this),
                                   " was modified in place after the op ran: version ", out->version,
                                   ", expected ", output_version,
                                   ". Its backward reads that output: write to a copy instead"));
  return out->value;
}

// ------------------------------------------------------------------ teardown

// Takes the inputs out one at a time; an input that nobody else holds is about
// to be destroyed, so its creator node is moved to `orphans` first, to be
// destroyed by the caller's loop rather than inside this one.
static void release_inputs(std::vector<Node::Input>& inputs, std::vector<std::shared_ptr<Node>>& orphans) {
  while (!inputs.empty()) {
    Tensor t = std::move(inputs.back().tensor);
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
//
// One backward() call keeps its state in a Walk of its own. The walk itself is
// run_backward() at the bottom; the checks it makes are the functions above it.

// A gradient on its way to a tensor, and where its first share came from (for messages).
struct Arrival {
  Grad grad;
  const Node* via = nullptr;              // null: the root's seed
  std::size_t input = std::string::npos;  // the tensor's position among via's inputs; npos: via's output
};

struct Walk {
  std::vector<std::shared_ptr<Node>> order;                // every op under the root, latest first
  std::unordered_map<const TensorImpl*, Arrival> arrived;  // what reached each tensor so far
  std::vector<std::shared_ptr<TensorImpl>> leaves;         // leaves that got some, in that order
  std::vector<std::pair<std::shared_ptr<TensorImpl>, Arrival>> retained;  // non-leaves that keep theirs

  ~Walk() {  // however the call ends, its claims end with it
    for (const auto& n : order) n->walker = nullptr;
  }
};

// Claims n for walk w. A node already in w is not gathered again; one that
// another backward() is walking, or that an earlier one released, throws.
static void claim(Walk& w, const std::shared_ptr<Node>& n) {
  const void* holder = nullptr;
  if (!n->walker.compare_exchange_strong(holder, &w)) {
    if (holder == &w) return;
    throw std::logic_error(message("backward: ", entry_str(*n),
                                   " is being walked by a backward() on another thread; graphs that run "
                                   "backward() at the same time may share leaves, not recorded ops"));
  }
  w.order.push_back(n);  // first: ~Walk drops the claim even if the next line throws
  if (n->released)
    throw std::logic_error(message("backward: ", entry_str(*n),
                                   " was already released by an earlier backward(); pass retain_graph = true "
                                   "to the first backward() to go through a graph twice"));
}

// The tensor a gradient is on its way to, for messages.
static std::string tensor_str(const TensorImpl& t, const Arrival& a) {
  if (!a.via) return message("the leaf backward() was called on, of shape ", t.value.shape());
  return a.input == std::string::npos ? "the output of " + entry_str(*a.via) : input_str(*a.via, a.input);
}

// Every op the root depends on, claimed, latest first: recording order is a
// topological order, so an op comes after every op that used its output.
static void gather(Walk& w, const Tensor& root) {
  if (root.creator()) claim(w, root.creator());
  for (std::size_t k = 0; k < w.order.size(); ++k)
    for (const Node::Input& in : w.order[k]->inputs)
      if (in.tensor.creator()) claim(w, in.tensor.creator());
  auto later = [](const auto& a, const auto& b) { return a->index > b->index; };
  if (!std::is_sorted(w.order.begin(), w.order.end(), later))
    std::sort(w.order.begin(), w.order.end(), later);
}

// Adds g to what tensor t has received; `via` and `input` say where it came from.
static void send(Walk& w, const Tensor& t, Grad&& g, const Node* via, std::size_t input) {
  auto [it, first] = w.arrived.try_emplace(t.impl().get(), Arrival{{}, via, input});
  Grad& held = it->second.grad;
  if (first) {
    if (t.is_leaf()) w.leaves.push_back(t.impl());
    held = std::move(g);
    return;
  }
  const Array::shape_type shape = held.shape();
  if (!g.has_shape(shape))  // t was used at two shapes: changed in place between two ops
    throw std::logic_error(message("backward: ", tensor_str(*t.impl(), {{}, via, input}), ", had shape ",
                                   g.shape(), " when the op ran; an in-place write changed it to ", shape,
                                   " for another op"));
  held.accumulate(std::move(g), shape);
}

// Runs n's closure and returns each input's gradient, summed back to the
// input's shape where the op broadcast (the one place that un-broadcasts).
static Grads run_closure(const Node& n, Array&& grad_output) {
  Grads grads(n.inputs.size());
  // The closure may move grad_output away; a step hook, when set, is shown a copy.
  StepHook* hook = step_hook();
  std::optional<Array> seen = hook ? std::optional<Array>(grad_output) : std::nullopt;
  n.backward(std::move(grad_output), n, grads);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Array::shape_type& shape = n.input_shape(i);
    if (!n.needs_grad(i)) grads[i].clear();
    if (grads[i].empty() || grads[i].has_shape(shape)) continue;
    if (grads[i].is_dense() && grads[i].dense().dimension() >= shape.size())
      grads[i] = kernels::sum_to_shape(grads[i].dense(), shape);
    if (!grads[i].has_shape(shape))  // a bug in the op, not the user's
      throw std::logic_error(message("backward: ", entry_str(n), " gave input ", i, " a gradient of shape ",
                                     grads[i].shape(), " for shape ", shape));
  }
  if (hook) hook->backward(n, *seen, grads);  // the inspector's traces and anomaly checks
  return grads;
}

// Adds the leaves' gradients (and the retained ones) into the tensors once
// every closure has run, checking all of them first: a throw changes nothing.
// A leaf whose requires_grad was turned off since gets none (as in PyTorch).
static void commit(Walk& w) {
  for (const auto& t : w.leaves) w.retained.push_back({t, std::move(w.arrived[t.get()])});
  std::erase_if(w.retained, [](const auto& r) { return !r.first->requires_grad; });
  for (auto& [t, a] : w.retained) {  // each takes a gradient of its shape now, into a slot of that shape
    if (!a.grad.has_shape(t->value.shape()))
      throw std::logic_error(message("backward: ", tensor_str(*t, a), ", had shape ", a.grad.shape(),
                                     " when the op ran; an in-place write changed it"));
    std::lock_guard<std::mutex> lock(t->grad_mutex);  // another thread may be adding into it
    if (!t->grad.empty() && !t->grad.has_shape(t->value.shape()))
      throw std::logic_error(
          message("backward: ", tensor_str(*t, a), ", holds a gradient of shape ", t->grad.shape(),
                  " from before an in-place write changed its shape; call zero_grad() first"));
  }
  for (auto& [t, a] : w.retained) {
    std::lock_guard<std::mutex> lock(t->grad_mutex);
    t->grad.accumulate(std::move(a.grad), t->value.shape());
  }
}

// Drops what the walked ops keep for backward. Only now: dropping a node's
// inputs earlier could free a tensor whose own node still waits in `order`.
static void release(Walk& w) {
  for (const auto& n : w.order) {
    n->inputs.clear();  // flat: every node of the graph is still held by `order`
    n->backward = nullptr;
    n->released = true;
  }
}

// backward() as micrograd does it: gather the ops in reverse recording order,
// seed the root, and run each op's closure, passing the gradients it computes
// on to its inputs.
Grads run_backward(const Tensor& root, Array seed, bool retain_graph, const std::vector<Tensor>* inputs) {
  Walk w;
  gather(w, root);
  send(w, root, std::move(seed), nullptr, 0);
  {
    NoGradGuard no_grad;  // a closure that runs an op must not grow the tape
    for (const std::shared_ptr<Node>& n : w.order) {
      const std::shared_ptr<TensorImpl> out = n->output.lock();
      const auto it = w.arrived.find(out.get());
      if (it == w.arrived.end()) continue;  // no gradient reached this op
      Grad& g = it->second.grad;
      // g has the shape n's output had when it ran, unless an in-place write
      // changed that output's shape before a later op used it.
      if (!g.has_shape(n->output_shape))
        throw std::logic_error(message("backward: the output of ", entry_str(*n), " had shape ",
                                       n->output_shape, " when the op ran; an in-place write changed it to ",
                                       g.shape()));
      if (g.is_sparse()) g = g.sparse().to_dense();  // closures take dense gradients
      const StepHook* hook = step_hook();
      if (out->retains_grad || (hook && hook->retains_all_grads())) w.retained.push_back({out, {g, n.get()}});
      Grads grads = run_closure(*n, std::move(g.dense_mut()));  // the closure may take it: g is dropped below
      for (std::size_t i = 0; i < grads.size(); ++i)
        if (!grads[i].empty()) send(w, n->inputs[i].tensor, std::move(grads[i]), n.get(), i);
      w.arrived.erase(it);  // every op that used `out` has run: no more will come
    }
  }
  // tg::grad(): the gradients that reached `inputs` (distinct leaves), taken
  // out of the walk; an input the root does not depend on gets an empty one.
  Grads taken(inputs ? inputs->size() : 0);
  for (std::size_t i = 0; i < taken.size(); ++i)
    if (auto it = w.arrived.find((*inputs)[i].impl().get()); it != w.arrived.end())
      taken[i] = std::move(it->second.grad);
  if (!inputs) commit(w);
  if (!retain_graph) release(w);
  return taken;
}

}  // namespace tg
