// The pieces of examples/word2vec.cpp, in a header so that tests/test_word2vec.cpp
// can check each one: the vocabulary, the unigram^0.75 alias table of negative samples,
// frequent-word subsampling, fastText's character n-grams and their hashes, the
// batches of (word, context) pairs, one training step on the tape, the .vec
// file, and nearest neighbours.
//
// The model (Mikolov et al. 2013; Bojanowski et al. 2017 with subwords): every
// word has an input vector (a row of `in`) and an output vector (a row of
// `out`). Skip-gram scores a (word, context) pair by <in[word], out[context]>
// and K negative samples by <in[word], out[negative]>; CBOW scores the word
// against the mean of its context's input vectors. The loss of a pair is
//   -log sigmoid(score of the true context) - sum_k log sigmoid(-score of negative k)
// which is softplus(-s0) + sum_k softplus(s_k). With subwords, a word's input
// vector is the mean of the rows of the word itself and of its hashed character
// 3- to 6-grams: an EmbeddingBag in mean mode (as fastText computes it).
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <tapegrad/tapegrad.hpp>

namespace w2v {

// ------------------------------------------------------------------ vocabulary

struct Vocab {
  std::vector<std::string> words;  // most frequent first; ties in alphabetical order
  std::vector<int64_t> counts;
  std::unordered_map<std::string, int32_t> id;
  int64_t total = 0;  // tokens of the corpus that are in the vocabulary

  std::size_t size() const { return words.size(); }
  int32_t find(const std::string& w) const {
    auto it = id.find(w);
    return it == id.end() ? -1 : it->second;
  }
};

// The words seen at least min_count times.
inline Vocab build_vocab(const std::vector<tg::data::Sentence>& sentences, int64_t min_count) {
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& s : sentences)
    for (const auto& w : s) ++counts[w];
  std::vector<std::pair<std::string, int64_t>> kept;
  for (auto& [w, c] : counts)
    if (c >= min_count) kept.emplace_back(w, c);
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  Vocab v;
  for (auto& [w, c] : kept) {
    v.id.emplace(w, static_cast<int32_t>(v.words.size()));
    v.words.push_back(w);
    v.counts.push_back(c);
    v.total += c;
  }
  return v;
}

// The corpus as word ids: the words of each sentence that are in the vocabulary.
struct Corpus {
  std::vector<int32_t> ids;
  std::vector<std::size_t> starts;  // sentence s is ids[starts[s] .. starts[s + 1])
  std::size_t sentences() const { return starts.size() - 1; }
};

inline Corpus encode(const std::vector<tg::data::Sentence>& sentences, const Vocab& vocab) {
  Corpus c;
  c.starts.push_back(0);
  for (const auto& s : sentences) {
    for (const auto& w : s)
      if (int32_t i = vocab.find(w); i >= 0) c.ids.push_back(i);
    if (c.ids.size() > c.starts.back()) c.starts.push_back(c.ids.size());
  }
  return c;
}

// -------------------------------------------------- sampling: which words count

// Subsampling of frequent words (word2vec's -sample, fastText's -t): a word
// that makes up a share f = count / total of the corpus is kept with probability
//   min(1, sqrt(t / f) + t / f)
// so "the" (f = 0.06) is kept 4% of the time at t = 1e-4, and words under
// f = t always. sample = 0 keeps every word.
inline double keep_probability(int64_t count, int64_t total, double sample) {
  if (sample <= 0) return 1.0;
  const double r = sample * static_cast<double>(total) / static_cast<double>(count);
  return std::min(1.0, std::sqrt(r) + r);
}

// Random numbers from a counter (splitmix64): a sentence's draws depend on the
// seed, the epoch and the sentence alone, never on which thread built it or
// how the corpus was cut into batches.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
struct Rng {
  uint64_t state;
  uint64_t next() { return mix(state++); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Uniform in [0, n) for n < 2^32, by a multiply instead of a division.
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(((next() >> 32) * n) >> 32); }
};

// Negative samples are drawn from the unigram distribution raised to `power`
// (0.75: rare words are drawn more often than their share, frequent ones
// less): word i with probability p_i = count_i^power / sum_j count_j^power.
// word2vec and fastText draw a uniform entry of a table of 10^8 or 10^7
// entries that word i fills in its share; at 4 bytes an entry that table is
// far larger than the caches, and a draw waits for memory. Walker's alias
// method (as Vose 1991 builds it) draws from the same distribution with one
// slot per word: pick a slot i uniformly, keep i with probability keep_i, else
// take alias_i. The slots are filled so that every word's chances add up to
// p_i: a word whose p_i is under the mean 1/n gets slot i with keep_i = n p_i,
// and the rest of that slot goes to a word over the mean.
struct AliasTable {
  std::vector<uint32_t> keep;   // slot i keeps i when 32 random bits are below keep[i]
  std::vector<int32_t> alias;   // else it gives alias[i]

