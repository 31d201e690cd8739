// SparseRows: the gradient of a [num_rows, cols] matrix where only some rows are
// non-zero (an embedding table's, after a batch that looked up a few of them).
// Memory: rows.size() x cols floats, never num_rows x cols.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include "array.hpp"

namespace tg {

// The invariant ("coalesced"): `rows` is sorted, unique and in [0, num_rows),
// and values[i] is row rows[i]. The lookup layers build it that way; a Grad
// checks it once, when SparseRows become a gradient (core/grad.hpp), and every
// loop after that trusts it.
struct SparseRows {
  std::vector<int64_t> rows;
  xt::xtensor<float, 2> values;  // [rows.size(), cols]
  std::size_t num_rows = 0;

  std::size_t cols() const { return values.shape()[1]; }
  std::size_t nnz_rows() const { return rows.size(); }
  std::size_t nbytes() const { return rows.size() * sizeof(int64_t) + values.size() * sizeof(float); }
  Array to_dense() const;  // [num_rows, cols]
  // Throws std::invalid_argument (std::out_of_range for a row) naming `where`
  // unless the invariant holds.
  void check(const char* where) const;
  // Adds these rows into a row-major [num_rows, cols] array.
  void add_to(float* dense) const;
};

// a + b, still coalesced: the union of the rows, each the sum of its shares.
SparseRows merge(const SparseRows& a, const SparseRows& b);

// Prints as PyTorch prints a sparse gradient (an Embedding's with sparse=True,
// which is the same data: its row ids as indices [1, nnz], and values):
//   tensor(indices=tensor([[1, 3]]),
//          values=tensor([[2., 2., 2.],
//                         [1., 1., 1.]]),
//          shape=[5, 3], nnz=2, layout=sparse_rows)
std::ostream& operator<<(std::ostream& os, const SparseRows& s);

}  // namespace tg
