// word2vec on threads (run under ThreadSanitizer by ./scripts/test --threads):
// the batches are built on the thread pool and Embedding::dot splits its rows,
// yet a run gives the same vectors, bit for bit, on 1, 2 and 3 threads.
#include <doctest/doctest.h>

#include <cmath>

#include <tapegrad/tapegrad.hpp>

#include "../examples/word2vec.hpp"

namespace {

// 300 sentences of 12 words, drawn from 60 words, the low numbers more often.
std::vector<tg::data::Sentence> made_up_sentences() {
  std::vector<tg::data::Sentence> sentences;
  w2v::Rng rng{11};
  for (int s = 0; s < 300; ++s) {
    tg::data::Sentence sentence;
    for (int k = 0; k < 12; ++k) sentence.push_back("w" + std::to_string(rng.below(1 + rng.below(60))));
    sentences.push_back(sentence);
  }
  return sentences;
}

// A few steps of skip-gram (or CBOW, or subwords) on a made-up corpus; both tables after them.
std::vector<std::vector<float>> run(std::size_t threads, const w2v::Options& o) {
  tg::set_num_threads(threads);
  const std::vector<tg::data::Sentence> sentences = made_up_sentences();
  const w2v::Vocab vocab = w2v::build_vocab(sentences, o.min_count);
  const w2v::Corpus corpus = w2v::encode(sentences, vocab);
  const w2v::Sampler sampler(vocab, o);
  w2v::Model model(vocab, o);
  std::vector<w2v::Batch> parts;
  w2v::Batch batch;
  for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch)
    for (std::size_t first = 0; first < corpus.sentences(); first += 100) {
      w2v::build_batch(sampler, corpus, first, std::min(first + 100, corpus.sentences()), epoch, o, parts,
                       batch);
      model.step(batch, o.lr);
    }
  tg::set_num_threads(1);
  return {model.in_weight().to_vector(), model.out_weight().to_vector()};
}

}  // namespace

TEST_CASE("word2vec trains the same vectors on 1, 2 and 3 threads") {
  for (const char* kind : {"skipgram", "cbow", "subwords"}) {
    CAPTURE(kind);
    w2v::Options o;
    o.cbow = std::string(kind) == "cbow";
    o.subwords = std::string(kind) == "subwords";
    o.buckets = 500;
    o.dim = 24;
    o.epochs = 2;
    o.min_count = 1;
    o.sample = 1e-2;
    const auto one = run(1, o);
    const std::size_t before = tg::detail::split_loops();
    CHECK(run(2, o) == one);
    CHECK(tg::detail::split_loops() > before);  // the loops did run on more than one thread
    CHECK(run(3, o) == one);
  }
}

namespace {

using Tables = std::vector<std::vector<float>>;

// The same made-up corpus, trained for `epochs` by `epoch_of` (one of
// w2v::train_epoch, hogwild_epoch, data_parallel_epoch, bound to its thread
// count); both tables after it, and the mean loss of an example in each epoch.
template <class Epoch>
std::pair<Tables, std::vector<double>> train(const w2v::Options& o, const Epoch& epoch_of) {
  const std::vector<tg::data::Sentence> sentences = made_up_sentences();
  const w2v::Vocab vocab = w2v::build_vocab(sentences, o.min_count);
  const w2v::Corpus corpus = w2v::encode(sentences, vocab);
  const w2v::Sampler sampler(vocab, o);
  w2v::Model model(vocab, o);
  const double planned = static_cast<double>(o.epochs * corpus.ids.size());
  double done = 0;
  std::vector<double> loss;
  for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const w2v::EpochLoss l = epoch_of(model, sampler, corpus, epoch, done, planned);
    loss.push_back(l.loss / static_cast<double>(l.examples));
  }
  return {{model.in_weight().to_vector(), model.out_weight().to_vector()}, loss};
}

// Hogwild workers on `threads` threads; 0: the synchronous way (Model::step).
std::pair<Tables, std::vector<double>> run_hogwild(std::size_t threads, const w2v::Options& o) {
  return train(
      o, [&](auto& model, auto& sampler, auto& corpus, std::size_t epoch, double& done, double planned) {
        return threads ? w2v::hogwild_epoch(model, sampler, corpus, epoch, threads, done, planned)
                       : w2v::train_epoch(model, sampler, corpus, epoch, done, planned);
      });
}

// The data-parallel way on `threads` threads.
std::pair<Tables, std::vector<double>> run_data_parallel(std::size_t threads, const w2v::Options& o) {
  return train(
      o, [&](auto& model, auto& sampler, auto& corpus, std::size_t epoch, double& done, double planned) {
        return w2v::data_parallel_epoch(model, sampler, corpus, epoch, threads, done, planned);
      });
}

