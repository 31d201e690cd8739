// The weight gradient shared by Embedding, Embedding::dot and EmbeddingBag.
#include "embedding_grad.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "../core/kernels/dispatch.hpp"
#include "../core/kernels/loop.hpp"
#include "../core/kernels/parallel.hpp"
#include "../core/kernels/radix_sort.hpp"
#include "embedding.hpp"

namespace tg::nn {

namespace detail {

namespace {

// ------------------------------------------ the weight's gradient, for both layers
//
// Entry k adds, into the gradient of the row it read, its share of its bag's
// gradient g[bag]: coef[k] * g[bag] (sum and mean; an Embedding lookup is a bag
// of one entry with coef 1), or in max mode g[bag] in the columns where the
// entry won the max and 0 elsewhere. Rows no entry read get nothing: the result
// is coalesced SparseRows, (unique rows x dim) floats, never num_rows x dim.
// A row's first share is written, the others added in entry order, so both
// versions below give the same bits (tests/test_nn.cpp holds them equal).

thread_local bool plain_row_grads = false;

// The plain version: what the gradient is.
SparseRows row_grads_plain(const Plan& p, const float* g, const std::vector<std::size_t>* argmax) {
  std::map<int64_t, std::vector<float>> sums;  // row -> its gradient, rows in order
  for (std::size_t k = 0; k < p.index.size(); ++k) {
    if (p.bag_of[k] == skip) continue;
    auto [row, first] = sums.try_emplace(p.index[k], p.dim);
    for (std::size_t c = 0; c < p.dim; ++c) {
      const std::size_t at = p.bag_of[k] * p.dim + c;
      const float share = argmax ? ((*argmax)[at] == k ? g[at] : 0.0f) : p.coef[k] * g[at];
      row->second[c] = first ? share : row->second[c] + share;
    }
  }
  SparseRows out{{}, xt::empty<float>({sums.size(), p.dim}), p.num_rows};
  for (const auto& [r, v] : sums) {
    std::copy(v.begin(), v.end(), out.values.data() + out.rows.size() * p.dim);
    out.rows.push_back(r);
  }
  return out;
}

// The fast version starts by grouping the entries by row (rows ascending; within
// a row, in entry order): a stable radix sort on the row id, 11 bits a pass
// (two passes up to 4M rows; core/kernels/radix_sort.hpp).
std::vector<std::size_t> entries_by_row(const Plan& p) {
  std::vector<std::size_t> order;
  order.reserve(p.index.size());
  for (std::size_t k = 0; k < p.index.size(); ++k)
    if (p.bag_of[k] != skip) order.push_back(k);
  const auto row = [&](std::size_t k) { return static_cast<uint64_t>(p.index[k]); };
  if (order.size() < 256) {  // a pass over 2048 buckets costs more than a small sort
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return row(a) < row(b); });
    return order;
  }
  std::vector<std::size_t> scratch;
  kernels::radix_sort<11>(order, scratch, p.num_rows > 0 ? p.num_rows - 1 : 0, row);
  return order;
}

// Then each entry, in that order, writes or adds its share into its row's
// slot: out row i gets the entries order[group[i]] to order[group[i + 1] - 1].
// Also compiled for AVX2 (core/kernels/dispatch.hpp): the same bits.
TG_ALSO_FOR_AVX2 void add_shares(const Plan& p, const std::vector<std::size_t>& order,
                                 const std::vector<std::size_t>& group, std::size_t lo, std::size_t hi,
                                 const float* g, const std::vector<std::size_t>* argmax, SparseRows& out) {
  for (std::size_t i = lo; i < hi; ++i) {
    out.rows[i] = p.index[order[group[i]]];
    float* dst = out.values.data() + i * p.dim;
    for (std::size_t j = group[i]; j < group[i + 1]; ++j) {
      const std::size_t k = order[j];
      const bool first = j == group[i];
      const float* src = g + p.bag_of[k] * p.dim;
      if (argmax) {
        const std::size_t* won = argmax->data() + p.bag_of[k] * p.dim;
        for (std::size_t c = 0; c < p.dim; ++c) {
          const float share = won[c] == k ? src[c] : 0.0f;
          dst[c] = first ? share : dst[c] + share;
        }
      } else if (first) {
        for (std::size_t c = 0; c < p.dim; ++c) dst[c] = p.coef[k] * src[c];
      } else {
        for (std::size_t c = 0; c < p.dim; ++c) dst[c] += p.coef[k] * src[c];
      }
    }
  }
}

// The weight's gradient from d(loss)/d(output) g. argmax (max mode) says, for
// each output element, which entry it came from. Each row's slot is filled by
// its own entries alone, so the rows are split across threads (core/kernels/parallel.hpp).
SparseRows row_grads(const Plan& p, const Array& g, const std::vector<std::size_t>* argmax) {
  if (plain_row_grads) return row_grads_plain(p, g.data(), argmax);
  const std::vector<std::size_t> order = entries_by_row(p);
  std::vector<std::size_t> group;  // where each row's entries start in order, then order.size()
  for (std::size_t i = 0; i < order.size(); ++i)
    if (i == 0 || p.index[order[i]] != p.index[order[i - 1]]) group.push_back(i);
  const std::size_t unique = group.size();
  group.push_back(order.size());
  SparseRows out{std::vector<int64_t>(unique), xt::empty<float>({unique, p.dim}), p.num_rows};
  parallel_for(unique, kernels::grain_for(unique, order.size() * p.dim), [&](std::size_t lo, std::size_t hi) {
    add_shares(p, order, group, lo, hi, g.data(), argmax, out);
  });
  return out;
}

}  // namespace

// As the weight wants it: coalesced rows, or (sparse = false) the dense [num, dim] array.
Grad weight_grad(const Plan& p, const Array& g, const std::vector<std::size_t>* argmax, bool sparse) {
  SparseRows rows = row_grads(p, g, argmax);
  return sparse ? Grad(std::move(rows)) : Grad(rows.to_dense());
}

PlainRowGradsGuard::PlainRowGradsGuard() : ScopedSetting(plain_row_grads, true) {}

}  // namespace detail

}  // namespace tg::nn
