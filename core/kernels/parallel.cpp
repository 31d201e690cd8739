// The thread pool behind parallel_for and set_num_threads.
#include "parallel.hpp"

#include <cblas.h>  // openblas_set_num_threads

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tg {

namespace {

// True on the pool's workers, and on a caller while its loop runs: a loop
// started there runs on that thread alone.
thread_local bool inside_loop = false;

std::atomic<std::size_t> loops_split{0};

std::size_t threads_from_environment() {
  const char* text = std::getenv("TAPEGRAD_NUM_THREADS");
  if (text == nullptr || *text == '\0') return 1;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (*end != '\0' || n == 0 || n > 4096 || text[0] == '-')
    throw std::invalid_argument(std::string("TAPEGRAD_NUM_THREADS: expected a whole number from 1 to 4096, got '") +
                                text + "'");
  return static_cast<std::size_t>(n);
}

// The workers wait for a job: a body and a number of chunks. Chunk 0 is the
// caller's; worker w runs chunk w + 1 of every job that has one for it.
class Pool {
 public:
  explicit Pool(std::size_t threads) {
    // The matrix products split their rows across this pool, one BLAS call per
    // block: OpenBLAS's own threads would only compete with it. Unless the
    // environment says otherwise.
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
    resize(threads);
  }
  ~Pool() { stop_workers(); }

  std::size_t size() const { return size_.load(std::memory_order_relaxed); }

  void resize(std::size_t threads) {
    stop_workers();
    spin_ = threads <= std::max(1u, std::thread::hardware_concurrency()) ? std::chrono::microseconds(200)
                                                                         : std::chrono::microseconds(50);
    // A new worker waits for the next job, not the last one.
    for (std::size_t w = 0; w + 1 < threads; ++w)
      workers_.emplace_back([this, w, seen = generation_.load()] { work(w + 1, seen); });
    size_ = threads;
  }

  // Runs chunk(c) for c in [0, chunks), chunks <= size(); chunk 0 on this thread.
  void run(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
    {
      std::lock_guard lock(mutex_);
      job_ = &chunk;
      chunks_ = chunks;
      left_ = chunks - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    inside_loop = true;
    run_chunk(0);
    inside_loop = false;
    spin_while([&] { return left_ != 0; });
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return left_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  std::mutex busy;  // held by the thread whose loop the pool is running

 private:
  void stop_workers() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
  }

  void work(std::size_t index, uint64_t seen) {
    inside_loop = true;
    for (;;) {
      spin_while([&] { return generation_ == seen && !stop_; });
      std::size_t chunks = 0;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        chunks = chunks_;
      }
      if (index >= chunks) continue;  // this job has fewer chunks than workers
      run_chunk(index);
      if (--left_ == 0) {
        std::lock_guard lock(mutex_);  // the caller is waiting, or about to check left_ under it
        done_.notify_one();
      }
    }
  }

  // A training step runs its loops a few hundred microseconds apart, and
  // waking a thread that sleeps on a condition variable takes tens of them:
  // so a worker waiting for the next job, and the caller waiting for the
  // chunks, first watch for it for up to 200 microseconds, then sleep
  // (OpenMP's runtimes spin in the same way). With more threads than cores
  // the thread waited for may need this core: then 50 microseconds.
  template <class Pending>
  void spin_while(Pending pending) const {
    const auto until = std::chrono::steady_clock::now() + spin_;
    while (pending() && std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      std::this_thread::yield();
#endif
    }
  }

  void run_chunk(std::size_t c) {
    try {
      (*job_)(c);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  std::vector<std::thread> workers_;
  std::chrono::microseconds spin_{50};  // how long a waiting thread watches before it sleeps (resize())
  std::atomic<std::size_t> size_{1};  // workers_.size() + 1, for get_num_threads() on any thread
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t chunks_ = 0;
  std::atomic<std::size_t> left_{0};      // chunks of the job not yet done, the caller's aside
  std::atomic<uint64_t> generation_{0};  // which job: changed under mutex_, watched without it
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p(threads_from_environment());
  return p;
}

}  // namespace

void set_num_threads(std::size_t n) {
  if (n == 0) throw std::invalid_argument("set_num_threads: the number of threads must be at least 1, got 0");
  if (inside_loop) throw std::logic_error("set_num_threads: called inside a parallel_for loop");
  Pool& p = pool();
  std::lock_guard running(p.busy);
  if (n != p.size()) p.resize(n);
}

std::size_t get_num_threads() {
  return pool().size();
}

void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& body) {
  Pool& p = pool();
  const std::size_t most = grain == 0 ? n : n / grain;  // chunks at least `grain` long
  std::unique_lock<std::mutex> running;
  if (most > 1 && !inside_loop) running = std::unique_lock(p.busy, std::try_to_lock);
  const std::size_t chunks = running.owns_lock() ? std::min(p.size(), most) : 1;
  if (chunks <= 1) {  // too small to split, one thread, or the pool is taken
    if (n > 0) body(0, n);
    return;
  }
  loops_split.fetch_add(1, std::memory_order_relaxed);
  // Chunk c covers [c * n / chunks, (c + 1) * n / chunks): sizes differ by at most one.
  p.run(chunks, [&](std::size_t c) { body(c * n / chunks, (c + 1) * n / chunks); });
}

std::size_t detail::split_loops() {
  return loops_split.load(std::memory_order_relaxed);
}

}  // namespace tg
