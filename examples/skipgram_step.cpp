// Does an Embedding build word2vec's hidden layer? One skip-gram step, two ways.
//
// word2vec's picture is a network: a one-hot row of the vocabulary (the center
// word) -> a hidden layer of D units (a Linear [V -> D] without bias or
// activation) -> an output layer of V units (a Linear [D -> V]), of which
// negative sampling scores only the true context word and K sampled words.
// The one-hot product picks a row of the first weight, so the hidden layer IS
// the center word's row: an Embedding lookup. And the K + 1 scores need only
// K + 1 rows of the second weight: Embedding::dot. The Embedding is neither
// CBOW nor skip-gram: it is the table; the model is which rows are looked up
// (skip-gram: the center's; CBOW: the mean of the context's) and what they
// predict.
//
// This program runs the same step both ways from the same weights and prints
// the loss, the bytes of the gradients and the time of a step (forward,
// backward, SGD) at each vocabulary size: CPU time, which a machine busy with
// other work stretches far less than wall time.
//
//   skipgram_step [--sizes 10000,100000,1000000] [--pairs 32] [--dim 100] [--negative 5] [--repeats 5]
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xmath.hpp>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

namespace {

std::size_t grad_bytes(const tg::Tensor& t) {
  return t.grad().is_sparse() ? t.grad().sparse().nbytes() : t.grad().dense().size() * sizeof(float);
}

// The process's CPU time (every thread's), in ms.
double cpu_ms() {
  return 1000.0 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags flag(argc, argv,
                   {{"--sizes", "10000,100000,1000000"},
                    {"--pairs", "32"},
                    {"--dim", "100"},
                    {"--negative", "5"},
                    {"--repeats", "5"}},
                   "One skip-gram step with negative sampling, as word2vec's network (a one-hot Linear into\n"
                   "the hidden layer, a Linear over the whole vocabulary out of it) and as two Embeddings\n"
                   "(a lookup in, Embedding::dot out): the same loss and gradients, the bytes and time of each.");
  std::vector<std::size_t> sizes;
  std::stringstream list(flag["--sizes"]);
  for (std::string v; std::getline(list, v, ',');) sizes.push_back(std::stoul(v));
  const std::size_t pairs = flag.number("--pairs"), dim = flag.number("--dim"), negative = flag.number("--negative"),
                    repeats = std::max(1, flag.number("--repeats"));
  const float lr = 0.025f;
  std::printf("one skip-gram step: %zu (word, context) pairs, %zu negatives each, dim %zu, SGD lr %g; "
              "CPU ms/step: the fastest of %zu\n\n",
              pairs, negative, dim, lr, repeats);
  std::printf("%9s  %-36s %10s %16s %12s\n", "V", "path", "loss", "gradient bytes", "CPU ms/step");

  std::vector<float> sign(1 + negative, 1.0f);
  sign[0] = -1.0f;  // softplus(-s) = -log sigmoid(s) for the true context
  const tg::Tensor signs = tg::tensor(sign, {sign.size()});
  for (std::size_t V : sizes) {
    tg::Generator gen(1);
    std::vector<int64_t> centers, ids;
    for (std::size_t p = 0; p < pairs; ++p) {
      centers.push_back(static_cast<int64_t>(gen() % V));
      for (std::size_t k = 0; k <= negative; ++k) ids.push_back(static_cast<int64_t>(gen() % V));
    }
    const tg::Indices center = tg::indices(centers), targets = tg::indices(ids, {pairs, 1 + negative});
    const tg::Tensor one_hot = tg::one_hot(center, V);  // [pairs, V]

    // The same numbers in both: the Embeddings' tables, and the Linears' weights.
    tg::nn::Embedding in_emb(V, dim, {}, gen), out_emb(V, dim, {}, gen);
    tg::nn::Linear in_fc(V, dim, /*bias=*/false, gen), out_fc(dim, V, /*bias=*/false, gen);
    {
      tg::NoGradGuard no_grad;
      in_fc.weight.copy_(xt::transpose(in_emb.weight.value()));  // [dim, V]
      out_fc.weight.copy_(out_emb.weight.value());               // [V, dim]: one row per output word
    }
    tg::optim::SGD dense({in_fc.weight, out_fc.weight}, {.lr = lr});
    tg::optim::SGD sparse({in_emb.weight, out_emb.weight}, {.lr = lr});

    const auto linear_step = [&] {
      tg::Tensor hidden = in_fc(one_hot);                              // [pairs, V] x [V, dim]: one row each
      tg::Tensor scores = tg::gather(out_fc(hidden), 1, targets);      // [pairs, V] -> the 1 + K picked
      tg::Tensor loss = tg::sum(tg::softplus(scores * signs));
      dense.zero_grad();
      loss.backward();
      return loss;
    };
    const auto embedding_step = [&] {
      tg::Tensor hidden = in_emb(center);                              // the center words' rows
      tg::Tensor scores = out_emb.dot(hidden, targets);                // 1 + K rows each
      tg::Tensor loss = tg::sum(tg::softplus(scores * signs));
      sparse.zero_grad();
      loss.backward();
      return loss;
    };

    // First step: the same loss and the same gradients.
    const float linear_loss = linear_step().item(), embedding_loss = embedding_step().item();
    const bool same_grads =
        xt::allclose(xt::transpose(in_fc.weight.grad_dense()), in_emb.weight.grad_dense(), 1e-4, 1e-5) &&
        xt::allclose(out_fc.weight.grad_dense(), out_emb.weight.grad_dense(), 1e-4, 1e-5);
    const std::size_t linear_bytes = grad_bytes(in_fc.weight) + grad_bytes(out_fc.weight);
    const std::size_t embedding_bytes = grad_bytes(in_emb.weight) + grad_bytes(out_emb.weight);

    double linear_ms = 1e300, embedding_ms = 1e300;
    for (std::size_t r = 0; r < repeats; ++r) {  // alternating, so both see the same machine
      double t = cpu_ms();
      linear_step();
      dense.step();
      linear_ms = std::min(linear_ms, cpu_ms() - t);
      t = cpu_ms();
      embedding_step();
      sparse.step();
      embedding_ms = std::min(embedding_ms, cpu_ms() - t);
    }
    std::printf("%9zu  %-36s %10.4f %16zu %12.3f\n", V, "one-hot Linear in, Linear out (dense)", linear_loss,
                linear_bytes, linear_ms);
    std::printf("%9zu  %-36s %10.4f %16zu %12.3f\n", V, "Embedding in, Embedding::dot out", embedding_loss,
                embedding_bytes, embedding_ms);
    std::printf("%9s  same loss and gradients: %s; gradient bytes %.0fx, time %.0fx\n", "",
                same_grads && std::abs(linear_loss - embedding_loss) <= 1e-4f * std::abs(linear_loss) ? "yes" : "NO",
                double(linear_bytes) / double(embedding_bytes), linear_ms / embedding_ms);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "skipgram_step: %s\n", e.what());
  return 1;
}
