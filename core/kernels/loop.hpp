// The loop under every elementwise op: an output and up to three inputs that
// broadcast to it, walked over raw row-major buffers.
//
// It is PyTorch's TensorIterator in small. Each input gets a stride per output
// dim, in elements: its own stride where it has that dim, 0 where it is
// broadcast (a missing leading dim, or a dim of size 1). Adjacent dims are then
// merged wherever every operand steps through them as through one dim, so
// [1024, 300] + [1024, 300] becomes one flat run of 307,200 and
// [1024, 300] + [300] a [1024, 300] walk whose row input restarts every row.
// What is left is walked row by row: the last dim is the inner loop, where
// each input's stride is 1 or 0 (proved in plan()), so it compiles to plain
// SIMD code over contiguous values or one value held in a register.
//
// Large outputs are split across the thread pool (core/kernels/parallel.hpp) by ranges
// of output elements; every element is computed by the same instructions
// whatever range holds it, so the result has the same bits on any thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "../array.hpp"
#include "parallel.hpp"

namespace tg::kernels {

// The chunk length (the grain) for a parallel_for over `items` pieces that do
// `work` multiply-adds in all: enough pieces that a chunk does about
// `chunk_work` of them (16k unless said), so that a chunk outweighs waking a
// thread. At least 1.
inline std::size_t grain_for(std::size_t items, std::size_t work,
                             std::size_t chunk_work = std::size_t{1} << 14) {
  return std::max<std::size_t>(1, items * chunk_work / std::max<std::size_t>(work, 1));
}

// Elements per chunk below which a loop is not worth splitting across threads:
// waking a worker costs about as much as moving 32k floats through the cache.
inline constexpr std::size_t elementwise_grain = std::size_t{1} << 15;

// Calls body(begin, end) over [0, n): directly when n is too small to split
// (most ops of a small model: no pool, no std::function), else through
// parallel_for in chunks of at least `grain`.
template <class Body>
void for_range(std::size_t n, std::size_t grain, Body body) {
  if (n < 2 * grain || get_num_threads() == 1) {
    if (n > 0) body(std::size_t{0}, n);
    return;
  }
  parallel_for(n, grain, body);
}

template <std::size_t N>
struct Loop {
  Shape shape;                                          // the merged dims; at least one
  std::array<std::vector<std::size_t>, N> stride = {};  // per input, per merged dim
  std::size_t size = 1;                                 // elements of the output
};

// The loop for an output of shape `out` and inputs of shapes `in` (each must
// broadcast to `out`; the caller checked).
template <std::size_t N>
Loop<N> plan(const Shape& out, const std::array<const Shape*, N>& in) {
  Loop<N> loop;
  for (std::size_t d : out) loop.size *= d;
  // Each input's strides, aligned to the output's dims from the right.
  std::array<std::vector<std::size_t>, N> stride;
  for (std::size_t j = 0; j < N; ++j) {
    const Shape& s = *in[j];
    stride[j].assign(out.size(), 0);
    std::size_t step = 1;
    for (std::size_t k = s.size(); k-- > 0;) {
      const std::size_t d = out.size() - s.size() + k;
      if (s[k] != 1) stride[j][d] = step;
      step *= s[k];
    }
  }
  // Merge, from the last dim to the first. Dims of size 1 are dropped (no
  // operand moves along them), so the last dim left has stride 1 in every
  // input that is not broadcast along it, and 0 in the others.
  for (std::size_t d = out.size(); d-- > 0;) {
    if (out[d] == 1) continue;
    bool merges = !loop.shape.empty();
    for (std::size_t j = 0; j < N && merges; ++j)
      merges = stride[j][d] == loop.stride[j].front() * loop.shape.front();
    if (merges) {
      loop.shape.front() *= out[d];
    } else {
      loop.shape.insert(loop.shape.begin(), out[d]);
      for (std::size_t j = 0; j < N; ++j) loop.stride[j].insert(loop.stride[j].begin(), stride[j][d]);
    }
  }
  if (loop.shape.empty()) {  // a single element (or 0-d)
    loop.shape = {1};
    for (std::size_t j = 0; j < N; ++j) loop.stride[j] = {0};
  }
  return loop;
}

// A row-major counter over the coordinates of `shape` that carries N offsets:
// offset j moves by step[j][d] along dim d. The walk of every kernel that is
// not a flat loop (permute's rows, gather's rows, sums over several dims).
//
//   Odometer<1> o{{2, 3}, {{{30, 1}}}};   // offset of [i, j] in rows of 30
//   do use(o.at[0]); while (o.next());    // 0 1 2 30 31 32
template <std::size_t N>
struct Odometer {
  Shape shape;
  std::array<std::vector<std::size_t>, N> step;
  std::vector<std::size_t> coord = std::vector<std::size_t>(shape.size(), 0);
  std::array<std::size_t, N> at{};

  // Moves to the next coordinate; false after the last (coord and at back at 0).
  bool next() {
    for (std::size_t d = shape.size(); d-- > 0;) {
      for (std::size_t j = 0; j < N; ++j) at[j] += step[j][d];
      if (++coord[d] < shape[d]) return true;
      for (std::size_t j = 0; j < N; ++j) at[j] -= step[j][d] * shape[d];
      coord[d] = 0;
    }
    return false;
  }
};

// The strides of a contiguous row-major array of this shape, in elements.
inline std::vector<std::size_t> row_major_strides(const Shape& shape) {
  std::vector<std::size_t> stride(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  return stride;
}

// Calls row(out_offset, count, at) for runs of `count` consecutive output
// elements that lie in one row of the last merged dim; input j's run starts
// at element at[j] and steps by loop.stride[j].back() (0 or 1). Splits the
// output across threads when it is large.
template <std::size_t N, class Row>
void for_each_run(const Loop<N>& loop, Row row) {
  const std::size_t rank = loop.shape.size(), inner = loop.shape.back();
  for_range(loop.size, elementwise_grain, [&](std::size_t lo, std::size_t hi) {
    std::vector<std::size_t> coord(rank);  // of element lo, and then of each run's start
    std::array<std::size_t, N> at{};
    for (std::size_t d = rank, rest = lo; d-- > 0;) {
      coord[d] = rest % loop.shape[d];
      rest /= loop.shape[d];
      for (std::size_t j = 0; j < N; ++j) at[j] += coord[d] * loop.stride[j][d];
    }
    for (std::size_t pos = lo; pos < hi;) {
      const std::size_t count = std::min(inner - coord[rank - 1], hi - pos);
      row(pos, count, at);
      pos += count;
      coord[rank - 1] += count;
      for (std::size_t j = 0; j < N; ++j) at[j] += count * loop.stride[j][rank - 1];
      for (std::size_t d = rank - 1; d > 0 && coord[d] == loop.shape[d]; --d) {  // carry into the outer dims
        for (std::size_t j = 0; j < N; ++j) at[j] += loop.stride[j][d - 1] - coord[d] * loop.stride[j][d];
        coord[d] = 0;
        ++coord[d - 1];
      }
    }
  });
}

}  // namespace tg::kernels