  AliasTable(const std::vector<int64_t>& counts, double power) {
    if (counts.empty()) throw std::invalid_argument("AliasTable: no words");
    const std::size_t n = counts.size();
    double sum = 0;
    for (int64_t c : counts) sum += std::pow(static_cast<double>(c), power);
    std::vector<double> share(n);  // n p_i: 1 is a slot's worth
    std::vector<int32_t> under, over;
    for (std::size_t i = 0; i < n; ++i) {
      share[i] = std::pow(static_cast<double>(counts[i]), power) / sum * static_cast<double>(n);
      (share[i] < 1.0 ? under : over).push_back(static_cast<int32_t>(i));
    }
    keep.assign(n, UINT32_MAX);  // a slot nobody shares keeps its word (alias: itself)
    alias.resize(n);
    std::iota(alias.begin(), alias.end(), 0);
    while (!under.empty() && !over.empty()) {
      const int32_t small = under.back(), large = over.back();
      under.pop_back();
      keep[small] = static_cast<uint32_t>(std::min(share[small] * 0x1.0p32, double(UINT32_MAX)));
      alias[small] = large;
      share[large] -= 1.0 - share[small];  // what of large's share the slot took
      if (share[large] < 1.0) {
        over.pop_back();
        under.push_back(large);
      }
    }
  }
  std::size_t size() const { return keep.size(); }
  // The chance that draw() gives word i (what the slots add up to), for tests.
  double probability(std::size_t i) const {
    double p = 0;
    for (std::size_t s = 0; s < size(); ++s) {
      const double kept = keep[s] == UINT32_MAX ? 1.0 : keep[s] * 0x1.0p-32;
      p += (s == i ? kept : 0.0) + (static_cast<std::size_t>(alias[s]) == i ? 1.0 - kept : 0.0);
    }
    return p / static_cast<double>(size());
  }
  // One draw: the slot from the top 32 bits of a random number, the choice from the bottom 32.
  int32_t draw(Rng& rng) const {
    const uint64_t r = rng.next();
    const std::size_t slot = static_cast<std::size_t>(((r >> 32) * size()) >> 32);
    return static_cast<uint32_t>(r) < keep[slot] ? static_cast<int32_t>(slot) : alias[slot];
  }
};

// ------------------------------------------------------ fastText's subwords

// fastText's hash of a string (FNV-1a, 32 bits), bytes taken as signed chars
// as its Dictionary::hash does.
inline uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (char c : s) {
    h ^= static_cast<uint32_t>(static_cast<int8_t>(c));
    h *= 16777619u;
  }
  return h;
}

// The character n-grams of "<" word ">" of minn to maxn characters (UTF-8
// sequences count as one), in fastText's order: by start, then by length; the
// one-character grams "<" and ">" are left out.
inline std::vector<std::string> char_ngrams(const std::string& word, std::size_t minn, std::size_t maxn) {
  const std::string w = "<" + word + ">";
  std::vector<std::string> out;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if ((w[i] & 0xC0) == 0x80) continue;
    std::string ngram;
    for (std::size_t j = i, n = 1; j < w.size() && n <= maxn; ++n) {
      ngram.push_back(w[j++]);
      while (j < w.size() && (w[j] & 0xC0) == 0x80) ngram.push_back(w[j++]);
      if (n >= minn && !(n == 1 && (i == 0 || j == w.size()))) out.push_back(ngram);
    }
  }
  return out;
}

// The rows of the input table that make a word's vector: the word's own row
// (`word_id`, or none for a word outside the vocabulary: -1) and, for each
// n-gram, row vocab_size + fnv1a(ngram) % buckets, as fastText numbers them.
inline std::vector<int64_t> subword_rows(const std::string& word, int32_t word_id, std::size_t vocab_size,
                                         std::size_t minn, std::size_t maxn, std::size_t buckets) {
  std::vector<int64_t> rows;
  if (word_id >= 0) rows.push_back(word_id);
  if (buckets > 0 && maxn > 0)
    for (const std::string& g : char_ngrams(word, minn, maxn))
      rows.push_back(static_cast<int64_t>(vocab_size + fnv1a(g) % buckets));
  return rows;
}

// ----------------------------------------------------------------- settings

struct Options {
  bool cbow = false;      // CBOW; else skip-gram
  bool subwords = false;  // fastText's model: a word is the mean of its row and its n-grams'
  std::size_t dim = 100, window = 5, negative = 5, epochs = 5;
  int64_t min_count = 5;
  double sample = 1e-4;  // subsampling threshold t
  double lr = 0.025;     // decays linearly to lr * 1e-4 over the run, as word2vec's
  std::size_t minn = 3, maxn = 6, buckets = 2000000;
  std::size_t batch = 1000;  // corpus words per step (before subsampling)
  bool adam = false;         // else SGD
  uint64_t seed = 0;
};

// --------------------------------------------------------------- the batches

// What one step trains on. Skip-gram: pair p is (center[p], targets[p, 0]) and
// targets[p, 1..K] its negative samples. CBOW: example p is the bag of context
// words bag[bag_start[p] .. bag_start[p + 1]) predicting targets[p, 0], with
// negatives targets[p, 1..K]. With subwords, a skip-gram center is a bag too.
struct Batch {
  std::vector<int32_t> center;        // skip-gram: the word of each pair
  std::vector<int64_t> targets;       // [pairs, 1 + K]
  std::vector<int32_t> bag;           // CBOW: the context words of each example
  std::vector<int64_t> bag_start{0};  // CBOW: where each example's bag starts
  std::size_t examples() const { return bag_start.size() > 1 ? bag_start.size() - 1 : center.size(); }
  void clear() {
    center.clear();
    targets.clear();
    bag.clear();
    bag_start.assign(1, 0);
  }
  void append(const Batch& b) {
    center.insert(center.end(), b.center.begin(), b.center.end());
    targets.insert(targets.end(), b.targets.begin(), b.targets.end());
    const int64_t base = static_cast<int64_t>(bag.size());
    bag.insert(bag.end(), b.bag.begin(), b.bag.end());
    for (std::size_t i = 1; i < b.bag_start.size(); ++i) bag_start.push_back(base + b.bag_start[i]);
  }
};

// Everything sampling needs, made once from the vocabulary.
struct Sampler {
  AliasTable negatives;      // unigram^0.75
  std::vector<double> keep;  // keep_probability of each word

  Sampler(const Vocab& v, const Options& o) : negatives(enough_words(v).counts, 0.75) {
    for (int64_t c : v.counts) keep.push_back(keep_probability(c, v.total, o.sample));
  }

