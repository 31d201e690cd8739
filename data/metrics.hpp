#pragma once
// Measures of a classifier's predictions.

#include "core/tensor.hpp"

namespace tg::data {

// The share of rows whose largest logit is at the row's label: logits [N, C],
// labels [N] of class ids in [0, C). PyTorch: (logits.argmax(1) == labels)
// .float().mean().item(). Ties go to the first largest logit and a NaN counts
// as the largest, as torch.argmax does. Throws std::invalid_argument for other
// shapes or N = 0, std::out_of_range for a label outside [0, C).
double accuracy(const Tensor& logits, const Indices& labels);

}  // namespace tg::data
