// What the op files share (inside the library): reading a node's input
// shapes, and seeing a tensor as [outer, n, inner] around one of its dims.
// The public helpers (normalize_dim, check_indices, sum_to_shape) are
// declared in core/ops.hpp.
#pragma once

#include <cstddef>

#include "../array.hpp"
#include "../tape.hpp"

namespace tg {

// The shape input i had when the op ran.
inline Shape shape_of_input(const Node& n, std::size_t i) {
  return Shape(n.input_shape(i).begin(), n.input_shape(i).end());
}

// A tensor of shape s seen as [outer, n, inner] around axis ax: element
// (o, j, i) sits at o * n * inner + j * inner + i.
struct AxisSplit {
  std::size_t outer = 1, n = 1, inner = 1;
};
inline AxisSplit split_at(const Shape& s, std::size_t ax) {
  AxisSplit r;
  for (std::size_t i = 0; i < ax; ++i) r.outer *= s[i];
  r.n = s[ax];
  for (std::size_t i = ax + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

// s with dim ax removed, or kept as 1.
inline Shape reduced_shape(Shape s, std::size_t ax, bool keepdim) {
  if (keepdim)
    s[ax] = 1;
  else
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(ax));
  return s;
}

}  // namespace tg
