// One training step on every thread: data parallelism over the rows of a batch
// (PyTorch: nn.DataParallel, which splits a batch across devices the same way).
//
//   opt.zero_grad();
//   tg::Tensor loss = tg::nn::data_parallel(model.parameters(), idx.size(), [&](std::size_t b, std::size_t e) {
//     tg::Indices rows = tg::narrow(idx, 0, b, e - b);  // this shard's rows of the batch
//     return tg::cross_entropy(model(tg::index_select(images, 0, rows)), tg::data::take(labels, rows));
//   });
//   opt.step();
//
// The rows [0, batch) are split into get_num_threads() contiguous shards
// (core/parallel.hpp), and shard_loss(begin, end) runs for each on the pool's
// threads: a forward pass over those rows that returns their mean loss. Each
// shard's loss is weighted by its share of the batch, (end - begin) / batch, so
// the shards' gradients add up to the gradient of the whole batch's mean loss.
// Each thread takes its shard's gradients with tg::grad() (nothing is written
// while the shards run); then they are added into the parameters' grad() in
// shard order. The return value is the batch's loss (the weighted sum), detached.
//
// Bits. For one thread count, a run gives the same bits every time: the shards
// are the same and their gradients are added in the same order. On one thread
// it is exactly the plain step: shard_loss(0, batch), then backward(). Across
// thread counts the results differ in rounding (a sum of shard means is not
// rounded as the mean of the batch is). One exception: modules that draw
// random numbers while training (Dropout) draw each shard's mask from their one
// generator in the order the threads reach it, so with dropout on, a run on
// more than one thread is reproducible in distribution, not in bits.
//
// shard_loss runs on several threads at once, so it may read anything shared
// (modules' forward passes only read their parameters) but not write it.
// The shards' ops run on their own threads: the split loops inside them
// (parallel_for) run serially there. If a shard throws, no gradient is added
// and the exception reaches the caller.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "../core/tensor.hpp"

namespace tg::nn {

Tensor data_parallel(const std::vector<Tensor>& parameters, std::size_t batch,
                     const std::function<Tensor(std::size_t begin, std::size_t end)>& shard_loss);

}  // namespace tg::nn
