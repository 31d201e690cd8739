// DistributedSampler: each rank's share of a dataset's positions, as PyTorch's
// torch.utils.data.distributed.DistributedSampler gives it.
//
//   tg::distributed::DistributedSampler sampler(split.train, {.seed = 0});  // this rank of the world
//   for (int epoch = 1; ...) {
//     sampler.set_epoch(epoch);                          // else every epoch has the same order
//     for (const std::vector<int64_t>& idx : sampler.batches(32)) ...   // this rank's batches
//   }
//
// PyTorch's semantics, step by step:
//   1. with shuffle, the positions are permuted by a seeded shuffle of seed + epoch
//      (the same on every rank; tg::data::shuffled_indices, so not torch.randperm's order);
//   2. drop_last = false (the default): the list is padded to a multiple of
//      num_replicas by repeating its first positions, so a few samples count twice;
//      drop_last = true: its tail is dropped to a multiple of num_replicas instead;
//   3. rank r takes the positions r, r + num_replicas, r + 2 num_replicas, ...
// Every rank then has num_samples() positions, so every rank has the same
// number of batches and the same batch sizes, the last one smaller when
// num_samples() is not a multiple of the batch size.
//
// With a local batch of b, batch k of every rank together is the positions
// [k b N, (k + 1) b N) of the list of step 2: one process stepping through that
// list with batch b N sees the same global batches, which is what makes N
// processes equal one (distributed/distributed.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tg::distributed {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;        // the same on every rank
  bool drop_last = false;   // drop the tail instead of padding
  int num_replicas = -1;    // -1: world_size()
  int rank = -1;            // -1: rank()
};

class DistributedSampler {
 public:
  // Over the given positions (a split's train part), or over 0 .. n-1. Throws
  // std::invalid_argument, naming the values, for num_replicas < 1, a rank
  // outside [0, num_replicas), or no positions at all.
  DistributedSampler(std::vector<int64_t> indices, DistributedSamplerOptions options = {});
  DistributedSampler(std::size_t n, DistributedSamplerOptions options = {});

  // The epoch the next order is drawn for (PyTorch: sampler.set_epoch(epoch)).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

  // The whole list of step 2 (padded or cut) for this epoch, every rank's.
  std::vector<int64_t> global_order() const;
  // This rank's positions for this epoch (PyTorch: list(iter(sampler))).
  std::vector<int64_t> indices() const;
  // This rank's positions cut into batches of batch_size (the last may be smaller).
  // Throws std::invalid_argument for batch_size 0.
  std::vector<std::vector<int64_t>> batches(std::size_t batch_size) const;

  std::size_t num_samples() const { return num_samples_; }              // per rank (PyTorch: len(sampler))
  std::size_t total_size() const { return num_samples_ * replicas_; }  // over all ranks
  int num_replicas() const { return replicas_; }
  int rank() const { return rank_; }

 private:
  std::vector<int64_t> indices_;
  DistributedSamplerOptions options_;
  int replicas_ = 1, rank_ = 0;
  std::size_t num_samples_ = 0;
  uint64_t epoch_ = 0;
};

}  // namespace tg::distributed
