// Sums: of a whole array, along dims, and back to a shape an input was
// broadcast from (the engine's un-broadcast step). Every sum in the library
// runs here or through lane_sum below.
//
// Sums accumulate in double, in 16 lanes: the values are added into 16
// running sums in turn (lane i takes elements i, i + 16, ...), which a
// compiler can keep in SIMD registers without reordering anything, and the
// lanes are then added pairwise. Added up in float32 one after another, ten
// million values of 0.1 drift to 1.088e6; in double the error stays below
// float32's last digit up to billions of values. The order depends only on
// the shapes, never on the CPU or the thread count, so the bits do not either.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "../array.hpp"

namespace tg::kernels {

// sum_i term(i) for i in [0, n), in double, in the 16 lanes. term(i) returns
// the i-th addend as a double; it is inlined, so that a loop like
//   lane_sum(n, [&](std::size_t i) { return double(x[i]) * y[i]; })
// compiles to SIMD code. Inlined into its caller too, so that a caller
// compiled for AVX2 (core/kernels/dispatch.hpp) gets it in AVX2; the bits are the same.
template <class Term>
[[gnu::always_inline]] inline double lane_sum(std::size_t n, Term term) {
  double lane[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) lane[j] += term(i + j);
  for (std::size_t j = 0; i < n; ++i, ++j) lane[j] += term(i);
  for (std::size_t half = 8; half > 0; half /= 2)
    for (std::size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
  return lane[0];
}

// The sum of x[0..n), and of x[i] y[i].
[[gnu::always_inline]] inline double lane_sum(const float* x, std::size_t n) {
  return lane_sum(n, [x](std::size_t i) { return static_cast<double>(x[i]); });
}
[[gnu::always_inline]] inline double lane_dot(const float* x, const float* y, std::size_t n) {
  return lane_sum(n, [x, y](std::size_t i) { return static_cast<double>(x[i]) * static_cast<double>(y[i]); });
}

// The largest of x[0..n) (-inf for none), NaNs passed over, in 16 lanes as
// above: a running maximum compares one value after another, which no
// compiler may split up by itself.
[[gnu::always_inline]] inline float lane_max(const float* x, std::size_t n) {
  float lane[16];
  for (float& v : lane) v = -std::numeric_limits<float>::infinity();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  for (std::size_t j = 0; i < n; ++i, ++j) lane[j] = x[i] > lane[j] ? x[i] : lane[j];
  for (std::size_t half = 8; half > 0; half /= 2)
    for (std::size_t j = 0; j < half; ++j) lane[j] = lane[j + half] > lane[j] ? lane[j + half] : lane[j];
  return lane[0];
}

// Column sums: for the columns [lo, hi), out[k][i] = the sum over rows r of
// term(r, i)[k] (term returns K doubles: K sums in one pass), added in double
// row after row. 256 columns at a time: a row of doubles per sum, which stays
// in L1 while the rows go by and which the compiler vectorizes across the
// columns. A null out[k] is not written. Inlined, as lane_sum.
template <std::size_t K, class Term>
[[gnu::always_inline]] inline void column_sums(std::size_t rows, std::size_t lo, std::size_t hi,
                                               const std::array<float*, K>& out, Term term) {
  constexpr std::size_t width = 256;
  double acc[K][width];
  for (std::size_t c0 = lo; c0 < hi; c0 += width) {
    const std::size_t cols = std::min(width, hi - c0);
    for (std::size_t k = 0; k < K; ++k) std::fill_n(acc[k], cols, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < cols; ++i) {
        const std::array<double, K> v = term(r, c0 + i);
        for (std::size_t k = 0; k < K; ++k) acc[k][i] += v[k];
      }
    for (std::size_t k = 0; k < K; ++k)
      if (out[k])
        for (std::size_t i = 0; i < cols; ++i) out[k][c0 + i] = static_cast<float>(acc[k][i]);
  }
}

// Every element of x added up (large arrays split across threads in fixed
// blocks, so the result does not depend on the thread count).
double sum(const float* x, std::size_t n);

// x seen as [outer, n, inner]: out[o, i] = sum_j x[o, j, i], out [outer, inner].
void sum_middle(const float* x, std::size_t outer, std::size_t n, std::size_t inner, float* out);

// x summed over `axes` (any order, no repeats), which stay as dims of size 1
// when keepdim.
Array sum_over(const char* op, const Array& x, std::vector<std::size_t> axes, bool keepdim);

// A gradient of a broadcast shape summed back to `shape`, the shape of the
// input that was broadcast (the dims it lacked or had as 1). One pass when the
// summed dims are adjacent once the kept ones are merged; g itself when the
// shapes already match.
Array sum_to_shape(const Array& g, std::span<const std::size_t> shape);

}  // namespace tg::kernels
