#include "data_parallel.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../core/ops.hpp"
#include "../core/parallel.hpp"

namespace tg::nn {

static Tensor checked_loss(const std::function<Tensor(const Tensor&)>& loss, const Tensor& output) {
  Tensor l = loss(output);
  if (l.numel() != 1 || !l.requires_grad())
    throw std::invalid_argument(
        "data_parallel: loss(output) returned a tensor of shape " + shape_str(l.shape()) +
        (l.requires_grad() ? "" : " that does not require grad") + "; it must be one value");
  return l;
}

Tensor data_parallel(const std::vector<Tensor>& parameters, std::size_t batch,
                     const std::function<Tensor(std::size_t begin, std::size_t end)>& forward,
                     const std::function<Tensor(const Tensor& output)>& loss, Generator& gen) {
  if (batch == 0) throw std::invalid_argument("data_parallel: the batch has no rows");
  if (!is_grad_enabled()) throw std::logic_error("data_parallel: grad mode is off (a NoGradGuard is alive)");
  const std::size_t shards = std::min(get_num_threads(), batch);
  // Shard k holds the rows [begin(k), begin(k + 1)).
  auto begin = [&](std::size_t k) { return batch * k / shards; };
  auto forward_rows = [&](std::size_t k) {
    Tensor out = forward(begin(k), begin(k + 1));
    if (out.dim() == 0 || out.shape()[0] != begin(k + 1) - begin(k) || !out.requires_grad())
      throw std::invalid_argument(
          "data_parallel: forward(" + std::to_string(begin(k)) + ", " + std::to_string(begin(k + 1)) +
          ") returned a tensor of shape " + shape_str(out.shape()) +
          (out.requires_grad() ? "" : " that does not require grad") + "; its first dim must be those rows");
    return out;
  };
  if (shards == 1) {  // the plain step
    Tensor l = checked_loss(loss, forward_rows(0));
    l.backward();
    return l.detach();
  }

  std::vector<Tensor> params;  // the parameters that take a gradient
  for (const Tensor& p : parameters)
    if (p.requires_grad()) params.push_back(p);
  std::vector<uint32_t> seeds(shards);
  for (uint32_t& s : seeds) s = static_cast<uint32_t>(gen());

  // Forward, each shard on its own thread, with its own random draws.
  std::vector<Tensor> outputs(shards);
  parallel_for(shards, 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t k = first; k < last; ++k) {
      detail::ShardStream stream(seeds[k]);
      outputs[k] = forward_rows(k);
    }
  });
  // The loss of the gathered outputs, here: its gradient for each shard's
  // output (and for parameters the loss uses itself).
  std::vector<Tensor> wrt;
  for (const Tensor& out : outputs) wrt.push_back(out.detach().set_requires_grad(true));
  wrt.insert(wrt.end(), params.begin(), params.end());
  Tensor l = checked_loss(loss, cat(std::vector<Tensor>(wrt.begin(), wrt.begin() + shards), 0));
  std::vector<Grad> to_outputs = grad(l, wrt);

  // Backward, each shard on its own thread.
  std::vector<std::vector<Grad>> grads(shards);
  parallel_for(shards, 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t k = first; k < last; ++k)
      grads[k] = grad(outputs[k], params, to_outputs[k].to_dense(outputs[k].shape()));
  });
  for (std::size_t i = 0; i < params.size(); ++i)  // the loss's own share first, then the shards' in order
    if (!to_outputs[shards + i].empty()) params[i].accumulate_grad(std::move(to_outputs[shards + i]));
  for (std::size_t k = 0; k < shards; ++k)
    for (std::size_t i = 0; i < params.size(); ++i)
      if (!grads[k][i].empty()) params[i].accumulate_grad(std::move(grads[k][i]));
  return l.detach();
}

}  // namespace tg::nn
