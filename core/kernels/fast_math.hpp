// exp, log, erf and tanh of one float in plain arithmetic, for loops the
// compiler turns into SIMD code (inside the library; not a public header).
//
// std::exp, std::log, std::erf and std::tanh are a library call per element
// (10 to 35 ns here), and a compiler cannot vectorize a loop that calls them.
// The elementwise kernels (core/kernels/elementwise.cpp), GELU and the softmax
// rows run these instead: only multiplies, adds, one division, comparisons
// and bit operations, no branches, so every x86-64 CPU computes the same bits.
// Put them inside a function marked TG_ALSO_FOR_AVX2 (core/kernels/dispatch.hpp) to
// get AVX2 code too. GCC turns their comparisons into SIMD selects only under
// -fno-trapping-math (meson.build), which tells it that nothing reads the
// floating-point exception flags.
//
// How close (tests/test_ops_transformer.cpp checks these bounds on a grid):
//   exp_fast   within 2 ulp of std::exp for x in [-87, 88]; 0 below -104,
//              inf above 89, subnormals between, NaN stays NaN (Cephes' expf:
//              e^x = 2^n e^r with |r| <= ln2 / 2, e^r a degree-6 polynomial).
//   log_fast   within 2 ulp of std::log for every positive float, subnormals
//              included; log(0) = -inf, log(inf) = inf, log(x < 0) and
//              log(NaN) NaN (Cephes' logf: x = 2^e m, log m a polynomial).
//   erf_fast   within 6e-7 of std::erf: Abramowitz & Stegun's 7.1.26, the
//              formula PyTorch's own AVX2 erf uses.
//   tanh_fast  within 2 ulp of std::tanh: an odd polynomial for |x| <= 0.625
//              (so tanh(1e-10) is 1e-10, not 0), 1 - 2 / (e^2|x| + 1) above
//              (Cephes' tanhf).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

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

// erf(x), given e = e^(-x^2): GELU's slope needs that exponential anyway (the
// normal density), and computes it once for both.
inline float erf_with_exp(float x, float e) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float r = 1.0f - p * t * e;  // erf(|x|); NaN stays NaN
  return x < 0.0f ? -r : r;
}

inline float erf_fast(float x) {
  return erf_with_exp(x, exp_fast(-x * x));
}

inline float log_fast(float x) {
  // Subnormals first become normal: x 2^23, with 23 taken off the exponent.
  const bool tiny = x < 1.17549435e-38f;
  const float xn = tiny ? x * 8388608.0f : x;
  // x = 2^e m with m in [sqrt(1/2), sqrt(2)), from the bits.
  const int32_t bits = std::bit_cast<int32_t>(xn);
  int32_t e = ((bits >> 23) & 0xff) - 126 - (tiny ? 23 : 0);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e -= low;
  m = (low ? m + m : m) - 1.0f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  const float ef = static_cast<float>(e);
  // log x = e ln2 + log(1 + m), ln 2 in two parts as in exp_fast.
  float y = p * m * z + ef * -2.12194440e-4f - 0.5f * z;
  y = m + y + ef * 0.693359375f;
  // The edges: 0 (and -0) give -inf, inf gives inf, negatives and NaN give NaN.
  y = x == 0.0f ? -std::numeric_limits<float>::infinity() : y;
  y = x == std::numeric_limits<float>::infinity() ? x : y;
  return x < 0.0f || x != x ? std::numeric_limits<float>::quiet_NaN() : y;
}

inline float tanh_fast(float x) {
  const float a = x < 0.0f ? -x : x;
  // Near 0 an odd polynomial: x + x^3 P(x^2).
  const float s = x * x;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  const float small = p * s * x + x;
  // Further out, 1 - 2 / (e^2|x| + 1), which is 1 once e^2|x| overflows.
  const float large = 1.0f - 2.0f / (exp_fast(2.0f * a) + 1.0f);
  const float signed_large = x < 0.0f ? -large : large;
  return a > 0.625f ? signed_large : small;  // NaN fails the test: the polynomial keeps it NaN
}

}  // namespace tg::detail
