// Differentiable ops. Each one computes its forward value and records, right
// beside it, the backward closure that turns the output's gradient into its
// inputs' gradients (see core/tape.hpp).
//
// Names and semantics follow PyTorch. Elementwise binary ops broadcast like
// PyTorch/NumPy; the gradient of a broadcast input is summed back to its shape
// by one helper, sum_to_shape(). Bad shapes throw std::invalid_argument naming
// the op and the shapes; bad indices throw std::out_of_range.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor.hpp"

namespace tg {

// ---- elementwise, broadcasting
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor pow(const Tensor& a, float exponent);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, float s);
Tensor operator+(float s, const Tensor& a);
Tensor operator-(const Tensor& a, float s);
Tensor operator-(float s, const Tensor& a);
Tensor operator*(const Tensor& a, float s);
Tensor operator*(float s, const Tensor& a);
Tensor operator/(const Tensor& a, float s);
Tensor operator/(float s, const Tensor& a);

// ---- elementwise functions
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);

// ---- matrix product through BLAS: [n, k] x [k, m] -> [n, m] and [B, n, k] x [k, m] -> [B, n, m]
Tensor matmul(const Tensor& a, const Tensor& b);

// PyTorch's F.linear: x [.., in] times weight [out, in] transposed, plus bias [out]
// (bias may be an empty Tensor handle: pass std::nullopt). One GEMM with the
// transpose as a flag, no copy of weight^T; backward is two more GEMMs.
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt);

// ---- reductions. dim may be negative (counted from the end).
Tensor sum(const Tensor& a);  // all elements -> 0-d
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
// Largest value along dim; the gradient goes to the first position holding it.
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);

// ---- softmax family, numerically stable (the max is subtracted first)
Tensor softmax(const Tensor& a, int64_t dim = -1);
Tensor log_softmax(const Tensor& a, int64_t dim = -1);

// ---- shape
Tensor reshape(const Tensor& a, const std::vector<int64_t>& shape);  // one entry may be -1
Tensor transpose(const Tensor& a, int64_t dim0 = 0, int64_t dim1 = 1);

// ---- indexing
// Rows of `a` (dim must be 0) picked by a 1-D index; the gradient is scattered back.
Tensor index_select(const Tensor& a, int64_t dim, const Indices& index);
// [..] class ids -> [.., num_classes] of 0/1 (float32 here; PyTorch returns int64).
// num_classes = -1 takes max(index) + 1. Not differentiable.
Tensor one_hot(const Indices& index, int64_t num_classes = -1);

// ---- losses
enum class Reduction { none, mean, sum };
// logits [N, C], target [N] of class ids in [0, C): log_softmax followed by nll_loss.
Tensor cross_entropy(const Tensor& logits, const Indices& target, Reduction r = Reduction::mean);
// log_probs [N, C]: -log_probs[i, target[i]], reduced.
Tensor nll_loss(const Tensor& log_probs, const Indices& target, Reduction r = Reduction::mean);
// (input - target)^2, reduced; shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r = Reduction::mean);

// ---- helpers shared by ops (public so custom ops can use them)
// Sums a broadcast gradient back down to `shape` (the un-broadcast step).
Array sum_to_shape(const Array& grad, const Shape& shape);
// Shape of a op b under broadcasting; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Turns a possibly negative dim into an axis of a `rank`-d tensor; throws naming `op`.
std::size_t normalize_dim(const char* op, int64_t dim, std::size_t rank);
// Throws std::out_of_range naming `op` unless every index is in [0, size).
void check_indices(const char* op, const Indices& index, std::size_t size);

}  // namespace tg
