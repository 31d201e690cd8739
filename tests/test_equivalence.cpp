// The project's central claim, end to end: a bag-of-words model built as
// EmbeddingBag (sparse rows) and the same model built as Linear over count rows
// (dense) train to the same numbers with SGD, step after step.
#include <doctest/doctest.h>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using tg::Array;
using tg::Tensor;

namespace {

constexpr std::size_t V = 40, D = 8, C = 3, B = 4;

struct Batch {
  tg::CsrBatch csr;  // counts, for the EmbeddingBag
  Array dense;             // the same counts as [B, V] rows, for the Linear
  tg::Indices y;
};

// B random documents of 1-12 tokens (repeats included), as CSR and dense counts.
Batch make_batch(tg::Generator& gen) {
  Batch b;
  b.dense = xt::zeros<float>({B, V});
  b.y = xt::zeros<int64_t>({B});
  b.csr.indptr = {0};
  for (std::size_t i = 0; i < B; ++i) {
    const std::size_t len = 1 + gen() % 12;
    for (std::size_t k = 0; k < len; ++k) b.dense(i, gen() % V) += 1.0f;
    for (std::size_t v = 0; v < V; ++v)
      if (b.dense(i, v) != 0.0f) {
        b.csr.indices.push_back(static_cast<int64_t>(v));
        b.csr.values.push_back(b.dense(i, v));
      }
    b.csr.indptr.push_back(static_cast<int64_t>(b.csr.indices.size()));
    b.y(i) = static_cast<int64_t>(gen() % C);
  }
  return b;
}

}  // namespace

TEST_SUITE("equivalence") {
  TEST_CASE("50 SGD steps of a bag-of-words model built both ways stay within 1e-5") {
    tg::Generator gen(11);
    tg::nn::EmbeddingBagOptions opt;
    opt.mode = tg::nn::EmbeddingBagMode::sum;
    tg::nn::EmbeddingBag bag(V, D, opt, gen);
    tg::nn::Linear head_a(D, C, true, gen);
    tg::nn::Linear proj(V, D, false, gen), head_b(D, C, true, gen);
    {
      tg::NoGradGuard no_grad;  // same starting point: proj.weight = bag.weight^T
      proj.weight.copy_(xt::transpose(bag.weight.value()));
      head_b.weight.copy_(head_a.weight.value());
      head_b.bias->copy_(head_a.bias->value());
    }
    std::vector<Tensor> pa = bag.parameters(), pb = proj.parameters();
    for (const Tensor& p : head_a.parameters()) pa.push_back(p);
    for (const Tensor& p : head_b.parameters()) pb.push_back(p);
    tg::optim::SGD sgd_a(pa, {.lr = 0.5}), sgd_b(pb, {.lr = 0.5});

    double max_loss_diff = 0, first_loss = 0, last_loss = 0;
    std::size_t sparse_rows_seen = 0;
    Batch fixed = make_batch(gen);  // one batch seen every 5 steps: its loss must fall
    for (int step = 0; step < 50; ++step) {
      Batch b = step % 5 == 0 ? fixed : make_batch(gen);
      Tensor la = tg::cross_entropy(head_a(tg::tanh(bag(b.csr))), b.y);
      Tensor lb = tg::cross_entropy(head_b(tg::tanh(proj(Tensor(b.dense)))), b.y);
      sgd_a.zero_grad();
      sgd_b.zero_grad();
      la.backward();
      lb.backward();
      REQUIRE(bag.weight.grad().is_sparse());
      REQUIRE(proj.weight.grad().is_dense());
      sparse_rows_seen += bag.weight.grad().sparse().nnz_rows();
      // Same gradient, one as rows, one as a dense [D, V] block.
      CHECK_ALLCLOSE(Array(xt::transpose(bag.weight.grad_dense())), proj.weight.grad().dense(), 1e-5, 1e-6);
      sgd_a.step();
      sgd_b.step();
      max_loss_diff = std::max(max_loss_diff, static_cast<double>(std::abs(la.item() - lb.item())));
      if (step == 0) first_loss = la.item();
      if (step == 45) last_loss = la.item();
    }
    CHECK(max_loss_diff < 1e-5);
    CHECK_ALLCLOSE(Array(xt::transpose(bag.weight.value())), proj.weight.value(), 1e-5, 1e-6);
    CHECK_ALLCLOSE(head_a.weight.value(), head_b.weight.value(), 1e-5, 1e-6);
    CHECK(last_loss < first_loss);     // it learned the repeated batch
    CHECK(sparse_rows_seen < 50 * V);  // and the sparse side never carried all V rows
  }
}
