// micro_tapegrad: Google Benchmark timings of the ops a bag-of-words step spends
// its time in, on inputs shaped like the step benchmark's: 32 documents of 160
// distinct ids drawn from Zipf(1) over V (export_ids --synthetic), dim 64.
//
//   ./micro_tapegrad [--benchmark_filter=Embedding] [--benchmark_min_time=0.2]
//
// Each benchmark's argument is V. "ForwardBackward" times a forward pass and the
// backward() of its output, so backward alone is the difference with "Forward".
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include <tapegrad/tapegrad.hpp>

namespace {

constexpr std::size_t dim = 64, batch = 32, tokens = 160;
using Docs = std::vector<std::vector<int64_t>>;

// One batch of documents for vocabulary size V, seeded by V and `which`.
const Docs& docs_for(std::size_t vocab, int which = 0) {
  static std::map<std::pair<std::size_t, int>, Docs> cache;
  auto [it, fresh] = cache.try_emplace({vocab, which});
  if (!fresh) return it->second;
  std::mt19937_64 rng(vocab * 31 + static_cast<std::size_t>(which));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> cdf(vocab);
  double total = 0;
  for (std::size_t v = 0; v < vocab; ++v) cdf[v] = total += 1.0 / static_cast<double>(v + 1);
  for (std::size_t d = 0; d < batch; ++d) {
    std::set<int64_t> doc;
    while (doc.size() < tokens)
      doc.insert(std::min<int64_t>(std::lower_bound(cdf.begin(), cdf.end(), unit(rng) * total) - cdf.begin(),
                                   static_cast<int64_t>(vocab) - 1));
    it->second.emplace_back(doc.begin(), doc.end());
  }
  return it->second;
}

tg::CsrBatch csr_for(std::size_t vocab, int which = 0) {
  tg::CsrBatch b =
      tg::data::to_csr(docs_for(vocab, which), static_cast<int64_t>(vocab), tg::data::CsrValues::binary);
  b.values.clear();  // plain bags: every entry counts 1, no per-sample weights
  return b;
}

tg::nn::EmbeddingBag make_bag(std::size_t vocab) {
  tg::Generator gen(0);
  tg::nn::EmbeddingBagOptions o;
  o.mode = tg::nn::EmbeddingBagMode::sum;
  return tg::nn::EmbeddingBag(vocab, dim, o, gen);
}

// The coalesced weight gradient of one batch, as EmbeddingBag's backward makes it.
tg::SparseRows batch_grad(std::size_t vocab, int which) {
  tg::nn::EmbeddingBag bag = make_bag(vocab);
  tg::Tensor out = bag.forward(csr_for(vocab, which));
  out.backward(xt::ones<float>({batch, dim}));
  return bag.weight.grad().sparse();
}

void set_tokens(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(batch * tokens));
}

// ----------------------------------------------------------- EmbeddingBag

void BM_EmbeddingBagForward(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::nn::EmbeddingBag bag = make_bag(vocab);
  const tg::CsrBatch input = csr_for(vocab);
  tg::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(bag.forward(input).value().data());
  set_tokens(state);
  state.SetLabel("32 bags x 160 ids, no grad");
}

void BM_EmbeddingBagForwardBackward(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::nn::EmbeddingBag bag = make_bag(vocab);
  const tg::CsrBatch input = csr_for(vocab);
  const tg::Array seed = xt::ones<float>({batch, dim});
  for (auto _ : state) {
    bag.weight.zero_grad();
    bag.forward(input).backward(seed);
    benchmark::DoNotOptimize(bag.weight.grad().sparse().values.data());
  }
  set_tokens(state);
  state.SetLabel("backward: coalesced SparseRows");
}

// ----------------------------------------------------------------- Linear

void BM_LinearForward(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::nn::Linear proj(vocab, dim, false);
  const tg::Tensor x(tg::data::to_dense(
      tg::data::to_csr(docs_for(vocab), static_cast<int64_t>(vocab), tg::data::CsrValues::binary)));
  tg::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(proj.forward(x).value().data());
  state.SetLabel("[32, V] x [64, V]^T, no grad");
}

