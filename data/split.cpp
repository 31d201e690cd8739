// train_test_split and k-fold splits, seeded.
#include "split.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

namespace tg::data {

namespace {

// Fisher-Yates: walk from the back, swapping each slot with a uniformly chosen
// slot at or before it.
void shuffle_in_place(std::vector<std::int64_t>& items, std::mt19937_64& rng) {
  for (std::size_t i = items.size(); i > 1; --i) {
    auto j = static_cast<std::size_t>(uniform_below(rng, i));
    std::swap(items[i - 1], items[j]);
  }
}

// The number of test examples among n, checked so neither part is empty.
std::int64_t test_count(std::int64_t n, double test_fraction, const std::string& caller) {
  if (!(test_fraction > 0.0 && test_fraction < 1.0)) {  // also rejects NaN
    throw std::invalid_argument(caller + ": test_fraction must be in (0, 1), got " +
                                std::to_string(test_fraction));
  }
  // The small tolerance keeps 0.7 * 10 = 7.000000000000001 from rounding up to 8.
  double wanted = std::ceil(test_fraction * static_cast<double>(n) - 1e-9);
  auto count = static_cast<std::int64_t>(std::max(wanted, 0.0));
  if (count < 1 || count >= n) {
    throw std::invalid_argument(caller + ": n=" + std::to_string(n) +
                                " with test_fraction=" + std::to_string(test_fraction) + " gives " +
                                std::to_string(count) + " test and " + std::to_string(n - count) +
                                " train examples; both must be at least 1");
  }
  return count;
}

}  // namespace

std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  if (bound == 0) throw std::invalid_argument("uniform_below: bound must be >= 1, got 0");
  // 2^64 mod bound, computed in 64 bits: (2^64 - bound) mod bound is the same number.
  // Raw values below it are the incomplete block; values from it on come in whole
  // blocks of `bound`, so x % bound is uniform over them.
  std::uint64_t threshold = (0 - bound) % bound;
  std::uint64_t x = rng();
  while (x < threshold) x = rng();
  return x % bound;
}

std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed) {
  if (n < 0) throw std::invalid_argument("shuffled_indices: n must be >= 0, got " + std::to_string(n));
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  std::iota(indices.begin(), indices.end(), std::int64_t{0});
  std::mt19937_64 rng(seed);
  shuffle_in_place(indices, rng);
  return indices;
}

Split train_test_split(std::int64_t n, double test_fraction, std::uint64_t seed) {
  std::int64_t n_test = test_count(n, test_fraction, "train_test_split");
  std::vector<std::int64_t> order = shuffled_indices(n, seed);
  Split split;
  split.test.assign(order.begin(), order.begin() + n_test);
  split.train.assign(order.begin() + n_test, order.end());
  return split;
}

Split stratified_split(const std::vector<std::int64_t>& targets, double test_fraction, std::uint64_t seed) {
  // n_test * class_size below must not overflow 64 bits.
  if (targets.size() > (std::size_t{1} << 31)) {
    throw std::invalid_argument("stratified_split: at most 2^31 examples, got " +
                                std::to_string(targets.size()));
  }
  auto n = static_cast<std::int64_t>(targets.size());
  std::int64_t n_test = test_count(n, test_fraction, "stratified_split");

  std::map<std::int64_t, std::vector<std::int64_t>> members;  // class id -> examples
  for (std::int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0) {
      throw std::invalid_argument("stratified_split: targets[" + std::to_string(i) + "] is " +
                                  std::to_string(targets[i]) + ", class ids must be >= 0");
    }
    members[targets[i]].push_back(i);
  }

  // Each class gets the whole part of its exact share n_test * size / n; the test
  // examples still missing go to the classes with the largest leftover fractions
  // (ties to the smaller class id). Integer arithmetic, so no platform rounds differently.
  struct Quota {
    std::int64_t class_id, count, remainder;
  };
  std::vector<Quota> quotas;
  std::int64_t assigned = 0;
  for (const auto& [class_id, examples] : members) {
    auto size = static_cast<std::int64_t>(examples.size());
    quotas.push_back({class_id, n_test * size / n, n_test * size % n});
    assigned += quotas.back().count;
  }
  std::vector<Quota> by_remainder = quotas;
  std::stable_sort(by_remainder.begin(), by_remainder.end(),
                   [](const Quota& a, const Quota& b) { return a.remainder > b.remainder; });
  std::map<std::int64_t, std::int64_t> extra;
  for (std::int64_t k = 0; k < n_test - assigned; ++k) ++extra[by_remainder[k].class_id];

  std::mt19937_64 rng(seed);
  Split split;
  for (const Quota& quota : quotas) {
    std::vector<std::int64_t> examples = members[quota.class_id];
    shuffle_in_place(examples, rng);
    auto take = static_cast<std::size_t>(quota.count + extra[quota.class_id]);
    split.test.insert(split.test.end(), examples.begin(), examples.begin() + take);
    split.train.insert(split.train.end(), examples.begin() + take, examples.end());
  }
  // Mix the classes, which the loop above laid out one after another.
  shuffle_in_place(split.test, rng);
  shuffle_in_place(split.train, rng);
  return split;
}

}  // namespace tg::data
