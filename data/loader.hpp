#pragma once
// Minibatches of a dataset held in memory, by position.
//
//   tg::data::BatchSampler batches(split.train, {.batch_size = 32, .shuffle = true}, gen);
//   for (int epoch = 0; epoch < epochs; ++epoch)
//     for (const tg::Indices& idx : batches) {               // a new order every epoch
//       tg::Tensor x = tg::index_select(data.features, 0, idx);  // the batch's rows
//       tg::Indices y = tg::data::take(data.labels, idx);        // and their labels
//       ...
//     }
//
// PyTorch: BatchSampler(RandomSampler(indices, generator=gen), batch_size,
// drop_last), or the order a DataLoader(..., shuffle=True, generator=gen) uses;
// here it yields the positions and you pick the rows, so the same sampler
// serves features held as a Tensor, token ids held as Indices, or documents.
//
// With shuffle, each pass (each begin()) draws a new order from the generator,
// when the pass starts, as PyTorch does. A run whose randomness all comes from
// one generator therefore repeats exactly, and resumes exactly from a
// checkpoint that saved the generator (optim/checkpoint.hpp). The shuffle is a
// Fisher-Yates shuffle with an unbiased draw of its own (not std::shuffle, whose
// algorithm differs between standard libraries), so the order is the same on
// every platform; it is not the order PyTorch's generator would give.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../core/factories.hpp"

namespace tg::data {

struct BatchOptions {
  std::size_t batch_size = 1;  // > 0 (PyTorch's default is 1 too)
  bool shuffle = false;        // a new order every pass
  bool drop_last = false;      // leave out a last batch smaller than batch_size
};

class BatchSampler {
 public:
  // Batches of positions 0 .. n-1. Throws std::invalid_argument for
  // batch_size 0. `gen` (used only with shuffle) is a handle: the sampler
  // shares its state with the caller's copy.
  BatchSampler(std::size_t n, BatchOptions options, Generator& gen = default_generator());
  // Batches of the given positions (a split's train part, say), in this order
  // unless shuffled.
  BatchSampler(std::vector<int64_t> indices, BatchOptions options, Generator& gen = default_generator());

  // Batches per pass (PyTorch: len(loader)).
  std::size_t size() const;
  // Positions per pass: all of them, or fewer with drop_last.
  std::size_t num_samples() const;
  const BatchOptions& options() const { return options_; }

  class iterator {
   public:
    Indices operator*() const;  // the batch's positions, 1-d
    iterator& operator++() {
      ++batch_;
      return *this;
    }
    bool operator==(const iterator& other) const { return batch_ == other.batch_; }

   private:
    friend class BatchSampler;
    iterator(const BatchSampler* sampler, std::size_t batch) : sampler_(sampler), batch_(batch) {}
    const BatchSampler* sampler_;
    std::size_t batch_;
  };

  // Starts a pass: with shuffle, draws this pass's order from the generator.
  // Starting another pass while iterating over one reorders the batches still
  // to come (as with a Python iterator of the same DataLoader, do not).
  iterator begin();
  iterator end() const { return iterator(this, size()); }

 private:
  std::vector<int64_t> indices_;  // as given
  std::vector<int64_t> order_;    // this pass's order
  BatchOptions options_;
  Generator gen_;
};

// Rows of `items` (along dim 0) at the given positions, in that order:
// take(labels, idx) gives a batch's labels, take(contexts, idx) a batch of
// [N, 3] token ids. Throws std::out_of_range naming the position and the size
// for a position outside [0, items.shape(0)), std::invalid_argument for a
// 0-d `items` or `rows` that is not 1-d.
Indices take(const Indices& items, const Indices& rows);

}  // namespace tg::data
