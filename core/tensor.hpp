// Tensor: float32 n-d values, a gradient slot, and the tape entry that made it.
//
// A Tensor is a cheap HANDLE: copies are shallow. `Tensor b = a;` makes b and a
// name the same values and the same gradient slot (one shared TensorImpl), just
// like assigning a torch.Tensor in Python. To get an independent copy, use
// `a.detach()` (which copies values) or build a new Tensor from `a.value()`.
//
// Leaves are tensors you create (parameters, inputs). Non-leaves are outputs of
// recorded ops; their gradient is only kept if you call retain_grad() on them.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "core/grad.hpp"

namespace tg {

using Indices = xt::xarray<int64_t>;  // integer inputs: class labels, token ids, rows
using Generator = std::mt19937;       // pass one explicitly to every random factory

struct Node;  // one tape entry, see core/tape.hpp

struct TensorImpl {
  Array value;
  Grad grad;     // what grad() returns: leaves, and non-leaves that retain_grad
  Grad pending;  // gradient flowing into a non-leaf during one backward()
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<Node> creator;  // the op that produced this tensor; null for leaves
  std::string name;               // optional, shown by print_tape() and to_dot()
  // Counts in-place writes to `value` (value_mut(), copy_(), optimizer steps,
  // load_state_dict, max_norm). An op remembers the versions of the values its
  // backward reads; backward() refuses to use values written since.
  uint64_t version = 0;
  // Two threads may backward() their own graphs into the same leaf (a shared
  // parameter): its gradient is added to under this lock.
  std::mutex grad_mutex;
};

class Tensor {
 public:
  Tensor();  // a 0-d tensor holding 0
  explicit Tensor(Array value, bool requires_grad = false);
  Tensor(xt::nested_initializer_list_t<float, 1> values, bool requires_grad = false);
  Tensor(xt::nested_initializer_list_t<float, 2> values, bool requires_grad = false);
  Tensor(xt::nested_initializer_list_t<float, 3> values, bool requires_grad = false);

  // --- values ---
  const Array& value() const { return impl_->value; }
  Shape shape() const;
  std::size_t dim() const { return impl_->value.dimension(); }
  std::size_t numel() const { return impl_->value.size(); }
  float item() const;  // the single value of a one-element tensor

  // The values, for writing in place (like PyTorch's `.data`): the write is not
  // recorded on the tape, so no gradient flows through it. Each call counts as an
  // in-place write and bumps version(): a backward() that needs the values an
  // earlier op read then throws instead of computing a wrong gradient. So write
  // between a step and the next forward (as optimizers do), and do not keep the
  // reference across a forward pass: a write through a kept reference is not seen.
  Array& value_mut() {
    ++impl_->version;
    return impl_->value;
  }
  // Overwrites the values in place (same shape) and bumps version(). A tensor
  // that requires grad can only be overwritten under NoGradGuard, as in PyTorch.
  void copy_(const Array& src);
  // How many in-place writes this tensor has had (PyTorch's _version).
  uint64_t version() const { return impl_->version; }

  // --- gradients ---
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool on);  // leaves only
  bool is_leaf() const { return impl_->creator == nullptr; }
  const Grad& grad() const { return impl_->grad; }
  Grad& grad_mut() { return impl_->grad; }
  Array grad_dense() const { return impl_->grad.to_dense(shape()); }  // zeros when empty
  void zero_grad() { impl_->grad.clear(); }
  void retain_grad();  // keep this non-leaf's gradient after backward()

  // Adds g into this tensor's gradient (or, for a non-leaf, into the gradient
  // that flows on during backward). Backward closures call these.
  // Pass std::move(g) to hand over the buffer instead of copying it. Adding into
  // a leaf takes its lock, so threads that share a parameter add up correctly.
  void accumulate_grad(Array g);
  void accumulate_grad(SparseRows g);

  // Runs backpropagation from this tensor. Without `gradient`, the tensor must
  // hold one element (a loss) and the seed is 1. The recorded ops of this graph
  // are released afterwards unless retain_graph is true.
  void backward(std::optional<Array> gradient = std::nullopt, bool retain_graph = false) const;

  Tensor detach() const;  // a new leaf with a copy of the values, no history

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

// The generator used when none is passed (module initialisation, for one).
// manual_seed() resets it, like torch.manual_seed.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Factories. Random ones take the generator explicitly so runs are reproducible.
Tensor zeros(const Shape& shape, bool requires_grad = false);
Tensor ones(const Shape& shape, bool requires_grad = false);
Tensor full(const Shape& shape, float value, bool requires_grad = false);
Tensor randn(const Shape& shape, Generator& gen, bool requires_grad = false);  // N(0, 1)
Tensor rand(const Shape& shape, Generator& gen, bool requires_grad = false);   // U[0, 1)

// Tensors and Indices from plain C++ data, as torch.tensor: the values are copied
// (row-major), and their count must fit the shape.
//   tg::Tensor x = tg::tensor(pixels, {n, 64});   // a std::vector<float>
//   tg::Indices y = tg::indices(labels);          // a std::vector<int64_t> -> [n]
Tensor tensor(const std::vector<float>& values, const Shape& shape, bool requires_grad = false);
Tensor tensor(const std::vector<float>& values);  // 1-d
Tensor tensor(const float* data, const Shape& shape, bool requires_grad = false);
Indices indices(const std::vector<int64_t>& values, const Shape& shape);
Indices indices(const std::vector<int64_t>& values);  // 1-d
Indices indices(const int64_t* data, const Shape& shape);

// torch.arange: start, start + step, ... up to but not including end. As in
// PyTorch, integer arguments give integers (Indices) and floating-point ones a
// float32 Tensor: arange(4) is Indices {0, 1, 2, 3}; arange(0.0, 1.0, 0.25) is
// Tensor {0, 0.25, 0.5, 0.75}.
namespace detail {
Indices arange_int(int64_t start, int64_t end, int64_t step);
Tensor arange_float(double start, double end, double step);
}  // namespace detail
template <class A, class B, class C = int>
  requires(std::is_arithmetic_v<A> && std::is_arithmetic_v<B> && std::is_arithmetic_v<C>)
auto arange(A start, B end, C step = 1) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B> && std::is_integral_v<C>)
    return detail::arange_int(start, end, step);
  else
    return detail::arange_float(start, end, step);
}
template <class T>
  requires std::is_arithmetic_v<T>
auto arange(T end) {
  return arange(T(0), end);
}

// Prints like PyTorch's repr, with the shape added:
//   tensor([[1.5000, 2.0000],
//           [3.0000, 4.0000]], shape=[2, 2], requires_grad=True)
// An op's output shows the op instead: grad_fn=<mul> (PyTorch: <MulBackward0>).
// More than 1000 elements are summarised with "...", as PyTorch does.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Grad mode. While a NoGradGuard lives, no op is recorded (this thread only).
bool is_grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tg

// Indices print the same way: tensor([3, 0, 1], shape=[3]). Indices is an
// xtensor type, so this lives in xtensor's namespace, where `std::cout << ids`
// finds it from any namespace.
namespace xt {
std::ostream& operator<<(std::ostream& os, const tg::Indices& a);
}  // namespace xt
