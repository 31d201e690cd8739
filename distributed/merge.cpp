// merge_in_rank_order: the ranks' sparse rows summed row by row, rank 0's share first.
#include "merge.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg::distributed {

SparseRows merge_rows(std::span<const RankRows> parts, std::span<const float> weights, std::size_t num_rows,
                      std::size_t cols) {
  // The union of the ids: each rank's are sorted, so one pass per rank.
  std::vector<int64_t> ids, next;
  for (const RankRows& p : parts) {
    next.clear();
    next.reserve(ids.size() + p.ids.size());
    std::set_union(ids.begin(), ids.end(), p.ids.begin(), p.ids.end(), std::back_inserter(next));
    ids.swap(next);
  }
  SparseRows out;
  out.num_rows = num_rows;
  out.rows = std::move(ids);
  out.values = xt::xtensor<float, 2>::from_shape({out.rows.size(), cols});
  // Row by row, the ranks that hold it in rank order: every rank adds in the same order.
  std::vector<std::size_t> at(parts.size(), 0);  // each rank's next row
  for (std::size_t k = 0; k < out.rows.size(); ++k) {
    float* dst = out.values.data() + k * cols;
    std::fill_n(dst, cols, 0.0f);
    for (std::size_t r = 0; r < parts.size(); ++r) {
      if (at[r] == parts[r].ids.size() || parts[r].ids[at[r]] != out.rows[k]) continue;
      const float* in = parts[r].values + at[r]++ * cols;
      for (std::size_t c = 0; c < cols; ++c) dst[c] += weights[r] * in[c];
    }
  }
  return out;
}

SparseRows merge_in_rank_order(const std::vector<SparseRows>& parts, const std::vector<float>& weights) {
  if (parts.empty() || parts.size() != weights.size())
    throw std::invalid_argument("merge_in_rank_order: " + std::to_string(parts.size()) + " parts and " +
                                std::to_string(weights.size()) + " weights (one per rank, at least one)");
  const std::size_t num_rows = parts[0].num_rows, cols = parts[0].values.shape()[1];
  std::vector<RankRows> views;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    if (parts[r].num_rows != num_rows || parts[r].values.shape()[1] != cols)
      throw std::invalid_argument("merge_in_rank_order: rank " + std::to_string(r) + "'s rows are of a [" +
                                  std::to_string(parts[r].num_rows) + ", " +
                                  std::to_string(parts[r].values.shape()[1]) + "] table, rank 0's of a [" +
                                  std::to_string(num_rows) + ", " + std::to_string(cols) + "] one");
    parts[r].check(("merge_in_rank_order: rank " + std::to_string(r) + "'s rows").c_str());
    views.push_back({parts[r].rows, parts[r].values.data()});
  }
  return merge_rows(views, weights, num_rows, cols);
}

}  // namespace tg::distributed
