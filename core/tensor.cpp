#include "tensor.hpp"

#include <cstdint>
#include <stdexcept>

#ifdef __linux__
#include <sys/mman.h>
#endif

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

void advise_huge_pages(float* data, std::size_t count) {
#ifdef __linux__
  const std::uintptr_t huge = std::uintptr_t{2} << 20;
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(data + count) & ~(huge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // a hint
#else
  (void)data;
  (void)count;
#endif
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