  // A negative is drawn again while it is the word to predict: with one word, for ever.
  static const Vocab& enough_words(const Vocab& v) {
    if (v.size() < 2)
      throw std::invalid_argument(
          "w2v::Sampler: negative sampling needs a vocabulary of at least 2 words; this one has " +
          std::to_string(v.size()) + " (lower --min-count, or give more text)");
    return v;
  }

  // The random numbers of sentence `s` in epoch `epoch`.
  static Rng sentence_rng(std::size_t s, std::size_t epoch, const Options& o) {
    return Rng{mix(o.seed * 0x100000001b3ULL ^ mix(epoch << 40 ^ s))};
  }

  // The words of sentence s that subsampling keeps, in order.
  std::vector<int32_t> subsample(const Corpus& c, std::size_t s, Rng& rng) const {
    std::vector<int32_t> words;
    for (std::size_t i = c.starts[s]; i < c.starts[s + 1]; ++i)
      if (keep[c.ids[i]] >= 1.0 || rng.uniform() < keep[c.ids[i]]) words.push_back(c.ids[i]);
    return words;
  }

  // The examples of sentence `s` in epoch `epoch`, appended to `out`. The words
  // are subsampled first (a dropped word leaves the sentence, so windows reach
  // past it); each word then gets a window of 1 to `window` words on each side
  // (fastText and word2vec draw it so: near words count more), and each
  // example K negatives, drawn again when one is the word to predict.
  void sentence(const Corpus& c, std::size_t s, std::size_t epoch, const Options& o, Batch& out) const {
    Rng rng = sentence_rng(s, epoch, o);
    const std::vector<int32_t> words = subsample(c, s, rng);
    const std::size_t cols = 1 + o.negative, first = out.targets.size();
    // The examples, with room for their negatives.
    const auto example = [&](int32_t target) {
      out.targets.push_back(target);
      out.targets.resize(out.targets.size() + o.negative);
    };
    const std::size_t len = words.size();
    for (std::size_t i = 0; i < len; ++i) {
      const std::size_t b = 1 + rng.below(o.window);
      const std::size_t lo = i >= b ? i - b : 0, hi = std::min(len, i + b + 1);
      if (o.cbow) {
        if (hi - lo < 2) continue;  // no context
        for (std::size_t j = lo; j < hi; ++j)
          if (j != i) out.bag.push_back(words[j]);
        out.bag_start.push_back(static_cast<int64_t>(out.bag.size()));
        example(words[i]);
      } else {
        for (std::size_t j = lo; j < hi; ++j) {
          if (j == i) continue;
          out.center.push_back(words[i]);
          example(words[j]);
        }
      }
    }
    // Then the negatives, drawn again when one is the word to predict.
    for (std::size_t e = first; e < out.targets.size(); e += cols)
      for (std::size_t k = 1; k < cols; ++k) {
        int32_t neg = negatives.draw(rng);
        while (neg == out.targets[e]) neg = negatives.draw(rng);
        out.targets[e + k] = neg;
      }
  }
};

// Sentences [first, last) of epoch `epoch` as one batch, built on the
// tapegrad thread pool (tg::parallel_for) one sentence at a time and joined in
// order: the same batch on any number of threads.
inline void build_batch(const Sampler& sampler, const Corpus& c, std::size_t first, std::size_t last,
                        std::size_t epoch, const Options& o, std::vector<Batch>& parts, Batch& out) {
  const std::size_t n = last - first;
  if (parts.size() < n) parts.resize(n);
  tg::parallel_for(n, 8, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      parts[i].clear();
      sampler.sentence(c, first + i, epoch, o, parts[i]);
    }
  });
  out.clear();
  for (std::size_t i = 0; i < n; ++i) out.append(parts[i]);
}

// ----------------------------------------------------------------- the model

// The rows one batch reads, as row numbers of the input and output tables.
struct Lookup {
  std::vector<int64_t> in;    // input rows: one per example, or the bags' rows
  std::vector<int64_t> bags;  // bag e is in[bags[e] .. bags[e + 1]); empty: no bags
  std::vector<int64_t> pick;  // skip-gram with subwords: the bag of each pair
  std::vector<int64_t> out;   // [examples, 1 + K]: each example's target, then its negatives
  std::size_t examples = 0;
  double mean_bag = 1.0;  // the mean number of rows in an example's input
};

// The tables a loss reads: an Embedding (skip-gram) or an EmbeddingBag (CBOW,
// subwords) for the input, an Embedding for the output.
struct Tables {
  tg::nn::Embedding* in = nullptr;
  tg::nn::EmbeddingBag* bags = nullptr;
  tg::nn::Embedding* out = nullptr;
};

class Model {
 public:
  // Input vectors uniform in +-1 / dim, output vectors 0: fastText's and
  // gensim's start. (word2vec.c starts at +-0.5 / dim; on the Brown corpus that
  // gave vectors whose nearest words shared their tag less often: benchmarks.md.)
  Model(const Vocab& vocab, const Options& o) : o_(o), vocab_size_(vocab.size()) {
    const std::size_t rows = vocab.size() + (o.subwords ? o.buckets : 0);
    tg::Array w = xt::empty<float>({rows, o.dim});
    Rng rng{mix(o.seed ^ 0x5eedULL)};
    for (float& x : w) x = static_cast<float>((2 * rng.uniform() - 1) / static_cast<double>(o.dim));
    if (o.subwords || o.cbow)
      bag_ = std::make_unique<tg::nn::EmbeddingBag>(tg::nn::EmbeddingBag::from_pretrained(
          w, {.mode = tg::nn::EmbeddingBagMode::mean}, /*freeze=*/false));
    else
      emb_ = std::make_unique<tg::nn::Embedding>(tg::nn::Embedding::from_pretrained(w, {}, /*freeze=*/false));
    out_ = std::make_unique<tg::nn::Embedding>(
        tg::nn::Embedding::from_pretrained(xt::zeros<float>({vocab.size(), o.dim}), {}, /*freeze=*/false));
    if (o.subwords)
      for (std::size_t i = 0; i < vocab.size(); ++i)
        rows_.push_back(
            subword_rows(vocab.words[i], static_cast<int32_t>(i), vocab.size(), o.minn, o.maxn, o.buckets));
    // Two groups, so that the input table can have a rate of its own (step()).
    std::vector<tg::optim::ParamGroup> groups{{.params = {in_weight()}}, {.params = {out_->weight}}};
    if (o.adam)
      opt_ = std::make_unique<tg::optim::Adam>(groups, tg::optim::AdamOptions{.lr = o.lr});
    else
      opt_ = std::make_unique<tg::optim::SGD>(groups, tg::optim::SGDOptions{.lr = o.lr});
    std::vector<float> sign(1 + o.negative, 1.0f);
    sign[0] = -1.0f;  // softplus(-s) = -log sigmoid(s) for the true context
    sign_ = tg::tensor(sign, {sign.size()});
  }

