// Losses under tg::nn, as in torch.nn.functional and torch.nn. The functions
// are core's (core/ops.hpp); the structs hold a reduction, like nn.MSELoss().
#pragma once

#include "../core/ops.hpp"

namespace tg::nn {

using tg::cross_entropy;  // logits [N, C], class ids [N]
using tg::mse_loss;       // input and target of the same shape
using tg::nll_loss;       // log-probabilities [N, C], class ids [N]
using tg::Reduction;

struct CrossEntropyLoss {
  Reduction reduction = Reduction::mean;
  Tensor operator()(const Tensor& logits, const Indices& target) const {
    return cross_entropy(logits, target, reduction);
  }
};

struct MSELoss {
  Reduction reduction = Reduction::mean;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target, reduction);
  }
};

}  // namespace tg::nn
