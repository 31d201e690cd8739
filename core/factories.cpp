// Tensors made from nothing: zeros, ones, full, arange, rand, randn, and the Generator.
#include "factories.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "check.hpp"

namespace tg {

Generator::Generator(uint64_t seed) : state_(std::make_shared<State>()) {
  this->seed(seed);
}

void Generator::seed(uint64_t seed) {
  set_engine(std::mt19937(static_cast<result_type>(seed)));
}

void Generator::set_engine(const std::mt19937& engine) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->engine = engine;
  }
  // In a shard, a generator made before it draws from the shard: from now on from
  // an engine of its own there, seeded the same (detail::ShardStream).
  if (detail::ShardStream* shard = detail::ShardStream::current; shard && state_->made_in != shard->id)
    shard->seeded[state_.get()] = engine;
}

Generator Generator::clone() const {
  Generator copy;
  std::lock_guard<std::mutex> lock(state_->mutex);
  copy.state_->engine = state_->engine;
  return copy;
}

std::string Generator::state() const {
  std::ostringstream out;
  std::lock_guard<std::mutex> lock(state_->mutex);
  out << state_->engine;
  return out.str();
}

void Generator::set_state(const std::string& text) {
  std::mt19937 engine;
  std::istringstream in(text);
  in >> engine;
  std::ostringstream back;
  back << engine;
  // Whatever does not read back to the same text (truncated, not numbers,
  // another library's layout) is refused.
  if (in.fail() || back.str() != text)
    throw std::invalid_argument("Generator::set_state: not a state that std::mt19937 wrote");
  set_engine(engine);
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}
void manual_seed(uint64_t seed) {
  default_generator().seed(seed);
}

Tensor zeros(const Dims& shape, bool requires_grad) {
  return full(shape, 0.0f, requires_grad);
}
Tensor ones(const Dims& shape, bool requires_grad) {
  return full(shape, 1.0f, requires_grad);
}
Tensor full(const Dims& shape, float value, bool requires_grad) {
  Array a = empty_array("full", shape);
  a.fill(value);
  return Tensor(std::move(a), requires_grad);
}
Tensor randn(const Dims& shape, Generator& gen, bool requires_grad) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Array a = empty_array("randn", shape);
  gen.draw([&](std::mt19937& e) {
    for (float& x : a) x = dist(e);
  });
  return Tensor(std::move(a), requires_grad);
}
Tensor rand(const Dims& shape, Generator& gen, bool requires_grad) {
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  Array a = empty_array("rand", shape);
  gen.draw([&](std::mt19937& e) {
    for (float& x : a) x = dist(e);
  });
  return Tensor(std::move(a), requires_grad);
}

template <class T>
static xt::xarray<T> from_values(const char* op, const T* data, std::size_t count, const Shape& shape) {
  const std::size_t n = checked_numel(op, shape, sizeof(T));
  if (count != n)
    throw std::invalid_argument(
        message(op, ": ", count, " values do not fit shape ", shape, " (", n, " elements)"));
  xt::xarray<T> a = xt::empty<T>(shape);
  std::copy_n(data, count, a.data());
  return a;
}

Tensor tensor(const std::vector<float>& values, const Dims& shape, bool requires_grad) {
  return Tensor(from_values("tensor", values.data(), values.size(), shape), requires_grad);
}
Tensor tensor(const std::vector<float>& values) {
  return tensor(values, Shape{values.size()});
}
Tensor tensor(const float* data, const Dims& shape, bool requires_grad) {
  const std::size_t n = checked_numel("tensor", shape);
  if (data == nullptr && n > 0)
    throw std::invalid_argument(message("tensor: null pointer for shape ", shape));
  return Tensor(from_values("tensor", data, n, shape), requires_grad);
}
Indices indices(const std::vector<int64_t>& values, const Dims& shape) {
  return from_values("indices", values.data(), values.size(), shape);
}
Indices indices(const std::vector<int64_t>& values) {
  return indices(values, Shape{values.size()});
}
Indices indices(const int64_t* data, const Dims& shape) {
  const std::size_t n = checked_numel("indices", shape, sizeof(int64_t));
  if (data == nullptr && n > 0)
    throw std::invalid_argument(message("indices: null pointer for shape ", shape));
  return from_values("indices", data, n, shape);
}

// The number of steps from start towards end, ceil((end - start) / step), after
// checking that step goes that way (PyTorch's checks and count).
static std::size_t arange_count(double start, double end, double step) {
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw std::invalid_argument(
        message("arange: start ", start, ", end ", end, " and step ", step, " must be finite"));
  if (step == 0) throw std::invalid_argument("arange: step must be nonzero");
  if ((step > 0 && end < start) || (step < 0 && end > start))
    throw std::invalid_argument(
        message("arange: step ", step, " does not lead from start ", start, " to end ", end));
  const double n = std::ceil((end - start) / step);
  if (n > 1e12)  // also keeps the conversion below defined
    throw std::invalid_argument(message("arange: ", n, " elements are too many"));
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
