// Making tensors: filled, random, from C++ data, ranges; and the generator
// random factories and module initialisers draw from.
#pragma once

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "tensor.hpp"

namespace tg {

using Generator = std::mt19937;  // pass one explicitly to every random factory
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
requires(std::is_arithmetic_v<A>&& std::is_arithmetic_v<B>&& std::is_arithmetic_v<C>) auto arange(
    A start, B end, C step = 1) {
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

}  // namespace tg
