// Kernels that work a row at a time: softmax and log_softmax along any dim,
// and layer_norm over the last n values. Each row is computed by one function
// compiled for SSE2, AVX2 and AVX-512 (core/kernels/dispatch.hpp), with its sums in
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
// The input's gradient.
Array layer_norm_backward(const Array& x, const Array& g, std::size_t n, const float* w,
                          const std::vector<float>& mean, const std::vector<float>& rstd);
// Weight's and bias's gradients (n values each; a null one is not wanted),
// summed over the rows in one pass, without an array of g * xhat:
// dw[i] = sum_r g[r, i] xhat[r, i] and db[i] = sum_r g[r, i], xhat = (x - mean) * rstd,
// each column added in double row after row (the engine's column sums, bit for bit).
void layer_norm_param_grads(const Array& x, const Array& g, std::size_t n, const std::vector<float>& mean,
                            const std::vector<float>& rstd, float* dw, float* db);

}  // namespace tg::kernels
