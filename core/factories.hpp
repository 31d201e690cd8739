// Making tensors: filled, random, from C++ data, ranges; and the generator
// random factories and module initialisers draw from.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor.hpp"

namespace tg {

namespace detail {
// While a ShardStream lives on a thread (nn::data_parallel gives each shard
// one, seeded in shard order), the draws there of every Generator made before
// it come from the ShardStream instead, so that dropout masks repeat exactly
// run to run, whichever thread runs the shard: from its one engine, or, for a
// generator seeded on this thread since (manual_seed inside forward), from an
// engine of the generator's own in this shard, seeded with that seed. A
// Generator made while the ShardStream lives draws from its own state, as
// anywhere else.
struct ShardStream {
  explicit ShardStream(uint32_t seed) : engine(seed), id(++last_id), before(current) { current = this; }
  ~ShardStream() { current = before; }
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;
  std::mt19937 engine;
  std::map<const void*, std::mt19937> seeded;  // by the seeded generator's state
  uint64_t id;                                 // never 0, never reused
  ShardStream* before;
  static inline thread_local ShardStream* current = nullptr;
  static inline std::atomic<uint64_t> last_id = 0;
};
}  // namespace detail

// A random number generator: a std::mt19937 behind a cheap HANDLE, like Tensor:
// copies share one state. A module or sampler keeps the generator it is given,
// so it draws from the caller's stream, and the state lives as long as any
// holder does. clone() makes an independent copy (to replay the same draws).
//
// Threads may share a generator (the default one, say): every draw takes its
// lock, one number at a time (operator(), for std's distributions) or a whole
// op's worth at once (draw()). Which thread gets which numbers is then up to the
// scheduler: give each thread its own generator for runs that repeat exactly.
class Generator {
 public:
  using result_type = std::mt19937::result_type;
  explicit Generator(uint64_t seed = 5489u);  // std::mt19937's default seed
  static constexpr result_type min() { return std::mt19937::min(); }
  static constexpr result_type max() { return std::mt19937::max(); }
  // Runs f(engine) under the lock: the draws of one op in one go.
  template <class F>
  decltype(auto) draw(F&& f) {
    if (std::mt19937* shard = shard_engine()) return f(*shard);
    std::lock_guard<std::mutex> lock(state_->mutex);
    return f(state_->engine);
  }
  result_type operator()() {
    return draw([](std::mt19937& engine) { return engine(); });
  }
  // Seeding sets this generator's state, also inside a shard of nn::data_parallel
  // (where the shard's draws from it then follow the seed too; see detail::ShardStream).
  void seed(uint64_t seed);
  Generator clone() const;
  // The state as std::mt19937 writes it (operator<<), and back: for checkpoints.
  // set_state throws std::invalid_argument for text that does not read back to itself.
  std::string state() const;
  void set_state(const std::string& text);
  bool is_same(const Generator& other) const { return state_ == other.state_; }

 private:
  struct State {
    std::mt19937 engine;
    std::mutex mutex;
    // The ShardStream this generator was made under (its id), 0 for none.
    uint64_t made_in = detail::ShardStream::current ? detail::ShardStream::current->id : 0;
  };
  // Inside a shard of nn::data_parallel, the engine the shard draws this
  // generator's numbers from; null where the generator's own state is drawn from.
  std::mt19937* shard_engine() const {
    detail::ShardStream* shard = detail::ShardStream::current;
    if (!shard || state_->made_in == shard->id) return nullptr;
    const auto own = shard->seeded.find(state_.get());
    return own != shard->seeded.end() ? &own->second : &shard->engine;
  }
  void set_engine(const std::mt19937& engine);  // the state, and in a shard its engine for it
  std::shared_ptr<State> state_;
};

// The generator used when none is passed (module initialisation, for one): one
// for the whole program, as PyTorch's default generator, seeded with 0.
// manual_seed() reseeds it, like torch.manual_seed.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Factories. Random ones take the generator explicitly so runs are reproducible.
Tensor zeros(const Dims& shape, bool requires_grad = false);
Tensor ones(const Dims& shape, bool requires_grad = false);
Tensor full(const Dims& shape, float value, bool requires_grad = false);
Tensor randn(const Dims& shape, Generator& gen, bool requires_grad = false);  // N(0, 1)
Tensor rand(const Dims& shape, Generator& gen, bool requires_grad = false);   // U[0, 1)

// Tensors and Indices from plain C++ data, as torch.tensor: the values are copied
// (row-major), and their count must fit the shape.
//   tg::Tensor x = tg::tensor(pixels, {n, 64});   // a std::vector<float>
//   tg::Indices y = tg::indices(labels);          // a std::vector<int64_t> -> [n]
Tensor tensor(const std::vector<float>& values, const Dims& shape, bool requires_grad = false);
Tensor tensor(const std::vector<float>& values);  // 1-d
Tensor tensor(const float* data, const Dims& shape, bool requires_grad = false);
Indices indices(const std::vector<int64_t>& values, const Dims& shape);
Indices indices(const std::vector<int64_t>& values);  // 1-d
Indices indices(const int64_t* data, const Dims& shape);

// torch.arange: start, start + step, ... up to but not including end. As in
// PyTorch, integer arguments give integers (Indices) and floating-point ones a
// float32 Tensor: arange(4) is Indices {0, 1, 2, 3}; arange(0.0, 1.0, 0.25) is
// Tensor {0, 0.25, 0.5, 0.75}.
namespace detail {
Indices arange_int(int64_t start, int64_t end, int64_t step);
Tensor arange_float(double start, double end, double step);
}  // namespace detail
template <class A, class B, class C = int>
requires(std::is_arithmetic_v<A>&& std::is_arithmetic_v<B>&& std::is_arithmetic_v<C>) auto arange(
    A start, B end, C step = 1) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B> && std::is_integral_v<C>)
    return detail::arange_int(start, end, step);
  else
    return detail::arange_float(start, end, step);
}
template <class T>
requires std::is_arithmetic_v<T>
auto arange(T end) {
  return arange(T(0), end);
}

}  // namespace tg
