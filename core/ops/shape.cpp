// Ops that move values: reshape, transpose, permute, flatten, cat, stack,
// narrow, index_select and gather.
#include "../ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../check.hpp"
#include "../kernels/copy.hpp"
#include "../tape.hpp"
#include "common.hpp"

namespace tg {

// -------------------------------------------------------------------- shape

// Marks the result of an op whose PyTorch counterpart returns a view: it is a
// copy here, so Tensor::value_mut() on it throws instead of writing into a copy.
static Tensor copy_of_view(Tensor t, const char* op) {
  t.impl()->copy_of_view = op;
  return t;
}

Tensor reshape(const Tensor& a, const std::vector<int64_t>& shape) {
  Shape out_shape(shape.size());
  std::size_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && infer < 0) {
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument(message("reshape: invalid size ", shape[i], " (only one -1 is allowed)"));
    } else {
      out_shape[i] = static_cast<std::size_t>(shape[i]);
      known *= out_shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.numel() % known != 0)
      throw std::invalid_argument(
          message("reshape: cannot infer the -1 in a shape for ", a.numel(), " elements of ", a.shape()));
    out_shape[infer] = a.numel() / known;
    known *= out_shape[infer];
  }
  if (known != a.numel())
    throw std::invalid_argument(
        message("reshape: shape ", out_shape, " does not fit the ", a.numel(), " elements of ", a.shape()));
  Array out = kernels::copy("reshape", a.value());
  out.reshape(out_shape);
  return copy_of_view(record("reshape", std::move(out), {a},
                             [](Array&& g, const Node& n, Grads& d) {
                               g.reshape(n.input_shape(0));  // the same values, seen in the input's shape
                               d[0] = std::move(g);
                             }),
                      "reshape");
}

// a with its dims reordered by perm (checked); backward reorders the gradient back.
static Tensor permuted(const char* op, const Tensor& a, const std::vector<std::size_t>& perm) {
  std::vector<std::size_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = i;
  Tensor t = record(
      op, kernels::permute(op, a.value(), perm), {a},
      [op, inverse](const Array& g, const Node&, Grads& d) { d[0] = kernels::permute(op, g, inverse); });
  return copy_of_view(t, op);
}

Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  const std::size_t d0 = normalize_dim("transpose", dim0, a.shape());
  const std::size_t d1 = normalize_dim("transpose", dim1, a.shape());
  std::vector<std::size_t> perm(a.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permuted("transpose", a, perm);
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  const Shape s = a.shape();
  std::string listed;
  for (int64_t d : dims) listed += (listed.empty() ? "" : ", ") + std::to_string(d);
  if (dims.size() != s.size())
    throw std::invalid_argument(
        message("permute: dims [", listed, "] for shape ", s, ": name each of its ", s.size(), " dims once"));
  std::vector<std::size_t> perm;
  for (int64_t d : dims) {
    perm.push_back(normalize_dim("permute", d, s));
    if (std::find(perm.begin(), perm.end() - 1, perm.back()) != perm.end() - 1)
      throw std::invalid_argument(
          message("permute: dims [", listed, "] for shape ", s, " name dim ", perm.back(), " twice"));
  }
  return permuted("permute", a, perm);
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  OpGroup group("flatten");  // its reshape shows up as the flatten that was written
  if (a.dim() == 0) {        // as in PyTorch, its dims are those of a 1-d tensor: 0 or -1
    for (int64_t d : {start_dim, end_dim})
      if (d != 0 && d != -1)
        throw std::invalid_argument(
            message("flatten: dim ", d, " out of range for a 0-d tensor (its dims are 0 and -1)"));
    return copy_of_view(reshape(a, {1}), "flatten");
  }
  const std::size_t first = normalize_dim("flatten", start_dim, a.dim());
  const std::size_t last = normalize_dim("flatten", end_dim, a.dim());
  if (first > last)
    throw std::invalid_argument(message("flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
                                        " for shape ", a.shape()));
  std::vector<int64_t> shape;
  int64_t merged = 1;
  for (std::size_t d = 0; d < a.dim(); ++d) {
    const auto n = static_cast<int64_t>(a.shape()[d]);
    if (d < first || d > last) {
      shape.push_back(n);
    } else {
      merged *= n;
      if (d == last) shape.push_back(merged);
    }
  }
  return copy_of_view(reshape(a, shape), "flatten");
}

