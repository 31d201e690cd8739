// longrun: does a long training run hold steady? Trains the bag-of-words spam
// classifier both ways (EmbeddingBag over token ids, and Linear over multi-hot
// rows) on the bundled SpamAssassin sample for many steps, evaluating on the
// test split every few steps WITHOUT NoGradGuard (each evaluation graph is
// recorded and must free itself when its result is dropped), and measures
// resident memory.
//
//   longrun [--steps N] [--eval-every N] [--batch N] [--dim N] [--max-growth PCT] [--data FILE]
//
// Prints the resident set size at step 100 and at the end and the growth in
// between; exits 1 when it grew by more than --max-growth percent (default 5),
// 2 when the tape holds entries after a step. scripts/longrun builds and runs it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include <tapegrad/tapegrad.hpp>

namespace {

using tg::Tensor;
using Docs = std::vector<std::vector<int64_t>>;

struct Options {
  std::size_t steps = 10000, eval_every = 50, batch = 32, dim = 64;
  double max_growth = 5.0;
  std::string data = std::string(TAPEGRAD_SOURCE_DIR) + "/examples/data/spam_sample.tsv";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--steps")
      o.steps = std::stoul(v);
    else if (a == "--eval-every")
      o.eval_every = std::max<std::size_t>(1, std::stoul(v));
    else if (a == "--batch")
      o.batch = std::max<std::size_t>(1, std::stoul(v));
    else if (a == "--dim")
      o.dim = std::max<std::size_t>(1, std::stoul(v));
    else if (a == "--max-growth")
      o.max_growth = std::stod(v);
    else if (a == "--data")
      o.data = v;
    else
      throw std::invalid_argument("unknown option " + a);
  }
  return o;
}

// Current (not peak) resident set size in KiB.
std::size_t rss_kib() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) / 1024;
}

// Bag of words -> [B, dim] -> tanh -> Linear(dim, 2), as examples/bow_classifier,
// either as an EmbeddingBag over CSR rows or a bias-free Linear over dense rows.
struct Model : tg::nn::Module {
  std::shared_ptr<tg::nn::EmbeddingBag> bag;
  std::shared_ptr<tg::nn::Linear> proj, head;
  Model(bool embedding, std::size_t vocab, std::size_t dim, tg::Generator& gen) {
    if (embedding)
      bag = register_module(
          "bag", std::make_shared<tg::nn::EmbeddingBag>(
                     vocab, dim, tg::nn::EmbeddingBagOptions{.mode = tg::nn::EmbeddingBagMode::sum}, gen));
    else
      proj = register_module("proj", std::make_shared<tg::nn::Linear>(vocab, dim, false, gen));
    head = register_module("head", std::make_shared<tg::nn::Linear>(dim, 2, true, gen));
    if (bag) {  // a Linear's init: N(0, 1) rows summed over a whole email would saturate tanh
      const float bound = 1.0f / std::sqrt(static_cast<float>(vocab));
      tg::nn::init::uniform_(bag->weight, -bound, bound, gen);
    }
  }
  Tensor forward(const tg::CsrBatch& rows) {
    if (bag) return head->forward(tg::tanh(bag->forward(rows)));
    return head->forward(tg::tanh(proj->forward(Tensor(tg::data::to_dense(rows)))));
  }
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const tg::data::TsvData corpus = tg::data::read_tsv(o.data);
  const tg::data::Split split = tg::data::stratified_split(corpus.targets, 0.2, 0);
  const std::vector<std::vector<std::string>> tokens = tg::data::tokenize_all(corpus.texts);
  std::vector<std::vector<std::string>> train_tokens;  // the vocabulary sees the training split only
  for (int64_t i : split.train) train_tokens.push_back(tokens[i]);
  const tg::data::Vocabulary vocab = tg::data::Vocabulary::build(
      train_tokens, {.min_df = 2, .max_size = 0, .unknown = tg::data::UnknownPolicy::drop});
  const Docs docs = vocab.encode_all(tokens);
  const auto V = static_cast<std::size_t>(vocab.size());
  const auto rows = [&](const Docs& d) {
    return tg::data::to_csr(d, vocab.size(), tg::data::CsrValues::binary);
  };

