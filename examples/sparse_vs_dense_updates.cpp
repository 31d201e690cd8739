// Which rows of an embedding does an optimizer step move? Three steps, each on
// a different batch of ids, with four optimizers, each fed a sparse gradient
// (Embedding sparse = true) and a dense one (sparse = false).
//
// A row outside the batch gets gradient 0. Plain SGD moves a row by lr * g, so
// such a row stays put. Anything else an optimizer adds to g moves it anyway
// when the gradient is dense, because a dense gradient lists every row: weight
// decay adds weight_decay * p to every row, momentum adds the row's running
// buffer, Adam steps by the row's running mean m. A sparse gradient lists only
// the rows in the batch, and the lazy updates (optim/sgd.hpp, optim/adam.hpp)
// leave every other row, and its state, alone.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

namespace {

std::string set_str(const std::vector<int64_t>& rows) {  // "{0, 1, 2}"
  std::string s = "{";
  for (std::size_t i = 0; i < rows.size(); ++i) s += (i ? ", " : "") + std::to_string(rows[i]);
  return s + "}";
}

const double lr = 0.1, momentum = 0.9, weight_decay = 0.1;

std::unique_ptr<tg::optim::Optimizer> make_optimizer(const std::string& name,
                                                     std::vector<tg::Tensor> params) {
  using namespace tg::optim;
  if (name == "sgd") return std::make_unique<SGD>(params, SGDOptions{.lr = lr});
  if (name == "sgd+momentum")
    return std::make_unique<SGD>(params, SGDOptions{.lr = lr, .momentum = momentum});
  if (name == "sgd+decay")
    return std::make_unique<SGD>(params, SGDOptions{.lr = lr, .weight_decay = weight_decay});
  return std::make_unique<Adam>(params, AdamOptions{.lr = lr});  // betas (0.9, 0.999), eps 1e-8
}

}  // namespace

int main(int argc, char** argv) {
  no_flags(argc, argv,
           "Which rows move: SGD, momentum, weight decay and Adam stepping an embedding with a sparse and a "
           "dense gradient.");
  const std::size_t vocab = 8, dim = 4;
  const std::vector<std::vector<int64_t>> batches = {{0, 1, 2}, {2, 5}, {3}};  // step 1, 2, 3
  const std::vector<std::string> optimizers = {"sgd", "sgd+momentum", "sgd+decay", "adam"};

  tg::Generator gen0(0);
  const float w00 = tg::nn::Embedding(vocab, dim, {}, gen0).weight.value()(0, 0);
  std::printf("embedding %zu x %zu, the same starting table for every run (w[0,0] = %.4f)\n", vocab, dim,
              w00);
  std::printf("loss sum(embedding(batch)): each looked-up row gets gradient 1 in every column, others 0\n");
  std::printf("  sgd           SGD(lr %g)\n", lr);
  std::printf("  sgd+momentum  SGD(lr %g, momentum %g)\n", lr, momentum);
  std::printf("  sgd+decay     SGD(lr %g, weight_decay %g)\n", lr, weight_decay);
  std::printf("  adam          Adam(lr %g), betas (0.9, 0.999)\n\n", lr);
  std::printf("%-12s %-8s %-4s %-10s %-25s %12s  %10s  %11s\n", "optimizer", "gradient", "step", "batch",
              "rows that moved", "w[0,0] moved", "grad bytes", "state bytes");

  for (const std::string& name : optimizers) {
    for (const bool sparse : {true, false}) {
      tg::Generator gen(0);
      tg::nn::Embedding emb(vocab, dim, {.sparse = sparse}, gen);
      std::unique_ptr<tg::optim::Optimizer> optimizer = make_optimizer(name, emb.parameters());

      for (std::size_t step = 0; step < batches.size(); ++step) {
        const std::vector<int64_t>& batch = batches[step];
        const tg::Array before = emb.weight.value();  // a copy, to compare with after the step

        optimizer->zero_grad();
        tg::sum(emb(tg::Indices(xt::adapt(batch)))).backward();
        const std::size_t grad_bytes = emb.weight.grad().nbytes();
        optimizer->step();

        // A row moved if any of its entries differs from before the step.
        std::vector<int64_t> moved;
        for (std::size_t r = 0; r < vocab; ++r)
          for (std::size_t c = 0; c < dim; ++c)
            if (emb.weight.value()(r, c) != before(r, c)) {
              moved.push_back(static_cast<int64_t>(r));
              break;
            }
        // Row 0 is only in the first batch: does it move at steps 2 and 3?
        const float w00_moved = emb.weight.value()(0, 0) - before(0, 0);
        std::printf("%-12s %-8s %-4zu %-10s %-25s %+12.4f  %10zu  %11zu\n", name.c_str(),
                    sparse ? "sparse" : "dense", step + 1, set_str(batch).c_str(), set_str(moved).c_str(),
                    w00_moved, grad_bytes, optimizer->state_bytes());
      }
      std::printf("\n");
    }
  }

  // The gradient's size at a realistic scale: a dense one is the whole table every step.
  const std::size_t big_vocab = 50000, big_dim = 64, batch_rows = 32;
  std::printf("at %zu x %zu with %zu distinct ids per batch: dense gradient %zu bytes, sparse %zu bytes\n",
              big_vocab, big_dim, batch_rows, big_vocab * big_dim * sizeof(float),
              batch_rows * (sizeof(int64_t) + big_dim * sizeof(float)));
  return 0;
}