w2v::Options small(const char* kind) {
  w2v::Options o;
  o.cbow = std::string(kind) == "cbow";
  o.subwords = std::string(kind) == "subwords";
  o.buckets = 500;
  o.dim = 24;
  o.epochs = 3;
  o.min_count = 1;
  o.sample = 1e-2;
  // Steps of a few sentences: each touches a small share of the rows, as on a
  // real corpus (threads that all rewrite every row at once, each from the same
  // stale values, take several steps' worth of one and can diverge).
  o.batch = 50;
  return o;
}

}  // namespace

TEST_CASE("a Hogwild worker alone takes Model::step's SGD steps, bit for bit") {
  for (const char* kind : {"skipgram", "cbow", "subwords"}) {
    CAPTURE(kind);
    const w2v::Options o = small(kind);
    const auto [synchronous, loss] = run_hogwild(0, o);
    const auto [one_worker, worker_loss] = run_hogwild(1, o);
    CHECK(one_worker == synchronous);
    CHECK(worker_loss == loss);
  }
}

// Under ThreadSanitizer (./scripts/test --threads) this is the check that the
// workers read and write a shared row only while they hold its lock.
TEST_CASE("Hogwild workers on 2 and 3 threads train the shared tables without a data race") {
  for (const char* kind : {"skipgram", "cbow", "subwords"}) {
    CAPTURE(kind);
    const w2v::Options o = small(kind);
    const std::vector<double> loss = run_hogwild(0, o).second;
    for (std::size_t threads : {2, 3}) {
      CAPTURE(threads);
      const std::size_t pool = tg::get_num_threads();
      const std::vector<double> hogwild_loss = run_hogwild(threads, o).second;
      CHECK(tg::get_num_threads() == pool);  // the pool's size is put back
      // The threads interleave differently from run to run (a worker that ends
      // its share before the next starts gives the synchronous run's steps).
      // Each epoch's loss falls, from below the loss of the untrained model
      // (its output rows are 0: every score is 0, an example's loss (1 + K) log 2).
      const double untrained = static_cast<double>(1 + o.negative) * std::log(2.0);
      CHECK(hogwild_loss[0] < untrained);
      for (std::size_t e = 1; e < hogwild_loss.size(); ++e) CHECK(hogwild_loss[e] < hogwild_loss[e - 1]);
      CHECK(loss.back() < untrained);
    }
  }
}

TEST_CASE("Hogwild trains with SGD only") {
  w2v::Options o = small("skipgram");
  o.adam = true;
  CHECK_THROWS_WITH_AS(run_hogwild(2, o), doctest::Contains("SGD only"), std::invalid_argument);
}

TEST_CASE("data-parallel word2vec: one thread takes Model::step's SGD steps, bit for bit") {
  for (const char* kind : {"skipgram", "cbow", "subwords"}) {
    CAPTURE(kind);
    const w2v::Options o = small(kind);
    const auto [synchronous, loss] = run_hogwild(0, o);  // 0 threads: train_epoch, Model::step
    const auto [one, one_loss] = run_data_parallel(1, o);
    CHECK(one == synchronous);
    CHECK(one_loss == loss);
  }
}

// Under ThreadSanitizer (./scripts/test --threads) this is also the check that
// no thread reads a row while another writes it: the meetings order them.
TEST_CASE("data-parallel word2vec on 2 and 3 threads: the same bits every run, a falling loss") {
  for (const char* kind : {"skipgram", "cbow", "subwords"}) {
    CAPTURE(kind);
    const w2v::Options o = small(kind);
    const std::vector<double> loss = run_hogwild(0, o).second;
    for (std::size_t threads : {2, 3}) {
      CAPTURE(threads);
      const std::size_t pool = tg::get_num_threads();
      const auto [tables, dp_loss] = run_data_parallel(threads, o);
      CHECK(tg::get_num_threads() == pool);  // the pool's size is put back
      CHECK(run_data_parallel(threads, o).first == tables);
      // The same steps as one thread's, each row's gradient summed in another
      // order: the same training up to rounding.
      REQUIRE(dp_loss.size() == loss.size());
      for (std::size_t e = 0; e < loss.size(); ++e)
        CHECK(dp_loss[e] == doctest::Approx(loss[e]).epsilon(1e-3));
      for (std::size_t e = 1; e < dp_loss.size(); ++e) CHECK(dp_loss[e] < dp_loss[e - 1]);
    }
  }
}

TEST_CASE("data-parallel word2vec trains with SGD only") {
  w2v::Options o = small("skipgram");
  o.adam = true;
  CHECK_THROWS_WITH_AS(run_data_parallel(2, o), doctest::Contains("SGD only"), std::invalid_argument);
}
