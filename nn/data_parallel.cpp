#include "data_parallel.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../core/ops.hpp"
#include "../core/parallel.hpp"

namespace tg::nn {

Tensor data_parallel(const std::vector<Tensor>& parameters, std::size_t batch,
                     const std::function<Tensor(std::size_t begin, std::size_t end)>& shard_loss) {
  if (batch == 0) throw std::invalid_argument("data_parallel: the batch has no rows");
  if (!is_grad_enabled()) throw std::logic_error("data_parallel: grad mode is off (a NoGradGuard is alive)");
  auto loss_of = [&](std::size_t b, std::size_t e) {
    Tensor loss = shard_loss(b, e);
    if (loss.numel() != 1 || !loss.requires_grad())
      throw std::invalid_argument("data_parallel: shard_loss(" + std::to_string(b) + ", " + std::to_string(e) +
                                  ") returned a tensor of shape " + shape_str(loss.shape()) +
                                  (loss.requires_grad() ? "" : " that does not require grad") +
                                  "; it must return the shard's loss, one element");
    return loss;
  };
  const std::size_t shards = std::min(get_num_threads(), batch);
  if (shards == 1) {  // the plain step
    Tensor loss = loss_of(0, batch);
    loss.backward();
    return loss.detach();
  }

  std::vector<Tensor> leaves;  // the parameters that take a gradient
  for (const Tensor& p : parameters)
    if (p.requires_grad()) leaves.push_back(p);
  std::vector<float> losses(shards);
  std::vector<std::vector<Grad>> grads(shards);
  parallel_for(shards, 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t k = first; k < last; ++k) {
      const std::size_t b = batch * k / shards, e = batch * (k + 1) / shards;
      Tensor loss = loss_of(b, e) * (static_cast<float>(e - b) / static_cast<float>(batch));
      losses[k] = loss.item();
      grads[k] = grad(loss, leaves);
    }
  });
  float total = 0;
  for (std::size_t k = 0; k < shards; ++k) {
    total += losses[k];
    for (std::size_t i = 0; i < leaves.size(); ++i)
      if (!grads[k][i].empty()) leaves[i].accumulate_grad(std::move(grads[k][i]));
  }
  return Tensor(Array(total));
}

}  // namespace tg::nn
