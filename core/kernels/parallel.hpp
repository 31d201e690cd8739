// Threads inside tapegrad's own loops (PyTorch: torch.set_num_threads).
//
// A few loops are worth splitting across cores: EmbeddingBag's sums and its
// gradient rows, the optimizers' row updates, and the matrix products (by rows
// of the result, one BLAS call per block; OpenBLAS itself is kept on one
// thread unless OPENBLAS_NUM_THREADS is set). Each such loop hands
// parallel_for() a range of independent pieces (bags, rows). In the embedding
// and optimizer loops every piece is computed by the same instructions in the
// same order whichever thread runs it, so their results have the same bits
// with 1, 2 or 64 threads; a product's bits are the same for one thread count,
// close across counts (BLAS may round a block's edge rows differently).
// tests/test_parallel.cpp holds both.
//
//   tg::set_num_threads(4);     // or TAPEGRAD_NUM_THREADS=4 in the environment
//
// The default is 1, or TAPEGRAD_NUM_THREADS: a library that starts threads its
// program did not ask for competes with the program's own threads.
// What runs the loops is one pool of get_num_threads() - 1 workers plus the
// calling thread. One parallel loop runs at a time: a loop started while
// another runs (from a second thread of the program, or inside a loop's body)
// runs on its calling thread alone, so a program that already trains on several
// threads of its own is not oversubscribed.
#pragma once

#include <cstddef>
#include <functional>

namespace tg {

// Threads the parallel loops may use, the caller included.
// Throws std::invalid_argument for 0. Not to be called while a loop runs.
void set_num_threads(std::size_t n);
std::size_t get_num_threads();

// Calls body(begin, end) on contiguous chunks that cover [0, n) once, at most
// get_num_threads() of them at once, each at least `grain` long (except a
// shorter n), and returns when all are done. The first exception a chunk
// throws is rethrown here, after every chunk has ended.
void parallel_for(std::size_t n, std::size_t grain,
                  const std::function<void(std::size_t, std::size_t)>& body);

namespace detail {
// How many parallel_for calls so far ran on more than one thread: lets a test
// see that a loop it means to check was split.
std::size_t split_loops();
}  // namespace detail

}  // namespace tg
