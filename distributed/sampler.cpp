// DistributedSampler: a seeded order, padded or cut to the world, and every N-th position for one rank.
#include "sampler.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include "../data/split.hpp"
#include "distributed.hpp"

namespace tg::distributed {

DistributedSampler::DistributedSampler(std::vector<int64_t> indices, DistributedSamplerOptions options)
    : indices_(std::move(indices)), options_(options) {
  replicas_ = options.num_replicas < 0 ? world_size() : options.num_replicas;
  rank_ = options.rank < 0 ? distributed::rank() : options.rank;
  const std::string where = "DistributedSampler(" + std::to_string(indices_.size()) +
                            " positions, num_replicas " + std::to_string(replicas_) + ", rank " +
                            std::to_string(rank_) + ")";
  if (replicas_ < 1) throw std::invalid_argument(where + ": num_replicas must be at least 1");
  if (rank_ >= replicas_) throw std::invalid_argument(where + ": rank must be in [0, num_replicas)");
  if (indices_.empty()) throw std::invalid_argument(where + ": no positions to sample");
  const std::size_t n = indices_.size(), world = static_cast<std::size_t>(replicas_);
  num_samples_ = options.drop_last ? n / world : (n + world - 1) / world;  // PyTorch's, for both
  if (num_samples_ == 0)
    throw std::invalid_argument(where + ": drop_last leaves no position for any rank (fewer positions than ranks)");
}

DistributedSampler::DistributedSampler(std::size_t n, DistributedSamplerOptions options)
    : DistributedSampler(
          [n] {
            std::vector<int64_t> all(n);
            std::iota(all.begin(), all.end(), int64_t{0});
            return all;
          }(),
          options) {}

std::vector<int64_t> DistributedSampler::global_order() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    for (int64_t i : data::shuffled_indices(static_cast<int64_t>(indices_.size()), options_.seed + epoch_))
      order.push_back(indices_[i]);
  } else {
    order = indices_;
  }
  const std::size_t total = total_size();
  for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % indices_.size()]);  // pad
  order.resize(total);                                                                              // or cut
  return order;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const std::vector<int64_t> order = global_order();
  std::vector<int64_t> mine;
  for (std::size_t i = static_cast<std::size_t>(rank_); i < order.size(); i += replicas_) mine.push_back(order[i]);
  return mine;
}

std::vector<std::vector<int64_t>> DistributedSampler::batches(std::size_t batch_size) const {
  if (batch_size == 0) throw std::invalid_argument("DistributedSampler::batches: batch_size must be at least 1, got 0");
  const std::vector<int64_t> mine = indices();
  std::vector<std::vector<int64_t>> out;
  for (std::size_t b = 0; b < mine.size(); b += batch_size)
    out.emplace_back(mine.begin() + b, mine.begin() + std::min(mine.size(), b + batch_size));
  return out;
}

}  // namespace tg::distributed
