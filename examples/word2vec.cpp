// Word vectors on the tape: word2vec's skip-gram and CBOW with negative sampling,
// and fastText's subword model (--subwords), trained with tapegrad's SGD (or Adam)
// over sparse row gradients. The pieces are in examples/word2vec.hpp.
//
//   ./scripts/fetch-brown                                 # the Brown corpus, 1.16M words
//   word2vec [--data DIR|FILE] [--model skipgram|cbow] [--subwords] [--output FILE.vec]
//            [--neighbours WORD,...] [--threads N] ...    (--help lists every flag)
//
// One step takes the (word, context) pairs of about --batch corpus words, each
// with --negative words drawn from the unigram^0.75 distribution
// (w2v::AliasTable), and puts the batch on the tape as five entries: the
// input rows (Embedding, or EmbeddingBag with subwords or CBOW), the scores of
// each pair's true context and negatives against the output rows
// (Embedding::dot), the signs, softplus and the sum.
// backward() gives both tables SparseRows gradients over the rows the batch
// touched, and the optimizer updates those rows only. The learning rate falls
// linearly to 1e-4 of its start over the run, as word2vec's does.
//
// Threads: a batch is built sentence by sentence on the thread pool, and the
// ops split their loops (pairs, rows); every sentence's random draws come from
// the seed, the epoch and the sentence's number, and every loop computes each
// row the same way on any thread, so a run gives the same vectors, bit for
// bit, on any number of threads. With --data-parallel each thread takes its
// share of every step's sentences and its own tape, and then updates the rows
// it owns with every thread's gradients (w2v::data_parallel_epoch): the same
// vectors for the same number of threads. With --hogwild the threads train as
// fastText's do, each on its own sentences, writing into the shared tables
// as it goes (w2v::HogwildWorker; a lock on each row while it is copied or
// updated), repeatable on one thread only.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"
#include "word2vec.hpp"

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string w; std::getline(in, w, ',');)
    if (!w.empty()) out.push_back(w);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags flag(
      argc, argv,
      {{"--data", WORD2VEC_DEFAULT_DATA},
       {"--format", "auto"},
       {"--model", "skipgram"},
       {"--dim", "100"},
       {"--window", "5"},
       {"--negative", "5"},
       {"--epochs", "5"},
       {"--min-count", "5"},
       {"--sample", "1e-4"},
       {"--lr", "0.025"},
       {"--minn", "3"},
       {"--maxn", "6"},
       {"--bucket", "2000000"},
       {"--batch", "1000"},
       {"--optim", "sgd"},
       {"--seed", "0"},
       {"--threads", "1"},
       {"--output", ""},
       {"--neighbours", ""}},
      "Trains word vectors: skip-gram or CBOW with negative sampling, or with --subwords\n"
      "fastText's model (a word is the mean of its row and its hashed character n-grams').\n"
      "--data: a directory or file of tagged text (word/tag, the Brown corpus: ./scripts/fetch-brown)\n"
      "or plain text, one sentence a line (--format auto: a directory or a file whose first word\n"
      "has a '/' is tagged). --batch: corpus words per step. --output: the vectors as a .vec file\n"
      "(word2vec's text format). --neighbours: comma-separated words whose nearest words to print.\n"
      "A run gives the same vectors on any --threads. With --data-parallel each thread takes\n"
      "a share of every step's sentences and updates the rows it owns with the sum of all\n"
      "threads' gradients (the same vectors for the same --threads); with --hogwild the threads\n"
      "train at once on their own sentences, as fastText's do (repeatable on one thread only).",
      {"--subwords", "--hogwild", "--data-parallel"});
  w2v::Options o;
  o.cbow = flag["--model"] == "cbow";
  if (!o.cbow && flag["--model"] != "skipgram") throw std::invalid_argument("--model: skipgram or cbow");
  o.subwords = flag.given("--subwords");
  o.dim = flag.number("--dim");
  o.window = flag.number("--window");
  o.negative = flag.number("--negative");
  o.epochs = flag.number("--epochs");
  o.min_count = flag.number("--min-count");
  o.sample = flag.real("--sample");
  o.lr = flag.real("--lr");
  o.minn = flag.number("--minn");
  o.maxn = flag.number("--maxn");
  o.buckets = flag.number("--bucket");
  o.batch = flag.number("--batch");
  o.adam = flag["--optim"] == "adam";
  if (!o.adam && flag["--optim"] != "sgd") throw std::invalid_argument("--optim: sgd or adam");
  o.seed = flag.number("--seed");
  if (o.dim == 0 || o.window == 0 || o.batch == 0)
    throw std::invalid_argument("--dim, --window, --batch: at least 1");
  const bool hogwild = flag.given("--hogwild"), data_parallel = flag.given("--data-parallel");
  if (hogwild && data_parallel) throw std::invalid_argument("--hogwild or --data-parallel, not both");
  if (o.adam && (hogwild || data_parallel))
    throw std::invalid_argument(std::string(hogwild ? "--hogwild" : "--data-parallel") +
                                " trains with SGD only (not --optim adam)");
  const std::size_t threads = std::max(1, flag.number("--threads"));
  tg::set_num_threads(threads);

  // ---- the corpus
  const auto start = std::chrono::steady_clock::now();
  const std::string& path = flag["--data"];
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path + " does not exist (./scripts/fetch-brown fetches the Brown corpus)");
  bool tagged = flag["--format"] == "tagged";
  if (flag["--format"] == "auto") {
    tagged = std::filesystem::is_directory(path);
    if (!tagged) {
      std::ifstream in(path);
      std::string first;
      in >> first;
      tagged = first.find('/') != std::string::npos;
    }
  } else if (!tagged && flag["--format"] != "text") {
    throw std::invalid_argument("--format: auto, tagged or text");
  }
  const std::vector<tg::data::Sentence> sentences =
      tagged ? tg::data::read_tagged_sentences(path) : tg::data::read_text_sentences(path);
  std::size_t words = 0;
  for (const auto& s : sentences) words += s.size();
  const w2v::Vocab vocab = w2v::build_vocab(sentences, o.min_count);
  const w2v::Corpus corpus = w2v::encode(sentences, vocab);
  std::printf("data: %s (%s): %zu sentences, %zu words; vocabulary %zu words (min count %lld), %lld tokens\n",
              path.c_str(), tagged ? "tagged" : "text", sentences.size(), words, vocab.size(),
              static_cast<long long>(o.min_count), static_cast<long long>(vocab.total));
  std::printf(
      "model: %s%s, dim %zu, window %zu, negative %zu, sample %g, lr %g decaying to 0, %s, batch %zu words, "
      "%zu epochs, %zu thread%s%s, seed %llu\n",
      o.cbow ? "cbow" : "skipgram", o.subwords ? " with subwords" : "", o.dim, o.window, o.negative, o.sample,
      o.lr, o.adam ? "adam" : "sgd", o.batch, o.epochs, threads, threads == 1 ? "" : "s",
      hogwild         ? " (hogwild)"
      : data_parallel ? " (data parallel)"
                      : "",
      static_cast<unsigned long long>(o.seed));
  if (o.subwords) std::printf("subwords: %zu- to %zu-grams in %zu buckets\n", o.minn, o.maxn, o.buckets);

  // ---- training
  const w2v::Sampler sampler(vocab, o);
  w2v::Model model(vocab, o);
  std::fflush(stdout);
  const auto train_start = std::chrono::steady_clock::now();
  const double planned = static_cast<double>(o.epochs) * static_cast<double>(vocab.total);
  double done = 0;
  for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    const auto [loss, examples] =
        hogwild         ? w2v::hogwild_epoch(model, sampler, corpus, epoch, threads, done, planned)
        : data_parallel ? w2v::data_parallel_epoch(model, sampler, corpus, epoch, threads, done, planned)
                        : w2v::train_epoch(model, sampler, corpus, epoch, done, planned);
    const double s = seconds_since(epoch_start);
    std::printf("epoch %zu  loss %.4f per example  %zu examples  %.2f s  %.0f words/s/thread\n", epoch,
                loss / std::max<std::size_t>(examples, 1), examples, s,
                static_cast<double>(vocab.total) / s / static_cast<double>(threads));
    std::fflush(stdout);
  }
  const double train_s = seconds_since(train_start);
  std::printf("trained: %.0f words in %.2f s, %.0f words/s/thread (%.2f s with reading the corpus)\n",
              planned, train_s, planned / train_s / static_cast<double>(threads), seconds_since(start));

  // ---- the vectors
  std::vector<std::vector<float>> vectors;
  for (std::size_t i = 0; i < vocab.size(); ++i)
    vectors.push_back(model.vector(vocab.words[i], static_cast<int32_t>(i)));
  if (flag.given("--output")) {
    w2v::write_vec(flag["--output"], vocab.words, vectors);
    std::printf("wrote %s: %zu vectors of %zu\n", flag["--output"].c_str(), vectors.size(), o.dim);
  }
  for (const std::string& word : split_commas(flag["--neighbours"])) {
    const int32_t id = vocab.find(word);
    if (id < 0 && !o.subwords) {
      std::printf("%s: not in the vocabulary\n", word.c_str());
      continue;
    }
    std::printf("nearest to %s%s:", word.c_str(), id < 0 ? " (from its n-grams)" : "");
    for (const auto& [i, c] : w2v::nearest(vectors, model.vector(word, id), 10, id))
      std::printf(" %s %.3f", vocab.words[i].c_str(), c);
    std::printf("\n");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "word2vec: %s\n", e.what());
  return 1;
}
