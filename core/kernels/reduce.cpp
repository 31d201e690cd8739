// Sums in double: whole arrays in fixed blocks, along dims, and back to a broadcast input's shape.
#include "reduce.hpp"

#include <algorithm>
#include <numeric>

#include "copy.hpp"
#include "dispatch.hpp"
#include "loop.hpp"
#include "parallel.hpp"

namespace tg::kernels {

namespace {

// Blocks a long sum is cut into, whatever the thread count.
constexpr std::size_t sum_block = std::size_t{1} << 16;

TG_ALSO_FOR_AVX2 double block_sum(const float* x, std::size_t n) {
  return lane_sum(x, n);
}

// out[i] = sum over `rows` rows of x (`stride` apart) of column i, for the
// columns [lo, hi).
TG_ALSO_FOR_AVX2 void sum_columns(const float* x, std::size_t rows, std::size_t stride, std::size_t lo,
                                 std::size_t hi, float* out) {
  column_sums<1>(rows, lo, hi, {out}, [x, stride](std::size_t r, std::size_t i) {
    return std::array<double, 1>{static_cast<double>(x[r * stride + i])};
  });
}

}  // namespace

double sum(const float* x, std::size_t n) {
  if (n <= sum_block) return block_sum(x, n);
  const std::size_t blocks = (n + sum_block - 1) / sum_block;
  std::vector<double> partial(blocks);
  parallel_for(blocks, 4, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t b = lo; b < hi; ++b)
      partial[b] = block_sum(x + b * sum_block, std::min(sum_block, n - b * sum_block));
  });
  return std::accumulate(partial.begin(), partial.end(), 0.0);  // in block order
}

void sum_middle(const float* x, std::size_t outer, std::size_t n, std::size_t inner, float* out) {
  if (inner == 1 && outer == 1) {
    out[0] = static_cast<float>(sum(x, n));
  } else if (inner == 1) {  // a sum per row
    parallel_for(outer, grain_for(outer, outer * n, elementwise_grain), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t o = lo; o < hi; ++o) out[o] = static_cast<float>(block_sum(x + o * n, n));
    });
  } else {  // a sum per column of each [n, inner] block, in pieces of 256 columns
    const std::size_t pieces = (inner + 255) / 256, items = outer * pieces;
    parallel_for(
        items, grain_for(items, outer * n * inner, elementwise_grain), [&](std::size_t lo, std::size_t hi) {
          for (std::size_t it = lo; it < hi; ++it) {
            const std::size_t o = it / pieces, first = it % pieces * 256;
            sum_columns(x + o * n * inner, n, inner, first, std::min(inner, first + 256), out + o * inner);
          }
        });
  }
}

namespace {

// x summed over the dims marked in `summed` (one flag per dim of x), as a flat
// array of the kept dims' elements. The dims are first merged into runs of
// summed and kept ones (dims of size 1 dropped). One summed run is one
// sum_middle pass; several (a [3, 4, 5, 6] gradient summed to [3, 1, 5, 1])
// are walked once, each value (or, when the last dims are summed, each
// contiguous row of them, summed in lanes) added into its output's running double.
Array sum_marked(const char* op, const Array& x, const std::vector<bool>& summed) {
  struct Run {
    std::size_t size;
    bool summed;
  };
  std::vector<Run> runs;
  std::size_t kept = 1;
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    const std::size_t n = x.shape()[d];
    if (!summed[d]) kept *= n;
    if (n == 1) continue;
    if (!runs.empty() && runs.back().summed == summed[d])
      runs.back().size *= n;
    else
      runs.push_back({n, summed[d]});
  }
  if (x.size() == 0) {  // an empty sum is 0
    Array out = empty_array(op, Shape{kept});
    std::fill(out.begin(), out.end(), 0.0f);
    return out;
  }
  std::size_t summed_runs = 0;
  for (const Run& r : runs) summed_runs += r.summed;
  Array out = empty_array(op, Shape{kept});
  if (summed_runs == 0) {  // every summed dim had size 1: the values as they are
    std::copy(x.begin(), x.end(), out.begin());
  } else if (summed_runs == 1) {  // [outer, n, inner]: one pass
    std::size_t outer = 1, n = 1, inner = 1;
    bool after = false;
    for (const Run& r : runs) {
      if (r.summed) {
        n = r.size;
        after = true;
      } else {
        (after ? inner : outer) *= r.size;
      }
    }
    sum_middle(x.data(), outer, n, inner, out.data());
  } else {  // summed runs between kept ones: walked once, each value added into its output's double
    // When the last run is summed, x is rows of that length, each all for one
    // output: a row is summed in lanes first (block_sum) and added as one value.
    const std::size_t row = runs.back().summed ? runs.back().size : 1;
    if (row > 1) runs.pop_back();
    std::vector<std::size_t> out_stride(runs.size(), 0);
    for (std::size_t i = runs.size(), step = 1; i-- > 0;)
      if (!runs[i].summed) {
        out_stride[i] = step;
        step *= runs[i].size;
      }
    std::vector<double> acc(kept, 0.0);
    Shape sizes;
    for (const auto& r : runs) sizes.push_back(r.size);
    Odometer<1> walk{sizes, {out_stride}};  // walk.at[0]: the output element of x's row r
    const float* data = x.data();
    for (std::size_t r = 0; r < x.size() / row; ++r, walk.next())
      acc[walk.at[0]] += row == 1 ? static_cast<double>(data[r]) : block_sum(data + r * row, row);
    for (std::size_t i = 0; i < kept; ++i) out.data()[i] = static_cast<float>(acc[i]);
  }
  return out;
}

}  // namespace

Array sum_over(const char* op, const Array& x, std::vector<std::size_t> axes, bool keepdim) {
  std::vector<bool> summed(x.dimension(), false);
  for (std::size_t a : axes) summed.at(a) = true;
  Shape out;
  for (std::size_t d = 0; d < x.dimension(); ++d)
    if (!summed[d] || keepdim) out.push_back(summed[d] ? 1 : x.shape()[d]);
  Array r = sum_marked(op, x, summed);
  r.reshape(out);
  return r;
}

Array sum_to_shape(const Array& g, std::span<const std::size_t> shape) {
  if (std::equal(g.shape().begin(), g.shape().end(), shape.begin(), shape.end()))
    return copy("sum_to_shape", g);
  const std::size_t lead = g.dimension() - shape.size();
  std::vector<bool> summed(g.dimension());
  bool any = false;
  for (std::size_t d = 0; d < g.dimension(); ++d) {
    summed[d] = d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1);
    any = any || summed[d];
  }
  if (!any) return copy("sum_to_shape", g);
  Array r = sum_marked("sum_to_shape", g, summed);
  r.reshape(Shape(shape.begin(), shape.end()));
  return r;
}

}  // namespace tg::kernels
