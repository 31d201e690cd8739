#include "data_parallel.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "../core/debug.hpp"
#include "../core/ops.hpp"
#include "../core/parallel.hpp"
#include "../core/tape.hpp"

namespace tg::nn {

static Tensor checked_loss(const std::function<Tensor(const Tensor&)>& loss, const Tensor& output) {
  Tensor l = loss(output);
  if (l.numel() != 1 || !l.requires_grad())
    throw std::invalid_argument(
        "data_parallel: loss(output) returned a tensor of shape " + shape_str(l.shape()) +
        (l.requires_grad() ? "" : " that does not require grad") + "; it must be one value");
  return l;
}

// `parameters` that require grad, then every other leaf that requires grad
// under `roots`, but not those in `taken`: the leaves the plain step's
// backward() would reach.
static std::vector<Tensor> leaves_under(const std::vector<Tensor>& parameters, std::vector<Tensor> roots,
                                        const std::vector<Tensor>& taken) {
  std::vector<Tensor> leaves;
  std::unordered_set<const TensorImpl*> seen;
  for (const Tensor& t : taken) seen.insert(t.impl().get());
  for (const Tensor& p : parameters)
    if (p.requires_grad() && seen.insert(p.impl().get()).second) leaves.push_back(p);
  std::unordered_set<const Node*> walked;
  for (std::vector<Tensor> todo = std::move(roots); !todo.empty();) {
    const Tensor t = todo.back();
    todo.pop_back();
    if (const std::shared_ptr<Node>& n = t.creator()) {
      if (walked.insert(n.get()).second)
        for (const Node::Input& in : n->inputs) todo.push_back(in.tensor);
    } else if (t.requires_grad() && seen.insert(t.impl().get()).second) {
      leaves.push_back(t);
    }
  }
  return leaves;
}

// The loss returned: its backward pass has run (a backward() on it says so).
static Tensor returned(const Tensor& loss) {
  Tensor out = loss.detach();
  out.impl()->backward_ran_in = "nn::data_parallel";
  return out;
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
    return returned(l);
  }

  std::vector<uint32_t> seeds(shards);
  for (uint32_t& s : seeds) s = static_cast<uint32_t>(gen());
  // Anomaly mode is per thread: the caller's reaches each shard's thread.
  const bool anomaly = debug::anomaly_enabled();

  // Forward, each shard on its own thread, with its own random draws.
  std::vector<Tensor> outputs(shards);
  parallel_for(shards, 1, [&](std::size_t first, std::size_t last) {
    std::optional<DetectAnomalyGuard> anomaly_guard;
    if (anomaly) anomaly_guard.emplace();
    for (std::size_t k = first; k < last; ++k) {
      detail::ShardStream stream(seeds[k]);
      outputs[k] = forward_rows(k);
    }
  });
  // The loss of the gathered outputs, here: its gradient for each shard's
  // output (and for leaves the loss uses itself).
  std::vector<Tensor> gathered;
  for (const Tensor& out : outputs) gathered.push_back(out.detach().set_requires_grad(true));
  Tensor l = checked_loss(loss, cat(gathered, 0));
  // Every leaf that takes a gradient: the parameters, and any other leaf that
  // requires grad and that a shard or the loss uses, as backward() would reach.
  std::vector<Tensor> roots = outputs;
  roots.push_back(l);
  std::vector<Tensor> leaves = leaves_under(parameters, roots, gathered);
  std::vector<Tensor> wrt = gathered;
  wrt.insert(wrt.end(), leaves.begin(), leaves.end());
  std::vector<Grad> to_outputs = grad(l, wrt);

  // Backward, each shard on its own thread.
  std::vector<std::vector<Grad>> grads(shards);
  parallel_for(shards, 1, [&](std::size_t first, std::size_t last) {
    std::optional<DetectAnomalyGuard> anomaly_guard;
    if (anomaly) anomaly_guard.emplace();
    for (std::size_t k = first; k < last; ++k)
      grads[k] = grad(outputs[k], leaves, to_outputs[k].to_dense(outputs[k].shape()));
  });
  for (std::size_t i = 0; i < leaves.size(); ++i)  // the loss's own share first, then the shards' in order
    if (!to_outputs[shards + i].empty()) leaves[i].accumulate_grad(std::move(to_outputs[shards + i]));
  for (std::size_t k = 0; k < shards; ++k)
    for (std::size_t i = 0; i < leaves.size(); ++i)
      if (!grads[k][i].empty()) leaves[i].accumulate_grad(std::move(grads[k][i]));
  return returned(l);
}

}  // namespace tg::nn
