#include "gemm.hpp"

#include <algorithm>
#include <array>

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../parallel.hpp"

namespace tg::kernels {

// C[m, n] = op(A)[m, k] * op(B)[k, n] (+ C if accumulate), row-major, through
// xtensor-blas's gemm: the operands are views of the buffers (no copies) and a
// transpose is a flag to BLAS, never a transposed copy. C's rows are
// independent: a large product is split by rows across threads
// (core/parallel.hpp), one single-threaded BLAS call per block. The same
// thread count gives the same blocks and so the same bits; across counts a
// row may round differently at a block's edge, within the bound of any
// summation order (tests/test_parallel.cpp).
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const float* A,
          const float* B, float* C, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: BLAS would reject the zero leading dimension
    if (!accumulate) std::fill(C, C + m * n, 0.0f);
    return;
  }
  using Shape2 = std::array<std::size_t, 2>;
  const auto a = xt::adapt(A, m * k, xt::no_ownership(), trans_a ? Shape2{k, m} : Shape2{m, k});
  const auto b = xt::adapt(B, k * n, xt::no_ownership(), trans_b ? Shape2{n, k} : Shape2{k, n});
  const float beta = accumulate ? 1.0f : 0.0f;
  parallel_for(m, grain_for(1, n * k, std::size_t{1} << 15), [&](std::size_t lo, std::size_t hi) {
    auto c = xt::adapt(C + lo * n, (hi - lo) * n, xt::no_ownership(), Shape2{hi - lo, n});
    if (lo == 0 && hi == m) {
      xt::blas::gemm(a, b, c, trans_a, trans_b, 1.0f, beta);
    } else if (!trans_a) {  // rows lo..hi of A
      const auto rows = xt::adapt(A + lo * k, (hi - lo) * k, xt::no_ownership(), Shape2{hi - lo, k});
      xt::blas::gemm(rows, b, c, false, trans_b, 1.0f, beta);
    } else {  // columns lo..hi of A, copied together: [k, hi - lo]
      const xt::xtensor<float, 2> columns = xt::view(a, xt::all(), xt::range(lo, hi));
      xt::blas::gemm(columns, b, c, true, trans_b, 1.0f, beta);
    }
  });
}

}  // namespace tg::kernels
