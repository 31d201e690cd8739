// word2vec on threads (run under ThreadSanitizer by ./scripts/test --threads):
// the batches are built on the thread pool and Embedding::dot splits its rows,
// yet a run gives the same vectors, bit for bit, on 1, 2 and 3 threads.
#include <doctest/doctest.h>

#include <tapegrad/tapegrad.hpp>

#include "../examples/word2vec.hpp"

namespace {

// A few steps of skip-gram (or CBOW, or subwords) on a made-up corpus; both tables after them.
std::vector<std::vector<float>> run(std::size_t threads, const w2v::Options& o) {
  tg::set_num_threads(threads);
  std::vector<tg::data::Sentence> sentences;
  w2v::Rng rng{11};
  for (int s = 0; s < 300; ++s) {
    tg::data::Sentence sentence;
    for (int k = 0; k < 12; ++k) sentence.push_back("w" + std::to_string(rng.below(1 + rng.below(60))));
    sentences.push_back(sentence);
  }
  const w2v::Vocab vocab = w2v::build_vocab(sentences, o.min_count);
  const w2v::Corpus corpus = w2v::encode(sentences, vocab);
  const w2v::Sampler sampler(vocab, o);
  w2v::Model model(vocab, o);
  std::vector<w2v::Batch> parts;
  w2v::Batch batch;
  for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch)
    for (std::size_t first = 0; first < corpus.sentences(); first += 100) {
      w2v::build_batch(sampler, corpus, first, std::min(first + 100, corpus.sentences()), epoch, o, parts, batch);
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
    o.table_size = 10000;
    const auto one = run(1, o);
    const std::size_t before = tg::detail::split_loops();
    CHECK(run(2, o) == one);
    CHECK(tg::detail::split_loops() > before);  // the loops did run on more than one thread
    CHECK(run(3, o) == one);
  }
}
