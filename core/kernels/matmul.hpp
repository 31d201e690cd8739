// Matrix products as the ops use them: a batched, broadcasting matmul and the
// two products its backward needs, named as flashlight names them:
//
//   y  = matmul(a, b)                       [.., n, k] x [.., k, m] -> [.., n, m]
//   da = matmul_nt(g, b, a_shape)           g B^T, summed over a's broadcast batch dims
//   db = matmul_tn(a, g, b_shape)           A^T g, summed over b's broadcast batch dims
//
// Batch dims broadcast as in torch.matmul; a 2-d b is one matrix for every row
// of a, and then each product is a single GEMM over all those rows. Shapes are
// checked by the ops (core/ops.hpp); these only compute. All of it goes through
// gemm() (core/kernels/gemm.hpp): BLAS, split by rows or by matrices across
// the thread pool.
#pragma once

#include "../array.hpp"
#include "gemm.hpp"

namespace tg::kernels {

Array matmul(const Array& a, const Array& b);
Array matmul_nt(const Array& g, const Array& b, const Shape& a_shape);
Array matmul_tn(const Array& a, const Array& g, const Shape& b_shape);

// F.linear: x [.., in] times weight [out, in] transposed, plus bias [out] (or
// no bias: nullptr): one GEMM that starts from the bias in every row.
Array linear(const Array& x, const Array& weight, const float* bias);

}  // namespace tg::kernels
