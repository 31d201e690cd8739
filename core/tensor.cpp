#include "tensor.hpp"

#include <stdexcept>

#include "tape.hpp"

namespace tg {

Tensor::Tensor() : Tensor(Array(0.0f)) {}

Tensor::Tensor(Array value, bool requires_grad) : impl_(std::make_shared<TensorImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

Tensor::Tensor(xt::nested_initializer_list_t<float, 1> values, bool requires_grad)
    : Tensor(Array(values), requires_grad) {}
Tensor::Tensor(xt::nested_initializer_list_t<float, 2> values, bool requires_grad)
    : Tensor(Array(values), requires_grad) {}
Tensor::Tensor(xt::nested_initializer_list_t<float, 3> values, bool requires_grad)
    : Tensor(Array(values), requires_grad) {}

float Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item: tensor of shape " + shape_str(shape()) + " has " +
                                std::to_string(numel()) + " elements, not one");
  return impl_->value.data()[0];
}

float Tensor::item(std::initializer_list<int64_t> index) const {
  if (index.size() != dim())
    throw std::out_of_range("item: " + std::to_string(index.size()) + " indices for a tensor of shape " +
                            shape_str(shape()));
  std::size_t at = 0, d = 0;  // row-major: the last index varies fastest
  for (int64_t i : index) {
    const std::size_t n = impl_->value.shape()[d++];
    at = at * n + wrap_index("item: index", i, n);
  }
  return impl_->value.data()[at];
}

std::vector<float> Tensor::to_vector() const {
  return std::vector<float>(impl_->value.begin(), impl_->value.end());
}

Array& Tensor::value_mut() {
  if (const char* op = impl_->copy_of_view)
    throw std::logic_error(std::string("in-place write (value_mut, copy_): this tensor is the result of ") + op + ", a copy in tapegrad " +
                           "(a view in PyTorch): a write would not reach " + op + "'s input; write into the " +
                           "input, or into detach() of this tensor, an independent copy");
  ++impl_->version;
  return impl_->value;
}

void Tensor::copy_(const Array& src) {
  if (requires_grad() && is_grad_enabled())
    throw std::logic_error("copy_: a tensor that requires grad can only be overwritten under NoGradGuard");
  if (shape_of(src) != shape())
    throw std::invalid_argument("copy_: source of shape " + shape_str(shape_of(src)) +
                                " for a tensor of shape " + shape_str(shape()));
  value_mut() = src;
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (!is_leaf())
    throw std::logic_error("set_requires_grad: only leaves can change it; this tensor was made by op '" +
                           creator()->op + "' (use detach() to get a leaf)");
  impl_->requires_grad = on;
  return *this;
}

void Tensor::retain_grad() {
  if (!requires_grad()) throw std::logic_error("retain_grad: the tensor does not require grad");
  impl_->retains_grad = true;
}

void Tensor::accumulate_grad(Grad g) {
  std::lock_guard<std::mutex> lock(impl_->grad_mutex);
  impl_->grad.add(std::move(g), shape());
}

void Tensor::backward(std::optional<Array> gradient, bool retain_graph) const {
  if (!requires_grad())
    throw std::logic_error(
        "backward: the tensor does not require grad (it is a leaf without "
        "requires_grad, or was computed under NoGradGuard)");
  if (gradient && shape_of(*gradient) != shape())
    throw std::invalid_argument("backward: gradient of shape " + shape_str(shape_of(*gradient)) +
                                " for a tensor of shape " + shape_str(shape()));
  if (!gradient && numel() != 1)
    throw std::invalid_argument(
        "backward: a gradient can only be implied for a one-element tensor; this one has shape " +
        shape_str(shape()) + ": pass backward(gradient)");
  run_backward(*this, gradient ? std::move(*gradient) : Array(xt::ones<float>(shape())), retain_graph);
}

// ---------------------------------------------------------------- grad mode

static thread_local bool grad_enabled = true;

bool is_grad_enabled() {
  return grad_enabled;
}
NoGradGuard::NoGradGuard() : previous_(grad_enabled) {
  grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  grad_enabled = previous_;
}

}  // namespace tg