  tg::Generator gen(0);
  std::vector<std::unique_ptr<Model>> models;
  models.push_back(std::make_unique<Model>(true, V, o.dim, gen));
  models.push_back(std::make_unique<Model>(false, V, o.dim, gen));
  std::vector<std::unique_ptr<tg::optim::Adam>> opts;
  for (auto& m : models)
    opts.push_back(std::make_unique<tg::optim::Adam>(m->parameters(), tg::optim::AdamOptions{.lr = 0.01}));

  std::printf(
      "longrun: %zu documents (%zu train, %zu test), vocabulary %zu, dim %zu, batch %zu, %zu steps, "
      "evaluation every %zu steps without NoGradGuard\n",
      corpus.texts.size(), split.train.size(), split.test.size(), V, o.dim, o.batch, o.steps, o.eval_every);
  std::printf("%7s %12s %12s %10s %10s %10s %8s\n", "step", "loss(bag)", "loss(linear)", "acc(bag)",
              "acc(linear)", "rss_kib", "slots");

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> order;
  std::size_t pos = 0, epoch = 0, rss_100 = 0, max_slots = 0;
  double last_loss[2] = {0, 0}, last_acc[2] = {0, 0};
  for (std::size_t step = 1; step <= o.steps; ++step) {
    if (pos + o.batch > order.size()) {  // next epoch: reshuffle the training ids
      order.clear();
      for (int64_t i : tg::data::shuffled_indices(static_cast<int64_t>(split.train.size()), ++epoch))
        order.push_back(split.train[i]);
      pos = 0;
    }
    const tg::CsrBatch batch = rows(tg::data::take(docs, order, pos, pos + o.batch));
    const tg::Indices y = xt::adapt(tg::data::take(corpus.targets, order, pos, pos + o.batch));
    pos += o.batch;

    for (std::size_t m = 0; m < models.size(); ++m) {
      Tensor loss = tg::cross_entropy(models[m]->forward(batch), y);
      opts[m]->zero_grad();
      loss.backward();
      opts[m]->step();
      last_loss[m] = loss.item();
    }
    if (step % o.eval_every == 0) {
      // Deliberately no NoGradGuard: every forward here is recorded on the tape.
      for (std::size_t m = 0; m < models.size(); ++m) {
        std::size_t correct = 0;
        for (std::size_t b = 0; b < split.test.size(); b += 100) {
          const std::size_t end = std::min(split.test.size(), b + 100);
          const tg::Indices ty = xt::adapt(tg::data::take(corpus.targets, split.test, b, end));
          Tensor logits = models[m]->forward(rows(tg::data::take(docs, split.test, b, end)));
          for (std::size_t i = 0; i < ty.size(); ++i)
            correct += (logits.value()(i, 1) > logits.value()(i, 0)) == (ty(i) == 1);
        }
        last_acc[m] = static_cast<double>(correct) / static_cast<double>(split.test.size());
      }
    }
    tg::Tape& tape = tg::Tape::current();
    max_slots = std::max(max_slots, tape.slots());  // before live_count(), which prunes
    if (tape.live_count() != 0) {
      std::printf("longrun: %zu entries left on the tape after step %zu\n", tape.live_count(), step);
      return 2;
    }
    if (step == 100) rss_100 = rss_kib();
    if (step == 1 || step == 100 || step % 1000 == 0 || step == o.steps)
      std::printf("%7zu %12.4f %12.4f %10.3f %10.3f %10zu %8zu\n", step, last_loss[0], last_loss[1],
                  last_acc[0], last_acc[1], rss_kib(), max_slots);
  }
  const std::size_t rss_end = rss_kib();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tape: 0 live entries after every step; at most %zu slots (expired entries not yet pruned)\n",
              max_slots);
  std::printf("time: %.1f s (%.2f ms per step, both models)\n", seconds,
              1000 * seconds / static_cast<double>(o.steps));
  if (o.steps < 100) {
    std::printf("RSS: %zu KiB (fewer than 100 steps: no growth measured)\n", rss_end);
    return 0;
  }
  const double growth =
      100.0 * (static_cast<double>(rss_end) - static_cast<double>(rss_100)) / static_cast<double>(rss_100);
  std::printf("RSS at step 100: %zu KiB; at step %zu: %zu KiB; growth %+.2f%% (limit %.1f%%)\n", rss_100,
              o.steps, rss_end, growth, o.max_growth);
  return growth > o.max_growth ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "longrun: %s\n", e.what());
  return 3;
}
