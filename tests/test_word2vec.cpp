// Tests for word vectors: Embedding::dot, the Brown corpus reader, and the pieces
// of examples/word2vec.hpp (negative-sampling loss against PyTorch's numbers from
// tests/tools/gen_word2vec_reference.py, fastText's n-grams and hashes from
// tests/tools/gen_fasttext_subwords.py, the alias table of negatives, subsampling, the .vec
// file, which rows a step touches, and a tiny corpus whose related words end up near).
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <tapegrad/tapegrad.hpp>

#include "../examples/word2vec.hpp"
#include "helpers.hpp"

using tg::Array;
using tg::Indices;
using tg::Tensor;
using tg::test::to_array;
namespace nn = tg::nn;

namespace {

bool allclose(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-5) {
  return a.shape() == b.shape() && xt::allclose(a, b, rtol, atol);
}

// A vocabulary of n words "w0", "w1", ..., word i seen counts[i] times.
w2v::Vocab make_vocab(const std::vector<int64_t>& counts) {
  w2v::Vocab v;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    v.words.push_back("w" + std::to_string(i));
    v.id.emplace(v.words.back(), static_cast<int32_t>(i));
    v.counts.push_back(counts[i]);
    v.total += counts[i];
  }
  return v;
}

// Two topics of six words; each sentence draws 8 words from one topic. Words of
// one topic share their contexts, words of the other never meet them.
std::vector<tg::data::Sentence> two_topics(std::size_t sentences, uint64_t seed) {
  const std::vector<std::vector<std::string>> topics = {{"cat", "dog", "horse", "cow", "sheep", "goat"},
                                                        {"red", "green", "blue", "yellow", "white", "black"}};
  w2v::Rng rng{seed};
  std::vector<tg::data::Sentence> out;
  for (std::size_t s = 0; s < sentences; ++s) {
    const auto& topic = topics[s % 2];
    tg::data::Sentence sentence;
    for (int k = 0; k < 8; ++k) sentence.push_back(topic[rng.below(topic.size())]);
    out.push_back(sentence);
  }
  return out;
}

// Trains on `sentences` and returns each vocabulary word's vector: the
// synchronous way, or with `hogwild` threads as fastText trains.
std::vector<std::vector<float>> train(const std::vector<tg::data::Sentence>& sentences, const w2v::Options& o,
                                      w2v::Vocab& vocab, std::size_t hogwild = 0) {
  vocab = w2v::build_vocab(sentences, o.min_count);
  const w2v::Corpus corpus = w2v::encode(sentences, vocab);
  const w2v::Sampler sampler(vocab, o);
  w2v::Model model(vocab, o);
  const double planned = static_cast<double>(o.epochs * corpus.ids.size());
  double done = 0;
  for (std::size_t epoch = 1; epoch <= o.epochs; ++epoch)
    if (hogwild)
      w2v::hogwild_epoch(model, sampler, corpus, epoch, hogwild, done, planned);
    else
      w2v::train_epoch(model, sampler, corpus, epoch, done, planned);
  std::vector<std::vector<float>> vectors;
  for (std::size_t i = 0; i < vocab.size(); ++i)
    vectors.push_back(model.vector(vocab.words[i], static_cast<int32_t>(i)));
  return vectors;
}

}  // namespace

