// exp, erf and tanh of one float in plain arithmetic, for loops the compiler
// turns into SIMD code (inside the library; not a public header).
//
// std::exp, std::erf and std::tanh are a library call per element (10, 30 and
// 35 ns here), and a compiler cannot vectorize a loop that calls them. A
// transformer's GELU and attention softmax run them over every hidden value
// and every score, so those loops use these instead: only multiplies, adds,
// one division, comparisons and bit shifts, no branches. Put them inside a
// function marked TG_ALSO_FOR_AVX2 (core/dispatch.hpp) to get AVX2 code too.
// GCC turns their comparisons into SIMD selects only under -fno-trapping-math
// (meson.build), which tells it that nothing reads the floating-point
// exception flags.
//
// How close (tests/test_ops_transformer.cpp checks these bounds on a grid):
//   exp_fast   within 2 ulp of std::exp for x in [-87, 88]; 0 below -104,
//              inf above 89, subnormals between, NaN stays NaN (Cephes' expf:
//              e^x = 2^n e^r with |r| <= ln2 / 2, e^r a degree-6 polynomial).
//   erf_fast   within 6e-7 of std::erf: Abramowitz & Stegun's 7.1.26, the
//              formula PyTorch's own AVX2 erf uses.
//   tanh_fast  within 2e-7 of std::tanh: 1 - 2 / (e^2x + 1).
#pragma once

#include <bit>
#include <cstdint>

namespace tg::detail {

inline float exp_fast(float x) {
  // Clamp first: outside [-104, 89] e^x is 0 or inf in float32 anyway. A NaN
  // passes both tests and the polynomial below, and comes out NaN.
  float c = x < -104.0f ? -104.0f : x;
  c = c > 89.0f ? 89.0f : c;
  // n = round(x / ln 2), as floor(t + 0.5) without a call to floor; a NaN t
  // becomes 0 first (converting NaN to an integer is undefined).
  float t = c * 1.44269504088896341f + 0.5f;
  t = t != t ? 0.0f : t;
  int32_t n = static_cast<int32_t>(t);  // rounds toward 0 ...
  n -= t < static_cast<float>(n);       // ... so step down for negative t
  const float nf = static_cast<float>(n);
  // r = x - n ln 2, with ln 2 in two parts so that n * ln2_hi is exact.
  const float r = c - nf * 0.693359375f + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // Times 2^n, in two halves so that each factor is a normal float even where
  // e^x is subnormal (n down to -150) or about to overflow (n up to 128).
  const int32_t n1 = n >> 1, n2 = n - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  return er * s1 * s2;
}

inline float erf_fast(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float e = 1.0f - p * t * exp_fast(-a * a);  // erf(|x|); NaN stays NaN
  return x < 0.0f ? -e : e;
}

inline float tanh_fast(float x) {
  return 1.0f - 2.0f / (exp_fast(2.0f * x) + 1.0f);  // +-inf give +-1
}

}  // namespace tg::detail
