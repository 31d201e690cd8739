// Kernels that work a row at a time: softmax and log_softmax along any dim,
// and layer_norm over the last n values. Each row is computed by one function
// compiled for SSE2, AVX2 and AVX-512 (core/dispatch.hpp), with its sums in
// double (core/kernels/reduce.hpp); rows are split across threads when there
// are many, with the same bits on any thread count.
#pragma once

#include <cstddef>
#include <vector>

#include "../array.hpp"

namespace tg::kernels {

// softmax (log = false) or log_softmax (log = true) of x along axis ax.
Array softmax(const char* op, const Array& x, std::size_t ax, bool log);
// Their gradient from the output y and its gradient g:
// softmax dx = y (g - sum(g y)), log_softmax dx = g - exp(y) sum(g), per row.
Array softmax_backward(const char* op, const Array& y, const Array& g, std::size_t ax, bool log);

// layer_norm over rows of the last n values of x: y = (x - mean) / std * w + b
// (w, b of n values, or null), the biased variance and the mean in double.
// Fills mean and rstd (1 / std), one per row, which the backward needs.
Array layer_norm(const Array& x, std::size_t n, const float* w, const float* b, float eps,
                 std::vector<float>& mean, std::vector<float>& rstd);
// The input's gradient; `xhat` (if not null, of x's shape) gets the
// normalised values, which weight's gradient is g * xhat.
Array layer_norm_backward(const Array& x, const Array& g, std::size_t n, const float* w,
                          const std::vector<float>& mean, const std::vector<float>& rstd, Array* xhat);

}  // namespace tg::kernels
