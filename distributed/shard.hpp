// Row-sharded tables: one embedding table's rows split across the ranks, for
// models whose table is the heavy part (a bag of words, word vectors), as
// TorchRec's row-wise sharding and Megatron's row-parallel layers split them.
//
// Rank r of N holds rows r, r + N, r + 2N, ... of the table (row g is local
// row g / N on rank g % N: the most frequent words, the first ids, fall on
// every rank in turn). Each rank looks up its own rows for the whole global
// batch and adds them into partial bag sums; sum_over_ranks() adds the
// partial sums of all ranks, in rank order, and every rank runs the rest of
// the model on the same sums:
//
//   tg::distributed::RowShard shard;                      // this rank of the world
//   tg::nn::EmbeddingBag bag(shard.rows(V), D, opt);      // this rank's rows only
//   tg::nn::Linear head(D, C, true, gen);                 // whole, on every rank
//   ...
//   CsrBatch mine = to_csr(shard.documents(docs, V), shard.rows(V));   // the whole batch, my ids
//   Tensor loss = cross_entropy(head(tanh(sum_over_ranks(bag.forward(mine)))), y);
//   loss.backward();   // no gradient exchange: see below
//   opt.step();
//
// Why no gradient is exchanged. Every rank computes the same loss from the same
// sums, so the gradient reaching the sum is the same on every rank, and it is
// also the gradient of each rank's partial sum (d sum / d part = 1):
// sum_over_ranks' backward passes it on unchanged (Megatron's all-reduce
// "forward, identity backward"). The head's gradients are then the same bits
// on every rank, and each rank's table gets the gradient of its own rows, the
// rows no other rank holds. So the optimizer of each rank steps its own rows
// and the same head: lazy Adam's state is split with the rows.
//
// What each rank does, and what it sends: the lookups, their gradient and the
// optimizer's update of its own rows (1 / N of the table's work); the head
// and the loss (small) on every rank; per step one exchange of the partial
// sums, batch x dim floats from every rank. Memory: 1 / N of the table and of
// its optimizer state.
//
// With one process every function here is the identity, and the program is
// the plain one. On N processes the sums add N partial sums where one
// process adds the rows in another order: the same function up to float
// rounding, and the same bits from run to run for a fixed N.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/tensor.hpp"

namespace tg::distributed {

class RowShard {
 public:
  RowShard();                     // this process: rank() of world_size()
  RowShard(int rank, int world);  // throws std::invalid_argument unless 0 <= rank < world

  int rank() const { return rank_; }
  int world() const { return world_; }
  bool owns(int64_t row) const { return row % world_ == rank_; }
  int64_t local(int64_t row) const { return row / world_; }  // for a row this rank owns
  int64_t global(int64_t local) const { return local * world_ + rank_; }
  int64_t rows(int64_t num_rows) const;  // how many rows of a num_rows table this rank holds

  // Each document's ids that this rank owns, as local rows, in their order
  // (what to_csr then makes this rank's batch of, with rows(num_rows)
  // columns). Throws std::invalid_argument for an id outside [0, num_rows),
  // naming the document and the position.
  std::vector<std::vector<int64_t>> documents(const std::vector<std::vector<int64_t>>& docs,
                                              int64_t num_rows) const;
  // This rank's rows of a whole table [num_rows, ...], in local order.
  Array take(const Array& table) const;

 private:
  int rank_, world_;
};

// The whole table [num_rows, ...] from every rank's rows `mine` ([rows(num_rows),
// ...]): a collective (every rank calls it, and every rank gets the table), for
// saving a checkpoint. Throws std::invalid_argument (on every rank) when the
// ranks' row counts or row sizes do not fit num_rows.
Array all_gather_rows(const Array& mine, int64_t num_rows, const RowShard& shard);

// Forward: x summed over the ranks, added in rank order (every rank gets the
// same bits). Backward: the gradient reaching the sum goes to x unchanged,
// which is x's gradient when every rank computes the same loss from this sum
// (the top of this file). A collective: every rank calls it, with the same
// shape (else std::invalid_argument on every rank).
Tensor sum_over_ranks(const Tensor& x);

}  // namespace tg::distributed