void BM_LinearForwardBackward(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::nn::Linear proj(vocab, dim, false);
  const tg::Tensor x(tg::data::to_dense(
      tg::data::to_csr(docs_for(vocab), static_cast<int64_t>(vocab), tg::data::CsrValues::binary)));
  const tg::Array seed = xt::ones<float>({batch, dim});
  for (auto _ : state) {
    proj.weight.zero_grad();
    proj.forward(x).backward(seed);
    benchmark::DoNotOptimize(proj.weight.grad().dense().data());
  }
  state.SetLabel("backward: dW = g^T x, [64, V]");
}

// ------------------------------------------------------- sparse gradients

void BM_GradMergeSparse(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  const tg::SparseRows a = batch_grad(vocab, 0), b = batch_grad(vocab, 1);
  const tg::Shape shape{vocab, dim};
  for (auto _ : state) {
    tg::Grad g;
    g.accumulate(tg::Grad(a), shape);
    g.accumulate(tg::Grad(b), shape);  // sparse + sparse: merged, still coalesced
    benchmark::DoNotOptimize(g.sparse().values.data());
  }
  state.SetLabel(std::to_string(a.nnz_rows()) + " + " + std::to_string(b.nnz_rows()) +
                 " rows (incl. copies)");
}

// ------------------------------------------------------------- optimizers

// Adam on a [V, 64] parameter whose gradient stays set between steps.
void adam_steps(benchmark::State& state, tg::Grad grad, const std::string& label) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::Tensor w = tg::zeros({vocab, dim}, true);
  w.grad_mut().accumulate(std::move(grad), w.shape());
  tg::optim::Adam adam({w}, {.lr = 1e-3});
  adam.step();  // allocates the moments
  for (auto _ : state) {
    adam.step();
    benchmark::DoNotOptimize(w.value().data());
  }
  state.SetLabel(label);
}

void BM_AdamDense(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::Grad g;
  g.accumulate(tg::Array(xt::ones<float>({vocab, dim})), tg::Shape{vocab, dim});
  adam_steps(state, std::move(g), "every row");
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(vocab * dim));
}

void BM_AdamLazy(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::Grad g;
  g.accumulate(batch_grad(vocab, 0), tg::Shape{vocab, dim});
  const std::size_t rows = g.sparse().nnz_rows();
  adam_steps(state, std::move(g), std::to_string(rows) + " rows of one batch");
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(rows * dim));
}

void BM_SGDLazy(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  tg::Tensor w = tg::zeros({vocab, dim}, true);
  w.grad_mut().accumulate(batch_grad(vocab, 0), w.shape());
  tg::optim::SGD sgd({w}, {.lr = 0.1});
  for (auto _ : state) {
    sgd.step();
    benchmark::DoNotOptimize(w.value().data());
  }
  state.SetLabel(std::to_string(w.grad().sparse().nnz_rows()) + " rows of one batch");
}

// -------------------------------------------------------------- batch build

void BM_BatchCsr(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  const Docs& docs = docs_for(vocab);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        tg::data::to_csr(docs, static_cast<int64_t>(vocab), tg::data::CsrValues::binary).indices.data());
  set_tokens(state);
  state.SetLabel("to_csr, 32 documents");
}

void BM_BatchDense(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  const Docs& docs = docs_for(vocab);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        tg::data::to_dense(tg::data::to_csr(docs, static_cast<int64_t>(vocab), tg::data::CsrValues::binary))
            .data());
  state.SetLabel("to_dense(to_csr), [32, V]");
}

}  // namespace

BENCHMARK(BM_EmbeddingBagForward)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EmbeddingBagForwardBackward)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LinearForward)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LinearForwardBackward)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GradMergeSparse)->Arg(100'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamDense)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamLazy)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SGDLazy)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BatchCsr)->Arg(100'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BatchDense)->Arg(100'000)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
