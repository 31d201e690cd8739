// Shapes as text, broadcasting, checked sizes and allocations, and the allocator settings.
#include "array.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "check.hpp"

namespace tg {

std::string shape_str(std::span<const std::size_t> shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

std::size_t wrap_index(const char* what, int64_t i, std::size_t n) {
  const std::size_t at = wrapped(i, n);
  check<std::out_of_range>(at < n, what, " ", i, " is out of range for a dim of size ", n);
  return at;
}

std::size_t checked_numel(const char* op, const Shape& shape, std::size_t element_size) {
  // xtensor keeps strides as signed integers: the count must fit in one too.
  const std::size_t limit =
      static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / element_size;
  std::size_t n = 1;
  bool overflow = false;
  for (std::size_t d : shape) {
    if (d == 0) return 0;
    overflow = overflow || n > limit / d;
    if (!overflow) n *= d;
  }
  if (overflow)
    throw std::length_error(message(op, ": shape ", shape, " has more elements than memory can address"));
  return n;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    // Align from the right: a missing leading dim counts as 1.
    std::size_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    std::size_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(message(op, ": shapes ", a, " and ", b, " cannot be broadcast together"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

OutOfMemory::OutOfMemory(const char* op, const Shape& shape, std::size_t bytes)
    : message_(std::string(op) + ": cannot allocate " + std::to_string(bytes) + " bytes for shape " +
               shape_str(shape)) {}

// Freed arrays stay with the allocator for the next op. By default glibc hands
// an allocation above 128 KB (and, as it adapts, up to 32 MB) fresh pages from
// the kernel and returns them on free, so every op of a training loop paid a
// page fault per 4 KB it wrote: a [1024, 300] add and its backward spent 4x
// their time in the kernel. Here the library asks glibc, once, as it loads,
// to serve arrays up to 32 MB (its limit) from its heap and to keep up to
// 1 GB of freed memory there instead of trimming it. A program that sets
// MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ in its environment keeps
// its own settings.
static const bool memory_kept_for_reuse = [] {
#ifdef __GLIBC__
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
#else
  return false;
#endif
}();

Array empty_array(const char* op, const Shape& shape) {
  const std::size_t n = checked_numel(op, shape);
  try {
    return xt::empty<float>(shape);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(op, shape, n * sizeof(float));
  }
}

Array empty_array(const char* op, std::span<const std::size_t> shape) {
  return empty_array(op, Shape(shape.begin(), shape.end()));
}

Array zeros_array(const char* op, const Shape& shape) {
  Array a = empty_array(op, shape);
  std::fill_n(a.data(), a.size(), 0.0f);
  return a;
}

Array zeros_array(const char* op, std::span<const std::size_t> shape) {
  return zeros_array(op, Shape(shape.begin(), shape.end()));
}

Indices empty_indices(const char* op, const Shape& shape) {
  const std::size_t n = checked_numel(op, shape, sizeof(int64_t));
  try {
    return xt::empty<int64_t>(shape);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(op, shape, n * sizeof(int64_t));
  }
}

Array empty_like(const char* op, const Array& x) {
  try {
    return Array(x.shape());
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(op, shape_of(x), x.size() * sizeof(float));
  }
}

}  // namespace tg
