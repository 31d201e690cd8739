// The helpers core/ops.hpp makes public for custom ops: dims and indices
// checked with a message naming the op, and the un-broadcast step.
#include "../ops.hpp"

#include <stdexcept>
#include <string>

#include "../check.hpp"
#include "../kernels/reduce.hpp"

namespace tg {

Array sum_to_shape(const Array& grad, const Shape& shape) {
  return kernels::sum_to_shape(grad, std::span<const std::size_t>(shape));
}

std::size_t normalize_dim(const char* op, int64_t dim, std::size_t rank) {
  const std::size_t d = wrapped(dim, rank);
  check(d < rank, op, ": dim ", dim, " out of range for a tensor with ", rank, " dims");
  return d;
}

std::size_t normalize_dim(const char* op, int64_t dim, const Shape& shape) {
  const std::size_t d = wrapped(dim, shape.size());
  check(d < shape.size(), op, ": dim ", dim, " out of range for shape ", shape, " (", shape.size(), " dims)");
  return d;
}

void check_indices(const char* op, const Indices& index, std::size_t size) {
  // One pass that a compiler vectorizes (a negative index is a huge unsigned
  // one), then, only if something is out of range, a second to name it.
  const int64_t* first = index.data();
  bool bad = false;
  for (std::size_t k = 0; k < index.size(); ++k) bad |= static_cast<uint64_t>(first[k]) >= size;
  if (!bad) return;
  for (std::size_t k = 0; k < index.size(); ++k)
    check<std::out_of_range>(static_cast<uint64_t>(first[k]) < size, op, ": index ", first[k],
                             " out of range for size ", size);
}

}  // namespace tg
