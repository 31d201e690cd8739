// Kernels that move values: a copy, permute (tiled), gather and its scatter-add.
#include "copy.hpp"

#include <algorithm>

#include "loop.hpp"

namespace tg::kernels {

Array copy_on_threads(const char* op, const Array& x) {
  Array y = empty_like(op, x);
  for_range(x.size(), elementwise_grain,
            [&](std::size_t lo, std::size_t hi) { std::copy_n(x.data() + lo, hi - lo, y.data() + lo); });
  return y;
}

namespace {

// Copies x (of shape `in`) into out, whose dim i is x's dim perm[i]. Walks out
// in order and reads x through the permuted strides. When out's last dim is
// also x's last, each row is one contiguous copy. Otherwise (a transpose of
// the last dims) x is read across its rows: the rows are then walked in
// 64 x 64 tiles, which stay in the cache between the strided reads and the
// contiguous writes (a [4096, 1024] transpose read row after row is 5x slower).
void permute_copy(const float* x, float* out, const Shape& in, const std::vector<std::size_t>& perm) {
  const std::size_t rank = in.size();
  std::size_t total = 1;
  for (std::size_t d : in) total *= d;
  if (total == 0) return;
  if (rank == 0) {
    out[0] = x[0];
    return;
  }
  const std::vector<std::size_t> in_stride = row_major_strides(in);
  Shape shape(rank);
  std::vector<std::size_t> stride(rank);  // x's steps along out's dims
  for (std::size_t i = 0; i < rank; ++i) {
    shape[i] = in[perm[i]];
    stride[i] = in_stride[perm[i]];
  }
  const std::vector<std::size_t> out_stride = row_major_strides(shape);
  // Out's dim k is x's last one; tiles are [k, last] when it is not out's last.
  std::size_t k = rank - 1;
  for (std::size_t i = 0; i < rank; ++i)
    if (perm[i] == rank - 1) k = i;
  const bool tiled = k != rank - 1 && in.back() > 1;
  const std::size_t inner = shape.back(), step = stride.back();
  // Every other dim is walked by the odometer (k too, when not tiled); it
  // carries where the current row (or tile block) starts in x and in out.
  Shape outer(shape.begin(), shape.end() - 1);
  if (tiled) outer[k] = 1;
  Odometer<2> rows{outer, {stride, out_stride}};
  do {
    const std::size_t from = rows.at[0], to = rows.at[1];
    if (!tiled) {
      if (step == 1)
        std::copy_n(x + from, inner, out + to);
      else
        for (std::size_t j = 0; j < inner; ++j) out[to + j] = x[from + j * step];
    } else {
      constexpr std::size_t tile = 64;
      const std::size_t rows_k = shape[k], out_row = out_stride[k];
      for (std::size_t r0 = 0; r0 < rows_k; r0 += tile)
        for (std::size_t c0 = 0; c0 < inner; c0 += tile)
          for (std::size_t r = r0; r < std::min(rows_k, r0 + tile); ++r)
            for (std::size_t c = c0; c < std::min(inner, c0 + tile); ++c)
              out[to + r * out_row + c] = x[from + r + c * step];
    }
  } while (rows.next());
}

// Calls f(k, source) for every element k of index (row-major), with source
// the element of an input of shape `in` that gather reads for it: k's own
// position (counted in index's shape) with the coordinate along ax replaced
// by index[k]. Walks index row by row (its last dim), so the inner loop is a
// plain one.
template <class F>
void for_each_gathered(const Shape& in, const Indices& index, std::size_t ax, F f) {
  const std::size_t rank = in.size();
  if (index.size() == 0) return;
  const std::vector<std::size_t> stride = row_major_strides(in);
  const std::size_t row = rank == 0 ? 1 : index.shape()[rank - 1];
  const int64_t* idx = index.data();
  // The odometer walks index's outer dims and carries the row's start in the
  // input, its coordinate along ax at 0 (so that dim does not move it).
  std::vector<std::size_t> move = stride;
  if (ax < rank) move[ax] = 0;
  Odometer<1> rows{rank == 0 ? Shape{} : Shape(index.shape().begin(), index.shape().end() - 1), {move}};
  std::size_t k = 0;
  do {
    const std::size_t base = rows.at[0];
    if (rank == 0 || ax == rank - 1)
      for (std::size_t j = 0; j < row; ++j) f(k + j, base + static_cast<std::size_t>(idx[k + j]));
    else
      for (std::size_t j = 0; j < row; ++j)
        f(k + j, base + j + static_cast<std::size_t>(idx[k + j]) * stride[ax]);
    k += row;
  } while (rows.next());
}

}  // namespace

Array permute(const char* op, const Array& x, const std::vector<std::size_t>& perm) {
  const Shape in = shape_of(x);
  Shape out_shape(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) out_shape[i] = in[perm[i]];
  Array y = empty_array(op, out_shape);
  permute_copy(x.data(), y.data(), in, perm);
  return y;
}

Array gather(const Array& x, std::size_t ax, const Indices& index) {
  Array y = empty_array("gather", shape_of(index));
  const float* in = x.data();
  float* out = y.data();
  for_each_gathered(shape_of(x), index, ax,
                    [in, out](std::size_t k, std::size_t from) { out[k] = in[from]; });
  return y;
}

Array scatter_add(const Shape& shape, std::size_t ax, const Indices& index, const Array& g) {
  Array gx = empty_array("gather", shape);
  std::fill_n(gx.data(), gx.size(), 0.0f);
  float* out = gx.data();
  const float* in = g.data();
  for_each_gathered(shape, index, ax, [in, out](std::size_t k, std::size_t to) { out[to] += in[k]; });
  return gx;
}

}  // namespace tg::kernels
