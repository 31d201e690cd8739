// accuracy and the confusion counts of a classifier's logits.
#include "metrics.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "../core/ops.hpp"

namespace tg::data {

double accuracy(const Tensor& logits, const Indices& labels) {
  const Shape shape = logits.shape();
  const Shape label_shape(labels.shape().begin(), labels.shape().end());
  if (shape.size() != 2 || label_shape.size() != 1 || label_shape[0] != shape[0])
    throw std::invalid_argument("accuracy: logits must be [N, C] and labels [N]; got " + shape_str(shape) +
                                " and " + shape_str(label_shape));
  const std::size_t n = shape[0], classes = shape[1];
  if (n == 0 || classes == 0)
    throw std::invalid_argument("accuracy: no rows or no classes in logits " + shape_str(shape));
  check_indices("accuracy", labels, classes);
  std::size_t correct = 0;
  const float* row = logits.value().data();
  for (std::size_t i = 0; i < n; ++i, row += classes) {
    std::size_t best = 0;
    for (std::size_t c = 1; c < classes && !std::isnan(row[best]); ++c)
      if (row[c] > row[best] || std::isnan(row[c])) best = c;
    correct += static_cast<int64_t>(best) == labels(i);
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace tg::data
