// Tensor, the handle: values, the gradient slot, backward() and tg::grad(), grad mode.
#include "tensor.hpp"

#include <algorithm>

#include "check.hpp"
#include "tape.hpp"

namespace tg {

Tensor::Tensor(Array value, bool requires_grad) : impl_(std::make_shared<TensorImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

float Tensor::item() const {
  check(numel() == 1, "item: tensor of shape ", value().shape(), " has ", numel(), " elements, not one");
  return value().data()[0];
}

float Tensor::item(std::initializer_list<int64_t> index) const {
  check<std::out_of_range>(index.size() == dim(), "item: ", index.size(), " indices for a tensor of shape ",
                           value().shape());
  std::size_t at = 0, d = 0;  // row-major: the last index varies fastest
  for (int64_t i : index) {
    const std::size_t n = value().shape()[d++];
    at = at * n + wrap_index("item: index", i, n);
  }
  return value().data()[at];
}

Array& Tensor::value_mut() {
  const char* op = impl_->copy_of_view;
  check<std::logic_error>(
      !op, "in-place write (value_mut, copy_): this tensor is the result of ", op,
      ", a copy in tapegrad (a view in PyTorch): a write would not reach ", op,
      "'s input; write into the input, or into detach() of this tensor, an independent copy");
  ++impl_->version;
  return impl_->value;
}

void Tensor::copy_(const Array& src) {
  check<std::logic_error>(!requires_grad() || !is_grad_enabled(),
                          "copy_: a tensor that requires grad can only be overwritten under NoGradGuard");
  check(std::ranges::equal(src.shape(), value().shape()), "copy_: source of shape ", src.shape(),
        " for a tensor of shape ", value().shape());
  value_mut() = src;
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (!is_leaf())
    throw std::logic_error(
        message("set_requires_grad: only leaves can change it; this tensor was made by op '", creator()->op,
                "' (use detach() to get a leaf)"));
  impl_->requires_grad = on;
  return *this;
}

void Tensor::retain_grad() {
  check<std::logic_error>(requires_grad(), "retain_grad: the tensor does not require grad");
  impl_->retains_grad = true;
}

void Tensor::accumulate_grad(Grad g) {
  std::lock_guard<std::mutex> lock(impl_->grad_mutex);
  impl_->grad.accumulate(std::move(g), value().shape());
}

// The seed of a backward pass from t: `gradient`, or 1 for a one-element t.
static Array seed_of(const Tensor& t, std::optional<Array> gradient, const std::string& op) {
  const char* ran_in = t.impl()->backward_ran_in;
  check<std::logic_error>(
      !ran_in, op, ": ", ran_in,
      " returned this loss after running its backward pass, which added the gradients "
      "into the parameters: step the optimizer now (a second backward would add them again)");
  check<std::logic_error>(t.requires_grad(), op,
                          ": the tensor does not require grad (it is a leaf without requires_grad, or was "
                          "computed under NoGradGuard)");
  if (!gradient) {
    check(t.numel() == 1, op,
          ": a gradient can only be implied for a one-element tensor; this one has shape ", t.value().shape(),
          op == "grad" ? ": pass grad_output" : ": pass backward(gradient)");
    return xt::ones<float>(t.value().shape());
  }
  check(std::ranges::equal(gradient->shape(), t.value().shape()), op, ": gradient of shape ",
        gradient->shape(), " for a tensor of shape ", t.value().shape());
  return std::move(*gradient);
}

void Tensor::backward(std::optional<Array> gradient, bool retain_graph) const {
  run_backward(*this, seed_of(*this, std::move(gradient), "backward"), retain_graph);
}

std::vector<Grad> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                       std::optional<Array> grad_output, bool retain_graph) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    const std::string what =
        message("grad: input ", i, " (",
                x.name().empty() ? "of shape " + shape_str(x.shape()) : "'" + x.name() + "'", ")");
    check(x.is_leaf() && x.requires_grad(), what, " is not a leaf that requires grad");
    for (std::size_t j = 0; j < i; ++j) check(!inputs[j].is_same(x), what, " is input ", j, " again");
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
