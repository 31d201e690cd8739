// The gradient slot of a tensor: empty, a dense array, or SparseRows.
//
// Accumulation rules (Grad::add):
//   empty  + x      -> x
//   dense  + dense  -> dense (shapes must match)
//   dense  + sparse -> dense (the sparse rows are added into the dense array)
//   sparse + dense  -> dense
//   sparse + sparse -> sparse, merged and still coalesced (sorted unique rows)
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

namespace tg {

using Array = xt::xarray<float>;
using Shape = std::vector<std::size_t>;

std::string shape_str(const Shape& shape);

// A row-sparse gradient of a [num_rows, cols] matrix: only the listed rows are
// non-zero. `rows` is sorted and unique ("coalesced"); values[i] belongs to rows[i].
// Memory is rows.size() x cols floats, whatever num_rows is.
struct SparseRows {
  std::vector<int64_t> rows;
  xt::xtensor<float, 2> values;  // [rows.size(), cols]
  std::size_t num_rows = 0;

  std::size_t cols() const { return values.shape()[1]; }
  std::size_t nnz_rows() const { return rows.size(); }
  std::size_t nbytes() const;  // bytes held by rows + values
  Array to_dense() const;      // [num_rows, cols]; for tests and comparisons

  // Builds a coalesced SparseRows from unsorted, possibly repeated rows:
  // equal rows are summed. values is [row_ids.size(), cols].
  static SparseRows coalesce(const std::vector<int64_t>& row_ids, const xt::xtensor<float, 2>& values,
                             std::size_t num_rows);
  // Throws std::invalid_argument unless rows are sorted, unique and in range and
  // values has rows.size() rows.
  void check(const char* where) const;
};

class Grad {
 public:
  bool empty() const { return std::holds_alternative<std::monostate>(slot_); }
  bool is_dense() const { return std::holds_alternative<Array>(slot_); }
  bool is_sparse() const { return std::holds_alternative<SparseRows>(slot_); }

  const Array& dense() const;        // throws unless is_dense()
  const SparseRows& sparse() const;  // throws unless is_sparse()
  Array& dense_mut();                // for optimizers (e.g. clip_grad_norm scaling)
  SparseRows& sparse_mut();

  // `shape` is the shape of the tensor this gradient belongs to; every add checks it.
  // Arguments are taken by value: pass std::move(g) to hand over the buffer.
  void add(Array g, const Shape& shape);
  void add(SparseRows g, const Shape& shape);
  void add(const Grad& g, const Shape& shape);

  Array to_dense(const Shape& shape) const;  // zeros when empty
  std::size_t nbytes() const;
  void clear() { slot_ = std::monostate{}; }

 private:
  std::variant<std::monostate, Array, SparseRows> slot_;
};

}  // namespace tg
