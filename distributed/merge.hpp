// The rank-order merge over rows that stay where they arrived (not installed:
// distributed.hpp's merge_in_rank_order is the public form).
#pragma once

#include <cstdint>
#include <span>

#include "distributed.hpp"

namespace tg::distributed {

// One rank's coalesced rows as they lie in a receive buffer: sorted unique ids,
// and their values, `cols` floats a row, one row after another.
struct RankRows {
  std::span<const int64_t> ids;
  const float* values;
};

// The union of the ranks' rows of a [num_rows, cols] table, each row the sum
// of its parts in rank order, part r scaled by weights[r]. Arguments unchecked:
// merge_in_rank_order checks them, sync_gradients builds them.
SparseRows merge_rows(std::span<const RankRows> parts, std::span<const float> weights, std::size_t num_rows,
                      std::size_t cols);

}  // namespace tg::distributed
