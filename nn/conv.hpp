// Convolution and pooling layers, PyTorch's nn.Conv1d, nn.Conv2d, nn.MaxPool1d,
// nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool1d and
// nn.AdaptiveAvgPool2d. Each forward() is the core op of the same name
// (core/conv.hpp), which says what the options mean.
//
//   tg::nn::Sequential cnn(tg::nn::Conv2d(1, 16, 3, {.padding = 1}),   // [N, 1, 8, 8] -> [N, 16, 8, 8]
//                          tg::nn::ReLU(), tg::nn::MaxPool2d(2),        // -> [N, 16, 4, 4]
//                          tg::nn::Flatten(), tg::nn::Linear(256, 10));
//
// Conv1d and Conv2d are initialised like PyTorch's: weight by kaiming_uniform_
// with a = sqrt(5), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias from the
// same range, fan_in = in_channels / groups * the kernel's size.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "../core/conv.hpp"
#include "../core/factories.hpp"
#include "module.hpp"

namespace tg::nn {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// Input [N, in_channels, L] (or [in_channels, L]); weight [out, in / groups, kernel_size].
class Conv1d : public Module {
 public:
  Conv1d(std::size_t in_channels, std::size_t out_channels, int64_t kernel_size, const Conv1dOptions& options = {},
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Module> clone() const override;
  void reset_parameters(Generator& gen = default_generator());  // re-draws the weights as the constructor does
  const Conv1dOptions& options() const { return options_; }

  Tensor weight;               // [out_channels, in_channels / groups, kernel_size]
  std::optional<Tensor> bias;  // [out_channels], or none with .bias = false

 private:
  std::size_t in_channels_;
  Conv1dOptions options_;
};

// Input [N, in_channels, H, W] (or [in_channels, H, W]); weight [out, in / groups, kH, kW].
class Conv2d : public Module {
 public:
  Conv2d(std::size_t in_channels, std::size_t out_channels, Size2 kernel_size, const Conv2dOptions& options = {},
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Module> clone() const override;
  void reset_parameters(Generator& gen = default_generator());
  const Conv2dOptions& options() const { return options_; }

  Tensor weight;               // [out_channels, in_channels / groups, kH, kW]
  std::optional<Tensor> bias;  // [out_channels]

 private:
  std::size_t in_channels_;
  Conv2dOptions options_;
};

// Pooling layers hold no weights: their options are the functions'.
using MaxPool1dOptions = MaxPool1dFuncOptions;
using MaxPool2dOptions = MaxPool2dFuncOptions;
using AvgPool1dOptions = AvgPool1dFuncOptions;
using AvgPool2dOptions = AvgPool2dFuncOptions;

class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel_size, const MaxPool1dOptions& options = {})
      : kernel_size_(kernel_size), options_(options) {}
  Tensor forward(const Tensor& x) const override { return tg::max_pool1d(x, kernel_size_, options_); }
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<MaxPool1d>(kernel_size_, options_));
  }

 private:
  int64_t kernel_size_;
  MaxPool1dOptions options_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, const MaxPool2dOptions& options = {})
      : kernel_size_(kernel_size), options_(options) {}
  Tensor forward(const Tensor& x) const override { return tg::max_pool2d(x, kernel_size_, options_); }
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<MaxPool2d>(kernel_size_, options_));
  }

 private:
  Size2 kernel_size_;
  MaxPool2dOptions options_;
};

class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel_size, const AvgPool1dOptions& options = {})
      : kernel_size_(kernel_size), options_(options) {}
  Tensor forward(const Tensor& x) const override { return tg::avg_pool1d(x, kernel_size_, options_); }
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<AvgPool1d>(kernel_size_, options_));
  }

 private:
  int64_t kernel_size_;
  AvgPool1dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, const AvgPool2dOptions& options = {})
      : kernel_size_(kernel_size), options_(options) {}
  Tensor forward(const Tensor& x) const override { return tg::avg_pool2d(x, kernel_size_, options_); }
  std::shared_ptr<Module> clone() const override {
    return copy_into(std::make_shared<AvgPool2d>(kernel_size_, options_));
  }

 private:
  Size2 kernel_size_;
  AvgPool2dOptions options_;
};

class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) const override { return tg::adaptive_avg_pool1d(x, output_size_); }
  std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<AdaptiveAvgPool1d>(output_size_)); }

 private:
  int64_t output_size_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) const override { return tg::adaptive_avg_pool2d(x, output_size_); }
  std::shared_ptr<Module> clone() const override { return copy_into(std::make_shared<AdaptiveAvgPool2d>(output_size_)); }

 private:
  Size2 output_size_;
};

}  // namespace tg::nn
