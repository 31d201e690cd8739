// step_libtorch: the same training step as step_tapegrad, in libtorch (PyTorch's
// C++ API), timed the same way (see harness.hpp).
//
//   embedding: ids -> (ids, offsets) -> EmbeddingBag(V, D, sum) -> tanh -> Linear(D, C)
//   linear:    ids -> dense 0/1 rows [B, V] -> Linear(V, D, no bias) -> tanh -> Linear(D, C)
//
// libtorch has no SparseAdam, so embedding + Adam uses a dense [V, D] gradient
// (EmbeddingBag sparse = false) and dense Adam; embedding + SGD uses the sparse
// gradient (torch::optim::SGD adds it into the weight). Gradients are cleared
// with optimizer.zero_grad(), the call a libtorch program makes: in libtorch
// 1.13 it zeroes each gradient in place (there is no set_to_none yet), where
// tapegrad's zero_grad() empties the slots. With --zero-grad none they are reset
// to undefined instead (set_to_none), for comparison.
#include <torch/torch.h>

#include <cstdio>

#include "harness.hpp"

namespace {

std::size_t tensor_bytes(const torch::Tensor& t) {
  return t.defined() ? t.numel() * t.element_size() : 0;
}

std::size_t state_bytes(torch::optim::Optimizer& opt) {
  std::size_t n = 0;
  for (auto& [key, state] : opt.state()) {
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get()))
      n += tensor_bytes(adam->exp_avg()) + tensor_bytes(adam->exp_avg_sq()) +
           tensor_bytes(adam->max_exp_avg_sq());
    else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get()))
      n += tensor_bytes(sgd->momentum_buffer());
  }
  return n;
}

int run(const bench::Args& a) {
  at::set_num_threads(static_cast<int>(a.threads));
  at::set_num_interop_threads(1);
  const long rss_start = bench::status_kb("VmRSS");
  const bench::Corpus corpus = bench::read_corpus(a.ids);
  const int64_t vocab = corpus.vocab, dim = a.dim, classes = corpus.classes, batch = a.batch;
  const int64_t batches = corpus.batches(batch);
  if (batches < 1) throw std::invalid_argument(a.ids + ": fewer documents than one batch");

  const bool embedding = a.model == "embedding";
  torch::nn::EmbeddingBag bag{nullptr};
  torch::nn::Linear proj{nullptr};
  std::vector<torch::Tensor> params;
  {
    torch::NoGradGuard no_grad;
    if (embedding) {
      bag = torch::nn::EmbeddingBag(
          torch::nn::EmbeddingBagOptions(vocab, dim).mode(torch::kSum).sparse(a.optim == "sgd"));
      bench::fill_table(bag->weight.data_ptr<float>(), vocab, dim);
      params.push_back(bag->weight);
    } else {
      proj = torch::nn::Linear(torch::nn::LinearOptions(vocab, dim).bias(false));
      bench::fill_projection(proj->weight.data_ptr<float>(), vocab, dim);
      params.push_back(proj->weight);
    }
  }
  torch::nn::Linear head(dim, classes);
  {
    torch::NoGradGuard no_grad;
    bench::fill_head(head->weight.data_ptr<float>(), head->bias.data_ptr<float>(), classes, dim);
  }
  params.push_back(head->weight);
  params.push_back(head->bias);
  std::size_t param_bytes = 0;
  for (const torch::Tensor& p : params) param_bytes += tensor_bytes(p);

  std::unique_ptr<torch::optim::Optimizer> opt;
  if (a.optim == "sgd")
    opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(a.lr));
  else
    opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(a.lr));
  const long rss_model = bench::status_kb("VmRSS");

  auto step = [&](int64_t s, bench::Phases& ph) -> double {
    bench::PhaseClock clock;
    const int64_t b = s % batches;
    const int64_t first = corpus.offsets[b * batch], last = corpus.offsets[(b + 1) * batch];
    auto* labels = const_cast<int32_t*>(corpus.labels.data() + b * batch);
    const torch::Tensor y = torch::from_blob(labels, {batch}, torch::kInt).to(torch::kLong);
    torch::Tensor hidden;
    if (embedding) {
      auto* ids = const_cast<int32_t*>(corpus.ids.data() + first);
      const torch::Tensor input = torch::from_blob(ids, {last - first}, torch::kInt).to(torch::kLong);
      auto* starts = const_cast<int64_t*>(corpus.offsets.data() + b * batch);
      const torch::Tensor offsets = torch::from_blob(starts, {batch}, torch::kLong) - first;
      clock.lap(ph.batch);
      hidden = bag->forward(input, offsets);
    } else {
      torch::Tensor rows = torch::zeros({batch, vocab});  // [B, V]
      float* out = rows.data_ptr<float>();
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t k = corpus.offsets[b * batch + i]; k < corpus.offsets[b * batch + i + 1]; ++k)
          out[i * vocab + corpus.ids[static_cast<std::size_t>(k)]] = 1.0f;
      clock.lap(ph.batch);
      hidden = proj->forward(rows);
    }
    const torch::Tensor loss = torch::nn::functional::cross_entropy(head->forward(torch::tanh(hidden)), y);
    clock.lap(ph.forward);
    if (a.zero_grad == "none")
      for (torch::Tensor& p : params) p.mutable_grad().reset();
    else
      opt->zero_grad();
    loss.backward();
    clock.lap(ph.backward);
    opt->step();
    clock.lap(ph.step);
    return loss.item<double>();
  };
  const bench::Measured m = bench::measure(a, step);
  bench::print_result("libtorch", TORCH_VERSION, a, corpus, m, param_bytes, state_bytes(*opt), rss_start,
                      rss_model);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::main("step_libtorch", argc, argv, run);
}
