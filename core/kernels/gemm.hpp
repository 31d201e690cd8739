// Matrix products on raw row-major buffers, the one place that calls BLAS
// (through xtensor-blas). Ops and modules call it with their arrays' data().
#pragma once

#include <cstddef>

namespace tg::kernels {

// C[m, n] = op(A)[m, k] op(B)[k, n], or C += that when accumulate; op(X) is X
// or X transposed (a flag to BLAS, never a transposed copy). Split by rows of C
// across the thread pool for large products (core/parallel.hpp).
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const float* A,
          const float* B, float* C, bool accumulate = false);

}  // namespace tg::kernels
