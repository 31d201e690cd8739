#include "core/grad.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace tg {

std::string shape_str(const Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

// ---------------------------------------------------------------- SparseRows

std::size_t SparseRows::nbytes() const {
  return rows.size() * sizeof(int64_t) + values.size() * sizeof(float);
}

Array SparseRows::to_dense() const {
  Array out = xt::zeros<float>({num_rows, cols()});
  for (std::size_t i = 0; i < rows.size(); ++i) std::copy_n(&values(i, 0), cols(), &out(rows[i], 0));
  return out;
}

SparseRows SparseRows::coalesce(const std::vector<int64_t>& row_ids, const xt::xtensor<float, 2>& values,
                                std::size_t num_rows) {
  if (values.shape()[0] != row_ids.size())
    throw std::invalid_argument("SparseRows::coalesce: " + std::to_string(row_ids.size()) +
                                " row ids but values has shape " +
                                shape_str({values.shape()[0], values.shape()[1]}));
  const std::size_t cols = values.shape()[1];
  // Sort positions by row id (stable, so equal rows are summed in input order).
  std::vector<std::size_t> order(row_ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return row_ids[a] < row_ids[b]; });
  std::size_t unique = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (i == 0 || row_ids[order[i]] != row_ids[order[i - 1]]) ++unique;

  SparseRows out;
  out.num_rows = num_rows;
  out.rows.reserve(unique);
  out.values = xt::empty<float>({unique, cols});
  for (std::size_t i = 0; i < order.size(); ++i) {
    int64_t r = row_ids[order[i]];
    if (r < 0 || static_cast<std::size_t>(r) >= num_rows)
      throw std::out_of_range("SparseRows::coalesce: row " + std::to_string(r) + " out of range for " +
                              std::to_string(num_rows) + " rows");
    const bool first = out.rows.empty() || out.rows.back() != r;
    if (first) out.rows.push_back(r);
    float* dst = &out.values(out.rows.size() - 1, 0);
    const float* src = &values(order[i], 0);
    // A row's first value is copied, later ones added in input order: the same
    // sums, bit for bit, as the grouped loop of nn/embedding.cpp (a -0.0 stays -0.0).
    for (std::size_t c = 0; c < cols; ++c) dst[c] = first ? src[c] : dst[c] + src[c];
  }
  return out;
}

void SparseRows::check(const char* where) const {
  if (values.shape()[0] != rows.size())
    throw std::invalid_argument(std::string(where) + ": SparseRows has " + std::to_string(rows.size()) +
                                " rows but values of shape " +
                                shape_str({values.shape()[0], values.shape()[1]}));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || static_cast<std::size_t>(rows[i]) >= num_rows)
      throw std::out_of_range(std::string(where) + ": SparseRows row " + std::to_string(rows[i]) +
                              " out of range for " + std::to_string(num_rows) + " rows");
    if (i > 0 && rows[i] <= rows[i - 1])
      throw std::invalid_argument(std::string(where) + ": SparseRows rows are not sorted and unique");
  }
}

// Merges two coalesced SparseRows into one, still sorted and unique.
static SparseRows merge(const SparseRows& a, const SparseRows& b) {
  const std::size_t cols = a.cols();
  SparseRows out;
  out.num_rows = a.num_rows;
  std::size_t i = 0, j = 0, n = 0;
  std::vector<int64_t> rows;
  rows.reserve(a.rows.size() + b.rows.size());
  while (i < a.rows.size() || j < b.rows.size()) {
    if (j == b.rows.size() || (i < a.rows.size() && a.rows[i] < b.rows[j]))
      rows.push_back(a.rows[i++]);
    else if (i == a.rows.size() || b.rows[j] < a.rows[i])
      rows.push_back(b.rows[j++]);
    else {
      rows.push_back(a.rows[i]);
      ++i;
      ++j;
    }
  }
  out.values = xt::zeros<float>({rows.size(), cols});
  i = j = 0;
  for (n = 0; n < rows.size(); ++n) {
    float* dst = &out.values(n, 0);
    if (i < a.rows.size() && a.rows[i] == rows[n]) {
      const float* src = &a.values(i++, 0);
      for (std::size_t c = 0; c < cols; ++c) dst[c] += src[c];
    }
    if (j < b.rows.size() && b.rows[j] == rows[n]) {
      const float* src = &b.values(j++, 0);
      for (std::size_t c = 0; c < cols; ++c) dst[c] += src[c];
    }
  }
  out.rows = std::move(rows);
  return out;
}

// ---------------------------------------------------------------------- Grad

const Array& Grad::dense() const {
  if (!is_dense()) throw std::logic_error("Grad::dense: the gradient is not a dense array");
  return std::get<Array>(slot_);
}
const SparseRows& Grad::sparse() const {
  if (!is_sparse()) throw std::logic_error("Grad::sparse: the gradient is not SparseRows");
  return std::get<SparseRows>(slot_);
}
Array& Grad::dense_mut() {
  return const_cast<Array&>(dense());
}
SparseRows& Grad::sparse_mut() {
  return const_cast<SparseRows&>(sparse());
}

static void check_dense_shape(const Array& g, const Shape& shape) {
  if (!std::equal(g.shape().begin(), g.shape().end(), shape.begin(), shape.end()))
    throw std::invalid_argument("accumulate_grad: gradient of shape " +
                                shape_str(Shape(g.shape().begin(), g.shape().end())) +
                                " for a tensor of shape " + shape_str(shape));
}

static void check_sparse_shape(const SparseRows& g, const Shape& shape) {
  if (shape.size() != 2 || g.num_rows != shape[0] || g.values.shape()[1] != shape[1])
    throw std::invalid_argument("accumulate_grad: SparseRows gradient of shape " +
                                shape_str({g.num_rows, g.values.shape()[1]}) + " for a tensor of shape " +
                                shape_str(shape));
}

void Grad::add(Array g, const Shape& shape) {
  check_dense_shape(g, shape);
  if (empty()) {
    slot_ = std::move(g);
  } else if (is_dense()) {
    std::get<Array>(slot_) += g;
  } else {  // sparse + dense -> dense
    SparseRows s = std::move(std::get<SparseRows>(slot_));
    slot_ = std::move(g);
    add(std::move(s), shape);
  }
}

void Grad::add(SparseRows g, const Shape& shape) {
  check_sparse_shape(g, shape);
  g.check("accumulate_grad");  // the adds below trust sorted, unique, in-range rows
  if (empty()) {
    slot_ = std::move(g);
  } else if (is_sparse()) {
    slot_ = merge(std::get<SparseRows>(slot_), g);
  } else {  // dense + sparse -> dense: add the rows in place
    Array& d = std::get<Array>(slot_);
    const std::size_t cols = g.cols();
    for (std::size_t i = 0; i < g.rows.size(); ++i) {
      float* dst = &d(g.rows[i], 0);
      const float* src = &g.values(i, 0);
      for (std::size_t c = 0; c < cols; ++c) dst[c] += src[c];
    }
  }
}

void Grad::add(const Grad& g, const Shape& shape) {
  if (g.is_dense())
    add(g.dense(), shape);
  else if (g.is_sparse())
    add(g.sparse(), shape);
}

Array Grad::to_dense(const Shape& shape) const {
  if (is_dense()) return dense();
  if (is_sparse()) return sparse().to_dense();
  Array z = xt::zeros<float>(shape);
  return z;
}

std::size_t Grad::nbytes() const {
  if (is_dense()) return dense().size() * sizeof(float);
  if (is_sparse()) return sparse().nbytes();
  return 0;
}

}  // namespace tg