  const Options& options() const { return o_; }
  tg::Tensor& in_weight() { return bag_ ? bag_->weight : emb_->weight; }
  tg::Tensor& out_weight() { return out_->weight; }
  tg::optim::Optimizer& optimizer() { return *opt_; }

  // The rows a batch reads, as row numbers of the two tables (add_rows()
  // expands a word into its n-grams' rows). CBOW: the mean of the context's
  // rows; skip-gram with subwords: each run of pairs of one center word shares
  // its bag, which is averaged once and then picked for each pair.
  Lookup lookup(const Batch& b) const {
    Lookup l;
    l.examples = b.examples();
    l.out = b.targets;
    if (o_.cbow) {
      l.bags.push_back(0);
      for (std::size_t e = 0; e + 1 < b.bag_start.size(); ++e) {
        for (int64_t k = b.bag_start[e]; k < b.bag_start[e + 1]; ++k) add_rows(b.bag[k], l.in);
        l.bags.push_back(static_cast<int64_t>(l.in.size()));
      }
    } else if (o_.subwords) {
      l.bags.push_back(0);
      for (std::size_t p = 0; p < b.center.size(); ++p) {
        if (p == 0 || b.center[p] != b.center[p - 1]) {
          add_rows(b.center[p], l.in);
          l.bags.push_back(static_cast<int64_t>(l.in.size()));
        }
        l.pick.push_back(static_cast<int64_t>(l.bags.size()) - 2);
      }
    } else {
      l.in.assign(b.center.begin(), b.center.end());
    }
    if (l.bags.size() > 1)
      l.mean_bag = static_cast<double>(l.in.size()) / static_cast<double>(l.bags.size() - 1);
    return l;
  }

  // The loss of a lookup's examples, summed: for scores s = [true target,
  // K negatives], softplus(-s_0) + sum_k softplus(s_k). The tables are the
  // model's own (tables()) or a Hogwild worker's copies of the rows it reads.
  tg::Tensor loss(Lookup l, const Tables& t) const {
    const std::size_t cols = 1 + o_.negative;
    tg::Tensor h;  // [P, dim]: one input vector per example
    if (l.bags.empty()) {
      h = t.in->forward(tg::indices(std::move(l.in)));
    } else {
      tg::CsrBatch csr;
      csr.indptr = std::move(l.bags);
      csr.indices = std::move(l.in);
      h = t.bags->forward(csr);
      if (!l.pick.empty()) h = tg::index_select(h, 0, tg::indices(std::move(l.pick)));
    }
    tg::Tensor scores = t.out->dot(h, tg::indices(std::move(l.out), {l.examples, cols}));  // [P, 1 + K]
    return tg::sum(tg::softplus(scores * sign_));
  }
  tg::Tensor loss(const Batch& b) { return loss(lookup(b), tables()); }
  Tables tables() { return {emb_.get(), bag_.get(), out_.get()}; }

  // One step: the loss of the batch's examples on the tape, backward, and the
  // optimizer's update of the rows they touched. Returns the summed loss.
  //
  // An input that is the mean of n rows gives each row 1/n of the input's
  // gradient. word2vec (CBOW) and fastText (subwords) add the input's whole
  // gradient to each row instead, which moves the mean by lr times the
  // gradient. With SGD the input table's rate is therefore lr times the
  // batch's mean bag size: a bag of the mean size moves as in those tools,
  // and each row gets the true gradient's direction. (Adam scales its steps by
  // itself: both tables get lr.)
  double step(const Batch& b, double lr) {
    if (b.examples() == 0) return 0.0;
    Lookup l = lookup(b);
    const double in_lr = o_.adam ? lr : lr * l.mean_bag;
    tg::Tensor loss = this->loss(std::move(l), tables());
    opt_->zero_grad();
    loss.backward();
    opt_->set_lr(1, lr);
    opt_->set_lr(0, in_lr);
    opt_->step();
    return loss.item();
  }

  // A word's vector: its input row, or with subwords the mean of its rows (as
  // fastText's). For a word outside the vocabulary, with subwords, the mean of
  // its n-grams' rows.
  std::vector<float> vector(const std::string& word, int32_t id) {
    std::vector<float> v(o_.dim, 0.0f);
    std::vector<int64_t> rows;
    if (o_.subwords)
      rows = id >= 0 ? rows_[id] : subword_rows(word, -1, vocab_size_, o_.minn, o_.maxn, o_.buckets);
    else if (id >= 0)
      rows = {id};
    const float* w = in_weight().value().data();
    for (int64_t r : rows)
      for (std::size_t d = 0; d < o_.dim; ++d) v[d] += w[r * o_.dim + d];
    for (float& x : v) x /= static_cast<float>(std::max<std::size_t>(rows.size(), 1));
    return v;
  }

