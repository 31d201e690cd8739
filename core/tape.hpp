// The tape: every differentiable op, in the order it ran.
//
// An op computes its forward value and calls record(). When grad mode is on and
// some input requires grad, record() creates a Node (the op's name, its inputs,
// and a backward closure), gives it the next tape index and appends it to this
// thread's tape. An op can only run once its inputs exist, so recording order is
// a topological order: backward() gathers the nodes its root depends on and runs
// them from the highest index down, without recursion.
//
// Who owns what (this is what keeps memory bounded):
//   output tensor --owns--> its Node --owns--> input tensors --own--> their Nodes ...
//   tape          --weak--> Node
// A graph lives exactly as long as some tensor of it is alive. A forward pass
// whose result is dropped (say, an evaluation run without NoGradGuard) frees its
// nodes at once; the tape only holds weak references and prunes the expired
// ones as it grows. backward() releases the nodes it walked (their inputs and
// closures) unless retain_graph is true. A graph of any depth is freed in a
// loop, not by nested destructors (see Node::~Node), so a loss accumulated over
// a million steps is dropped without exhausting the stack.
//
// In-place writes. Each tensor counts its in-place writes (Tensor::version()).
// record() notes the version of every value the backward closure will read
// (`Reads`); backward() checks them all before it runs any closure, and throws
// std::logic_error naming the op if one was written since: its gradient would
// be computed from the wrong values.
//
// Threads. Each thread records on its own tape, and tape indices come from one
// counter shared by all threads, so a graph may span threads: a tensor computed
// on one thread can be used, and backward() called, on another, once the threads
// have synchronised (joined, or passed the tensor through a mutex or future).
// Several backward() calls may run at once when their graphs share only leaves:
// adding into a leaf's gradient is serialised by a per-leaf lock, so two threads
// that backward their own graphs into one parameter get the sum of both. A
// recorded op can be walked by one backward() at a time; a second one reaching
// it meanwhile throws std::logic_error naming the op, rather than racing. Writing
// values (an optimizer step, copy_) while another thread reads them is a data
// race, as in PyTorch: synchronise first.
//
// Closures must never capture the output's handle (a cycle: output -> node ->
// closure -> output); they receive the output's value as an argument instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace tg {

// Gets d(loss)/d(output) and the output's value; adds each input's share with
// inputs[i].accumulate_grad(...). Skip inputs that do not require grad.
using BackwardFn =
    std::function<void(const Array& grad_output, const Array& output, std::vector<Tensor>& inputs)>;

// Which values an op's backward closure reads, so that backward() can check
// they were not written since: `mul` reads both inputs (Reads::inputs({0, 1})),
// `exp` its output (Reads::output()), `add` neither (Reads::nothing()).
struct Reads {
  std::vector<std::size_t> input_positions;
  bool output_value = false;

  static Reads nothing() { return {}; }
  static Reads inputs(std::vector<std::size_t> positions) { return {std::move(positions), false}; }
  static Reads output() { return {{}, true}; }
};

struct Node {
  std::string op;                    // "matmul", "embedding", ...
  std::size_t index = 0;             // position in recording order (one counter for all threads)
  std::vector<Tensor> inputs;        // strong: an op keeps what its backward reads
  std::weak_ptr<TensorImpl> output;  // weak: the output owns this node
  Array::shape_type output_shape;    // the output's shape (held inline up to 4 dims)
  BackwardFn backward;

  // Each input as the op saw it, to catch in-place writes before backward().
  struct Seen {
    uint64_t version;
    Array::shape_type shape;
    bool read;  // the closure reads its values
  };
  std::vector<Seen> seen;  // seen[i] belongs to inputs[i]
  bool reads_output = false;
  uint64_t output_version = 0;

  std::atomic<bool> released = false;  // backward() ran and dropped inputs/closure
  std::atomic<uint64_t> walker = 0;    // the backward() call walking this node now; 0: none
  std::size_t uses = 0;                // during a walk: the graph's ops that use the output and have not run

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // frees the graph below it in a loop (see tape.cpp)
};

// Records an op and returns its output tensor. The output requires grad (and
// gets a Node) only when grad mode is on and some input requires grad.
Tensor record(std::string op, Array value, std::vector<Tensor> inputs, Reads reads, BackwardFn backward);

class Tape {
 public:
  static Tape& current();  // this thread's tape

  // This thread's entries that are still recorded: alive and not yet released
  // by backward(), in recording order.
  std::vector<std::shared_ptr<Node>> live_entries();
  std::size_t live_count() { return live_entries().size(); }
  std::size_t slots() const { return slots_.size(); }  // for the leak tests

  // The index the next recorded op will get (on any thread).
  static std::size_t next_index();

 private:
  void append(const std::shared_ptr<Node>& node);
  void prune();

  std::vector<std::weak_ptr<Node>> slots_;
  std::size_t prune_at_ = 64;

  friend Tensor record(std::string, Array, std::vector<Tensor>, Reads, BackwardFn);
  friend void run_backward(const Tensor&, Array, bool);
};

// The engine behind Tensor::backward().
void run_backward(const Tensor& root, Array seed, bool retain_graph);

}  // namespace tg
