// SparseRows: a gradient that lists the rows it touches; checks, merging, densifying.
#include "sparse_rows.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>

#include "check.hpp"

namespace tg {

// Row i of a row-major [n, cols] array. Not &a(i, 0): with cols = 0 that binds
// a reference to an element that does not exist.
static const float* row_at(const xt::xtensor<float, 2>& a, std::size_t i) {
  return a.data() + i * a.shape()[1];
}

Array SparseRows::to_dense() const {
  Array out = xt::zeros<float>({num_rows, cols()});
  add_to(out.data());
  return out;
}

void SparseRows::check(const char* where) const {
  if (values.shape()[0] != rows.size())
    throw std::invalid_argument(
        message(where, ": SparseRows has ", rows.size(), " rows but values of shape ", shape_of(values)));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || static_cast<std::size_t>(rows[i]) >= num_rows)
      throw std::out_of_range(
          message(where, ": SparseRows row ", rows[i], " out of range for ", num_rows, " rows"));
    if (i > 0 && rows[i] <= rows[i - 1])
      throw std::invalid_argument(message(where, ": SparseRows rows are not sorted and unique (", rows[i - 1],
                                          " before ", rows[i], ")"));
  }
}

void SparseRows::add_to(float* dense) const {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    float* d = dense + static_cast<std::size_t>(rows[i]) * cols();
    const float* s = row_at(values, i);
    for (std::size_t c = 0; c < cols(); ++c) d[c] += s[c];
  }
}

SparseRows merge(const SparseRows& a, const SparseRows& b) {
  SparseRows out{{}, {}, a.num_rows};
  std::set_union(a.rows.begin(), a.rows.end(), b.rows.begin(), b.rows.end(), std::back_inserter(out.rows));
  out.values = xt::zeros<float>({out.rows.size(), a.cols()});
  for (const SparseRows* in : {&a, &b}) {
    std::size_t at = 0;  // both sorted: walk out.rows along
    for (std::size_t i = 0; i < in->rows.size(); ++i) {
      while (out.rows[at] != in->rows[i]) ++at;
      float* d = out.values.data() + at * a.cols();
      const float* s = row_at(in->values, i);
      for (std::size_t c = 0; c < a.cols(); ++c) d[c] += s[c];
    }
  }
  return out;
}

}  // namespace tg
