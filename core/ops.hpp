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
#include <optional>
#include <string_view>
#include <vector>

#include "factories.hpp"

namespace tg {

// ---- elementwise, broadcasting
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor div(const Tensor& a, float s);
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
Tensor abs(const Tensor& a);   // gradient sign(x): 0 at x = 0, as PyTorch
Tensor sqrt(const Tensor& a);  // gradient 1 / (2 sqrt(x)): inf at x = 0, as PyTorch
// min(max(x, min), max); at least one bound. The gradient passes where
// min <= x <= max, bounds included (PyTorch's rule); NaN stays NaN with gradient 0.
Tensor clamp(const Tensor& a, std::optional<float> min, std::optional<float> max);
// PyTorch's F.gelu: x * Phi(x), Phi the standard normal CDF, written with erf
// (approximate = "none") or with tanh (approximate = "tanh", GPT-2's form:
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))). Any other string throws.
Tensor gelu(const Tensor& a, std::string_view approximate = "none");
// Elementwise larger/smaller of two tensors, broadcasting; NaN wins. Where a == b
// each input gets half the gradient (PyTorch's rule).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// ---- masks and selection
// Comparisons give a mask of 0s and 1s (float32; PyTorch gives bool), broadcasting.
// Not differentiable.
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, float b);
Tensor ge(const Tensor& a, float b);
Tensor lt(const Tensor& a, float b);
Tensor le(const Tensor& a, float b);
Tensor eq(const Tensor& a, float b);
Tensor ne(const Tensor& a, float b);
// a where condition is non-zero, else b; all three broadcast together. The
// gradient goes to a where the condition holds and to b elsewhere; the
// condition gets none. (PyTorch's condition is a bool tensor; here any mask.)
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// `value` where mask is non-zero, a elsewhere (torch.masked_fill; its mask is
// bool, here a tensor of 0s and non-zeros, as tril or a comparison gives). a and
// mask broadcast together, as in PyTorch. The gradient goes to a where the mask
// is 0; the mask gets none. Attention's causal mask:
//   masked_fill(scores, eq(tril(ones({T, T})), 0.0f), -INFINITY)   // [B, H, T, T]
Tensor masked_fill(const Tensor& a, const Tensor& mask, float value);
// The lower (tril) or upper (triu) triangle of the matrices in the last two dims,
// zeros elsewhere, as torch.tril / torch.triu: element (i, j) is kept when
// j - i <= diagonal (tril) or j - i >= diagonal (triu). diagonal 0 is the main
// diagonal, 1 the one above it, -1 the one below. The gradient passes where the
// values are kept. At least 2 dims.
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor triu(const Tensor& a, int64_t diagonal = 0);

// ---- dropout: PyTorch's F.dropout(a, p, training). When training, each element
// is zeroed with probability p, drawn from gen, and the rest are scaled by
// 1 / (1 - p) ("inverted" dropout, so evaluation needs no rescaling). Not
// training, or p = 0, returns `a` itself. The gradient uses the same mask.
Tensor dropout(const Tensor& a, float p, bool train, Generator& gen);

// ---- matrix product through BLAS, as torch.matmul for inputs of 2 or more dims:
// [n, k] x [k, m] -> [n, m], and batches of matrices, [.., n, k] x [.., k, m] ->
// [.., n, m], whose batch dims (all but the last two) broadcast:
//   [B, n, k] x [k, m]        -> [B, n, m]      (one GEMM over B * n rows)
//   [B, H, T, d] x [B, H, d, T] -> [B, H, T, T]  (attention scores: B * H GEMMs)
//   [B, 1, n, k] x [H, k, m]  -> [B, H, n, m]
// A broadcast input's gradient is summed over the batch dims it was repeated
// along. 1-d inputs (PyTorch's vector cases) are not supported.
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
// Largest element -> 0-d. Ties share the gradient evenly (PyTorch's rule); a NaN
// is the largest.
Tensor max(const Tensor& a);
// Largest value along dim and where it is, as torch.max(a, dim):
//   auto [values, indices] = tg::max(logits, 1);
// The first position wins a tie, and it alone gets the gradient. NaN wins.
struct MaxResult {
  Tensor values;
  Indices indices;
};
MaxResult max(const Tensor& a, int64_t dim, bool keepdim = false);
// Position of the largest element: in the flattened tensor (a 0-d Indices), or
// along dim. The first one wins a tie; NaN wins. Not differentiable.
Indices argmax(const Tensor& a);
Indices argmax(const Tensor& a, int64_t dim, bool keepdim = false);

