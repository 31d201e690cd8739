// The row view the optimizers update through (inside the library: sgd.cpp,
// adam.cpp, optimizer.cpp): a parameter of shape [n0, n1, ...] as n0 rows of
// n1 * n2 * ... values, a dense gradient covering every row and a SparseRows
// one its listed rows (optim/optimizer.hpp says why).
#pragma once

#include <array>
#include <cstddef>

#include "../core/grad.hpp"
#include "../core/kernels/loop.hpp"
#include "../core/kernels/parallel.hpp"
#include "../core/kernels/table_memory.hpp"

namespace tg::optim {

// A state array of zeros in `shape` (momentum, moments). A sparse gradient
// updates it at scattered rows, so it asks for 2 MB pages (advise_huge_pages).
Array zero_state(const Shape& shape);

// The row view described at the top of this file.
std::size_t num_rows(const Shape& shape);
std::size_t row_size(const Shape& shape);

// Calls update(r, g) for every row r the gradient covers; g points at that
// row's `cols` gradient values. The gradient has passed check_step(). Rows
// are independent (a sparse gradient's rows are unique), so they are split
// across threads (core/kernels/parallel.hpp): update may run on several rows at once.
// `touched` are the [rows, cols] arrays the update reads and writes (values,
// moments; null entries are skipped). A sparse gradient's rows are scattered
// over a table that can be far larger than the caches, so their rows in these
// arrays are requested a few rows before their update.
template <std::size_t N, class Update>
void for_each_row(const Grad& grad, std::size_t rows, std::size_t cols,
                         const std::array<float*, N>& touched, Update update) {
  const std::size_t grain = kernels::grain_for(1, cols);  // rows per chunk
  if (grad.is_dense()) {
    const float* g = grad.dense().data();
    parallel_for(rows, grain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t r = lo; r < hi; ++r) update(r, g + r * cols);
    });
  } else if (grad.is_sparse()) {
    const SparseRows& s = grad.sparse();
    parallel_for(s.rows.size(), grain, [&](std::size_t lo, std::size_t hi) {
      constexpr std::size_t ahead = 4;
      for (std::size_t i = lo; i < hi; ++i) {
        if (i + ahead < hi) {
          const std::size_t next = static_cast<std::size_t>(s.rows[i + ahead]);
          for (const float* a : touched)
            if (a != nullptr) prefetch_row(a + next * cols, cols);
        }
        update(static_cast<std::size_t>(s.rows[i]), s.values.data() + i * cols);
      }
    });
  }
}

}  // namespace tg::optim
