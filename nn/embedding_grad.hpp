// The weight gradient of Embedding and EmbeddingBag, for nn/ (inside the
// library, not installed): which entry reads which row into which bag, and the
// gradient that gives. Defined in nn/embedding_grad.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "../core/array.hpp"
#include "../core/grad.hpp"
#include "../core/tape.hpp"

namespace tg::nn::detail {

inline constexpr std::size_t skip = std::numeric_limits<std::size_t>::max();

// Who reads what: entry k reads weight row index[k] and adds it, times
// coef[k] (sum and mean), into output row bag_of[k]. Padding entries add
// nothing: bag_of[k] == skip.
//
// A view: a recorded lookup's ids and bags are its tape entry's (Node::ids,
// Node::bags, which the inspector reads too), so they are stored once.
struct Plan {
  std::span<const int64_t> index;
  std::span<const std::size_t> bag_of;
  std::span<const float> coef;
  std::size_t num_rows = 0, dim = 0;  // of the weight
};

// The Plan of a recorded lookup: its tape entry's ids and bags, with coef.
inline Plan recorded_plan(const Node& n, std::span<const float> coef, std::size_t num_rows, std::size_t dim) {
  return {{n.ids->data(), n.ids->size()}, n.bags, coef, num_rows, dim};
}

// The weight's gradient from d(loss)/d(output) g, as the weight wants it:
// coalesced rows, or (sparse = false) the dense [num, dim] array. argmax (max
// mode) says, for each output element, which entry it came from.
Grad weight_grad(const Plan& p, const Array& g, const std::vector<std::size_t>* argmax, bool sparse);

}  // namespace tg::nn::detail
