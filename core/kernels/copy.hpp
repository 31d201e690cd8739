// Kernels that move values without arithmetic: a copy, dims reordered (permute,
// transpose), and elements picked by an index (gather) or added back to where
// they were picked from (its backward).
#pragma once

#include <cstddef>
#include <vector>

#include "../array.hpp"
#include "loop.hpp"

namespace tg::kernels {

// A copy of x: what `Array y = x;` does, but a large array is copied by every
// thread of the pool, each its own range (copy_on_threads). Inline, so that a
// tiny op's copy costs what `Array y = x;` costs.
Array copy_on_threads(const char* op, const Array& x);
inline Array copy(const char* op, const Array& x) {
  return x.size() < 2 * elementwise_grain ? Array(x) : copy_on_threads(op, x);
}

// x with its dims reordered: the output's dim i is x's dim perm[i].
Array permute(const char* op, const Array& x, const std::vector<std::size_t>& perm);

// out[k] = x[k's position (in index's shape) with its coordinate along ax
// replaced by index[k]], out of index's shape (torch.gather). The indices are
// checked by the op.
Array gather(const Array& x, std::size_t ax, const Indices& index);
// gather's backward: zeros of `shape`, and g[k] added where gather read out[k]
// from (repeats add up).
Array scatter_add(const Shape& shape, std::size_t ax, const Indices& index, const Array& g);

}  // namespace tg::kernels