 private:
  void add_rows(int32_t word, std::vector<int64_t>& into) const {
    if (o_.subwords)
      into.insert(into.end(), rows_[word].begin(), rows_[word].end());
    else
      into.push_back(word);
  }

  Options o_;
  std::size_t vocab_size_;
  std::unique_ptr<tg::nn::Embedding> emb_;
  std::unique_ptr<tg::nn::EmbeddingBag> bag_;
  std::unique_ptr<tg::nn::Embedding> out_;
  std::unique_ptr<tg::optim::Optimizer> opt_;
  std::vector<std::vector<int64_t>> rows_;  // subwords: each word's rows of the input table
  tg::Tensor sign_;
};

// ---------------------------------------------------------------- training

// One epoch the synchronous way: batches of about o.batch corpus words in
// order, each built on the thread pool and trained by Model::step. `done`
// counts the corpus words trained so far, for the rate's linear decay to
// lr * 1e-4 at `planned`. A run repeats bit for bit on any number of threads.
struct EpochLoss {
  double loss = 0;  // summed over the examples
  std::size_t examples = 0;
};

inline double decayed_lr(const Options& o, double done, double planned) {
  return o.lr * std::max(1e-4, 1.0 - done / planned);
}

// Sentences [first, last): the first run of sentences from `first` that holds
// at least `words` corpus words (or the rest). Returns last; adds the words to `size`.
inline std::size_t batch_end(const Corpus& c, std::size_t first, std::size_t end, std::size_t words,
                             std::size_t& size) {
  std::size_t last = first;
  for (size = 0; last < end && size < words; ++last) size += c.starts[last + 1] - c.starts[last];
  return last;
}

inline EpochLoss train_epoch(Model& model, const Sampler& sampler, const Corpus& c, std::size_t epoch,
                             double& done, double planned) {
  const Options& o = model.options();
  EpochLoss r;
  std::vector<Batch> parts;
  Batch batch;
  for (std::size_t first = 0, size = 0; first < c.sentences();) {
    const std::size_t last = batch_end(c, first, c.sentences(), o.batch, size);
    build_batch(sampler, c, first, last, epoch, o, parts, batch);
    r.loss += model.step(batch, decayed_lr(o, done, planned));
    r.examples += batch.examples();
    done += static_cast<double>(size);
    first = last;
  }
  return r;
}