// cat and stack: the output is [outer, n, inner] around axis `ax`, and tensor t
// fills counts[t] of the n positions (cat: its size along ax; stack: 1, on a
// new axis). For every outer index the tensors' blocks of counts[t] * inner
// values are copied side by side; backward cuts the gradient up the same way.
static Tensor join(const char* op, const std::vector<Tensor>& tensors, const Shape& out_shape, std::size_t ax,
                   const std::vector<std::size_t>& counts) {
  const AxisSplit out_split = split_at(out_shape, ax);
  std::vector<std::size_t> block(tensors.size());  // counts[t] * inner
  for (std::size_t t = 0; t < tensors.size(); ++t) block[t] = counts[t] * out_split.inner;
  const std::size_t row = out_split.n * out_split.inner;
  Array out = empty_array(op, out_shape);
  float* dst = out.data();
  for (std::size_t o = 0; o < out_split.outer; ++o)
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      std::copy_n(tensors[t].value().data() + o * block[t], block[t], dst);
      dst += block[t];
    }
  return record(op, std::move(out), tensors,
                [op, block, row, outer = out_split.outer](const Array& g, const Node& n, Grads& d) {
                  std::size_t start = 0;  // where tensor t's block begins within an output row
                  for (std::size_t t = 0; t < d.size(); ++t) {
                    if (n.needs_grad(t)) {
                      Array gi = empty_array(op, n.input_shape(t));
                      for (std::size_t o = 0; o < outer; ++o)
                        std::copy_n(g.data() + o * row + start, block[t], gi.data() + o * block[t]);
                      d[t] = std::move(gi);
                    }
                    start += block[t];
                  }
                });
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw std::invalid_argument("cat: expected a non-empty list of tensors");
  const Shape first = tensors[0].shape();
  const std::size_t ax = normalize_dim("cat", dim, first.size());
  Shape out_shape = first;
  out_shape[ax] = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    Shape s = tensors[t].shape();
    bool fits = s.size() == first.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d) fits = d == ax || s[d] == first[d];
    check(fits, "cat: tensor ", t, " has shape ", s, ", tensor 0 has ", first,
          "; they must match except in dim ", ax);
    out_shape[ax] += s[ax];
  }
  std::vector<std::size_t> counts;
  for (const Tensor& t : tensors) counts.push_back(t.shape()[ax]);
  return join("cat", tensors, out_shape, ax, counts);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw std::invalid_argument("stack: expected a non-empty list of tensors");
  const Shape first = tensors[0].shape();
  const std::size_t ax = normalize_dim("stack", dim, first.size() + 1);
  for (std::size_t t = 0; t < tensors.size(); ++t)
    if (tensors[t].shape() != first)
      throw std::invalid_argument(message("stack: tensor ", t, " has shape ", tensors[t].shape(),
                                          ", tensor 0 has ", first, "; all must be equal"));
  // One op on the tape with every tensor as an input (not a cat of reshaped
  // copies), so that backward() sees an in-place change to any of them.
  Shape out_shape = first;
  out_shape.insert(out_shape.begin() + static_cast<std::ptrdiff_t>(ax), tensors.size());
  return join("stack", tensors, out_shape, ax, std::vector<std::size_t>(tensors.size(), 1));
}

// Checks narrow's range and returns where it starts (a negative start counts
// from the end, as in PyTorch).
static std::size_t narrow_start(const char* op, const Shape& shape, std::size_t ax, int64_t start,
                                int64_t length) {
  const auto n = static_cast<int64_t>(shape[ax]);
  const int64_t begin = start < 0 ? start + n : start;
  if (begin < 0 || begin > n || length < 0 || begin + length > n)
    throw std::out_of_range(
        message(op, ": start ", start, " and length ", length, " do not fit dim ", ax, " of shape ", shape));
  return static_cast<std::size_t>(begin);
}

// Copies positions [begin, begin + length) along the axis of an [outer, n, inner] view.
template <class T>
static void copy_narrow(const T* src, T* dst, const AxisSplit& s, std::size_t begin, std::size_t length) {
  for (std::size_t o = 0; o < s.outer; ++o)
    std::copy_n(src + (o * s.n + begin) * s.inner, length * s.inner, dst + o * length * s.inner);
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  const std::size_t ax = normalize_dim("narrow", dim, a.dim());
  const std::size_t begin = narrow_start("narrow", a.shape(), ax, start, length);
  const AxisSplit s = split_at(a.shape(), ax);
  Shape out_shape = a.shape();
  out_shape[ax] = static_cast<std::size_t>(length);
  Array out = empty_array("narrow", out_shape);
  copy_narrow(a.value().data(), out.data(), s, begin, out_shape[ax]);
  Tensor t = record("narrow", std::move(out), {a},
                    [s, begin, len = out_shape[ax]](const Array& g, const Node& n, Grads& d) {
                      Array gi = zeros_array("narrow", n.input_shape(0));  // zero outside the slice
                      for (std::size_t o = 0; o < s.outer; ++o)
                        std::copy_n(g.data() + o * len * s.inner, len * s.inner,
                                    gi.data() + (o * s.n + begin) * s.inner);
                      d[0] = std::move(gi);
                    });
  return copy_of_view(t, "narrow");
}

