// Memory hints for large tables read and written at scattered rows: embedding
// weights (nn/embedding.cpp), their optimizer state (optim/optimizer.*), and
// linear's weight gradient (core/kernels/matmul.cpp). They change speed only, never
// results; a learner can skip this file.
#pragma once

#include <cstddef>

namespace tg {

// Such tables cost a TLB miss per row with 4 KB pages once they pass a few MB.
// On Linux this asks for 2 MB pages (transparent huge pages, "madvise" mode)
// for the whole 2 MB blocks of data[0, count); call it before the pages are
// first written. Elsewhere it does nothing.
void advise_huge_pages(float* data, std::size_t count);

// Asks for the first 4 cache lines (64 floats) of a row that will be read soon.
// For loops over rows scattered in a table far larger than the caches, where
// the hardware prefetcher cannot guess the next one: call it for the row a few
// iterations ahead. Always inlined: GCC drops a prefetch left in a function of
// its own.
[[gnu::always_inline]] inline void prefetch_row(const float* row, std::size_t cols) {
  const char* p = reinterpret_cast<const char*>(row);
  __builtin_prefetch(p);
  if (cols > 16) __builtin_prefetch(p + 64);
  if (cols > 32) __builtin_prefetch(p + 128);
  if (cols > 48) __builtin_prefetch(p + 192);
}

}  // namespace tg
