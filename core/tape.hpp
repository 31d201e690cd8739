// The tape: every differentiable op, in the order it ran.
//
// An op computes its forward value and calls record(). When grad mode is on and
// some input requires grad, record() creates a Node (the op's name, its inputs,
// and a backward closure) and appends it to this thread's tape. Because ops run
// in order, the tape is already a topological order: backward() walks it in
// reverse and never needs to sort or recurse.
//
// Who owns what (this is what keeps memory bounded):
//   output tensor --owns--> its Node --owns--> input tensors --own--> their Nodes ...
//   tape          --weak--> Node
// A graph lives exactly as long as some tensor of it is alive. A forward pass
// whose result is dropped (say, an evaluation run without NoGradGuard) frees its
// nodes at once; the tape only holds weak references and prunes the expired
// ones as it grows. backward() releases the nodes it walked (their inputs and
// closures) unless retain_graph is true.
//
// Closures must never capture the output's handle (a cycle: output -> node ->
// closure -> output); they receive the output's value as an argument instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace tg {

// Gets d(loss)/d(output) and the output's value; adds each input's share with
// inputs[i].accumulate_grad(...). Skip inputs that do not require grad.
using BackwardFn =
    std::function<void(const Array& grad_output, const Array& output, std::vector<Tensor>& inputs)>;

struct Node {
  std::string op;                    // "matmul", "embedding", ...
  std::size_t index = 0;             // position in recording order on this thread
  std::vector<Tensor> inputs;        // strong: an op keeps what its backward reads
  std::weak_ptr<TensorImpl> output;  // weak: the output owns this node
  Shape output_shape;
  BackwardFn backward;
  bool released = false;  // backward() ran and dropped inputs/closure
  std::size_t visit = 0;  // scratch mark used by one backward() call
};

// Records an op and returns its output tensor. The output requires grad (and
// gets a Node) only when grad mode is on and some input requires grad.
Tensor record(std::string op, Array value, std::vector<Tensor> inputs, BackwardFn backward);

class Tape {
 public:
  static Tape& current();  // this thread's tape

  // Entries that are still recorded: alive and not yet released by backward().
  std::vector<std::shared_ptr<Node>> live_entries();
  std::size_t live_count() { return live_entries().size(); }
  std::size_t slots() const { return slots_.size(); }  // for the leak tests

 private:
  struct Slot {
    std::size_t index;
    std::weak_ptr<Node> node;
  };
  void append(const std::shared_ptr<Node>& node);
  void prune();

  std::vector<Slot> slots_;
  std::size_t next_index_ = 0;
  std::size_t prune_at_ = 64;

  friend Tensor record(std::string, Array, std::vector<Tensor>, BackwardFn);
  friend void run_backward(const Tensor&, Array, bool);
};

// The engine behind Tensor::backward().
void run_backward(const Tensor& root, Array seed, bool retain_graph);

}  // namespace tg
