// Batch normalization, PyTorch's nn.BatchNorm1d and nn.BatchNorm2d: each channel
// of the input is normalised by a mean and variance, then scaled and shifted
// (tg::batch_norm, core/ops_nn.hpp):
//   y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]
//
//   tg::nn::BatchNorm2d bn(16);   // input [N, 16, H, W]
//   model.train();                // the batch's statistics; running ones updated
//   model.eval();                 // the running statistics
//
// While training, mean and var are the batch's, and the running statistics
// (buffers: in state_dict() and checkpoints, not in parameters()) move toward
// them: running = (1 - momentum) running + momentum batch, with the unbiased
// variance. momentum = std::nullopt makes them a plain average of every batch
// so far (1 / num_batches_tracked). After eval() the running statistics
// normalise instead. With track_running_stats = false there are none, and the
// batch's statistics are used in eval mode too. weight (ones) and bias (zeros)
// exist when affine.
//
// num_batches_tracked is a float32 buffer here (PyTorch's is int64): counts are
// exact up to 2^24 batches, and a PyTorch state dict loads once it holds float32
// (safetensors files here are float32 only: write it with .float()).
//
// forward() in training mode writes the running statistics: it must not run on
// two threads of one model at once, except inside nn::data_parallel, whose
// shards' updates take turns under a lock (each shard normalises with its own
// rows' statistics, as in PyTorch's DataParallel, and counts as a batch).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "../core/tensor.hpp"
#include "module.hpp"

namespace tg::nn {

struct BatchNormOptions {
  float eps = 1e-5f;
  std::optional<float> momentum = 0.1f;  // none: the cumulative average
  bool affine = true;
  bool track_running_stats = true;
};

// What BatchNorm1d and BatchNorm2d share (PyTorch's _BatchNorm); they differ
// only in the inputs they take.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) const override;

  void reset_running_stats();   // mean 0, variance 1, no batches
  void reset_parameters();      // the running statistics, and weight 1, bias 0
  std::size_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }

  std::optional<Tensor> weight, bias;  // [C], when affine
  // [C], [C] and [] (a count), when track_running_stats: buffers
  std::optional<Tensor> running_mean, running_var, num_batches_tracked;

 protected:
  BatchNorm(const char* name, std::size_t num_features, const BatchNormOptions& options);
  // Throws unless x has a shape this layer takes (dims and channels).
  virtual void check_input(const Tensor& x) const = 0;

  const char* name_;
  std::size_t num_features_;
  BatchNormOptions options_;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(std::size_t num_features, const BatchNormOptions& options = {})
      : BatchNorm("BatchNorm1d", num_features, options) {}
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<BatchNorm1d>(num_features_, options_));
  }

 private:
  void check_input(const Tensor& x) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(std::size_t num_features, const BatchNormOptions& options = {})
      : BatchNorm("BatchNorm2d", num_features, options) {}
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<BatchNorm2d>(num_features_, options_));
  }

 private:
  void check_input(const Tensor& x) const override;
};

}  // namespace tg::nn
