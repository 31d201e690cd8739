// Convolution and pooling, as torch.nn.functional's: unfold (im2col), conv1d,
// conv2d, max_pool1d/2d, avg_pool1d/2d, adaptive_avg_pool1d/2d.
//
// Layouts are PyTorch's: a 1-d input is [N, C, L], a 2-d one [N, C, H, W]
// (either may leave out N: [C, L], [C, H, W], and the output leaves it out
// too). A conv2d weight is [out_channels, in_channels / groups, kH, kW], a
// conv1d weight [out_channels, in_channels / groups, k]. Sizes, strides,
// paddings and dilations are one number for every dim or one per dim:
//
//   tg::Tensor y = tg::conv2d(x, w, b, {.stride = 2, .padding = 1});       // [N, O, H/2, W/2]
//   tg::Tensor z = tg::conv2d(x, w, std::nullopt, {.padding = {0, 1}, .groups = 4});
//   tg::Tensor p = tg::max_pool2d(y, 2);                                    // 2x2 windows, stride 2
//
// A convolution is unfold followed by one matrix product per image and group:
// the patches of an image become the columns of a [C/groups * kH * kW, outH *
// outW] matrix, which the weight, seen as [out/groups, C/groups * kH * kW],
// multiplies (kernels::gemm). Backward is two more products per image and the
// reverse of unfold (fold: each column added back where its patch came from).
// Only zero padding; PyTorch's padding="same"/"valid" strings and padding_mode
// are not here. Bad sizes throw std::invalid_argument naming the op and the shapes.
#pragma once

#include <cstdint>
#include <optional>

#include "tensor.hpp"

namespace tg {

// One size per spatial dim of a 2-d op, written as one number for both
// (stride = 2) or as {height, width} (padding = {0, 1}).
struct Size2 {
  int64_t h, w;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: a number is both sizes
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
};

// ---- unfold: F.unfold(input, kernel_size, dilation, padding, stride), im2col.
// [N, C, H, W] -> [N, C * kH * kW, L], L the number of window positions; column
// l holds the window at position l (row-major over the output grid), channel by
// channel, each window row-major, zeros where it covers padding. The gradient
// adds each column back where its window came from (F.fold).
struct UnfoldOptions {
  Size2 dilation = 1;
  Size2 padding = 0;
  Size2 stride = 1;
};
Tensor unfold(const Tensor& input, Size2 kernel_size, const UnfoldOptions& options = {});

// ---- convolution: F.conv1d and F.conv2d (cross-correlation, as PyTorch's).
// out[n, o] = bias[o] + sum over the group's input channels c and the kernel of
//             weight[o, c, i, j] * input[n, c, y * stride + i * dilation - padding, ...]
// groups splits the channels: out_channels and in_channels must both divide by
// it, and each group of out/groups outputs sees only its in/groups inputs.
struct Conv1dFuncOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
struct Conv2dFuncOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};
Tensor conv1d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
              const Conv1dFuncOptions& options = {});
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
              const Conv2dFuncOptions& options = {});

// ---- pooling over windows of each channel: F.max_pool1d/2d, F.avg_pool1d/2d.
// stride defaults to the kernel size (windows side by side). padding is at most
// half the (effective) kernel; padded places never win a max. ceil_mode counts
// a last window that starts inside the input (or its left padding) but runs
// past its end. max: a NaN wins its window, and on a tie the first maximum (in
// row-major order) gets the gradient, as in PyTorch. avg: the sum over the
// window divided by its size with the padding counted (count_include_pad), or
// without it, or by divisor_override.
struct MaxPool1dFuncOptions {
  std::optional<int64_t> stride = std::nullopt;  // none: kernel_size
  int64_t padding = 0;
  int64_t dilation = 1;
  bool ceil_mode = false;
};
struct MaxPool2dFuncOptions {
  std::optional<Size2> stride = std::nullopt;  // none: kernel_size
  Size2 padding = 0;
  Size2 dilation = 1;
  bool ceil_mode = false;
};
struct AvgPool1dFuncOptions {
  std::optional<int64_t> stride = std::nullopt;
  int64_t padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};
struct AvgPool2dFuncOptions {
  std::optional<Size2> stride = std::nullopt;
  Size2 padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override = std::nullopt;
};
Tensor max_pool1d(const Tensor& input, int64_t kernel_size, const MaxPool1dFuncOptions& options = {});
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, const MaxPool2dFuncOptions& options = {});
Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, const AvgPool1dFuncOptions& options = {});
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, const AvgPool2dFuncOptions& options = {});

// ---- F.adaptive_avg_pool1d/2d: the output size is given, and output position
// i averages the inputs floor(i * in / out) .. ceil((i + 1) * in / out) - 1,
// so the windows cover the input (overlapping when out does not divide in).
// adaptive_avg_pool2d(x, 1) is global average pooling: [N, C, H, W] -> [N, C, 1, 1].
Tensor adaptive_avg_pool1d(const Tensor& input, int64_t output_size);
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

}  // namespace tg