// ----------------------------------------------------------------- indexing

// Rows of `a` (dim 0) picked by a 1-d index, checked: the forward of both
// index_selects, for values (Array) and for labels (Indices).
template <class T>
static xt::xarray<T> pick_rows(const xt::xarray<T>& a, int64_t dim, const Indices& index) {
  const Shape in_shape = shape_of(a);
  if (a.dimension() == 0 || normalize_dim("index_select", dim, a.dimension()) != 0)
    throw std::invalid_argument(
        message("index_select: only dim 0 of a tensor with at least one dim is supported; got dim ", dim,
                " of ", in_shape));
  if (index.dimension() != 1)
    throw std::invalid_argument(message("index_select: index must be 1-d; got shape ", index.shape()));
  check_indices("index_select", index, in_shape[0]);
  const std::size_t row = a.size() / std::max<std::size_t>(in_shape[0], 1);
  Shape out_shape = in_shape;
  out_shape[0] = index.size();
  xt::xarray<T> out;
  if constexpr (std::is_same_v<T, float>)
    out = empty_array("index_select", out_shape);
  else
    out = empty_indices("index_select", out_shape);
  for (std::size_t i = 0; i < index.size(); ++i)
    std::copy_n(a.data() + index.data()[i] * static_cast<int64_t>(row), row, out.data() + i * row);
  return out;
}

Tensor index_select(const Tensor& a, int64_t dim, const Indices& index) {
  const std::size_t row = a.numel() / std::max<std::size_t>(a.dim() == 0 ? 1 : a.shape()[0], 1);
  Tensor t = record("index_select", pick_rows(a.value(), dim, index), {a},
                    [row](const Array& g, const Node& n, Grads& d) {
                      const Indices& index = *n.ids;
                      Array gi = zeros_array("index_select", n.input_shape(0));
                      for (std::size_t i = 0; i < index.size(); ++i)  // scatter-add: repeats sum
                        for (std::size_t c = 0; c < row; ++c)
                          gi.data()[index(i) * row + c] += g.data()[i * row + c];
                      d[0] = std::move(gi);
                    });
  // Kept by the tape entry: the backward reads them there, and the inspector shows them.
  if (t.creator()) t.creator()->ids = std::make_unique<Indices>(index);
  return t;
}

Tensor gather(const Tensor& a, int64_t dim, const Indices& index) {
  const Shape in_shape = a.shape();
  const Shape index_shape(index.shape().begin(), index.shape().end());
  const std::size_t ax = normalize_dim("gather", dim, in_shape.size());
  bool fits = index_shape.size() == in_shape.size();
  for (std::size_t d = 0; fits && d < in_shape.size(); ++d) fits = d == ax || index_shape[d] <= in_shape[d];
  check(fits, "gather: index of shape ", index_shape, " does not fit input ", in_shape,
        " (same number of dims, none larger except dim ", ax, ")");
  check_indices("gather", index, in_shape[ax]);
  Tensor t = record("gather", kernels::gather(a.value(), ax, index), {a},
                    [ax](const Array& g, const Node& n, Grads& d) {
                      d[0] = kernels::scatter_add(shape_of_input(n, 0), ax, *n.ids, g);
                    });
  // Kept by the tape entry: the backward reads them there, and the inspector shows them.
  if (t.creator()) t.creator()->ids = std::make_unique<Indices>(index);
  return t;
}

Indices index_select(const Indices& a, int64_t dim, const Indices& index) {
  return pick_rows(a, dim, index);
}

Indices narrow(const Indices& a, int64_t dim, int64_t start, int64_t length) {
  const Shape in_shape(a.shape().begin(), a.shape().end());
  const std::size_t ax = normalize_dim("narrow", dim, in_shape.size());
  const std::size_t begin = narrow_start("narrow", in_shape, ax, start, length);
  Shape out_shape = in_shape;
  out_shape[ax] = static_cast<std::size_t>(length);
  Indices out = empty_indices("narrow", out_shape);
  copy_narrow(a.data(), out.data(), split_at(in_shape, ax), begin, out_shape[ax]);
  return out;
}

}  // namespace tg
