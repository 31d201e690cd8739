#include "factories.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tg {

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
  const std::size_t n =
      arange_count(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step));
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

}  // namespace tg
