// Tensor: float32 n-d values, a gradient slot, and the tape entry that made it.
//
// A Tensor is a cheap HANDLE: copies are shallow. `Tensor b = a;` makes b and a
// name the same values and the same gradient slot (one shared TensorImpl), just
// like assigning a torch.Tensor in Python. To get an independent copy, use
// `a.detach()` (which copies values) or build a new Tensor from `a.value()`.
//
// Leaves are tensors you create (parameters, inputs). Non-leaves are outputs of
// recorded ops; their gradient is only kept if you call retain_grad() on them.
// Factories (zeros, randn, tensor, arange, ...) are in core/factories.hpp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "grad.hpp"
#include "scoped.hpp"

namespace tg {

struct Node;  // one tape entry, see core/tape.hpp

struct TensorImpl {
  Array value;
  Grad grad;  // what grad() returns: leaves, and non-leaves that retain_grad
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<Node> creator;  // the op that produced this tensor; null for leaves
  std::string name;               // optional, shown by print_tape() and to_dot()
  // Counts in-place writes to `value` (value_mut(), copy_(), optimizer steps,
  // load_state_dict, max_norm). A recorded op notes its inputs' versions; its
  // backward refuses to read a value written since (core/tape.hpp).
  uint64_t version = 0;
  // Set by ops whose PyTorch counterpart returns a view (reshape, transpose, ...):
  // here their result is a copy, so value_mut() on it throws rather than write
  // into a copy the user took for the input.
  const char* copy_of_view = nullptr;
  // Set on the loss nn::data_parallel returns (to "nn::data_parallel"): its
  // backward pass already ran there, and backward() on it says so.
  const char* backward_ran_in = nullptr;
  // Threads that backward() their own graphs into one leaf (a shared parameter)
  // add into its gradient under this lock.
  std::mutex grad_mutex;
};

class Tensor {
 public:
  Tensor() : Tensor(Array(0.0f)) {}  // a 0-d tensor holding 0
  explicit Tensor(Array value, bool requires_grad = false);
  // Nested braces of 1 to 3 levels: Tensor({{1, 2}, {3, 4}}, true).
  template <std::size_t N>
  using Values = xt::nested_initializer_list_t<float, N>;
  Tensor(Values<1> values, bool requires_grad = false) : Tensor(Array(values), requires_grad) {}
  Tensor(Values<2> values, bool requires_grad = false) : Tensor(Array(values), requires_grad) {}
  Tensor(Values<3> values, bool requires_grad = false) : Tensor(Array(values), requires_grad) {}

  // --- values ---
  const Array& value() const { return impl_->value; }
  Shape shape() const { return shape_of(impl_->value); }
  int64_t size(int64_t dim) const {  // shape()[dim]; dim < 0 counts from the end
    return static_cast<int64_t>(impl_->value.shape()[wrap_index("size: dim", dim, this->dim())]);
  }
  std::size_t dim() const { return impl_->value.dimension(); }
  std::size_t numel() const { return impl_->value.size(); }
  float item() const;  // the single value of a one-element tensor
  // One element, as NumPy's a.item(1, 2) (PyTorch: t[1, 2].item()): one index
  // per dim, negative ones counting from the end. Throws std::out_of_range.
  float item(std::initializer_list<int64_t> index) const;
  // Every value, row-major (t.flatten().tolist()).
  std::vector<float> to_vector() const { return {impl_->value.begin(), impl_->value.end()}; }

  // The values, for writing in place (like PyTorch's `.data`): the write is not
  // recorded on the tape, so no gradient flows through it. Each call counts as an
  // in-place write and bumps version(): a backward() that needs the values an
  // earlier op read then throws instead of computing a wrong gradient. So write
  // between a step and the next forward (as optimizers do), and do not keep the
  // reference across a forward pass: a write through a kept reference is not seen.
  // On the result of reshape, transpose, permute, flatten or narrow (copies here, views in
  // PyTorch) it throws std::logic_error: write into the input, or into detach().
  Array& value_mut();
  // Overwrites the values in place (same shape) and bumps version(). A tensor
  // that requires grad can only be overwritten under NoGradGuard, as in PyTorch.
  void copy_(const Array& src);
  // How many in-place writes this tensor has had (PyTorch's _version).
  uint64_t version() const { return impl_->version; }

  // --- gradients ---
  bool requires_grad() const { return impl_->requires_grad; }
  // Leaves only. Ops already recorded keep what they saw: turning it on does not
  // give this tensor a gradient from a graph recorded before (as in PyTorch).
  Tensor& set_requires_grad(bool on);
  bool is_leaf() const { return impl_->creator == nullptr; }
  const Grad& grad() const { return impl_->grad; }
  Grad& grad_mut() { return impl_->grad; }
  Array grad_dense() const { return impl_->grad.to_dense(shape()); }  // zeros when empty
  void zero_grad() { impl_->grad.clear(); }
  void retain_grad();  // keep this non-leaf's gradient after backward()

  // Adds g into grad(), as `x.grad += g` in PyTorch, under the tensor's lock
  // (Grad::accumulate checks the shapes). Pass std::move(g) to hand over the buffer.
  void accumulate_grad(Grad g);

  // Runs backpropagation from this tensor. Without `gradient`, the tensor must
  // hold one element (a loss) and the seed is 1. The recorded ops of this graph
  // are released afterwards unless retain_graph is true.
  void backward(std::optional<Array> gradient = std::nullopt, bool retain_graph = false) const;

  Tensor detach() const { return Tensor(impl_->value); }  // a new leaf with a copy of the values, no history

  // A label for listings and graphs ("fc.weight"); modules name their parameters.
  const std::string& name() const { return impl_->name; }
  Tensor& set_name(std::string name) {
    impl_->name = std::move(name);
    return *this;
  }

  // Identity, not value equality: do both handles name the same tensor?
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  const std::shared_ptr<Node>& creator() const { return impl_->creator; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// The gradients of `output` with respect to `inputs`, returned instead of added
// into their grad(): torch.autograd.grad(output, inputs, grad_output). As in
// backward(), grad_output may be left out for a one-element output.
// Each input must be a distinct leaf that requires grad (PyTorch also takes
// non-leaves and repeats); one that output does not depend on gets an empty
// Grad (PyTorch: an error unless allow_unused=True, then None). No tensor's
// grad() changes, so threads may each take the gradients of their own loss and
// add them up in an order of their choosing (nn::data_parallel does).
// The graph is released unless retain_graph.
std::vector<Grad> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                       std::optional<Array> grad_output = std::nullopt, bool retain_graph = false);

// Prints like PyTorch's repr, with the shape added:
//   tensor([[1.5000, 2.0000],
//           [3.0000, 4.0000]], shape=[2, 2], requires_grad=True)
// An op's output shows the op instead: grad_fn=<mul> (PyTorch: <MulBackward0>).
// More than 1000 elements are summarised with "...", as PyTorch does.
// Arrays and Indices print the same way, without the autograd part
// (core/array.hpp): tensor([3, 0, 1], shape=[3]); a gradient slot prints as
// core/grad.hpp says.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Grad mode. While a NoGradGuard lives, no op is recorded (this thread only).
bool is_grad_enabled();
class NoGradGuard : ScopedSetting<bool> {
 public:
  NoGradGuard();
};

}  // namespace tg
