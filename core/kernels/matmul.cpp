#include "matmul.hpp"

#include <algorithm>
#include <vector>

#include "../parallel.hpp"
#include "../table_memory.hpp"
#include "loop.hpp"

namespace tg::kernels {

namespace {

// A product's sizes: y[i] = op(a[a_of[i]]) op(b[b_of[i]]) for each matrix i of
// the broadcast batch, a's matrices [n, k] and b's [k, m].
struct Batch {
  std::size_t n = 0, k = 0, m = 0;
  Shape shape;                          // the broadcast batch dims
  std::vector<std::size_t> a_of, b_of;  // which matrix of a and of b product i reads
};

std::size_t elements(const Shape& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

Shape batch_dims(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// For each position of `batch`, the position of `own` it reads when `own`
// broadcasts to it (a dim own lacks or has as 1 is read at 0).
std::vector<std::size_t> sources(const Shape& own, const Shape& batch) {
  const Loop<1> loop = plan<1>(batch, {&own});
  std::vector<std::size_t> out(loop.size);
  for_each_run(loop, [&](std::size_t pos, std::size_t count, const std::array<std::size_t, 1>& at) {
    for (std::size_t i = 0; i < count; ++i) out[pos + i] = at[0] + i * loop.stride[0].back();
  });
  return out;
}

Batch batch_of(const Shape& as, const Shape& bs) {
  Batch p{as[as.size() - 2],
          as.back(),
          bs.back(),
          broadcast_shapes("matmul", batch_dims(as), batch_dims(bs)),
          {},
          {}};
  p.a_of = sources(batch_dims(as), p.shape);
  p.b_of = sources(batch_dims(bs), p.shape);
  return p;
}

// The product of every dim of s but the last: the rows of a [.., k] array.
std::size_t rows_of(const Shape& s) {
  std::size_t r = 1;
  for (std::size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

// Each matrix j of a gradient of `shape` gets the sum of the products that
// read it, product(i, out, accumulate) for each such i in order: the first
// writes, the others add. The matrices are independent: split across threads.
template <class Product>
Array sum_of_products(const char* op, const Shape& shape, std::size_t size,
                      const std::vector<std::size_t>& read_by, std::size_t work, Product product) {
  const std::size_t count = elements(shape) / std::max<std::size_t>(size, 1);
  std::vector<std::vector<std::size_t>> readers(count);
  for (std::size_t i = 0; i < read_by.size(); ++i) readers[read_by[i]].push_back(i);
  Array out = empty_array(op, shape);
  parallel_for(count, grain_for(count, work, std::size_t{1} << 15), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t j = lo; j < hi; ++j) {
      float* o = out.data() + j * size;
      if (readers[j].empty()) std::fill_n(o, size, 0.0f);  // read by no product (an empty batch)
      for (std::size_t r = 0; r < readers[j].size(); ++r) product(readers[j][r], o, r > 0);
    }
  });
  return out;
}

}  // namespace

Array matmul(const Array& a, const Array& b) {
  const Shape as = shape_of(a), bs = shape_of(b);
  Shape out_shape;
  if (bs.size() == 2) {  // [rows, k] x [k, m]: one GEMM
    out_shape = as;
    out_shape.back() = bs[1];
    Array y = empty_array("matmul", out_shape);
    gemm(false, false, rows_of(as), bs[1], as.back(), a.data(), b.data(), y.data());
    return y;
  }
  const Batch p = batch_of(as, bs);
  out_shape = p.shape;
  out_shape.insert(out_shape.end(), {p.n, p.m});
  Array y = empty_array("matmul", out_shape);
  const std::size_t grain = grain_for(1, p.n * p.m * p.k, std::size_t{1} << 15);  // products per chunk
  parallel_for(p.a_of.size(), grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i)
      gemm(false, false, p.n, p.m, p.k, a.data() + p.a_of[i] * p.n * p.k, b.data() + p.b_of[i] * p.k * p.m,
           y.data() + i * p.n * p.m);
  });
  return y;
}

Array matmul_nt(const Array& g, const Array& b, const Shape& a_shape) {
  const Shape bs = shape_of(b);
  if (bs.size() == 2) {  // [rows, m] x [m, k]
    Array da = empty_array("matmul", a_shape);
    gemm(false, true, rows_of(a_shape), bs[0], bs[1], g.data(), b.data(), da.data());
    return da;
  }
  const Batch p = batch_of(a_shape, bs);
  return sum_of_products("matmul", a_shape, p.n * p.k, p.a_of, p.a_of.size() * p.n * p.m * p.k,
                         [&](std::size_t i, float* out, bool add) {
                           gemm(false, true, p.n, p.k, p.m, g.data() + i * p.n * p.m,
                                b.data() + p.b_of[i] * p.k * p.m, out, add);
                         });
}

Array matmul_tn(const Array& a, const Array& g, const Shape& b_shape) {
  const Shape as = shape_of(a);
  if (b_shape.size() == 2) {  // [k, rows] x [rows, m]: every row of the batch in one sum
    Array db = empty_array("matmul", b_shape);
    // A weight's gradient is a fresh buffer every step (zero_grad empties the
    // slot); a large one comes straight from the kernel, which faults it in page
    // by page on the first write. 2 MB pages fault 512 times less often.
    advise_huge_pages(db.data(), db.size());
    gemm(true, false, b_shape[0], b_shape[1], rows_of(as), a.data(), g.data(), db.data());
    return db;
  }
  const Batch p = batch_of(as, b_shape);
  return sum_of_products("matmul", b_shape, p.k * p.m, p.b_of, p.b_of.size() * p.n * p.m * p.k,
                         [&](std::size_t i, float* out, bool add) {
                           gemm(true, false, p.k, p.m, p.n, a.data() + p.a_of[i] * p.n * p.k,
                                g.data() + i * p.n * p.m, out, add);
                         });
}

Array linear(const Array& x, const Array& weight, const float* bias) {
  const Shape xs = shape_of(x);
  const std::size_t rows = rows_of(xs), in = weight.shape()[1], out = weight.shape()[0];
  Shape ys = xs;
  ys.back() = out;
  Array y = empty_array("linear", ys);
  if (bias)  // start from the bias in every row, then let BLAS add x W^T on top
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(bias, out, y.data() + r * out);
  gemm(false, true, rows, out, in, x.data(), weight.data(), y.data(),
       bias != nullptr);  // [rows, in] x [in, out]
  return y;
}

}  // namespace tg::kernels