TEST_SUITE("word2vec") {
  TEST_CASE("Embedding::dot gives the values and gradients of the lookup, multiply and sum it stands for") {
    tg::Generator gen(3);
    nn::Embedding a(9, 4, {}, gen), b = nn::Embedding::from_pretrained(a.weight.value(), {}, false);
    Tensor h1 = tg::randn({5, 4}, gen, true), h2 = Tensor(h1.value(), true);
    const Indices ids = {{2, 5, 0}, {1, 2, 2}, {8, 1, 6}, {3, 0, 5}, {2, 2, 2}};
    const Tensor w = tg::randn({5, 3}, gen);
    Tensor fused = a.dot(h1, ids);
    Tensor plain = tg::sum(b(ids) * tg::reshape(h2, {5, 1, 4}), 2);  // [5, 3, 4] -> [5, 3]
    CHECK(allclose(fused.value(), plain.value()));
    // One tape entry, not three.
    CHECK(fused.creator()->op == "embedding_dot");
    CHECK(fused.creator()->inputs.size() == 2);  // the table and h, nothing in between
    tg::sum(fused * w).backward();
    tg::sum(plain * w).backward();
    CHECK(allclose(h1.grad_dense(), h2.grad_dense()));
    REQUIRE(a.weight.grad().is_sparse());
    // Exactly the rows the ids name, coalesced: the step touches those rows only.
    CHECK(a.weight.grad().sparse().rows == std::vector<int64_t>{0, 1, 2, 3, 5, 6, 8});
    CHECK(allclose(a.weight.grad_dense(), b.weight.grad_dense()));

    const tg::GradcheckReport r =
        tg::gradcheck([&](const std::vector<Tensor>& in) { return a.dot(in[1], ids); }, {a.weight, h1});
    CHECK_MESSAGE(r.ok, r.str());

    CHECK_THROWS_AS(a.dot(tg::randn({5, 3}, gen), ids), std::invalid_argument);  // dim 3 for a table of 4
    CHECK_THROWS_AS(a.dot(tg::randn({4, 4}, gen), ids), std::invalid_argument);  // 4 rows for 5 of ids
    CHECK_THROWS_AS(a.dot(h1, Indices{{9, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}}),
                    std::out_of_range);
  }

  TEST_CASE("the negative-sampling loss and its gradients are PyTorch's") {
    for (const char* name : {"skipgram", "bags"}) {
      CAPTURE(name);
      const nlohmann::json& c = tg::test::reference_case("word2vec_reference", name);
      const Array w_in = to_array(c["in"]), w_out = to_array(c["out"]);
      w2v::Options o;
      o.cbow = std::string(name) == "bags";  // CBOW's input: the sum of a bag of rows
      o.dim = w_in.shape()[1];
      o.negative = c["targets"]["shape"][1].get<std::size_t>() - 1;
      const w2v::Vocab vocab = make_vocab(std::vector<int64_t>(w_in.shape()[0], 1));
      w2v::Model model(vocab, o);
      {
        tg::NoGradGuard no_grad;
        model.in_weight().copy_(w_in);
        model.out_weight().copy_(w_out);
      }
      w2v::Batch batch;
      for (const auto& bag : c["bags"]) {
        for (int64_t row : bag) (o.cbow ? batch.bag : batch.center).push_back(static_cast<int32_t>(row));
        if (o.cbow) batch.bag_start.push_back(static_cast<int64_t>(batch.bag.size()));
      }
      for (int64_t t : c["targets"]["data"]) batch.targets.push_back(t);
      Tensor loss = model.loss(batch);
      CHECK(loss.item() == doctest::Approx(c["loss"].get<double>()).epsilon(1e-5));
      loss.backward();
      CHECK(allclose(model.in_weight().grad_dense(), to_array(c["grad_in"])));
      CHECK(allclose(model.out_weight().grad_dense(), to_array(c["grad_out"])));
      CHECK(model.in_weight().grad().is_sparse());
      CHECK(model.out_weight().grad().is_sparse());
    }
  }

  TEST_CASE("a step changes exactly the rows of its pairs, in both tables") {
    w2v::Options o;
    o.dim = 8;
    o.negative = 2;
    o.lr = 0.5;
    const w2v::Vocab vocab = make_vocab(std::vector<int64_t>(20, 3));
    w2v::Model model(vocab, o);
    {  // output rows start at 0, which would leave the input rows still on a first step
      tg::NoGradGuard no_grad;
      tg::Generator gen(1);
      model.out_weight().copy_(tg::randn({20, 8}, gen).value());
    }
    w2v::Batch batch;
    batch.center = {4, 4, 11};
    batch.targets = {7, 2, 19, 3, 2, 2, 16, 0, 7};
    const Array in_before = model.in_weight().value(), out_before = model.out_weight().value();
    model.step(batch, o.lr);
    CHECK(model.in_weight().grad().sparse().rows == std::vector<int64_t>{4, 11});
    CHECK(model.out_weight().grad().sparse().rows == std::vector<int64_t>{0, 2, 3, 7, 16, 19});
    const std::set<std::size_t> in_rows{4, 11}, out_rows{0, 2, 3, 7, 16, 19};
    for (std::size_t r = 0; r < 20; ++r) {
      CAPTURE(r);
      const auto row_same = [r](const Array& a, const Array& b) {
        return std::equal(a.data() + r * 8, a.data() + (r + 1) * 8, b.data() + r * 8);
      };
      const bool in_same = row_same(in_before, model.in_weight().value());
      const bool out_same = row_same(out_before, model.out_weight().value());
      CHECK(in_same == !in_rows.count(r));
      CHECK(out_same == !out_rows.count(r));
    }
  }

  TEST_CASE("the subword model's gradient is that of a Linear over the words' counts of rows") {
    // A word's vector is the sum of its rows: an EmbeddingBag in sum mode, or the
    // same map as a bias-free Linear over a row of counts (one-hot for one row).
    // The bag's SparseRows gradient is the Linear's dense gradient, transposed,
    // on the rows the words use, and 0 elsewhere.
    const std::size_t vocab = 4, buckets = 30, dim = 6, rows = vocab + buckets;
    const std::vector<std::string> words = {"where", "here", "there", "her"};
    tg::Generator gen(7);
    nn::EmbeddingBag bag(rows, dim, {.mode = nn::EmbeddingBagMode::sum}, gen);
    nn::Linear linear(rows, dim, /*bias=*/false);
    {
      tg::NoGradGuard no_grad;
      linear.weight.copy_(tg::transpose(bag.weight, 0, 1).value());
    }
    tg::CsrBatch csr;
    Array counts = xt::zeros<float>({words.size(), rows});
    for (std::size_t w = 0; w < words.size(); ++w) {
      for (int64_t r : w2v::subword_rows(words[w], static_cast<int32_t>(w), vocab, 3, 6, buckets)) {
        csr.indices.push_back(r);
        counts(w, r) += 1.0f;
      }
      csr.indptr.push_back(static_cast<int64_t>(csr.indices.size()));
    }
    nn::Embedding out_a(vocab, dim, {}, gen),
        out_b = nn::Embedding::from_pretrained(out_a.weight.value(), {}, false);
    const Indices targets = {{1, 2, 3}, {0, 3, 3}, {3, 1, 0}, {2, 0, 1}};
    const Tensor sign = Tensor{-1.0f, 1.0f, 1.0f};
    tg::sum(tg::softplus(out_a.dot(bag(csr), targets) * sign)).backward();
    tg::sum(tg::softplus(out_b.dot(linear(Tensor(counts)), targets) * sign)).backward();
    REQUIRE(bag.weight.grad().is_sparse());
    CHECK(allclose(bag.weight.grad_dense(), xt::transpose(linear.weight.grad_dense()), 1e-4, 1e-4));
    const std::set<int64_t> used(csr.indices.begin(), csr.indices.end());
    CHECK(bag.weight.grad().sparse().rows == std::vector<int64_t>(used.begin(), used.end()));
    CHECK(bag.weight.grad().sparse().nbytes() < linear.weight.grad_dense().size() * sizeof(float));
  }

  TEST_CASE("on a small corpus, a training step moves exactly the rows of its batch's pairs") {
    // The batch is built by the sampler from the corpus, as word2vec's loop
    // builds it (subsampling, random windows, negatives): the rows that move are
    // the centers' rows (with subwords, their n-grams' too) in the input table,
    // and the contexts' and negatives' rows in the output table. No other row.
    const std::vector<tg::data::Sentence> sentences = two_topics(40, 9);
    for (const bool subwords : {false, true}) {
      CAPTURE(subwords);
      w2v::Options o;
      o.subwords = subwords;
      o.buckets = 200;
      o.dim = 8;
      o.window = 2;
      o.negative = 2;
      o.min_count = 1;
      o.sample = 0;
      o.lr = 0.5;
      const w2v::Vocab vocab = w2v::build_vocab(sentences, o.min_count);
      const w2v::Corpus corpus = w2v::encode(sentences, vocab);
      const w2v::Sampler sampler(vocab, o);
      w2v::Model model(vocab, o);
      {  // output rows start at 0, which would leave the input rows still on a first step
        tg::NoGradGuard no_grad;
        tg::Generator gen(2);
        model.out_weight().copy_(tg::randn({vocab.size(), o.dim}, gen).value());
      }
      std::vector<w2v::Batch> parts;
      w2v::Batch batch;
      w2v::build_batch(sampler, corpus, 3, 5, /*epoch=*/1, o, parts, batch);  // sentences 3 and 4
      REQUIRE(batch.examples() > 0);
      std::set<int64_t> in_rows, out_rows(batch.targets.begin(), batch.targets.end());
      for (int32_t c : batch.center)
        for (int64_t r : subwords
                             ? w2v::subword_rows(vocab.words[c], c, vocab.size(), o.minn, o.maxn, o.buckets)
                             : std::vector<int64_t>{c})
          in_rows.insert(r);
      // the corpus words of sentences 3 and 4 are the centers (sample 0 keeps them all)
      CHECK(std::set<int32_t>(batch.center.begin(), batch.center.end()) ==
            std::set<int32_t>(corpus.ids.begin() + corpus.starts[3], corpus.ids.begin() + corpus.starts[5]));
      const Array in_before = model.in_weight().value(), out_before = model.out_weight().value();
      model.step(batch, o.lr);
      CHECK(model.in_weight().grad().sparse().rows == std::vector<int64_t>(in_rows.begin(), in_rows.end()));
      CHECK(model.out_weight().grad().sparse().rows ==
            std::vector<int64_t>(out_rows.begin(), out_rows.end()));
      const auto moved = [&](const Array& before, const Array& after) {
        std::set<int64_t> rows;
        for (std::size_t r = 0; r < before.shape()[0]; ++r)
          if (!std::equal(before.data() + r * o.dim, before.data() + (r + 1) * o.dim,
                          after.data() + r * o.dim))
            rows.insert(static_cast<int64_t>(r));
        return rows;
      };
      CHECK(moved(in_before, model.in_weight().value()) == in_rows);
      CHECK(moved(out_before, model.out_weight().value()) == out_rows);
    }
  }

  TEST_CASE(
      "word2vec's subword model on a corpus batch: its sparse gradient is a dense Linear's over the bags") {
    // Model with --subwords: a word's input is the mean of its rows (its own and
    // its n-grams'), an EmbeddingBag in mean mode. Written as word2vec's network,
    // that is a bias-free Linear [rows -> dim] applied to a row of weights that
    // holds 1/n at each of the word's n rows (one-hot for a word of one row), and
    // the Linear's dense gradient over every row is the bag's sparse one.
    const std::vector<tg::data::Sentence> sentences = two_topics(20, 4);
    w2v::Options o;
    o.subwords = true;
    o.buckets = 300;
    o.dim = 6;
    o.window = 2;
    o.negative = 3;
    o.min_count = 1;
    o.sample = 0;
    const w2v::Vocab vocab = w2v::build_vocab(sentences, o.min_count);
    const w2v::Corpus corpus = w2v::encode(sentences, vocab);
    const w2v::Sampler sampler(vocab, o);
    w2v::Model model(vocab, o);
    tg::Generator gen(3);
    {
      tg::NoGradGuard no_grad;
      model.out_weight().copy_(tg::randn({vocab.size(), o.dim}, gen).value());
    }
    std::vector<w2v::Batch> parts;
    w2v::Batch batch;
    w2v::build_batch(sampler, corpus, 0, 3, /*epoch=*/1, o, parts, batch);
    const std::size_t rows = vocab.size() + o.buckets, pairs = batch.examples();
    REQUIRE(pairs > 0);
    model.loss(batch).backward();

    nn::Linear linear(rows, o.dim, /*bias=*/false);
    nn::Embedding out = nn::Embedding::from_pretrained(model.out_weight().value(), {}, /*freeze=*/false);
    {
      tg::NoGradGuard no_grad;
      linear.weight.copy_(tg::transpose(model.in_weight(), 0, 1).value());
    }
    Array weights = xt::zeros<float>({pairs, rows});  // pair p: 1/n at each of its center's n rows
    for (std::size_t p = 0; p < pairs; ++p) {
      const int32_t c = batch.center[p];
      const auto r = w2v::subword_rows(vocab.words[c], c, vocab.size(), o.minn, o.maxn, o.buckets);
      for (int64_t row : r) weights(p, row) += 1.0f / static_cast<float>(r.size());
    }
    std::vector<float> sign(1 + o.negative, 1.0f);
    sign[0] = -1.0f;
    const Tensor signs = tg::tensor(sign, {sign.size()});
    const Indices targets = tg::indices(batch.targets, {pairs, 1 + o.negative});
    tg::sum(tg::softplus(out.dot(linear(Tensor(weights)), targets) * signs)).backward();

    REQUIRE(model.in_weight().grad().is_sparse());
    CHECK(allclose(model.in_weight().grad_dense(), xt::transpose(linear.weight.grad_dense()), 1e-4, 1e-5));
    CHECK(allclose(model.out_weight().grad_dense(), out.weight.grad_dense(), 1e-4, 1e-5));
    // The dense gradient has every row; the sparse one the rows the centers use, fewer than all.
    const std::size_t touched = model.in_weight().grad().sparse().rows.size();
    CHECK(touched < rows);
    CHECK(model.in_weight().grad().sparse().nbytes() < linear.weight.grad_dense().size() * sizeof(float));
  }

  TEST_CASE("fastText's hash, character n-grams and bucket rows") {
    // FNV-1a's published test values.
    CHECK(w2v::fnv1a("") == 0x811c9dc5u);
    CHECK(w2v::fnv1a("a") == 0xe40c292cu);
    CHECK(w2v::fnv1a("foobar") == 0xbf9cf968u);
    CHECK(w2v::char_ngrams("where", 3, 3) == std::vector<std::string>{"<wh", "whe", "her", "ere", "re>"});
    // fastText's own answers (tests/tools/gen_fasttext_subwords.py), non-ASCII words included.
    const nlohmann::json& ref = tg::test::reference("fasttext_subwords");
    const std::size_t bucket = ref["bucket"], minn = ref["minn"], maxn = ref["maxn"];
    REQUIRE(ref["cases"].size() >= 8);
    for (const auto& c : ref["cases"]) {
      const std::string word = c["word"];
      CAPTURE(word);
      CHECK(w2v::char_ngrams(word, minn, maxn) == c["ngrams"].get<std::vector<std::string>>());
      const bool inside = c["in_vocabulary"];
      std::vector<int64_t> rows = w2v::subword_rows(word, inside ? 17 : -1, 100, minn, maxn, bucket);
      if (inside) {
        REQUIRE(!rows.empty());
        CHECK(rows.front() == 17);  // the word's own row first
        rows.erase(rows.begin());
      }
      for (int64_t& r : rows) r -= 100;
      CHECK(rows == c["buckets"].get<std::vector<int64_t>>());
    }
  }

  TEST_CASE("negatives are drawn with each word's count^0.75 share (the alias table)") {
    const std::vector<int64_t> counts = {1000, 200, 30, 5, 1, 1, 7};
    double sum = 0;
    for (int64_t c : counts) sum += std::pow(double(c), 0.75);
    const w2v::AliasTable t(counts, 0.75);
    REQUIRE(t.size() == counts.size());
    // What the slots add up to is each word's share, to the 2^-32 of a slot's choice.
    for (std::size_t i = 0; i < counts.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(t.probability(i) - std::pow(double(counts[i]), 0.75) / sum) < 1e-9);
    }
    // And the draws land there: 700,000 of them, each word within 5 standard deviations.
    const std::size_t draws = 700000;
    std::vector<std::size_t> seen(counts.size(), 0);
    w2v::Rng rng{42};
    for (std::size_t d = 0; d < draws; ++d) ++seen[static_cast<std::size_t>(t.draw(rng))];
    for (std::size_t i = 0; i < counts.size(); ++i) {
      CAPTURE(i);
      const double p = std::pow(double(counts[i]), 0.75) / sum, mean = p * draws;
      CHECK(std::abs(double(seen[i]) - mean) <= 5 * std::sqrt(mean * (1 - p)));
    }
    // One word: every draw is it.
    const w2v::AliasTable one({3}, 0.75);
    CHECK(one.probability(0) == 1.0);
    CHECK(one.draw(rng) == 0);
    CHECK_THROWS_WITH_AS(w2v::AliasTable({}, 0.75), doctest::Contains("no words"), std::invalid_argument);
    // The sampler wants two words at least: one word would be drawn again for ever.
    for (const std::vector<int64_t>& few : {std::vector<int64_t>{}, std::vector<int64_t>{5}})
      CHECK_THROWS_WITH_AS(w2v::Sampler(make_vocab(few), w2v::Options{}),
                           doctest::Contains(("at least 2 words; this one has " + std::to_string(few.size())).c_str()),
                           std::invalid_argument);
  }

  TEST_CASE("subsampling keeps a word with probability min(1, sqrt(t / f) + t / f)") {
    CHECK(w2v::keep_probability(10000, 1000000, 1e-4) == doctest::Approx(0.11));  // f = 0.01: 0.1 + 0.01
    CHECK(w2v::keep_probability(100, 1000000, 1e-4) == 1.0);  // f = t: sqrt(1) + 1, capped
    CHECK(w2v::keep_probability(60000, 1000000, 1e-3) == doctest::Approx(std::sqrt(1.0 / 60) + 1.0 / 60));
    CHECK(w2v::keep_probability(60000, 1000000, 0.0) == 1.0);  // no subsampling

    // The sampler keeps about that share: word 0 makes up 0.9 of the corpus, word 1 0.1.
    std::vector<tg::data::Sentence> sentences(200, tg::data::Sentence{});
    for (auto& s : sentences)
      for (int k = 0; k < 50; ++k) s.push_back(k % 10 == 0 ? "b" : "a");
    w2v::Options o;
    o.sample = 1e-2;
    o.min_count = 1;
    const w2v::Vocab vocab = w2v::build_vocab(sentences, 1);
    const w2v::Corpus corpus = w2v::encode(sentences, vocab);
    const w2v::Sampler sampler(vocab, o);
    std::vector<double> kept(2, 0);
    for (std::size_t s = 0; s < corpus.sentences(); ++s) {
      w2v::Rng rng = w2v::Sampler::sentence_rng(s, 1, o);
      for (int32_t w : sampler.subsample(corpus, s, rng)) kept[w] += 1;
    }
    for (int w : {0, 1}) {
      CAPTURE(w);
      const double n = static_cast<double>(vocab.counts[w]), p = sampler.keep[w];
      CHECK(p == doctest::Approx(w2v::keep_probability(vocab.counts[w], vocab.total, 1e-2)));
      CHECK(std::abs(kept[w] - n * p) < 5 * std::sqrt(n * p * (1 - p)));  // within 5 standard deviations
    }
    CHECK(sampler.keep[0] < 0.2);  // the frequent word is mostly dropped (0.117)
    CHECK(sampler.keep[1] > 0.4);  // the other one less (0.416)
  }

  TEST_CASE("a .vec file reads back the same words and floats") {
    const std::string path = (std::filesystem::temp_directory_path() / "test_word2vec.vec").string();
    const std::vector<std::string> words = {"the", "naïve", "''"};
    const std::vector<std::vector<float>> vectors = {
        {0.1f, -1.0f / 3.0f}, {3.4e38f, -1e-8f}, {0.0f, 123456.789f}};
    w2v::write_vec(path, words, vectors);
    std::ifstream in(path);
    std::string header;
    std::getline(in, header);
    CHECK(header == "3 2");
    const w2v::VecFile back = w2v::read_vec(path);
    CHECK(back.words == words);
    CHECK(back.vectors == vectors);  // the shortest text that reads back as each float: exact
    std::filesystem::remove(path);
  }

  TEST_CASE("on a tiny corpus of two topics, each word's nearest words are of its topic") {
    const std::vector<tg::data::Sentence> sentences = two_topics(400, 5);
    const std::set<std::string> animals = {"cat", "dog", "horse", "cow", "sheep", "goat"};
    for (const std::string model : {"skipgram", "cbow", "subwords"})
      for (const std::size_t hogwild : {0, 2}) {  // synchronous, then Hogwild on 2 threads
        CAPTURE(model);
        CAPTURE(hogwild);
        w2v::Options o;
        o.cbow = model == "cbow";
        o.subwords = model == "subwords";
        // 10 sentences a step; 2 on Hogwild threads, whose steps on these 12 words
        // all meet on every row: two taken at once from the same values must stay small.
        o.batch = hogwild ? 16 : 80;
        o.buckets = 1000;
        o.dim = 16;
        o.window = 3;
        o.negative = 3;
        o.epochs = 3;
        o.min_count = 1;
        o.sample = 0;
        o.lr = 0.05;
        w2v::Vocab vocab;
        const auto vectors = train(sentences, o, vocab, hogwild);
        REQUIRE(vocab.size() == 12);
        double same = 0, other = 0;
        int same_n = 0, other_n = 0;
        for (std::size_t i = 0; i < vocab.size(); ++i) {
          const bool topic = animals.count(vocab.words[i]) > 0;
          // the 5 nearest words are the other 5 of the topic
          for (const auto& [j, c] : w2v::nearest(vectors, vectors[i], 5, static_cast<int64_t>(i))) {
            CAPTURE(vocab.words[i]);
            CAPTURE(vocab.words[j]);
            CHECK((animals.count(vocab.words[j]) > 0) == topic);
          }
          for (std::size_t j = 0; j < vocab.size(); ++j) {
            if (j == i) continue;
            const double c = w2v::cosine(vectors[i], vectors[j]);
            ((animals.count(vocab.words[j]) > 0) == topic ? same : other) += c;
            ++((animals.count(vocab.words[j]) > 0) == topic ? same_n : other_n);
          }
        }
        CHECK(same / same_n > other / other_n + 0.5);  // about 1.0 and 0.05 here
      }
  }

  TEST_CASE("the Brown corpus reader keeps the words, lowercased, and drops the tags") {
    const std::string dir = tg::test::source_path("tests/data/brown_sample");
    const std::vector<tg::data::Sentence> s = tg::data::read_tagged_sentences(dir);
    REQUIRE(s.size() == 4);  // two sentences from each of the two files, ca01 first
    CHECK(s[0] == tg::data::Sentence{"the",
                                     "fulton",
                                     "county",
                                     "grand",
                                     "jury",
                                     "said",
                                     "friday",
                                     "an",
                                     "investigation",
                                     "of",
                                     "atlanta's",
                                     "recent",
                                     "primary",
                                     "election",
                                     "produced",
                                     "``",
                                     "no",
                                     "evidence",
                                     "''",
                                     "that",
                                     "any",
                                     "irregularities",
                                     "took",
                                     "place",
                                     "."});
    CHECK(s[2][0] == "dear");
    CHECK(s[3].back() == ".");
    CHECK(tg::data::read_tagged_sentences(dir + "/cr09", {.lowercase = false})[0][0] == "Dear");

    const std::string bad = (std::filesystem::temp_directory_path() / "test_word2vec_bad_tagged").string();
    std::ofstream(bad) << "\tThe/at jury/nn\n\n\tsaid friday/nr\n";
    try {
      tg::data::read_tagged_sentences(bad);
      FAIL("no FileError");
    } catch (const tg::data::FileError& e) {
      CHECK(e.line() == 3);
      CHECK(std::string(e.what()).find("'said' is not word/tag") != std::string::npos);
    }
    std::ofstream(bad) << "The jury\n\n  said  Friday .\n";
    CHECK(tg::data::read_text_sentences(bad) ==
          std::vector<tg::data::Sentence>{{"the", "jury"}, {"said", "friday", "."}});
    std::filesystem::remove(bad);
    CHECK_THROWS_AS(tg::data::read_text_sentences(bad), tg::data::FileError);
  }
}
