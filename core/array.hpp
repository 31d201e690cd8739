// The value types under a Tensor: float32 arrays, integer index arrays, shapes,
// and the two checks every allocation goes through.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
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
// indexes); n itself (past the end) unless -n <= i < n. The one place that
// wraps: wrap_index and normalize_dim (core/ops.hpp) throw on top of it.
inline std::size_t wrapped(int64_t i, std::size_t n) {
  const auto len = static_cast<int64_t>(n);
  return i < -len || i >= len ? n : static_cast<std::size_t>(i < 0 ? i + len : i);
}
// wrapped(i, n), or std::out_of_range naming `what` unless -n <= i < n.
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
Array empty_array(const char* op, std::span<const std::size_t> shape);  // a node's input_shape(i), say
// The same, filled with zeros (a gradient that only some elements add into).
Array zeros_array(const char* op, const Shape& shape);
Array zeros_array(const char* op, std::span<const std::size_t> shape);
// An uninitialised index array (argmax, sampling), checked the same way.
Indices empty_indices(const char* op, const Shape& shape);
// An uninitialised array of x's shape (no size check needed: x has it).
Array empty_like(const char* op, const Array& x);

// What `std::cout << a` prints for an Array or Indices (inspect/print.cpp): PyTorch's
// repr plus the shape, as a Tensor prints, tensor([3.0000, -0.5000], shape=[2]).
std::ostream& print_values(std::ostream& os, const Array& a);
std::ostream& print_values(std::ostream& os, const Indices& a);

}  // namespace tg

// std::cout << t.grad_dense(), << ids, << t.value() * 2: an xtensor array or
// expression of floating-point values prints as an Array (float32), one of
// integers as Indices. (Without this, an Array would convert to Indices and
// print truncated to integers.) Arrays of bool do not print: compare with
// tg::Array masks instead. These live in xtensor's namespace, where
// `std::cout << a` finds them from any namespace; they take precedence over
// <xtensor/xio.hpp>'s printer.
namespace xt {
template <class E>
  requires(is_xexpression<E>::value &&
           (std::is_floating_point_v<typename E::value_type> ||
            (std::is_integral_v<typename E::value_type> && !std::is_same_v<typename E::value_type, bool>)))
std::ostream& operator<<(std::ostream& os, const E& e) {
  if constexpr (std::is_same_v<E, tg::Array> || std::is_same_v<E, tg::Indices>)
    return tg::print_values(os, e);
  else if constexpr (std::is_floating_point_v<typename E::value_type>)
    return tg::print_values(os, tg::Array(e));  // evaluated, as float32
  else
    return tg::print_values(os, tg::Indices(e));
}
}  // namespace xt
