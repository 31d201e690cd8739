// Conv1d, Conv2d and the pooling modules: PyTorch's initialisation, shapes checked, forward through core's ops.
#include "conv.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "init.hpp"

namespace tg::nn {

namespace {

// The sizes every convolution layer checks before it makes its weight.
void check_channels(const char* layer, std::size_t in, std::size_t out, int64_t groups) {
  if (groups < 1)
    throw std::invalid_argument(std::string(layer) + ": groups must be positive; got " + std::to_string(groups));
  const auto g = static_cast<std::size_t>(groups);
  if (in == 0 || out == 0 || in % g != 0 || out % g != 0)
    throw std::invalid_argument(std::string(layer) + ": in_channels " + std::to_string(in) + " and out_channels " +
                                std::to_string(out) + " must be positive multiples of groups = " +
                                std::to_string(groups));
}

std::size_t checked_kernel(const char* layer, int64_t k) {
  if (k < 1) throw std::invalid_argument(std::string(layer) + ": kernel_size must be positive; got " + std::to_string(k));
  return static_cast<std::size_t>(k);
}

// PyTorch's reset_parameters of a convolution: weight kaiming_uniform_(a = sqrt(5)),
// which is U(+-1/sqrt(fan_in)), and bias U(+-1/sqrt(fan_in)).
void init_conv(Tensor& weight, std::optional<Tensor>& bias, Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0f), gen);
  if (bias) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(init::fan_in(weight)));
    init::uniform_(*bias, -bound, bound, gen);
  }
}

}  // namespace

Conv1d::Conv1d(std::size_t in_channels, std::size_t out_channels, int64_t kernel_size, const Conv1dOptions& options,
               Generator& gen)
    : in_channels_(in_channels), options_(options) {
  check_channels("Conv1d", in_channels, out_channels, options.groups);
  const std::size_t k = checked_kernel("Conv1d", kernel_size), g = static_cast<std::size_t>(options.groups);
  weight = register_parameter("weight", Tensor(empty_array("Conv1d", {out_channels, in_channels / g, k})));
  if (options.bias) bias = register_parameter("bias", Tensor(empty_array("Conv1d", {out_channels})));
  reset_parameters(gen);
}

void Conv1d::reset_parameters(Generator& gen) {
  init_conv(weight, bias, gen);
}

Tensor Conv1d::forward(const Tensor& x) const {
  return tg::conv1d(x, weight, bias,
                    {.stride = options_.stride, .padding = options_.padding, .dilation = options_.dilation,
                     .groups = options_.groups});
}

std::shared_ptr<Module> Conv1d::clone() const {
  Generator unused;  // the values are copied over the fresh initialisation
  return copy_into(std::make_shared<Conv1d>(in_channels_, weight.shape()[0], static_cast<int64_t>(weight.shape()[2]),
                                            options_, unused));
}

Conv2d::Conv2d(std::size_t in_channels, std::size_t out_channels, Size2 kernel_size, const Conv2dOptions& options,
               Generator& gen)
    : in_channels_(in_channels), options_(options) {
  check_channels("Conv2d", in_channels, out_channels, options.groups);
  const std::size_t kh = checked_kernel("Conv2d", kernel_size.h), kw = checked_kernel("Conv2d", kernel_size.w);
  const std::size_t g = static_cast<std::size_t>(options.groups);
  weight = register_parameter("weight", Tensor(empty_array("Conv2d", {out_channels, in_channels / g, kh, kw})));
  if (options.bias) bias = register_parameter("bias", Tensor(empty_array("Conv2d", {out_channels})));
  reset_parameters(gen);
}

void Conv2d::reset_parameters(Generator& gen) {
  init_conv(weight, bias, gen);
}

Tensor Conv2d::forward(const Tensor& x) const {
  return tg::conv2d(x, weight, bias,
                    {.stride = options_.stride, .padding = options_.padding, .dilation = options_.dilation,
                     .groups = options_.groups});
}

std::shared_ptr<Module> Conv2d::clone() const {
  Generator unused;
  const Shape s = weight.shape();
  return copy_into(std::make_shared<Conv2d>(in_channels_, s[0],
                                            Size2(static_cast<int64_t>(s[2]), static_cast<int64_t>(s[3])), options_,
                                            unused));
}

}  // namespace tg::nn
