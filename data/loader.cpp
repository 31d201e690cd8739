// DataLoader-style iteration over a dataset in shuffled batches.
#include "loader.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "../core/grad.hpp"

namespace tg::data {

namespace {

// A uniform draw from [0, bound), bound > 0, from two 32-bit outputs of the
// generator. Raw values in the incomplete last block of `bound` values are
// thrown away, so no remainder is favoured (as uniform_below in split.hpp).
uint64_t draw_below(Generator& gen, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  while (true) {
    const uint64_t high = gen(), low = gen();
    const uint64_t x = (high << 32) | low;
    if (x < limit) return x % bound;
  }
}

std::vector<int64_t> positions(std::size_t n) {
  std::vector<int64_t> out(n);
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

}  // namespace

BatchSampler::BatchSampler(std::size_t n, BatchOptions options, Generator& gen)
    : BatchSampler(positions(n), options, gen) {}

BatchSampler::BatchSampler(std::vector<int64_t> indices, BatchOptions options, Generator& gen)
    : indices_(std::move(indices)), order_(indices_), options_(options), gen_(gen) {
  if (options_.batch_size == 0) throw std::invalid_argument("BatchSampler: batch_size must be > 0; got 0");
}

std::size_t BatchSampler::size() const {
  const std::size_t n = indices_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::size_t BatchSampler::num_samples() const {
  return options_.drop_last ? size() * options_.batch_size : indices_.size();
}

BatchSampler::iterator BatchSampler::begin() {
  if (options_.shuffle) {
    order_ = indices_;
    // Fisher-Yates: position i takes one of the i + 1 entries not yet placed.
    for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[draw_below(gen_, i)]);
  }
  return iterator(this, 0);
}

Indices BatchSampler::iterator::operator*() const {
  const std::size_t b = sampler_->options_.batch_size;
  const std::size_t begin = batch_ * b, end = std::min(begin + b, sampler_->order_.size());
  Indices out = xt::empty<int64_t>({end - begin});
  std::copy(sampler_->order_.begin() + static_cast<std::ptrdiff_t>(begin),
            sampler_->order_.begin() + static_cast<std::ptrdiff_t>(end), out.begin());
  return out;
}

Indices take(const Indices& items, const Indices& rows) {
  if (items.dimension() == 0)
    throw std::invalid_argument("take: items must have at least 1 dim; got a 0-d array");
  if (rows.dimension() != 1)
    throw std::invalid_argument("take: rows must be 1-d; got shape " +
                                shape_str(rows.shape()));
  const std::size_t n = items.shape()[0];
  const std::size_t row_size = n == 0 ? 0 : items.size() / n;
  for (std::size_t k = 0; k < rows.size(); ++k)
    if (rows(k) < 0 || static_cast<std::size_t>(rows(k)) >= n)
      throw std::out_of_range("take: rows[" + std::to_string(k) + "] = " + std::to_string(rows(k)) +
                              " out of range for " + std::to_string(n) + " rows");
  Shape shape(items.shape().begin(), items.shape().end());
  shape[0] = rows.size();
  Indices out = xt::empty<int64_t>(shape);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const int64_t* from = items.data() + static_cast<std::size_t>(rows(k)) * row_size;
    std::copy(from, from + row_size, out.data() + k * row_size);
  }
  return out;
}

}  // namespace tg::data
