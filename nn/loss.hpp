// Losses under tg::nn, as in torch.nn.functional: the functions are core's
// (core/ops.hpp). There are no loss modules (PyTorch's nn.CrossEntropyLoss()
// and nn.MSELoss()): they would only hold the reduction, which the functions
// take as an argument, and a loss does not go inside a Sequential.
//   criterion = nn.CrossEntropyLoss(reduction="sum")   ->   tg::cross_entropy(logits, y, tg::Reduction::sum)
#pragma once

#include "core/ops.hpp"

namespace tg::nn {

using tg::cross_entropy;  // logits [N, C], class ids [N]
using tg::mse_loss;       // input and target of the same shape
using tg::nll_loss;       // log-probabilities [N, C], class ids [N]
using tg::Reduction;

}  // namespace tg::nn
