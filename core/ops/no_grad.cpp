// What records nothing (no gradient flows through it): the comparisons, one_hot
// and multinomial sampling.
#include "../ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "../check.hpp"
#include "../kernels/elementwise.hpp"
#include "../tape.hpp"
#include "common.hpp"

namespace tg {

// ---------------------------------------------------------- comparisons

template <class Cmp>
static Tensor compare(const char* op, const Tensor& a, const Tensor& b, Cmp cmp) {
  broadcast_shapes(op, a.shape(), b.shape());
  // not recorded: a mask has no gradient
  return Tensor(
      kernels::map(op, a.value(), b.value(), [cmp](float x, float y) { return cmp(x, y) ? 1.0f : 0.0f; }));
}

Tensor gt(const Tensor& a, const Tensor& b) {
  return compare("gt", a, b, [](float x, float y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare("ge", a, b, [](float x, float y) { return x >= y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare("lt", a, b, [](float x, float y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare("le", a, b, [](float x, float y) { return x <= y; });
}
Tensor eq(const Tensor& a, const Tensor& b) {
  return compare("eq", a, b, [](float x, float y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare("ne", a, b, [](float x, float y) { return x != y; });
}
Tensor gt(const Tensor& a, float b) {
  return gt(a, Tensor(Array(b)));
}
Tensor ge(const Tensor& a, float b) {
  return ge(a, Tensor(Array(b)));
}
Tensor lt(const Tensor& a, float b) {
  return lt(a, Tensor(Array(b)));
}
Tensor le(const Tensor& a, float b) {
  return le(a, Tensor(Array(b)));
}
Tensor eq(const Tensor& a, float b) {
  return eq(a, Tensor(Array(b)));
}
Tensor ne(const Tensor& a, float b) {
  return ne(a, Tensor(Array(b)));
}

// ----------------------------------------------------------------- one_hot

Tensor one_hot(const Indices& index, int64_t num_classes) {
  if (num_classes < 0) {
    if (num_classes != -1 || index.size() == 0)
      throw std::invalid_argument(
          message("one_hot: num_classes ", num_classes, " (use -1 only with a non-empty index)"));
    const int64_t largest = *std::max_element(index.data(), index.data() + index.size());
    if (largest == std::numeric_limits<int64_t>::max())  // + 1 would overflow
      throw std::length_error(
          message("one_hot: class ", largest, " gives more classes than memory can address"));
    num_classes = largest + 1;
  }
  check_indices("one_hot", index, static_cast<std::size_t>(num_classes));
  Shape out_shape(index.shape().begin(), index.shape().end());
  out_shape.push_back(static_cast<std::size_t>(num_classes));
  // Checked like the factories: a size that overflows throws std::length_error,
  // one that does not fit in memory tg::OutOfMemory, both naming one_hot.
  Array out = empty_array("one_hot", out_shape);
  std::fill_n(out.data(), out.size(), 0.0f);
  const std::size_t classes = static_cast<std::size_t>(num_classes);
  for (std::size_t i = 0; i < index.size(); ++i)
    out.data()[i * classes + static_cast<std::size_t>(index.data()[i])] = 1.0f;
  return Tensor(std::move(out));
}

// ----------------------------------------------------------------- sampling

// A uniform double in [0, 1) from two 32-bit draws (53 random bits), the same
// on every platform (std::uniform_real_distribution's algorithm is not fixed).
static double uniform_double(Generator& gen) {
  const double high = static_cast<double>(gen() >> 5);  // 27 bits
  const double low = static_cast<double>(gen() >> 6);   // 26 bits
  return (high * 67108864.0 + low) / 9007199254740992.0;
}

Indices multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& gen) {
  const Shape ps = probs.shape();
  if (ps.size() != 1 && ps.size() != 2)
    throw std::invalid_argument(message("multinomial: probs must be 1-d or 2-d; got shape ", ps));
  const std::size_t rows = ps.size() == 2 ? ps[0] : 1, c = ps.back();
  check(num_samples > 0, "multinomial: num_samples must be positive; got ", num_samples);
  if (!replacement && static_cast<std::size_t>(num_samples) > c)
    throw std::invalid_argument(message("multinomial: cannot draw ", num_samples,
                                        " samples without replacement from ", c, " categories"));
  // Check every row before drawing anything, so a bad row leaves gen untouched.
  for (std::size_t r = 0; r < rows; ++r) {
    const float* w = probs.value().data() + r * c;
    double total = 0;
    std::size_t nonzero = 0;
    for (std::size_t j = 0; j < c; ++j) {
      if (!std::isfinite(w[j]) || w[j] < 0)
        throw std::invalid_argument(message("multinomial: probs of shape ", ps, " holds ", w[j], " at row ",
                                            r, ", column ", j, "; weights must be finite and >= 0"));
      total += w[j];
      nonzero += w[j] > 0;
    }
    check(total > 0, "multinomial: row ", r, " of probs ", ps, " sums to 0");
    if (!replacement && nonzero < static_cast<std::size_t>(num_samples))
      throw std::invalid_argument(message("multinomial: row ", r, " has ", nonzero,
                                          " non-zero weights, too few for ", num_samples,
                                          " samples without replacement"));
  }
  Shape out_shape = ps;
  out_shape.back() = static_cast<std::size_t>(num_samples);
  Indices out = empty_indices("multinomial", out_shape);
  std::vector<double> w(c);
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy_n(probs.value().data() + r * c, c, w.begin());
    for (int64_t s = 0; s < num_samples; ++s) {
      // Inverse CDF: the first category whose running total passes u * total.
      double total = 0;
      for (double v : w) total += v;
      const double u = uniform_double(gen) * total;
      std::size_t pick = c;
      double running = 0;
      for (std::size_t j = 0; j < c; ++j) {
        if (w[j] <= 0) continue;  // a zero weight is never drawn
        pick = j;                 // the last non-zero one, should rounding leave u past the end
        running += w[j];
        if (u < running) break;
      }
      out.data()[r * num_samples + s] = static_cast<int64_t>(pick);
      if (!replacement) w[pick] = 0;  // drawn once at most
    }
  }
  return out;
}

Indices multinomial(const Tensor& probs, int64_t num_samples, Generator& gen) {
  return multinomial(probs, num_samples, false, gen);
}

}  // namespace tg
