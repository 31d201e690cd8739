// A small training run that saves a checkpoint and can start from one, for
// tests/test_checkpoint.cpp: it runs this program several times, in separate
// processes, and compares the checkpoints bit for bit.
//
//   resume_train MODEL EPOCHS OUT [--load CKPT] [--skip PART]
//
// MODEL: dense       MLP (Linear, tanh, Linear), Adam, CosineAnnealingLR
//        sparse      EmbeddingBag (lazy sparse Adam, two param groups), StepLR
//        sparse_sgd  the same model, SGD with momentum and weight decay, LinearLR warm-up
// Trains EPOCHS epochs (after the one the checkpoint stopped at, with --load),
// shuffling with a generator that the checkpoint saves, and writes OUT.
// --skip optimizer|scheduler|generator loads everything but that part: a
// resumed run that should then differ.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

namespace {

using tg::Indices;
using tg::Tensor;

struct Mlp : tg::nn::Module {
  std::shared_ptr<tg::nn::Linear> fc1, fc2;
  explicit Mlp(tg::Generator& gen) {
    fc1 = register_module("fc1", std::make_shared<tg::nn::Linear>(6, 16, true, gen));
    fc2 = register_module("fc2", std::make_shared<tg::nn::Linear>(16, 3, true, gen));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(tg::tanh(fc1->forward(x))); }
};

struct Bow : tg::nn::Module {
  std::shared_ptr<tg::nn::EmbeddingBag> bag;
  std::shared_ptr<tg::nn::Linear> head;
  explicit Bow(tg::Generator& gen) {
    bag = register_module(
        "bag", std::make_shared<tg::nn::EmbeddingBag>(
                   50, 8, tg::nn::EmbeddingBagOptions{.mode = tg::nn::EmbeddingBagMode::sum}, gen));
    head = register_module("head", std::make_shared<tg::nn::Linear>(8, 2, true, gen));
  }
  Tensor forward(const tg::CsrBatch& docs) { return head->forward(tg::tanh(bag->forward(docs))); }
};

int run(int argc, char** argv) {
  if (argc < 4)
    throw std::invalid_argument("usage: resume_train MODEL EPOCHS OUT [--load CKPT] [--skip PART]");
  const std::string kind = argv[1], out = argv[3];
  const int epochs = std::stoi(argv[2]);
  std::string load, skip;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--load")
      load = argv[i + 1];
    else if (flag == "--skip")
      skip = argv[i + 1];
    else
      throw std::invalid_argument("unknown flag " + flag);
  }

  // The data and the initial weights come from their own seeds: the same in every process.
  tg::Generator data_gen(1), init_gen(2);
  const std::size_t n = 100;
  Tensor features = tg::randn({n, 6}, data_gen);
  Indices labels = xt::zeros<int64_t>({n});
  std::vector<std::vector<int64_t>> docs(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float* x = features.value().data() + i * 6;
    labels(i) = x[0] + x[1] > 0.5f ? 2 : x[2] > 0 ? 1 : 0;
    for (std::size_t k = 0, len = 2 + data_gen() % 5; k < len; ++k)
      docs[i].push_back(static_cast<int64_t>(data_gen() % 50));
  }
  Indices parity = xt::zeros<int64_t>({n});
  for (std::size_t i = 0; i < n; ++i) parity(i) = docs[i][0] % 2;

  Mlp mlp(init_gen);
  Bow bow(init_gen);
  tg::nn::Module& model = kind == "dense" ? static_cast<tg::nn::Module&>(mlp) : bow;
  std::unique_ptr<tg::optim::Optimizer> opt;
  std::unique_ptr<tg::optim::LRScheduler> sched;
  if (kind == "dense") {
    opt = std::make_unique<tg::optim::Adam>(mlp.parameters(), tg::optim::AdamOptions{.lr = 0.02});
    sched =
        std::make_unique<tg::optim::CosineAnnealingLR>(*opt, tg::optim::CosineAnnealingLROptions{.T_max = 3});
  } else if (kind == "sparse") {
    opt = std::make_unique<tg::optim::Adam>(
        std::vector<tg::optim::ParamGroup>{{.params = bow.bag->parameters(), .lr = 0.05},
                                           {.params = bow.head->parameters()}},
        tg::optim::AdamOptions{.lr = 0.01});
    sched = std::make_unique<tg::optim::StepLR>(*opt, tg::optim::StepLROptions{.step_size = 2, .gamma = 0.5});
  } else if (kind == "sparse_sgd") {
    opt = std::make_unique<tg::optim::SGD>(
        bow.parameters(), tg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
    sched = std::make_unique<tg::optim::LinearLR>(
        *opt, tg::optim::LinearLROptions{.start_factor = 0.25, .total_iters = 3});
  } else {
    throw std::invalid_argument("unknown model " + kind);
  }

  tg::Generator gen(7);  // every random draw of the training loop: here, the shuffling
  tg::Checkpoint ckpt{.model = &model, .optimizer = opt.get(), .scheduler = sched.get(), .generator = &gen};
  int first_epoch = 1;
  if (!load.empty()) {
    tg::Checkpoint parts = ckpt;
    if (skip == "optimizer") parts.optimizer = nullptr;
    if (skip == "scheduler") parts.scheduler = nullptr;
    if (skip == "generator") parts.generator = nullptr;
    tg::load_checkpoint(load, parts);
    first_epoch = std::stoi(parts.metadata.at("epoch")) + 1;
  }

  tg::data::BatchSampler batches(
      n, {.batch_size = kind == "dense" ? 16u : 12u, .shuffle = true, .drop_last = kind != "dense"}, gen);
  for (int epoch = first_epoch; epoch < first_epoch + epochs; ++epoch) {
    for (const Indices& idx : batches) {
      Tensor loss;
      if (kind == "dense") {
        loss =
            tg::cross_entropy(mlp.forward(tg::index_select(features, 0, idx)), tg::data::take(labels, idx));
      } else {
        const std::vector<int64_t> rows(idx.begin(), idx.end());
        loss = tg::cross_entropy(bow.forward(tg::data::to_csr(tg::data::take(docs, rows), 50)),
                                 tg::data::take(parity, idx));
      }
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
    sched->step();
    ckpt.metadata["epoch"] = std::to_string(epoch);
  }
  tg::save_checkpoint(out, ckpt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume_train: %s\n", e.what());
    return 2;
  }
}
