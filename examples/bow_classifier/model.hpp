// The bag-of-words classifier, built two ways that compute the same function.
//
//   EmbeddingModel: token ids with counts (CSR) -> EmbeddingBag(V, D, sum) -> tanh -> Linear(D, C)
//   LinearModel:    count rows [B, V], densified  -> Linear(V, D, no bias)  -> tanh -> Linear(D, C)
//
// For a document with counts c_v, both first layers give sum_v c_v * W[v, :]:
// EmbeddingBag looks the rows up and adds them (work ~ tokens in the batch), the
// Linear multiplies the whole [B, V] row block by the [V, D] matrix (work ~ B*V*D,
// nearly all of it multiplications by zero). Linear stores the matrix transposed:
// LinearModel::proj.weight is [D, V] = EmbeddingModel::bag.weight^T.
#pragma once

#include <cmath>
#include <functional>
#include <memory>

#include <tapegrad/tapegrad.hpp>

namespace bow {

struct EmbeddingModel : tg::nn::Module {
  std::shared_ptr<tg::nn::EmbeddingBag> bag;
  std::shared_ptr<tg::nn::Linear> head;

  // Initialised like a Linear(V, D) would be, U(-1/sqrt(V), 1/sqrt(V)), rather
  // than Embedding's N(0, 1): a sum over hundreds of tokens of N(0, 1) rows
  // would saturate tanh from the first step.
  EmbeddingModel(std::size_t vocab, std::size_t dim, std::size_t classes, tg::Generator& gen) {
    tg::nn::EmbeddingBagOptions opt;
    opt.mode = tg::nn::EmbeddingBagMode::sum;
    opt.sparse = true;
    bag = register_module("bag", std::make_shared<tg::nn::EmbeddingBag>(vocab, dim, opt, gen));
    const float bound = 1.0f / std::sqrt(static_cast<float>(vocab));
    tg::nn::init::uniform_(bag->weight, -bound, bound, gen);
    head = register_module("head", std::make_shared<tg::nn::Linear>(dim, classes, true, gen));
  }

  // Set when `bag` holds one rank's rows of a table split across processes
  // (bow_classifier --shard-table): adds the ranks' partial bag sums.
  std::function<tg::Tensor(const tg::Tensor&)> sum_parts;

  tg::Tensor forward(const tg::CsrBatch& batch) {
    tg::Tensor bags = bag->forward(batch);
    return head->forward(tg::tanh(sum_parts ? sum_parts(bags) : bags));
  }
};

struct LinearModel : tg::nn::Module {
  std::shared_ptr<tg::nn::Linear> proj;
  std::shared_ptr<tg::nn::Linear> head;

  // Starts from exactly the weights of `from`: proj.weight = bag.weight^T.
  explicit LinearModel(const EmbeddingModel& from) {
    const std::size_t vocab = from.bag->num_embeddings(), dim = from.bag->embedding_dim();
    const std::size_t classes = from.head->out_features();
    proj = register_module("proj", std::make_shared<tg::nn::Linear>(vocab, dim, false));
    head = register_module("head", std::make_shared<tg::nn::Linear>(dim, classes, true));
    tg::NoGradGuard no_grad;
    proj->weight.copy_(xt::transpose(from.bag->weight.value()));  // [V, D] -> [D, V]
    head->weight.copy_(from.head->weight.value());
    head->bias->copy_(from.head->bias->value());
  }

  tg::Tensor forward(const tg::Tensor& counts) { return head->forward(tg::tanh(proj->forward(counts))); }
};

}  // namespace bow
