// step_tapegrad: the bag-of-words training step of examples/bow_classifier in
// tapegrad, timed (see harness.hpp for the protocol and the options).
//
//   embedding: ids -> CSR rows (indptr, indices) -> EmbeddingBag(V, D, sum, sparse) -> tanh -> Linear(D, C)
//   linear:    ids -> dense 0/1 rows [B, V] -> Linear(V, D, no bias) -> tanh -> Linear(D, C)
//
// The ids file holds each document's distinct ids, sorted, so the batch is
// built as in the other two runners: copied, never sorted or deduplicated
// (data::to_csr would do both, for documents straight from the tokenizer).
//
// Loss: cross_entropy; optimizer: SGD, or one Adam for every parameter (lazy on
// the embedding's SparseRows gradient).
#include <cstdio>
#include <memory>

#include <tapegrad/tapegrad.hpp>

#include "harness.hpp"

namespace {

// Batch b's documents as CSR rows: row i holds document b * batch + i's ids.
// Values are left empty; the linear path fills them with 1 for data::to_dense.
tg::CsrBatch batch_rows(const bench::Corpus& c, int64_t b, int64_t batch) {
  const int64_t first = c.offsets[b * batch], last = c.offsets[(b + 1) * batch];
  tg::CsrBatch rows;
  rows.num_cols = c.vocab;
  rows.indptr.clear();
  for (int64_t i = 0; i <= batch; ++i) rows.indptr.push_back(c.offsets[b * batch + i] - first);
  rows.indices.assign(c.ids.begin() + first, c.ids.begin() + last);
  return rows;
}

tg::Indices batch_labels(const bench::Corpus& c, int64_t b, int64_t batch) {
  tg::Indices y = xt::empty<int64_t>({static_cast<std::size_t>(batch)});
  for (int64_t i = 0; i < batch; ++i) y(i) = c.labels[static_cast<std::size_t>(b * batch + i)];
  return y;
}

std::unique_ptr<tg::optim::Optimizer> make_optimizer(const bench::Args& a, std::vector<tg::Tensor> params) {
  if (a.optim == "sgd") {
    tg::optim::SGDOptions o;
    o.lr = a.lr;
    return std::make_unique<tg::optim::SGD>(std::move(params), o);
  }
  tg::optim::AdamOptions o;
  o.lr = a.lr;
  return std::make_unique<tg::optim::Adam>(std::move(params), o);
}

int run(const bench::Args& a) {
  tg::set_num_threads(static_cast<std::size_t>(a.threads));
  const long rss_start = bench::status_kb("VmRSS");
  const bench::Corpus corpus = bench::read_corpus(a.ids);
  const std::size_t vocab = static_cast<std::size_t>(corpus.vocab), dim = static_cast<std::size_t>(a.dim);
  const std::size_t classes = static_cast<std::size_t>(corpus.classes);
  const int64_t batches = corpus.batches(a.batch);
  if (batches < 1) throw std::invalid_argument(a.ids + ": fewer documents than one batch");

  tg::Generator gen(0);
  const bool embedding = a.model == "embedding";
  std::unique_ptr<tg::nn::EmbeddingBag> bag;
  std::unique_ptr<tg::nn::Linear> proj;
  if (embedding) {
    tg::nn::EmbeddingBagOptions o;
    o.mode = tg::nn::EmbeddingBagMode::sum;
    o.sparse = true;
    bag = std::make_unique<tg::nn::EmbeddingBag>(vocab, dim, o, gen);
    bench::fill_table(bag->weight.value_mut().data(), corpus.vocab, a.dim);
  } else {
    proj = std::make_unique<tg::nn::Linear>(vocab, dim, false, gen);
    bench::fill_projection(proj->weight.value_mut().data(), corpus.vocab, a.dim);
  }
  tg::nn::Linear head(dim, classes, true, gen);
  bench::fill_head(head.weight.value_mut().data(), head.bias->value_mut().data(), corpus.classes, a.dim);

  std::vector<tg::Tensor> params = embedding ? bag->parameters() : proj->parameters();
  for (const tg::Tensor& p : head.parameters()) params.push_back(p);
  std::size_t param_bytes = 0;
  for (const tg::Tensor& p : params) param_bytes += p.numel() * sizeof(float);
  auto opt = make_optimizer(a, params);
  const long rss_model = bench::status_kb("VmRSS");

  auto step = [&](int64_t s, bench::Phases& ph) -> double {
    bench::PhaseClock clock;
    const int64_t b = s % batches;
    const tg::Indices y = batch_labels(corpus, b, a.batch);
    tg::CsrBatch rows = batch_rows(corpus, b, a.batch);
    tg::Tensor hidden;
    if (embedding) {
      // Every entry counts 1 (multi-hot): plain bags, no per-sample weights (values empty).
      clock.lap(ph.batch);
      hidden = bag->forward(rows);
    } else {
      rows.values.assign(rows.indices.size(), 1.0f);
      const tg::Tensor dense(tg::data::to_dense(rows));  // [B, V]
      clock.lap(ph.batch);
      hidden = proj->forward(dense);
    }
    tg::Tensor loss = tg::cross_entropy(head.forward(tg::tanh(hidden)), y);
    clock.lap(ph.forward);
    opt->zero_grad();
    loss.backward();
    clock.lap(ph.backward);
    opt->step();
    clock.lap(ph.step);
    return loss.item();
  };
  const bench::Measured m = bench::measure(a, step);
  bench::print_result("tapegrad", TAPEGRAD_VERSION, a, corpus, m, param_bytes, opt->state_bytes(), rss_start,
                      rss_model);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::main("step_tapegrad", argc, argv, run);
}
