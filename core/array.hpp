// The value types under a Tensor: float32 arrays, integer index arrays, shapes,
// and the two checks every allocation goes through.
#pragma once

#include <cstddef>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

namespace tg {

using Array = xt::xarray<float>;      // n-d float32 values, row-major
using Indices = xt::xarray<int64_t>;  // integer inputs: class labels, token ids, rows
using Shape = std::vector<std::size_t>;

// A shape written in a call, zeros({n, 4}), with n of any integer type (an
// int64_t from Indices, a std::size_t from .size()) and no narrowing warning.
// A negative dim throws std::invalid_argument.
class Dim {
 public:
  template <std::integral T>
  Dim(T d) : value_(static_cast<std::size_t>(d)) {  // NOLINT: any integer is a dim
    if constexpr (std::is_signed_v<T>)
      if (d < 0) throw std::invalid_argument("shape: negative dimension " + std::to_string(d));
  }
  operator std::size_t() const { return value_; }

 private:
  std::size_t value_;
};
struct Dims : Shape {
  Dims(std::initializer_list<Dim> dims) : Shape(dims.begin(), dims.end()) {}
  Dims(Shape shape) : Shape(std::move(shape)) {}  // NOLINT: a Shape is Dims
};

std::string shape_str(std::span<const std::size_t> shape);  // "[2, 3]", of a Shape or an array's shape()
inline std::string shape_str(const Shape& shape) {  // shape_str({2, 3}) too
  return shape_str(std::span<const std::size_t>(shape));
}
template <class A>
Shape shape_of(const A& a) {  // an xtensor array's shape as a Shape
  return Shape(a.shape().begin(), a.shape().end());
}

// Shape of a op b under broadcasting (NumPy's and PyTorch's rule: shapes are
// aligned from the right, and a dim of 1 or a missing one stretches); throws
// std::invalid_argument naming `op` when they do not broadcast.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// Position i along a dim of n, negative counting from the end (as PyTorch
// indexes); throws std::out_of_range naming `what` unless -n <= i < n.
std::size_t wrap_index(const char* what, int64_t i, std::size_t n);

// The number of elements of `shape`. Throws std::length_error naming `op` and the
// shape when the count of elements or bytes does not fit in memory addresses
// (zeros({1 << 62, 4}) would otherwise wrap around to a small array).
std::size_t checked_numel(const char* op, const Shape& shape, std::size_t element_size = sizeof(float));

// What an allocation that failed throws: a std::bad_alloc that says which op
// asked and for how many bytes.
class OutOfMemory : public std::bad_alloc {
 public:
  OutOfMemory(const char* op, const Shape& shape, std::size_t bytes);
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// An uninitialised float array of `shape` for `op`: the size is checked first,
// and a failed allocation throws OutOfMemory.
Array empty_array(const char* op, const Shape& shape);
// An uninitialised array of x's shape (no size check needed: x has it).
Array empty_like(const char* op, const Array& x);

}  // namespace tg
