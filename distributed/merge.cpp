// merge_in_rank_order: the ranks' sparse rows summed row by row, rank 0's share first.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "distributed.hpp"

namespace tg::distributed {

SparseRows merge_in_rank_order(const std::vector<SparseRows>& parts, const std::vector<float>& weights) {
  if (parts.empty() || parts.size() != weights.size())
    throw std::invalid_argument("merge_in_rank_order: " + std::to_string(parts.size()) + " parts and " +
                                std::to_string(weights.size()) + " weights (one per rank, at least one)");
  const std::size_t num_rows = parts[0].num_rows, cols = parts[0].values.shape()[1];
  for (std::size_t r = 0; r < parts.size(); ++r)
    if (parts[r].num_rows != num_rows || parts[r].values.shape()[1] != cols)
      throw std::invalid_argument("merge_in_rank_order: rank " + std::to_string(r) + "'s rows are of a [" +
                                  std::to_string(parts[r].num_rows) + ", " +
                                  std::to_string(parts[r].values.shape()[1]) + "] table, rank 0's of a [" +
                                  std::to_string(num_rows) + ", " + std::to_string(cols) + "] one");
  SparseRows out{{}, {}, num_rows};
  for (const SparseRows& p : parts) out.rows.insert(out.rows.end(), p.rows.begin(), p.rows.end());
  std::sort(out.rows.begin(), out.rows.end());
  out.rows.erase(std::unique(out.rows.begin(), out.rows.end()), out.rows.end());
  out.values = xt::zeros<float>({out.rows.size(), cols});
  for (std::size_t r = 0; r < parts.size(); ++r) {  // rank order: every rank adds in the same order
    std::size_t k = 0;                              // both lists are sorted: walk them together
    for (std::size_t i = 0; i < parts[r].rows.size(); ++i) {
      while (out.rows[k] != parts[r].rows[i]) ++k;
      const float* in = parts[r].values.data() + i * cols;
      float* dst = out.values.data() + k * cols;
      for (std::size_t c = 0; c < cols; ++c) dst[c] += weights[r] * in[c];
    }
  }
  return out;
}

}  // namespace tg::distributed