// ---- softmax family along any dim, numerically stable (the max is subtracted
// first). A -inf entry (a masked attention score) gets probability 0; a row of
// nothing but -inf gives NaN, as in PyTorch.
Tensor softmax(const Tensor& a, int64_t dim = -1);
Tensor log_softmax(const Tensor& a, int64_t dim = -1);

// ---- shape
// reshape, transpose, permute, flatten and narrow return copies, where PyTorch returns
// views: a write into the result would not reach `a`, so value_mut() and copy_()
// on the result throw std::logic_error (write into `a`, or into result.detach()).
// Gradients are the same as through PyTorch's views.
Tensor reshape(const Tensor& a, const std::vector<int64_t>& shape);  // one entry may be -1
// Two dims swapped (any two; negatives count from the end), as torch.transpose:
// transpose(k, -2, -1) turns [B, H, T, d] into [B, H, d, T]. A copy here, a
// view in PyTorch.
Tensor transpose(const Tensor& a, int64_t dim0 = 0, int64_t dim1 = 1);
// Dims reordered, as torch.permute: the output's dim i is a's dim dims[i], so
// dims names every dim once (negatives count from the end). Splitting heads:
//   permute(reshape(x, {B, T, H, d}), {0, 2, 1, 3})   // [B, T, C] -> [B, H, T, d]
// A copy here, a view in PyTorch; the gradient is permuted back.
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
// Dims start_dim..end_dim merged into one (a reshape). A 0-d tensor becomes [1]
// (its dims count as those of a 1-d tensor, 0 or -1, as in PyTorch).
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
// Tensors joined along an existing dim (cat: all shapes equal except that dim)
// or along a new one (stack: all shapes equal). At least one tensor.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Elements start .. start + length - 1 along dim (Python's a[start:start + length]
// on that dim); start may be negative (counted from the end). A copy here, a view
// in PyTorch (see "shape" above).
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);

// ---- indexing
// Rows of `a` (dim must be 0) picked by a 1-D index; the gradient is scattered back.
Tensor index_select(const Tensor& a, int64_t dim, const Indices& index);
// out[i][j] = a[index[i][j]][j] for dim 0, a[i][index[i][j]] for dim 1, and so on:
// index has a's rank and no dim larger than a's except along `dim`; the output
// has index's shape. The gradient is scattered back (repeats add up).
Tensor gather(const Tensor& a, int64_t dim, const Indices& index);
// The same picking and slicing for labels and ids (Indices), not recorded:
// a batch's labels are index_select(labels, 0, batch) or narrow(labels, 0, start, n).
Indices index_select(const Indices& a, int64_t dim, const Indices& index);
Indices narrow(const Indices& a, int64_t dim, int64_t start, int64_t length);
// [..] class ids -> [.., num_classes] of 0/1 (float32 here; PyTorch returns int64).
// num_classes = -1 takes max(index) + 1. Not differentiable.
Tensor one_hot(const Indices& index, int64_t num_classes = -1);

// ---- normalization: PyTorch's F.layer_norm. Over the last dims of x, which must
// equal normalized_shape: y = (x - mean) / sqrt(var + eps) * weight + bias, var
// biased (divided by n). weight and bias have normalized_shape, or are absent.
// The mean and variance are computed in double: a row holding 3e38 normalises
// here where PyTorch's float32 variance overflows and gives NaN.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, float eps = 1e-5f);

// ---- sampling, as torch.multinomial: num_samples category ids per row of
// probs ([C] -> [num_samples], [R, C] -> [R, num_samples]). Rows are weights
// (>= 0, finite, not all 0), not necessarily summing to 1. Without replacement a
// category is drawn at most once per row. Not differentiable. The draws come
// from gen; they are not the numbers PyTorch would draw.
Indices multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& gen);
Indices multinomial(const Tensor& probs, int64_t num_samples, Generator& gen);  // without replacement

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
// broadcast_shapes(op, a, b), the shape of a op b, is in core/array.hpp.
// Turns a possibly negative dim into an axis of a `rank`-d tensor; throws naming `op`
// (and, given the shape, the shape).
std::size_t normalize_dim(const char* op, int64_t dim, std::size_t rank);
std::size_t normalize_dim(const char* op, int64_t dim, const Shape& shape);
// Throws std::out_of_range naming `op` unless every index is in [0, size).
void check_indices(const char* op, const Indices& index, std::size_t size);

}  // namespace tg
