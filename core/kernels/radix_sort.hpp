// A stable least-significant-digit radix sort by an integer key (not installed).
//
// `bits` of the key a pass, as many passes as max_key has digits: each pass
// counts the digits, turns the counts into where each digit starts, and moves
// the items there in order. No comparisons, so no branch to mispredict; a few
// passes over the items where std::sort costs log2(n) comparisons an item.
// to_csr sorts a document's ids with it (the key is the id), the embedding's
// backward the entries of a batch by the row they read (data/batch.cpp,
// nn/embedding_grad.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace tg::kernels {

// Sorts items by key(item), every key in [0, max_key]; equal keys keep their
// order. scratch is working space, of any size on the way in.
template <unsigned bits, class T, class Key>
void radix_sort(std::vector<T>& items, std::vector<T>& scratch, uint64_t max_key, Key key) {
  static_assert(bits > 0 && bits <= 16, "radix_sort: 1 to 16 bits a pass");
  constexpr uint64_t mask = (uint64_t{1} << bits) - 1;
  scratch.resize(items.size());
  std::array<std::size_t, mask + 1> start;  // on the stack: 2 KB for 8 bits, 16 KB for 11
  for (unsigned shift = 0; shift < 64 && (max_key >> shift) != 0; shift += bits) {
    std::fill(start.begin(), start.end(), 0);
    for (const T& item : items) ++start[(static_cast<uint64_t>(key(item)) >> shift) & mask];
    std::size_t at = 0;
    for (std::size_t& s : start) at += std::exchange(s, at);  // counts -> where each digit starts
    for (const T& item : items) scratch[start[(static_cast<uint64_t>(key(item)) >> shift) & mask]++] = item;
    items.swap(scratch);
  }
}

}  // namespace tg::kernels
