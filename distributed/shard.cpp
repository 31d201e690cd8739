// Row-sharded tables: which rank holds which row, the whole table back for a
// checkpoint, and the sum of the ranks' partial sums (shard.hpp).
#include "shard.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "../core/check.hpp"
#include "../core/tape.hpp"
#include "collective.hpp"
#include "distributed.hpp"

namespace tg::distributed {

namespace {

// The values in one row of a table of this shape (the product of its dims
// after the first): known even when a rank holds no row.
std::size_t row_size(const Array::shape_type& shape) {
  std::size_t n = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

}  // namespace

RowShard::RowShard() : RowShard(distributed::rank(), world_size()) {}

RowShard::RowShard(int rank, int world) : rank_(rank), world_(world) {
  check(world >= 1 && rank >= 0 && rank < world, "RowShard: rank ", rank, " of a world of ", world);
}

int64_t RowShard::rows(int64_t num_rows) const {
  check(num_rows >= 0, "RowShard::rows: num_rows ", num_rows);
  return num_rows / world_ + (rank_ < num_rows % world_ ? 1 : 0);
}

std::vector<std::vector<int64_t>> RowShard::documents(const std::vector<std::vector<int64_t>>& docs,
                                                      int64_t num_rows) const {
  std::vector<std::vector<int64_t>> mine(docs.size());
  for (std::size_t d = 0; d < docs.size(); ++d)
    for (std::size_t k = 0; k < docs[d].size(); ++k) {
      const int64_t id = docs[d][k];
      if (id < 0 || id >= num_rows)
        throw std::invalid_argument(message("RowShard::documents: document ", d, ", position ", k, ": id ",
                                            id, " outside [0, ", num_rows, ")"));
      const int64_t row = id / world_;  // one division: owns(id) and local(id) together
      if (id - row * world_ == rank_) mine[d].push_back(row);
    }
  return mine;
}

Array RowShard::take(const Array& table) const {
  check(table.dimension() >= 1, "RowShard::take: a table of shape ", table.shape(), " has no rows");
  Array::shape_type shape = table.shape();
  const std::size_t cols = row_size(shape);
  shape[0] = static_cast<std::size_t>(rows(static_cast<int64_t>(table.shape()[0])));
  Array mine = Array::from_shape(shape);
  for (std::size_t l = 0; l < shape[0]; ++l)
    std::copy_n(table.data() + static_cast<std::size_t>(global(static_cast<int64_t>(l))) * cols, cols,
                mine.data() + l * cols);
  return mine;
}

Array all_gather_rows(const Array& mine, int64_t num_rows, const RowShard& shard) {
  check(mine.dimension() >= 1 && num_rows >= 0, "all_gather_rows: rows of shape ", mine.shape(), " for ",
        num_rows, " rows");
  std::vector<std::size_t> counts;
  const std::vector<float> all = all_gather({mine.data(), mine.size()}, &counts);
  Array::shape_type shape = mine.shape();
  const std::size_t cols = row_size(shape);
  for (int r = 0; r < shard.world(); ++r) {  // the same gathered counts on every rank: all throw or none
    const std::size_t expected = static_cast<std::size_t>(RowShard(r, shard.world()).rows(num_rows)) * cols;
    if (counts[static_cast<std::size_t>(r)] != expected)
      throw std::invalid_argument(message("all_gather_rows: rank ", r, " holds ",
                                          counts[static_cast<std::size_t>(r)], " values where ", expected,
                                          " (its rows of ", num_rows, " times ", cols, ") were expected"));
  }
  shape[0] = static_cast<std::size_t>(num_rows);
  Array table = Array::from_shape(shape);
  std::size_t at = 0;
  for (int r = 0; r < shard.world(); ++r) {
    const RowShard theirs(r, shard.world());
    for (int64_t l = 0; l < theirs.rows(num_rows); ++l, at += cols)
      std::copy_n(all.data() + at, cols, table.data() + static_cast<std::size_t>(theirs.global(l)) * cols);
  }
  return table;
}

std::vector<float> all_gather(std::span<const float> values, std::vector<std::size_t>* counts) {
  const std::vector<std::byte> all =
      all_gather_bytes(std::as_bytes(values), counts, "tg::distributed::all_gather");
  if (counts)
    for (std::size_t& c : *counts) c /= sizeof(float);
  std::vector<float> out(all.size() / sizeof(float));
  std::memcpy(out.data(), all.data(), all.size());
  return out;
}

// Each rank sends its shape (the dim count, then the dims) and its values in
// one gather, so that ranks whose shapes differ all throw instead of adding
// values that do not line up.
Tensor sum_over_ranks(const Tensor& x) {
  const Array& v = x.value();
  std::vector<int64_t> shape{static_cast<int64_t>(v.dimension())};
  shape.insert(shape.end(), v.shape().begin(), v.shape().end());
  const std::size_t head = shape.size() * sizeof(int64_t), body = v.size() * sizeof(float);
  std::vector<std::byte> mine(head + body);
  std::memcpy(mine.data(), shape.data(), head);
  std::memcpy(mine.data() + head, v.data(), body);
  std::vector<std::size_t> counts;
  const std::vector<std::byte> all = all_gather_bytes(mine, &counts, "sum_over_ranks");
  Array sum = xt::zeros<float>(v.shape());
  std::size_t at = 0;
  for (std::size_t r = 0; r < counts.size(); at += counts[r], ++r) {
    if (counts[r] != mine.size() || std::memcmp(all.data() + at, mine.data(), head) != 0) {
      int64_t dims = 0;  // rank r's header: its dim count, then its dims
      std::memcpy(&dims, all.data() + at, sizeof dims);
      std::vector<std::size_t> theirs(static_cast<std::size_t>(dims));
      for (std::size_t i = 0; i < theirs.size(); ++i) {
        int64_t n = 0;
        std::memcpy(&n, all.data() + at + (i + 1) * sizeof n, sizeof n);
        theirs[i] = static_cast<std::size_t>(n);
      }
      throw std::invalid_argument(message("sum_over_ranks: rank ", rank(), " passes shape ", v.shape(),
                                          ", rank ", r, " shape ", theirs));
    }
    const float* part = reinterpret_cast<const float*>(all.data() + at + head);
    for (std::size_t k = 0; k < v.size(); ++k) sum.data()[k] += part[k];
  }
  return record("sum_over_ranks", std::move(sum), {x},
                [](Array&& g, const Node&, Grads& d) { d[0] = std::move(g); });  // d sum / d x = 1
}

}  // namespace tg::distributed
