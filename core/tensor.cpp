#include "core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "core/tape.hpp"

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

Shape Tensor::shape() const {
  return Shape(impl_->value.shape().begin(), impl_->value.shape().end());
}

float Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item: tensor of shape " + shape_str(shape()) + " has " +
                                std::to_string(numel()) + " elements, not one");
  return impl_->value.data()[0];
}

void Tensor::copy_(const Array& src) {
  if (requires_grad() && is_grad_enabled())
    throw std::logic_error("copy_: a tensor that requires grad can only be overwritten under NoGradGuard");
  Shape s(src.shape().begin(), src.shape().end());
  if (s != shape())
    throw std::invalid_argument("copy_: source of shape " + shape_str(s) + " for a tensor of shape " +
                                shape_str(shape()));
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

// A leaf may be shared by graphs that threads backward at the same time (a
// parameter), so adding into it takes its lock. A non-leaf belongs to one graph,
// which one backward() walks at a time.
template <class G>
static void add_into(TensorImpl& t, G g, const Shape& shape) {
  if (t.creator) {
    t.pending.add(std::move(g), shape);
  } else {
    std::lock_guard<std::mutex> lock(t.grad_mutex);
    t.grad.add(std::move(g), shape);
  }
}

void Tensor::accumulate_grad(Array g) {
  if (requires_grad()) add_into(*impl_, std::move(g), shape());
}

void Tensor::accumulate_grad(SparseRows g) {
  if (requires_grad()) add_into(*impl_, std::move(g), shape());
}

void Tensor::backward(std::optional<Array> gradient, bool retain_graph) const {
  if (!requires_grad())
    throw std::logic_error(
        "backward: the tensor does not require grad (it is a leaf without "
        "requires_grad, or was computed under NoGradGuard)");
  Array seed;
  if (gradient) {
    Shape s(gradient->shape().begin(), gradient->shape().end());
    if (s != shape())
      throw std::invalid_argument("backward: gradient of shape " + shape_str(s) + " for a tensor of shape " +
                                  shape_str(shape()));
    seed = std::move(*gradient);
  } else {
    if (numel() != 1)
      throw std::invalid_argument(
          "backward: a gradient can only be implied for a one-element "
          "tensor; this one has shape " +
          shape_str(shape()) + ": pass backward(gradient)");
    seed = xt::ones<float>(shape());
  }
  run_backward(*this, std::move(seed), retain_graph);
}

Tensor Tensor::detach() const {
  return Tensor(impl_->value);
}

// ---------------------------------------------------------------- factories

Generator& default_generator() {
  static thread_local Generator gen(0);
  return gen;
}
void manual_seed(uint64_t seed) {
  default_generator().seed(static_cast<Generator::result_type>(seed));
}

Tensor zeros(const Shape& shape, bool requires_grad) {
  return Tensor(xt::zeros<float>(shape), requires_grad);
}
Tensor ones(const Shape& shape, bool requires_grad) {
  return Tensor(xt::ones<float>(shape), requires_grad);
}
Tensor full(const Shape& shape, float value, bool requires_grad) {
  Array a = xt::empty<float>(shape);
  a.fill(value);
  return Tensor(std::move(a), requires_grad);
}
Tensor randn(const Shape& shape, Generator& gen, bool requires_grad) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Array a = xt::empty<float>(shape);
  for (float& x : a) x = dist(gen);
  return Tensor(std::move(a), requires_grad);
}
Tensor rand(const Shape& shape, Generator& gen, bool requires_grad) {
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  Array a = xt::empty<float>(shape);
  for (float& x : a) x = dist(gen);
  return Tensor(std::move(a), requires_grad);
}

static std::size_t shape_numel(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

template <class T>
static xt::xarray<T> from_values(const char* op, const T* data, std::size_t count, const Shape& shape) {
  if (count != shape_numel(shape))
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(count) + " values do not fit shape " +
                                shape_str(shape) + " (" + std::to_string(shape_numel(shape)) + " elements)");
  xt::xarray<T> a = xt::empty<T>(shape);
  std::copy_n(data, count, a.data());
  return a;
}

Tensor tensor(const std::vector<float>& values, const Shape& shape, bool requires_grad) {
  return Tensor(from_values("tensor", values.data(), values.size(), shape), requires_grad);
}
Tensor tensor(const std::vector<float>& values) {
  return tensor(values, Shape{values.size()});
}
Tensor tensor(const float* data, const Shape& shape, bool requires_grad) {
  if (data == nullptr && shape_numel(shape) > 0)
    throw std::invalid_argument("tensor: null pointer for shape " + shape_str(shape));
  return Tensor(from_values("tensor", data, shape_numel(shape), shape), requires_grad);
}
Indices indices(const std::vector<int64_t>& values, const Shape& shape) {
  return from_values("indices", values.data(), values.size(), shape);
}
Indices indices(const std::vector<int64_t>& values) {
  return indices(values, Shape{values.size()});
}
Indices indices(const int64_t* data, const Shape& shape) {
  if (data == nullptr && shape_numel(shape) > 0)
    throw std::invalid_argument("indices: null pointer for shape " + shape_str(shape));
  return from_values("indices", data, shape_numel(shape), shape);
}

// The number of steps from start towards end, ceil((end - start) / step), after
// checking that step goes that way (PyTorch's checks and count).
static std::size_t arange_count(double start, double end, double step) {
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw std::invalid_argument("arange: start " + std::to_string(start) + ", end " + std::to_string(end) +
                                " and step " + std::to_string(step) + " must be finite");
  if (step == 0) throw std::invalid_argument("arange: step must be nonzero");
  if ((step > 0 && end < start) || (step < 0 && end > start))
    throw std::invalid_argument("arange: step " + std::to_string(step) + " does not lead from start " +
                                std::to_string(start) + " to end " + std::to_string(end));
  const double n = std::ceil((end - start) / step);
  if (n > 1e12)  // also keeps the conversion below defined
    throw std::invalid_argument("arange: " + std::to_string(n) + " elements are too many");
  return static_cast<std::size_t>(n);
}

namespace detail {
Indices arange_int(int64_t start, int64_t end, int64_t step) {
  const std::size_t n = arange_count(static_cast<double>(start), static_cast<double>(end),
                                     static_cast<double>(step));
  Indices a = xt::empty<int64_t>(Shape{n});
  for (std::size_t i = 0; i < n; ++i) a(i) = start + static_cast<int64_t>(i) * step;
  return a;
}
Tensor arange_float(double start, double end, double step) {
  const std::size_t n = arange_count(start, end, step);
  Array a = xt::empty<float>(Shape{n});
  for (std::size_t i = 0; i < n; ++i) a(i) = static_cast<float>(start + static_cast<double>(i) * step);
  return Tensor(std::move(a));
}
}  // namespace detail

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