// Runs work(0) on this thread and work(1) ... work(threads - 1) on threads
// of their own, with the thread pool at one thread meanwhile (each thread's
// ops run on that thread alone; the pool's size is put back after), and waits
// for all of them. Then rethrows the first exception a thread threw.
template <class Work>
void run_on_threads(std::size_t threads, const Work& work) {
  const std::size_t pool_threads = tg::get_num_threads();
  tg::set_num_threads(1);
  std::vector<std::exception_ptr> errors(threads);
  const auto guarded = [&](std::size_t t) {
    try {
      work(t);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(guarded, t);
  guarded(0);
  for (std::thread& th : pool) th.join();
  tg::set_num_threads(pool_threads);
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

inline EpochLoss sum_of(const std::vector<EpochLoss>& parts) {
  EpochLoss r;
  for (const EpochLoss& p : parts) r.loss += p.loss, r.examples += p.examples;
  return r;
}

// Hogwild (Recht et al. 2011), as fastText and word2vec train on several
// threads: each thread takes its own run of sentences and adds its updates to
// the shared tables at once, with no meeting between the threads. fastText and
// word2vec let two threads read and write a row at the same moment (a data
// race, undefined behaviour in C++). Here a worker takes a lock on a row while
// it copies the row or adds its update into it, and holds one lock at a time:
// copies and updates are whole rows, plain loops the compiler vectorises, and
// the run is clean under ThreadSanitizer. A worker copies the rows its batch
// reads, runs the step on the tape over the copies (the same lookups and
// sparse row gradients as Model::step), and adds -lr * gradient into the
// shared rows. What one worker copies may already hold updates the other
// made since (as in fastText), so on several threads the result depends on
// how they interleave; alone, a worker gives Model::step's SGD result bit for bit.

// The locks of a shared table's rows: row r's is stripe r % stripes, each on a
// cache line of its own, so that two threads locking neighbouring rows (the
// most frequent words are rows 0, 1, ...) do not fight over one line.
class RowLocks {
 public:
  // Locks row r until the guard goes out of scope.
  class Guard {
   public:
    explicit Guard(std::atomic_flag& f) : f_(f) {
      for (unsigned spins = 0; f_.test_and_set(std::memory_order_acquire);)
        while (f_.test(std::memory_order_relaxed))
          if (++spins % 64 == 0) std::this_thread::yield();  // the holder may be descheduled
    }
    ~Guard() { f_.clear(std::memory_order_release); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    std::atomic_flag& f_;
  };

  Guard lock(int64_t row) { return Guard(stripes_[static_cast<std::size_t>(row) % kStripes].flag); }

 private:
  static constexpr std::size_t kStripes = 512;
  struct alignas(64) Stripe {
    std::atomic_flag flag;  // clear at the start (C++20)
  };
  std::unique_ptr<Stripe[]> stripes_ = std::make_unique<Stripe[]>(kStripes);
};

// A table the workers share: its rows and their locks.
struct SharedTable {
  float* data;
  std::size_t rows;
  RowLocks locks;
};

class HogwildWorker {
 public:
  HogwildWorker(Model& model, SharedTable& in, SharedTable& out)
      : model_(model),
        in_{&in, std::vector<int32_t>(in.rows, -1), {}},
        out_{&out, std::vector<int32_t>(out.rows, -1), {}},
        in_emb_(tg::nn::Embedding::from_pretrained(xt::zeros<float>({std::size_t{1}, model.options().dim}))),
        in_bags_(
            tg::nn::EmbeddingBag::from_pretrained(xt::zeros<float>({std::size_t{1}, model.options().dim}),
                                                  {.mode = tg::nn::EmbeddingBagMode::mean})),
        out_emb_(
            tg::nn::Embedding::from_pretrained(xt::zeros<float>({std::size_t{1}, model.options().dim}))) {}

  // One SGD step on a batch; returns its summed loss.
  double step(const Batch& b, double lr) {
    if (b.examples() == 0) return 0.0;
    const std::size_t dim = model_.options().dim;
    Lookup l = model_.lookup(b);
    const float in_lr = static_cast<float>(lr * l.mean_bag), out_lr = static_cast<float>(lr);
    in_.renumber(l.in);
    out_.renumber(l.out);
    // The copies become the tables' weights: leaves whose gradients are the step's.
    const bool bags = !l.bags.empty();
    (bags ? in_bags_.weight : in_emb_.weight) = tg::Tensor(in_.copy(dim), true);
    out_emb_.weight = tg::Tensor(out_.copy(dim), true);
    tg::Tensor loss = model_.loss(std::move(l), {&in_emb_, &in_bags_, &out_emb_});
    loss.backward();
    in_.subtract((bags ? in_bags_.weight : in_emb_.weight).grad(), in_lr, dim);
    out_.subtract(out_emb_.weight.grad(), out_lr, dim);
    in_.forget();
    out_.forget();
    return loss.item();
  }

 private:
  // A shared table and the worker's numbering of the rows one batch reads.
  struct Rows {
    SharedTable* table;
    std::vector<int32_t> place;  // a table row's row in the copy, or -1
    std::vector<int64_t> rows;   // the copy's rows, by their place

    // Renumbers ids into places 0, 1, ... of the copy, in the order first seen.
    void renumber(std::vector<int64_t>& ids) {
      for (int64_t& id : ids) {
        int32_t& p = place[static_cast<std::size_t>(id)];
        if (p < 0) {
          p = static_cast<int32_t>(rows.size());
          rows.push_back(id);
        }
        id = p;
      }
    }
    tg::Array copy(std::size_t dim) const {
      tg::Array c = xt::empty<float>({rows.size(), dim});
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (i + 4 < rows.size()) prefetch(row(rows[i + 4], dim), dim);
        const float* from = row(rows[i], dim);
        RowLocks::Guard held = table->locks.lock(rows[i]);
        std::copy_n(from, dim, c.data() + i * dim);
      }
      return c;
    }
    // table[rows[i]] -= lr * gradient row i, for each row of the gradient (SGD's step).
    void subtract(const tg::Grad& g, float lr, std::size_t dim) {
      const auto update = [&](std::size_t i, const float* gi) {
        float* p = row(rows[i], dim);
        RowLocks::Guard held = table->locks.lock(rows[i]);
        for (std::size_t d = 0; d < dim; ++d) p[d] -= lr * gi[d];
      };
      if (g.is_sparse()) {
        const std::vector<int64_t>& r = g.sparse().rows;
        for (std::size_t k = 0; k < r.size(); ++k) {
          if (k + 4 < r.size()) prefetch(row(rows[static_cast<std::size_t>(r[k + 4])], dim), dim);
          update(static_cast<std::size_t>(r[k]), g.sparse().values.data() + k * dim);
        }
      } else if (!g.empty()) {
        for (std::size_t i = 0; i < rows.size(); ++i) update(i, g.dense().data() + i * dim);
      }
    }
    float* row(int64_t r, std::size_t dim) const { return table->data + static_cast<std::size_t>(r) * dim; }
    // The rows are scattered over a table larger than the caches: each loop
    // asks for the row it will reach four rows later, so the reads overlap.
    static void prefetch(const float* row, std::size_t dim) {
      for (std::size_t d = 0; d < dim; d += 16) __builtin_prefetch(row + d);
    }
    void forget() {
      for (int64_t r : rows) place[static_cast<std::size_t>(r)] = -1;
      rows.clear();
    }
  };

  Model& model_;
  Rows in_, out_;
  tg::nn::Embedding in_emb_;      // the input table's copy, skip-gram
  tg::nn::EmbeddingBag in_bags_;  // the input table's copy, CBOW and subwords
  tg::nn::Embedding out_emb_;     // the output table's copy
};

// One epoch on `threads` Hogwild workers: worker t trains on the t-th of
// `threads` equal runs of the sentences, in batches of about o.batch words,
// and the rate decays with the words all of them have trained (`done`).
// SGD only (Adam's moments would be shared state of their own).
inline EpochLoss hogwild_epoch(Model& model, const Sampler& sampler, const Corpus& c, std::size_t epoch,
                               std::size_t threads, double& done, double planned) {
  const Options& o = model.options();
  if (o.adam) throw std::invalid_argument("word2vec: --hogwild trains with SGD only (not --optim adam)");
  SharedTable in{model.in_weight().value_mut().data(), model.in_weight().shape()[0], {}};
  SharedTable out{model.out_weight().value_mut().data(), model.out_weight().shape()[0], {}};
  std::atomic<uint64_t> words{0};
  std::vector<EpochLoss> parts(threads);
  const double start = done;
  run_on_threads(threads, [&](std::size_t t) {
    HogwildWorker worker(model, in, out);
    const std::size_t end = c.sentences() * (t + 1) / threads;
    Batch batch;
    for (std::size_t first = c.sentences() * t / threads, size = 0; first < end;) {
      const std::size_t last = batch_end(c, first, end, o.batch, size);
      batch.clear();
      for (std::size_t s = first; s < last; ++s) sampler.sentence(c, s, epoch, o, batch);
      const double lr =
          decayed_lr(o, start + static_cast<double>(words.load(std::memory_order_relaxed)), planned);
      parts[t].loss += worker.step(batch, lr);
      parts[t].examples += batch.examples();
      words.fetch_add(size, std::memory_order_relaxed);
      first = last;
    }
  });
  done = start + static_cast<double>(words.load());
  return sum_of(parts);
}

// Data parallelism (--data-parallel), synchronous as PyTorch's
// DistributedDataParallel is: every step's sentences are split into one run
// of about equal words per thread; each thread builds the pairs of its run,
// puts them on its own tape and takes both tables' gradients with tg::grad(),
// reading the tables while no thread writes them. The threads meet; each then
// updates the rows it owns (row r belongs to thread r % threads) with the sum
// of every thread's gradient for that row, added in thread order, and they
// meet again before the next step. Nothing races: each meeting orders every
// write before the reads that follow it. A run repeats bit for bit for one
// thread count, and on one thread it takes Model::step's SGD steps exactly;
// on another count a row's gradient is summed in another order, so the
// vectors differ in rounding.

// Where the threads of data_parallel_epoch meet: each waits until all have
// arrived. The threads meet twice a step, a few hundred microseconds apart,
// and a thread woken from sleep (std::barrier) takes tens of microseconds to
// run again, so a waiting thread watches the count instead, yielding its
// core now and then.
class SpinBarrier {
 public:
  explicit SpinBarrier(std::size_t threads) : threads_(threads) {}
  void arrive_and_wait() {
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {  // the last one lets all go
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (unsigned spins = 1; generation_.load(std::memory_order_acquire) == generation; ++spins)
      if (spins % 256 == 0) std::this_thread::yield();
  }

 private:
  const std::size_t threads_;
  std::atomic<std::size_t> arrived_{0};
  std::atomic<uint64_t> generation_{0};
};

// Part `part` of `parts` of the sentences [first, last), which hold `words`
// corpus words: sentence s is in part (words before s) * parts / words.
inline std::pair<std::size_t, std::size_t> part_of(const Corpus& c, std::size_t first, std::size_t last,
                                                   std::size_t words, std::size_t part, std::size_t parts) {
  std::size_t lo = last, hi = last, before = 0;
  for (std::size_t s = first; s < last; before += c.starts[s + 1] - c.starts[s], ++s) {
    const std::size_t p = words ? before * parts / words : 0;
    if (p >= part && lo == last) lo = s;
    if (p > part) {
      hi = s;
      break;
    }
  }
  return {std::min(lo, hi), hi};
}

// table[r] -= lr * (the sum over threads, in thread order, of each one's
// gradient row r), for the rows r of `grads` that thread `me` of `threads`
// owns. Each gradient is SparseRows (the tables' layers are sparse) or empty.
// next and from (one entry per thread) and sum (dim floats) are working space.
inline void update_owned_rows(float* table, const std::vector<const tg::Grad*>& grads, float lr,
                              std::size_t dim, std::size_t me, std::size_t threads,
                              std::vector<std::size_t>& next, std::vector<const float*>& from,
                              std::vector<float>& sum) {
  std::fill(next.begin(), next.end(), 0);  // each thread's next row to look at
  for (;;) {
    int64_t row = -1;  // the lowest row any thread has left
    for (std::size_t u = 0; u < grads.size(); ++u) {
      if (grads[u]->empty()) continue;
      const std::vector<int64_t>& rows = grads[u]->sparse().rows;
      while (next[u] < rows.size() && static_cast<std::size_t>(rows[next[u]]) % threads != me) ++next[u];
      if (next[u] < rows.size() && (row < 0 || rows[next[u]] < row)) row = rows[next[u]];
      // The table's rows are scattered: ask for one a few rows ahead, so the reads overlap.
      if (next[u] + 4 * threads < rows.size()) __builtin_prefetch(table + rows[next[u] + 4 * threads] * dim);
    }
    if (row < 0) return;
    std::size_t n = 0;  // the threads' gradient rows for `row`, in thread order
    for (std::size_t u = 0; u < grads.size(); ++u) {
      if (grads[u]->empty()) continue;
      const tg::SparseRows& g = grads[u]->sparse();
      if (next[u] < g.rows.size() && g.rows[next[u]] == row) from[n++] = g.values.data() + next[u]++ * dim;
    }
    float* p = table + static_cast<std::size_t>(row) * dim;
    if (n == 1) {
      for (std::size_t d = 0; d < dim; ++d) p[d] -= lr * from[0][d];
    } else if (n == 2) {
      for (std::size_t d = 0; d < dim; ++d) p[d] -= lr * (from[0][d] + from[1][d]);
    } else {
      std::copy_n(from[0], dim, sum.data());
      for (std::size_t k = 1; k < n; ++k)
        for (std::size_t d = 0; d < dim; ++d) sum[d] += from[k][d];
      for (std::size_t d = 0; d < dim; ++d) p[d] -= lr * sum[d];
    }
  }
}

// One epoch the data-parallel way on `threads` threads, in the batches
// train_epoch takes and with its rates. SGD only, as Hogwild.
inline EpochLoss data_parallel_epoch(Model& model, const Sampler& sampler, const Corpus& c, std::size_t epoch,
                                     std::size_t threads, double& done, double planned) {
  const Options& o = model.options();
  if (o.adam)
    throw std::invalid_argument("word2vec: --data-parallel trains with SGD only (not --optim adam)");
  const std::size_t dim = o.dim;
  float* in_table = model.in_weight().value_mut().data();  // one in-place write for the epoch, as Hogwild's
  float* out_table = model.out_weight().value_mut().data();
  const std::vector<tg::Tensor> weights{model.in_weight(), model.out_weight()};
  // What thread t leaves for the others at a meeting.
  struct Share {
    std::vector<tg::Grad> grads;  // of the input and the output table
    std::size_t in_rows = 0, bags = 0;
  };
  // Thread t's working space, made here: a thread that failed to make its own
  // would leave the others waiting at the first meeting.
  struct Scratch {
    Batch batch;
    std::vector<const tg::Grad*> in_grads, out_grads;
    std::vector<std::size_t> next;
    std::vector<const float*> from;
    std::vector<float> sum;
    Scratch(std::size_t threads, std::size_t dim)
        : in_grads(threads), out_grads(threads), next(threads), from(threads), sum(dim) {}
  };
  std::vector<Scratch> scratch(threads, Scratch(threads, dim));
  std::vector<Share> shares(threads);
  std::vector<EpochLoss> parts(threads);
  std::atomic<bool> failed{false};
  SpinBarrier meet(threads);
  const double start = done;
  run_on_threads(threads, [&](std::size_t t) {
    auto& [batch, in_grads, out_grads, next, from, sum] = scratch[t];
    double trained = start;
    for (std::size_t first = 0, size = 0; first < c.sentences();) {
      const std::size_t last = batch_end(c, first, c.sentences(), o.batch, size);
      const double lr = decayed_lr(o, trained, planned);
      std::exception_ptr error;
      try {  // this thread's gradients, from its part of the batch
        const auto [lo, hi] = part_of(c, first, last, size, t, threads);
        batch.clear();
        for (std::size_t s = lo; s < hi; ++s) sampler.sentence(c, s, epoch, o, batch);
        Share& mine = shares[t];
        mine.grads.assign(2, tg::Grad());
        mine.in_rows = mine.bags = 0;
        if (batch.examples() > 0) {
          Lookup l = model.lookup(batch);
          mine.in_rows = l.in.size();
          mine.bags = l.bags.empty() ? l.in.size() : l.bags.size() - 1;
          tg::Tensor loss = model.loss(std::move(l), model.tables());
          mine.grads = tg::grad(loss, weights);
          for (const tg::Grad& g : mine.grads)
            if (!g.empty() && !g.is_sparse())
              throw std::logic_error("word2vec: a table's gradient is not SparseRows");
          parts[t].loss += loss.item();
          parts[t].examples += batch.examples();
        }
      } catch (...) {
        error = std::current_exception();
        failed = true;
      }
      meet.arrive_and_wait();
      if (error) std::rethrow_exception(error);  // run_on_threads passes it on
      if (failed) return;                        // every thread leaves after the same meeting
      // The rows this thread owns, from every thread's gradients (nothing here allocates or throws).
      std::size_t in_rows = 0, bags = 0;
      for (std::size_t u = 0; u < threads; ++u) {
        in_rows += shares[u].in_rows, bags += shares[u].bags;
        in_grads[u] = &shares[u].grads[0];
        out_grads[u] = &shares[u].grads[1];
      }
      // The input table's rate as Model::step's: lr times the batch's mean bag size.
      const double mean_bag = bags > 0 ? static_cast<double>(in_rows) / static_cast<double>(bags) : 1.0;
      update_owned_rows(in_table, in_grads, static_cast<float>(lr * mean_bag), dim, t, threads, next, from,
                        sum);
      update_owned_rows(out_table, out_grads, static_cast<float>(lr), dim, t, threads, next, from, sum);
      meet.arrive_and_wait();
      trained += static_cast<double>(size);
      first = last;
    }
  });
  done = start + static_cast<double>(c.ids.size());
  return sum_of(parts);
}

// ------------------------------------------------------------- the .vec file

// word2vec's text format, which gensim's KeyedVectors.load_word2vec_format and
// fastText read: a line "count dim", then "word v1 ... vdim" per word. Each
// number is written in the fewest digits that read back as the same float.
inline void write_vec(const std::string& path, const std::vector<std::string>& words,
                      const std::vector<std::vector<float>>& vectors) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("write_vec: cannot write " + path);
  const std::size_t dim = vectors.empty() ? 0 : vectors[0].size();
  out << words.size() << ' ' << dim << '\n';
  char buf[32];
  for (std::size_t i = 0; i < words.size(); ++i) {
    out << words[i];
    for (float x : vectors[i]) {
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
      out << ' ' << std::string_view(buf, end - buf);
    }
    out << '\n';
  }
  if (!out) throw std::runtime_error("write_vec: writing " + path + " failed");
}

struct VecFile {
  std::vector<std::string> words;
  std::vector<std::vector<float>> vectors;
};

inline VecFile read_vec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("read_vec: cannot open " + path);
  std::size_t count = 0, dim = 0;
  in >> count >> dim;
  VecFile f;
  for (std::size_t i = 0; i < count; ++i) {
    std::string word;
    std::vector<float> v(dim);
    in >> word;
    for (float& x : v) {
      std::string t;
      in >> t;
      std::from_chars(t.data(), t.data() + t.size(), x);
    }
    if (!in)
      throw std::runtime_error("read_vec: " + path + " ends before its " + std::to_string(count) + " words");
    f.words.push_back(std::move(word));
    f.vectors.push_back(std::move(v));
  }
  return f;
}

// --------------------------------------------------------- nearest neighbours

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

// The k words whose vectors have the largest cosine with `query`, best first,
// `skip` (the query word's own index, or -1) left out.
inline std::vector<std::pair<std::size_t, double>> nearest(const std::vector<std::vector<float>>& vectors,
                                                           const std::vector<float>& query, std::size_t k,
                                                           int64_t skip = -1) {
  std::vector<std::pair<std::size_t, double>> all;
  for (std::size_t i = 0; i < vectors.size(); ++i)
    if (static_cast<int64_t>(i) != skip) all.emplace_back(i, cosine(vectors[i], query));
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + k, all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  all.resize(k);
  return all;
}

}  // namespace w2v
