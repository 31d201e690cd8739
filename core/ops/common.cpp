// The helpers core/ops.hpp makes public for custom ops: dims and indices
// checked with a message naming the op, and the un-broadcast step.
#include "../ops.hpp"

#include <stdexcept>
#include <string>

#include "../kernels/reduce.hpp"

namespace tg {

Array sum_to_shape(const Array& grad, const Shape& shape) {
  return kernels::sum_to_shape(grad, std::span<const std::size_t>(shape));
}

std::size_t normalize_dim(const char* op, int64_t dim, std::size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                                " out of range for a tensor with " + std::to_string(rank) + " dims");
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

std::size_t normalize_dim(const char* op, int64_t dim, const Shape& shape) {
  const int64_t r = static_cast<int64_t>(shape.size());
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                                " out of range for shape " + shape_str(shape) + " (" + std::to_string(r) +
                                " dims)");
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

void check_indices(const char* op, const Indices& index, std::size_t size) {
  // One pass that a compiler vectorizes (a negative index is a huge unsigned
  // one), then, only if something is out of range, a second to name it.
  const int64_t* first = index.data();
  bool bad = false;
  for (std::size_t k = 0; k < index.size(); ++k) bad |= static_cast<uint64_t>(first[k]) >= size;
  if (!bad) return;
  for (std::size_t k = 0; k < index.size(); ++k)
    if (static_cast<uint64_t>(first[k]) >= size)
      throw std::out_of_range(std::string(op) + ": index " + std::to_string(first[k]) +
                              " out of range for size " + std::to_string(size));
}

}  // namespace tg
