#pragma once
// Seeded shuffles and train/test splits that give the same indices on every
// platform and compiler.
//
// std::shuffle and std::uniform_int_distribution are not used: the standard leaves
// their algorithms to the implementation, so libstdc++ and libc++ shuffle
// differently. std::mt19937_64's output, by contrast, is fixed by the standard;
// on top of it this file does its own Fisher-Yates shuffle with its own unbiased
// draw from [0, bound).

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg::data {

// A uniform draw from [0, bound) by rejection: raw 64-bit values that fall in the
// incomplete last block of `bound` values are thrown away so no remainder is
// favoured. Throws std::invalid_argument when bound is 0.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound);

// A permutation of 0 .. n-1, the same for the same (n, seed) everywhere.
std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed);

struct Split {
  std::vector<std::int64_t> train;
  std::vector<std::int64_t> test;
};

// Shuffles 0 .. n-1 and puts the first ceil(test_fraction * n) in test, the rest
// in train (as scikit-learn's ShuffleSplit does). Throws std::invalid_argument when
// test_fraction is not in (0, 1) or either part would be empty.
Split train_test_split(std::int64_t n, double test_fraction, std::uint64_t seed);

// Like train_test_split over targets.size() examples, with each class's share of
// the test set as close as whole numbers allow to its share of the data. targets
// are class ids >= 0. Both parts come out shuffled (classes mixed).
Split stratified_split(const std::vector<std::int64_t>& targets, double test_fraction, std::uint64_t seed);

// items[indices[begin]], ..., items[indices[end - 1]]: a minibatch out of a
// shuffled order. Throws std::invalid_argument when [begin, end) is not within
// the indices, or naming the position and index when one is outside
// [0, items.size()).
template <typename T>
std::vector<T> take(const std::vector<T>& items, const std::vector<std::int64_t>& indices, std::size_t begin,
                    std::size_t end) {
    if (begin > end || end > indices.size()) {
        throw std::invalid_argument("take: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    ") outside the " + std::to_string(indices.size()) + " indices");
    }
    std::vector<T> out;
    out.reserve(end - begin);
    for (std::size_t k = begin; k < end; ++k) {
        std::int64_t i = indices[k];
        if (i < 0 || i >= static_cast<std::int64_t>(items.size())) {
            throw std::invalid_argument("take: indices[" + std::to_string(k) + "] = " + std::to_string(i) +
                                        " outside [0, " + std::to_string(items.size()) + ")");
        }
        out.push_back(items[static_cast<std::size_t>(i)]);
    }
    return out;
}

// items[indices[0]], items[indices[1]], ...: one part of a split.
template <typename T>
std::vector<T> take(const std::vector<T>& items, const std::vector<std::int64_t>& indices) {
    return take(items, indices, 0, indices.size());
}

}  // namespace tg::data
