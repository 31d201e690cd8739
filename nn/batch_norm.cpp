// BatchNorm1d and BatchNorm2d: training-mode batch statistics, running statistics as buffers, eval mode.
#include "batch_norm.hpp"

#include <mutex>
#include <stdexcept>
#include <string>

#include "../core/factories.hpp"
#include "../core/ops_nn.hpp"

namespace tg::nn {

BatchNorm::BatchNorm(const char* name, std::size_t num_features, const BatchNormOptions& options)
    : name_(name), num_features_(num_features), options_(options) {
  if (num_features == 0) throw std::invalid_argument(std::string(name) + ": num_features must be positive");
  if (!(options.eps >= 0.0f))
    throw std::invalid_argument(std::string(name) + ": eps must be >= 0; got " + std::to_string(options.eps));
  if (options.affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}));
  }
}

void BatchNorm::reset_running_stats() {
  if (!options_.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean->copy_(xt::zeros<float>({num_features_}));
  running_var->copy_(xt::ones<float>({num_features_}));
  num_batches_tracked->copy_(Array(0.0f));
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (!options_.affine) return;
  NoGradGuard no_grad;
  weight->copy_(xt::ones<float>({num_features_}));
  bias->copy_(xt::zeros<float>({num_features_}));
}

// nn::data_parallel's shards may run one model's forward on several threads: the
// count of batches is written under a lock.
static std::mutex count_mutex;

Tensor BatchNorm::forward(const Tensor& x) const {
  check_input(x);
  if (is_training() && x.numel() / num_features_ <= 1)  // before the count changes
    throw std::invalid_argument(std::string(name_) + ": expected more than 1 value per channel when training; got input " +
                                shape_str(x.shape()));
  // PyTorch's _BatchNorm.forward: a training step counts a batch and updates the
  // running statistics with momentum (or 1 / the count, for a plain average).
  float factor = options_.momentum.value_or(0.0f);
  if (is_training() && options_.track_running_stats) {
    std::lock_guard<std::mutex> lock(count_mutex);
    Tensor count = *num_batches_tracked;  // a handle: the buffer itself
    count.value_mut()() += 1.0f;
    if (!options_.momentum) factor = 1.0f / count.value()();
  }
  // The batch's statistics when training, and in eval mode without running ones.
  const bool use_batch = is_training() || !options_.track_running_stats;
  const bool pass_running = !is_training() || options_.track_running_stats;
  return tg::batch_norm(x, pass_running ? running_mean : std::nullopt, pass_running ? running_var : std::nullopt,
                        weight, bias, use_batch, factor, options_.eps);
}

void BatchNorm1d::check_input(const Tensor& x) const {
  if ((x.dim() != 2 && x.dim() != 3) || x.shape()[1] != num_features_)
    throw std::invalid_argument("BatchNorm1d: expected input [N, " + std::to_string(num_features_) + "] or [N, " +
                                std::to_string(num_features_) + ", L]; got " + shape_str(x.shape()));
}

void BatchNorm2d::check_input(const Tensor& x) const {
  if (x.dim() != 4 || x.shape()[1] != num_features_)
    throw std::invalid_argument("BatchNorm2d: expected input [N, " + std::to_string(num_features_) +
                                ", H, W]; got " + shape_str(x.shape()));
}

}  // namespace tg::nn
