// The tape: every differentiable op, in the order it ran.
//
// An op computes its forward value and calls record(). When grad mode is on and
// some input requires grad, record() creates a Node (the op's name, its inputs,
// and a backward closure) and gives it the next tape index, from one counter.
// An op can only run once its inputs exist, so recording order is
// a topological order: backward() gathers the nodes its root depends on, sorts
// them by index, highest first, and runs each one's closure. No recursion.
//
// A closure gets d(loss)/d(output) and fills one gradient slot per input:
//
//   record("mul", a.value() * b.value(), {a, b}, [](const Array& g, const Node& n, Grads& d) {
//     if (n.needs_grad(0)) d[0] = g * n.input(1);   // d(a*b)/da = b
//     if (n.needs_grad(1)) d[1] = g * n.input(0);
//   });
//
// A slot may hold a gradient of the broadcast shape the op computed in: the
// engine sums it back to the input's shape (un-broadcasting happens there, once).
// A slot left empty sends nothing. The closure may also take the arriving
// gradient as `Array&& g` and move it into a slot, d[0] = std::move(g), where
// it passes on unchanged (add, reshape): the engine has no more use for it.
//
// Who owns what (this is what keeps memory bounded):
//   output tensor --owns--> its Node --owns--> input tensors --own--> their Nodes ...
//   Tape          --weak--> Node   (this thread's list, for print_tape(); inspect/debug.hpp)
// A graph lives exactly as long as some tensor of it is alive; the list only
// holds weak references. backward() releases the nodes it walked
// (their inputs and closures) unless retain_graph is true. A graph of any depth
// is freed in a loop, not by nested destructors (see Node::~Node).
//
// In-place writes. Each tensor counts its in-place writes (Tensor::version()).
// A node keeps the version each input (and its output) had when the op ran, and
// n.input(i) / n.output_value() throw std::logic_error naming the op and the tensor
// if it changed: the gradient would be computed from the wrong values. What a
// backward reads is thus checked exactly where it reads it.
//
// One backward() call keeps everything it needs in a local object: the nodes it
// walks, the gradients on their way, and the leaves' gradients, which are added
// into the leaves only after every closure has run. So a backward() that throws
// leaves every gradient as it was.
//
// Threads. Tape indices come from one counter shared by all threads, so a graph may span threads: a tensor
// computed on one thread can be used, and backward() called, on another, once the threads have synchronised
// (joined, or passed the tensor through a mutex or future). Several backward() calls may run at once when
// their graphs share only leaves: adding into a leaf's gradient takes its lock, so two threads that backward
// their own graphs into one parameter get the sum of both. A recorded op can be
// walked by one backward() at a time: each call claims the nodes it walks, and a
// second one reaching a claimed node throws std::logic_error naming the op. Writing
// values (an optimizer step, copy_) while another thread reads them is a data
// race, as in PyTorch: synchronise first.
//
// Closures must never capture the output's handle (a cycle: output -> node ->
// closure -> output); they read the output's value through n.output_value() instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace tg {

using Grads = std::vector<Grad>;  // one gradient slot per input of a node
struct Node;
// grad_output is an rvalue: a closure taking `const Array&` reads it, one taking
// `Array&&` may move it into a slot.
using BackwardFn = std::function<void(Array&& grad_output, const Node& node, Grads& grads)>;

struct Node {
  // An input as the op saw it: its version, shape and requires_grad then.
  struct Input {
    Tensor tensor;  // strong: an op keeps its inputs
    uint64_t version;
    Array::shape_type shape;  // held inline up to 4 dims
    bool needs_grad;
  };
  std::string op;         // "matmul", "embedding", ...
  std::size_t index = 0;  // position in recording order (one counter for all threads)
  std::vector<Input> inputs;
  std::weak_ptr<TensorImpl> output;  // weak: the output owns this node
  uint64_t output_version = 0;
  Array::shape_type output_shape;
  BackwardFn backward;
  std::atomic<bool> released = false;         // backward() ran and dropped inputs and closure
  std::atomic<const void*> walker = nullptr;  // the backward() call walking this node now
  std::string group;  // the op the user called, when this one is part of it ("cross_entropy"; see OpGroup)
  // The ids a lookup read (embedding, embedding_bag, embedding_dot, index_select, gather, nll_loss); null for
  // other ops. embedding and embedding_bag also keep which output row (bag) each id adds into, SIZE_MAX for
  // padding. The op's backward reads them from here and the inspector shows them: they are stored once.
  std::unique_ptr<const Indices> ids;
  std::vector<std::size_t> bags;

  // For closures: input i's values (or the output's) as the op saw them;
  // throws std::logic_error if an in-place write changed them since.
  const Array& input(std::size_t i) const;
  const Array& output_value() const;
  bool needs_grad(std::size_t i) const { return inputs[i].needs_grad; }
  const Array::shape_type& input_shape(std::size_t i) const { return inputs[i].shape; }

  ~Node();  // frees the graph below it in a loop (see tape.cpp); not copyable (its atomics)
};

// Records an op and returns its output tensor. The output requires grad (and
// gets a Node) only when grad mode is on and some input requires grad.
Tensor record(std::string op, Array value, std::vector<Tensor> inputs, BackwardFn backward);

// While one lives (this thread), every recorded op is stamped with `name` as
// its group (Node::group): cross_entropy names its log_softmax and nll_loss so,
// flatten its reshape. An outer group wins over one inside it.
class OpGroup : ScopedSetting<const char*> {
 public:
  explicit OpGroup(const char* name);
};

// The index the next recorded op gets, on any thread.
std::size_t next_node_index();

// The tape as a list: this thread's recorded ops, in recording order. backward()
// does not need it (it follows a graph from its root); it is there to look at
// (print_tape() in inspect/debug.hpp).
class Tape {
 public:
  static Tape& current();  // this thread's tape

  // This thread's entries that are still recorded: alive and not yet released
  // by backward(), in recording order.
  std::vector<std::shared_ptr<Node>> live_entries();
  std::size_t live_count() { return live_entries().size(); }
  std::size_t slots() const { return slots_.size(); }  // for the leak tests
  static std::size_t next_index() { return next_node_index(); }
  void append(const std::shared_ptr<Node>& node);  // record() calls it

 private:
  void prune();  // forgets expired and released entries
  std::vector<std::weak_ptr<Node>> slots_;
  std::size_t prune_at_ = 64;
};

// How the inspector (inspect/: anomaly mode, traces, write_html's recording,
// RetainAllGradsGuard) watches the engine without the engine knowing it: each
// thread has at most one step hook, and with none the engine pays one test
// per op and per backward step.
class StepHook {
 public:
  virtual ~StepHook() = default;
  // An op computed `value`; `recorded` says whether it became tape entry `index`.
  virtual void forward(const std::string& op, const Array& value, std::size_t index, bool recorded) = 0;
  // A backward step ran: the gradient that reached node's output, and each input's share.
  virtual void backward(const Node& node, const Array& grad_output, const Grads& grads) = 0;
  // Whether backward() keeps the gradient of every tensor it walks, as if
  // retain_grad() had been called on each.
  virtual bool retains_all_grads() const = 0;
};

// This thread's hook (null for none), to read or to set. A thread starts with
// the default hook, null unless set_default_step_hook() named one.
StepHook*& step_hook();
void set_default_step_hook(StepHook* hook);

// The engine behind Tensor::backward() and tg::grad(): with `inputs`, the
// gradients reaching those leaves are returned instead of added into them.
Grads run_backward(const Tensor& root, Array seed, bool retain_graph,
                   const std::vector<Tensor>* inputs = nullptr);

}  // namespace tg
