// One training step on every thread: data parallelism over the rows of a batch,
// as PyTorch's nn.DataParallel does it across devices. The model's forward pass
// runs on each shard of the rows at once; the outputs are gathered into one
// tensor; the loss is computed on it as usual; each shard's backward pass runs
// on its own thread again.
//
//   tg::Tensor x = tg::index_select(images, 0, idx);
//   tg::Indices y = tg::data::take(labels, idx);
//   opt.zero_grad();
//   tg::Tensor loss = tg::nn::data_parallel(
//       model.parameters(), idx.size(),
//       [&](std::size_t b, std::size_t e) { return model(tg::narrow(x, 0, b, e - b)); },  // rows [b, e)
//       [&](const tg::Tensor& logits) { return tg::cross_entropy(logits, y); },            // all rows
//       gen);
//   opt.step();
//
// The rows [0, batch) are split into get_num_threads() contiguous shards
// (core/parallel.hpp). forward(begin, end) runs for each on the pool's threads
// and returns the output for those rows (its first dim: end - begin). The
// outputs are joined in order (cat) into the batch's output, loss(output) runs
// on the calling thread, and its gradient is sent back through each shard's
// graph on that shard's thread. Every gradient is taken with tg::grad() and
// added in shard order once all are done (a leaf the loss itself uses gets its
// share first), into `parameters` and into every other leaf that requires grad
// and that the shards or the loss use, as backward() would. The return value is
// the loss, detached; its backward pass has run (backward() on it throws,
// saying so): step the optimizer. The loss is the whole batch's, whatever it is
// (a mean over rows, over characters, a sum): nothing needs rescaling.
//
// Bits. For one thread count, a run gives the same bits every time: the shards
// are the same and their gradients are added in the same order. Random draws
// too: while the shards run, every draw on a shard's thread (Dropout's masks)
// comes from a stream of that shard's own, seeded from `gen` in shard order
// before they start (one draw of gen per shard). Pass the generator your
// program seeds and checkpoints, and a resumed run repeats exactly. On one
// thread it is exactly the plain step: loss(forward(0, batch)), backward(),
// with draws from the modules' own generators. Across thread counts results
// differ in rounding and in the dropout masks drawn. A generator made inside
// forward draws from its own seed, as anywhere; one seeded inside forward
// (tg::manual_seed(s), gen.seed(s)) holds that seed, and the shard's draws from
// it follow that seed (each shard's from the start of it).
//
// forward runs on several threads at once, so it may read anything shared
// (modules' forward passes only read their parameters) but not write it: an
// Embedding or EmbeddingBag with max_norm (which rescales rows of its weight
// in forward) throws std::logic_error in a shard. The ops inside it run on
// their shard's thread: their split loops (parallel_for) run serially there.
// A DetectAnomalyGuard of the calling thread reaches every shard, in forward
// and in backward. If anything throws, no gradient is added and the exception
// reaches the caller.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "../core/factories.hpp"
#include "../core/tensor.hpp"

namespace tg::nn {

Tensor data_parallel(const std::vector<Tensor>& parameters, std::size_t batch,
                     const std::function<Tensor(std::size_t begin, std::size_t end)>& forward,
                     const std::function<Tensor(const Tensor& output)>& loss,
                     Generator& gen = default_generator());

}  // namespace tg::nn
