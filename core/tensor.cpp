// Tensor, the handle: values, the gradient slot, backward() and tg::grad(), grad mode.
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
    throw std::logic_error(
        std::string("in-place write (value_mut, copy_): this tensor is the result of ") + op +
        ", a copy in tapegrad (a view in PyTorch): a write would not reach " + op +
        "'s input; write into the input, or into detach() of this tensor, an independent copy");
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
  impl_->grad.accumulate(std::move(g), shape());
}

// The seed of a backward pass from t: `gradient`, or 1 for a one-element t.
static Array seed_of(const Tensor& t, std::optional<Array> gradient, const char* op) {
  if (const char* ran_in = t.impl()->backward_ran_in)
    throw std::logic_error(std::string(op) + ": " + ran_in +
                           " returned this loss after running its backward pass, which added the gradients "
                           "into the parameters: step the optimizer now (a second backward would add them "
                           "again)");
  if (!t.requires_grad())
    throw std::logic_error(std::string(op) +
                           ": the tensor does not require grad (it is a leaf without requires_grad, or was "
                           "computed under NoGradGuard)");
  if (gradient && shape_of(*gradient) != t.shape())
    throw std::invalid_argument(std::string(op) + ": gradient of shape " + shape_str(shape_of(*gradient)) +
                                " for a tensor of shape " + shape_str(t.shape()));
  if (!gradient && t.numel() != 1)
    throw std::invalid_argument(
        std::string(op) + ": a gradient can only be implied for a one-element tensor; this one has shape " +
        shape_str(t.shape()) +
        (op == std::string("grad") ? ": pass grad_output" : ": pass backward(gradient)"));
  return gradient ? std::move(*gradient) : Array(xt::ones<float>(t.shape()));
}

void Tensor::backward(std::optional<Array> gradient, bool retain_graph) const {
  run_backward(*this, seed_of(*this, std::move(gradient), "backward"), retain_graph);
}

std::vector<Grad> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                       std::optional<Array> grad_output, bool retain_graph) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = "grad: input " + std::to_string(i) + " (" +
                             (inputs[i].name().empty() ? "of shape " + shape_str(inputs[i].shape())
                                                       : "'" + inputs[i].name() + "'") +
                             ")";
    if (!inputs[i].is_leaf() || !inputs[i].requires_grad())
      throw std::invalid_argument(what + " is not a leaf that requires grad");
    for (std::size_t j = 0; j < i; ++j)
      if (inputs[j].is_same(inputs[i]))
        throw std::invalid_argument(what + " is input " + std::to_string(j) + " again");
  }
  return run_backward(output, seed_of(output, std::move(grad_output), "grad"), retain_graph, &inputs);
}

// ---------------------------------------------------------------- grad mode

static thread_local bool grad_enabled = true;

bool is_grad_enabled() {
  return grad_enabled;
}
NoGradGuard::NoGradGuard() : ScopedSetting(grad_enabled, false) {}

}  // namespace tg
