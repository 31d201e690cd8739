// Tests for nn/ layers: Linear, Embedding and EmbeddingBag against PyTorch
// (tests/data/nn_reference.json, written by tests/tools/gen_nn_reference.py),
// gradcheck, the Embedding = one-hot x Linear equivalence, errors, init and
// clip_grad_norm_.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <xtensor/xadapt.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

using nlohmann::json;
using tg::Array;
using tg::Indices;
using tg::Tensor;
using tg::test::to_array;
using tg::test::to_int_array;
namespace nn = tg::nn;

namespace {

// The weight's gradient is SparseRows, coalesced, holding exactly the distinct
// rows the input read (padding excluded): unique rows x dim floats, no more.
void check_coalesced(const Tensor& weight, const Indices& input, std::optional<int64_t> padding_idx) {
  std::set<int64_t> used(input.begin(), input.end());
  if (padding_idx) used.erase(*padding_idx);
  REQUIRE(weight.grad().is_sparse());
  const tg::SparseRows& g = weight.grad().sparse();
  CHECK_NOTHROW(g.check("test"));  // sorted, unique, in range
  CHECK(g.rows == std::vector<int64_t>(used.begin(), used.end()));
  CHECK(g.values.shape()[0] == used.size());
  CHECK(g.nbytes() == used.size() * (sizeof(int64_t) + g.cols() * sizeof(float)));
}

Array transposed(const Array& a) {
  return xt::transpose(a);
}

nn::EmbeddingOptions embedding_options(const json& c, bool sparse) {
  nn::EmbeddingOptions o;
  if (!c.at("padding_idx").is_null()) o.padding_idx = c.at("padding_idx").get<int64_t>();
  if (!c.at("max_norm").is_null()) o.max_norm = c.at("max_norm").get<float>();
  o.norm_type = c.at("norm_type").get<float>();
  o.sparse = sparse;
  return o;
}

nn::EmbeddingBagOptions bag_options(const json& c, bool sparse) {
  nn::EmbeddingBagOptions o;
  const std::string mode = c.at("mode");
  o.mode = mode == "sum"    ? nn::EmbeddingBagMode::sum
           : mode == "mean" ? nn::EmbeddingBagMode::mean
                            : nn::EmbeddingBagMode::max;
  o.include_last_offset = c.at("include_last_offset");
  if (!c.at("padding_idx").is_null()) o.padding_idx = c.at("padding_idx").get<int64_t>();
  if (!c.at("max_norm").is_null()) o.max_norm = c.at("max_norm").get<float>();
  o.sparse = sparse;
  return o;
}

// A CSR batch and the same rows as a dense [rows, cols] matrix.
Array densify(const tg::CsrBatch& csr, std::size_t cols) {
  Array out = xt::zeros<float>({csr.indptr.size() - 1, cols});
  for (std::size_t r = 0; r + 1 < csr.indptr.size(); ++r)
    for (int64_t k = csr.indptr[r]; k < csr.indptr[r + 1]; ++k) out(r, csr.indices[k]) += csr.values[k];
  return out;
}

}  // namespace

TEST_SUITE("nn") {
  // ------------------------------------------------------------ PyTorch parity

  TEST_CASE("Linear matches PyTorch: 2-D and 3-D input, with and without bias") {
    for (const char* name : {"linear_2d", "linear_3d", "linear_no_bias"}) {
      INFO(name);
      const json& c = tg::test::reference_case("nn_reference", name);
      const Array weight = to_array(c["weight"]);
      const bool has_bias = !c["bias"].is_null();
      nn::Linear fc(weight.shape()[1], weight.shape()[0], has_bias);
      {
        tg::NoGradGuard no_grad;  // overwrite the public weight handles in place
        fc.weight.copy_(weight);
        if (has_bias) fc.bias->copy_(to_array(c["bias"]));
      }
      Tensor x(to_array(c["input"]), true);
      Tensor out = fc(x);
      out.backward(to_array(c["w"]));
      CHECK_ALLCLOSE(out.value(), to_array(c["out"]));
      CHECK_ALLCLOSE(fc.weight.grad().dense(), to_array(c["grad_weight"]));
      CHECK_ALLCLOSE(x.grad().dense(), to_array(c["grad_input"]));
      if (has_bias) CHECK_ALLCLOSE(fc.bias->grad().dense(), to_array(c["grad_bias"]));
    }
  }

  TEST_CASE("Embedding matches PyTorch: repeats, 2-D input, padding_idx, max_norm") {
    for (const char* name : {"embedding_duplicates", "embedding_2d", "embedding_padding",
                             "embedding_padding_negative", "embedding_max_norm", "embedding_max_norm_l1"}) {
      for (bool sparse : {true, false}) {
        INFO(name << (sparse ? " sparse" : " dense"));
        const json& c = tg::test::reference_case("nn_reference", name);
        auto emb = nn::Embedding::from_pretrained(to_array(c["weight"]), embedding_options(c, sparse),
                                                  /*freeze=*/false);
        const Indices input = to_int_array(c["input"]);
        Tensor out = emb(input);
        out.backward(to_array(c["w"]));
        CHECK_ALLCLOSE(out.value(), to_array(c["out"]));
        CHECK_ALLCLOSE(emb.weight.grad_dense(), to_array(c["grad_weight"]));
        CHECK_ALLCLOSE(emb.weight.value(), to_array(c["weight_after"]));  // max_norm renormalised
        if (sparse)
          check_coalesced(emb.weight, input, emb.options().padding_idx);
        else
          CHECK(emb.weight.grad().is_dense());
      }
    }
  }

  TEST_CASE("EmbeddingBag matches PyTorch: modes, offsets, weights, padding, empty bags") {
    std::size_t cases = 0;
    for (const auto& [name, c] : tg::test::reference("nn_reference").at("cases").items()) {
      if (name.rfind("bag_", 0) != 0) continue;
      ++cases;
      for (bool sparse : {true, false}) {
        INFO(name << (sparse ? " sparse" : " dense"));
        auto bag = nn::EmbeddingBag::from_pretrained(to_array(c["weight"]), bag_options(c, sparse),
                                                     /*freeze=*/false);
        const Indices input = to_int_array(c["input"]);
        std::optional<Tensor> weights;
        if (!c["per_sample_weights"].is_null()) weights = Tensor(to_array(c["per_sample_weights"]), true);
        Tensor out =
            c["offsets"].is_null() ? bag(input, weights) : bag(input, to_int_array(c["offsets"]), weights);
        out.backward(to_array(c["w"]));
        CHECK_ALLCLOSE(out.value(), to_array(c["out"]));
        CHECK_ALLCLOSE(bag.weight.grad_dense(), to_array(c["grad_weight"]));
        CHECK_ALLCLOSE(bag.weight.value(), to_array(c["weight_after"]));
        if (weights) CHECK_ALLCLOSE(weights->grad().dense(), to_array(c["grad_per_sample_weights"]));
        if (sparse)
          check_coalesced(bag.weight, input, bag.options().padding_idx);
        else
          CHECK(bag.weight.grad().is_dense());
      }
    }
    CHECK(cases == 16);
  }

  // --------------------------------------------------------------- gradcheck

  TEST_CASE("gradcheck: Linear w.r.t. input, weight and bias") {
    tg::Generator gen(1);
    nn::Linear fc(4, 3, true, gen);
    Tensor x = tg::randn({5, 4}, gen, true);
    auto report =
        tg::gradcheck([&](const std::vector<Tensor>& in) { return fc(in[0]); }, {x, fc.weight, *fc.bias});
    INFO(report.str());
    CHECK(report.ok);
    CHECK(report.checked == 5 * 4 + 3 * 4 + 3);
  }

  TEST_CASE("gradcheck: Embedding and EmbeddingBag w.r.t. the weight and per_sample_weights") {
    tg::Generator gen(2);
    const Indices input = {1, 4, 4, 0, 2, 4, 1}, offsets = {0, 3, 3, 5};  // bag 1 is empty
    // No padding_idx here: Embedding returns the padding row but, on purpose,
    // gives it no gradient, which a finite difference would see. (A bag leaves
    // padding out of its value too, so there the gradient is truly zero.)
    nn::Embedding emb(6, 3, {}, gen);
    auto report = tg::gradcheck([&](const std::vector<Tensor>&) { return emb(input); }, {emb.weight});
    INFO(report.str());
    CHECK(report.ok);

    for (auto mode : {nn::EmbeddingBagMode::sum, nn::EmbeddingBagMode::mean, nn::EmbeddingBagMode::max}) {
      nn::EmbeddingBag bag(6, 3, {.mode = mode, .padding_idx = 0}, gen);
      std::vector<Tensor> inputs{bag.weight};
      if (mode == nn::EmbeddingBagMode::sum) inputs.push_back(tg::rand({7}, gen, true));  // weights
      auto fn = [&](const std::vector<Tensor>& in) {
        return in.size() > 1 ? bag(input, offsets, in[1]) : bag(input, offsets);
      };
      report = tg::gradcheck(fn, inputs);
      INFO(report.str());
      CHECK(report.ok);
    }
  }

  // ---------------------------------------------- Embedding = one-hot x Linear

  TEST_CASE("Embedding on ids equals Linear on one-hot rows; sparse gradient equals dense") {
    tg::Generator gen(3);
    const std::size_t vocab = 7, dim = 3;
    nn::Linear fc(vocab, dim, /*bias=*/false, gen);  // weight [dim, vocab]
    auto emb = nn::Embedding::from_pretrained(transposed(fc.weight.value()), {}, /*freeze=*/false);
    const Indices ids = {2, 5, 2, 0};
    const Array w = tg::randn({4, dim}, gen).value();

    // [4, vocab] x [vocab, dim]: the one-hot product picks rows of W^T
    Tensor dense = fc(tg::one_hot(ids, vocab));
    Tensor looked_up = emb(ids);
    CHECK_ALLCLOSE(looked_up.value(), dense.value());
    dense.backward(w);
    looked_up.backward(w);
    CHECK_ALLCLOSE(transposed(emb.weight.grad_dense()), fc.weight.grad().dense());
    check_coalesced(emb.weight, ids, std::nullopt);  // 3 rows, not 7
  }

  TEST_CASE("EmbeddingBag sum on CSR counts or tf-idf equals Linear on the dense rows") {
    tg::Generator gen(4);
    const std::size_t vocab = 9, dim = 4;
    // Three documents; the second repeats column 3 (scipy sums repeats too).
    const tg::CsrBatch counts{{0, 3, 6, 7}, {1, 4, 8, 3, 0, 3, 5}, {2, 1, 1, 1, 3, 2, 4}};
    const tg::CsrBatch tfidf{
        counts.indptr, counts.indices, {0.31f, -1.2f, 0.05f, 2.5f, 0.7f, 0.4f, 1.9f}};
    for (const tg::CsrBatch* csr : {&counts, &tfidf}) {
      nn::Linear fc(vocab, dim, /*bias=*/false, gen);
      auto bag = nn::EmbeddingBag::from_pretrained(transposed(fc.weight.value()),
                                                   {.mode = nn::EmbeddingBagMode::sum}, /*freeze=*/false);
      const Array w = tg::randn({3, dim}, gen).value();

      Tensor dense = fc(Tensor(densify(*csr, vocab)));  // [3, vocab] x [vocab, dim]
      Tensor bags = bag(*csr);                          // the same, never densified
      CHECK_ALLCLOSE(bags.value(), dense.value());
      dense.backward(w);
      bags.backward(w);
      CHECK_ALLCLOSE(transposed(bag.weight.grad_dense()), fc.weight.grad().dense());
      check_coalesced(bag.weight, xt::adapt(csr->indices, {csr->indices.size()}), std::nullopt);
    }
  }

  // ------------------------------------------------------- sparse gradients

  TEST_CASE("a sparse gradient of a large table holds only the rows used") {
    const std::size_t vocab = 200000, dim = 8;
    nn::Embedding emb(vocab, dim);
    const Indices ids = {199999, 17, 17, 5, 199999};
    emb(ids).backward(xt::ones<float>(tg::Shape{5, dim}));
    check_coalesced(emb.weight, ids, std::nullopt);
    CHECK(emb.weight.grad().nbytes() == 3 * (8 + dim * 4));  // vs vocab * dim * 4 = 6.4 MB dense
    CHECK(emb.weight.grad().sparse().values(1, 0) == 2.0f);  // row 17, read twice

    // A second backward merges into the same coalesced gradient.
    emb(Indices{5, 3}).backward(xt::ones<float>(tg::Shape{2, dim}));
    CHECK(emb.weight.grad().sparse().rows == std::vector<int64_t>{3, 5, 17, 199999});
    CHECK(emb.weight.grad().sparse().values(1, 0) == 2.0f);  // row 5, once per pass
  }

  TEST_CASE("many entries: the output and the sparse gradient are the entry-by-entry loops' bits") {
    // Backward groups the entries by row (a radix sort once there are 256 or
    // more): check it against the plain loop, entry by entry in input order,
    // for tables that need one, two and three 11-bit digits of row id. The row
    // loops may run as AVX2 builds (core/kernels/dispatch.hpp): dim 37 runs their
    // vector body and their tail, and neither may change a bit.
    tg::Generator gen(11);
    for (const std::size_t vocab : {std::size_t{1500}, std::size_t{3000}, std::size_t{1} << 23}) {
      for (const auto mode : {nn::EmbeddingBagMode::sum, nn::EmbeddingBagMode::mean}) {
        CAPTURE(vocab);
        const std::size_t dim = vocab > 100000 ? 1 : 37, bags = 40, n = 2000;
        nn::EmbeddingBag bag(vocab, dim, {.mode = mode, .padding_idx = 7}, gen);
        // Ids from a small pool of rows spread over the table: many repeats.
        std::vector<int64_t> pool(300);
        for (auto& id : pool) id = static_cast<int64_t>(gen() % vocab);
        pool[0] = 7;  // the padding row, which gets no gradient
        Indices input = xt::empty<int64_t>({n});
        for (auto& id : input) id = pool[gen() % pool.size()];
        Indices offsets = xt::empty<int64_t>({bags});
        for (std::size_t b = 0; b < bags; ++b) offsets(b) = static_cast<int64_t>(b * (n / bags));
        const bool weighted = mode == nn::EmbeddingBagMode::sum;
        std::optional<Tensor> psw;
        if (weighted) psw = tg::randn({n}, gen);
        const Array g = tg::randn({bags, dim}, gen).value();
        Tensor out = bag(input, offsets, psw);
        out.backward(g);

        // The reference: each entry adds coef * row to its bag's output, and
        // coef * g[bag] to its row's gradient, in input order.
        std::map<int64_t, std::vector<float>> want;
        std::vector<float> want_out(bags * dim, 0.0f);
        const std::size_t per_bag = n / bags;
        for (std::size_t k = 0; k < n; ++k) {
          if (input(k) == 7) continue;
          const std::size_t b = k / per_bag;
          std::size_t counted = 0;  // mean divides by the non-padding entries
          for (std::size_t j = b * per_bag; j < (b + 1) * per_bag; ++j) counted += input(j) != 7;
          const float coef = weighted ? psw->value()(k) : 1.0f / static_cast<float>(counted);
          auto& row = want.try_emplace(input(k), dim, 0.0f).first->second;
          for (std::size_t c = 0; c < dim; ++c) {
            row[c] += coef * g(b, c);
            want_out[b * dim + c] += coef * bag.weight.value()(input(k), c);
          }
        }
        std::size_t out_mismatches = 0;
        for (std::size_t i = 0; i < want_out.size(); ++i) out_mismatches += out.value().data()[i] != want_out[i];
        CHECK(out_mismatches == 0);
        const tg::SparseRows& got = bag.weight.grad().sparse();
        REQUIRE(got.rows.size() == want.size());
        std::size_t i = 0, mismatches = 0;
        for (const auto& [row, values] : want) {
          CHECK(got.rows[i] == row);
          for (std::size_t c = 0; c < dim; ++c) mismatches += got.values(i, c) != values[c];
          ++i;
        }
        CHECK(mismatches == 0);  // the same summation order gives the same bits
      }
    }
  }

  TEST_CASE("Embedding's plain backward and EmbeddingBag's grouped one give the same bits") {
    // Embedding's backward is SparseRows::coalesce of the upstream rows; the
    // bag's groups entries by row (a radix sort from 256 entries on). The same
    // ids, one per bag, must give the same gradient bit for bit, -0.0 included.
    tg::Generator gen(5);
    for (const std::size_t n : {std::size_t{4}, std::size_t{1000}}) {
      for (const std::optional<int64_t> padding : {std::optional<int64_t>{}, std::optional<int64_t>{3}}) {
        CAPTURE(n);
        CAPTURE(padding.has_value());
        const std::size_t vocab = 5000, dim = 5;
        const Array table = tg::randn({vocab, dim}, gen).value();
        auto emb = nn::Embedding::from_pretrained(table, {.padding_idx = padding}, /*freeze=*/false);
        auto bag = nn::EmbeddingBag::from_pretrained(
            table, {.mode = nn::EmbeddingBagMode::sum, .padding_idx = padding}, /*freeze=*/false);
        Indices ids = xt::empty<int64_t>({n});
        for (auto& id : ids) id = static_cast<int64_t>(gen() % 40);  // few rows, many repeats
        ids(0) = 45;                                                 // read once, below with a -0.0
        Indices offsets = xt::empty<int64_t>({n});
        for (std::size_t k = 0; k < n; ++k) offsets(k) = static_cast<int64_t>(k);
        Array g = tg::randn({n, dim}, gen).value();
        g(0, 0) = -0.0f;  // row 45's only contribution: -0.0 in both (0.0f + -0.0f would be +0.0)

        emb(ids).backward(g);
        bag(ids, offsets).backward(g);
        const tg::SparseRows& plain = emb.weight.grad().sparse();
        const tg::SparseRows& grouped = bag.weight.grad().sparse();
        CHECK(plain.rows == grouped.rows);
        REQUIRE(plain.values.size() == grouped.values.size());
        CHECK(std::memcmp(plain.values.data(), grouped.values.data(), plain.values.size() * sizeof(float)) ==
              0);
      }
    }
  }

  TEST_CASE("output shapes, frozen weights and grad mode") {
    nn::Embedding emb(5, 3);
    CHECK(emb(Indices{{1, 2, 3}, {0, 0, 4}}).shape() == tg::Shape{2, 3, 3});
    CHECK(emb(Indices(4)).shape() == tg::Shape{3});  // a 0-d index
    CHECK(emb(Indices(xt::zeros<int64_t>({0}))).shape() == tg::Shape{0, 3});

    nn::EmbeddingBag bag(5, 3);
    CHECK(bag(Indices{{1, 2}, {0, 4}, {3, 3}}).shape() == tg::Shape{3, 3});
    CHECK(bag(Indices{1, 2}, Indices{0, 1, 2, 2}).shape() == tg::Shape{4, 3});  // two empty bags

    auto frozen = nn::Embedding::from_pretrained(Array{{1, 2}, {3, 4}});
    CHECK_FALSE(frozen.weight.requires_grad());
    CHECK_FALSE(frozen(Indices{1}).requires_grad());
    CHECK(frozen(Indices{1}).value() == Array{{3, 4}});

    tg::NoGradGuard no_grad;
    CHECK_FALSE(emb(Indices{1}).requires_grad());
  }

  TEST_CASE("padding_idx: the row starts at zero, is returned as stored, never gets a gradient") {
    nn::Embedding emb(4, 2, {.padding_idx = -1});  // the last row
    CHECK(emb.options().padding_idx == 3);
    CHECK(xt::view(emb.weight.value(), 3) == Array{0, 0});
    emb(Indices{3, 1, 3}).backward(xt::ones<float>(tg::Shape{3, 2}));
    CHECK(emb.weight.grad().sparse().rows == std::vector<int64_t>{1});

    nn::EmbeddingBag bag(4, 2, {.mode = nn::EmbeddingBagMode::mean, .padding_idx = 0});
    Tensor out = bag(Indices{{0, 0}, {0, 2}});
    CHECK(xt::view(out.value(), 0) == Array{0, 0});  // only padding: an empty bag
    CHECK_ALLCLOSE(Array(xt::view(out.value(), 1)), Array(xt::view(bag.weight.value(), 2)));  // mean over 1
  }

  // ------------------------------------------------------------------ errors

  TEST_CASE("EmbeddingBag rejects bad input before any work, leaving the module untouched") {
    // max_norm this small would rescale every row read, so any early work would show.
    nn::EmbeddingBag bag(6, 3, {.mode = nn::EmbeddingBagMode::sum, .max_norm = 0.01f});
    const Array before = bag.weight.value();
    const Indices input = {1, 2, 4, 4, 0};
    auto unchanged = [&] {
      CHECK(bag.weight.value() == before);
      CHECK(bag.weight.grad().empty());
    };
    using doctest::Contains;
    CHECK_THROWS_WITH_AS(bag(input, Indices{1, 3}), Contains("EmbeddingBag: offsets[0] must be 0; got 1"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(input, Indices{0, 3, 2}),
                         Contains("offsets must not decrease; offsets[2] = 2 < offsets[1] = 3"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(input, Indices{0, 9}),
                         Contains("EmbeddingBag: offsets[1] = 9 is past the end of the input (5 indices)"),
                         std::out_of_range);
    CHECK_THROWS_WITH_AS(bag(input, Indices{{0, 1}}), Contains("offsets must be 1-D; got shape [1, 2]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(Indices{{1, 2}}, Indices{0}), Contains("input must be 1-D; got shape [1, 2]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(input), Contains("input must be 2-D [bags, n]; got shape [5]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(Indices{1, 6}, Indices{0}),
                         Contains("EmbeddingBag: index 6 out of range for size 6"), std::out_of_range);
    CHECK_THROWS_WITH_AS(bag(Indices{1, -1}, Indices{0}), Contains("EmbeddingBag: index -1 out of range"),
                         std::out_of_range);
    CHECK_THROWS_WITH_AS(bag(Indices{{1, 9}}), Contains("EmbeddingBag: index 9"), std::out_of_range);
    CHECK_THROWS_WITH_AS(bag(input, Indices{0}, Tensor({1.0f, 2.0f, 3.0f})),
                         Contains("per_sample_weights of shape [3] for input of shape [5]"),
                         std::invalid_argument);
    unchanged();

    nn::EmbeddingBag last(6, 3, {.include_last_offset = true});
    CHECK_THROWS_WITH_AS(
        last(input, Indices{0, 3}),
        Contains("with include_last_offset, the last offset must be the input's length 5; got 3"),
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(last(input, Indices(xt::zeros<int64_t>({0}))),
                         Contains("include_last_offset needs at least one offset"), std::invalid_argument);

    nn::EmbeddingBag mean(6, 3);  // mode mean, PyTorch's default
    CHECK_THROWS_WITH_AS(mean(input, Indices{0}, Tensor(xt::ones<float>({5}))),
                         Contains("per_sample_weights are only supported for mode 'sum' (got 'mean')"),
                         std::invalid_argument);
  }

  TEST_CASE("EmbeddingBag rejects a bad CSR batch") {
    nn::EmbeddingBag bag(6, 3, {.mode = nn::EmbeddingBagMode::sum, .max_norm = 0.01f});
    const Array before = bag.weight.value();
    using doctest::Contains;
    CHECK_THROWS_WITH_AS(bag(tg::CsrBatch{{0, 2}, {1, 2, 3}, {}}),
                         Contains("CSR indptr must end at the number of indices (3); got 2"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(tg::CsrBatch{{}, {}, {}}), Contains("got an empty indptr"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(tg::CsrBatch{{1, 3}, {1, 2, 3}, {}}),
                         Contains("offsets[0] must be 0; got 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(tg::CsrBatch{{0, 2, 1, 3}, {1, 2, 3}, {}}), Contains("must not decrease"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(bag(tg::CsrBatch{{0, 3}, {1, 7, 3}, {}}), Contains("EmbeddingBag: index 7"),
                         std::out_of_range);
    CHECK_THROWS_WITH_AS(bag(tg::CsrBatch{{0, 3}, {1, 2, 3}, {1.0f}}),
                         Contains("CSR has 1 values for 3 indices"), std::invalid_argument);
    nn::EmbeddingBag max_bag(6, 3, {.mode = nn::EmbeddingBagMode::max});
    CHECK_THROWS_WITH_AS(max_bag(tg::CsrBatch{{0, 1}, {1}, {2.0f}}),
                         Contains("only supported for mode 'sum' (got 'max')"), std::invalid_argument);
    CHECK(max_bag(tg::CsrBatch{{0, 1}, {1}, {}}).shape() == tg::Shape{1, 3});  // plain bags are fine
    CHECK(bag.weight.value() == before);
    CHECK(bag.weight.grad().empty());
  }

  TEST_CASE("Embedding, Linear and constructors reject bad arguments") {
    using doctest::Contains;
    nn::Embedding emb(6, 3, {.max_norm = 0.01f});
    const Array before = emb.weight.value();
    CHECK_THROWS_WITH_AS(emb(Indices{0, 6}), Contains("Embedding: index 6 out of range for size 6"),
                         std::out_of_range);
    CHECK_THROWS_WITH_AS(emb(Indices{{1, -2}}), Contains("Embedding: index -2"), std::out_of_range);
    CHECK(emb.weight.value() == before);  // nothing renormalised

    CHECK_THROWS_WITH_AS(nn::Embedding(6, 3, {.padding_idx = 6}),
                         Contains("Embedding: padding_idx 6 out of range for 6 embeddings"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::EmbeddingBag(6, 3, {.padding_idx = -7}),
                         Contains("EmbeddingBag: padding_idx -7 out of range"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::Embedding(6, 3, {.norm_type = 0.0f}), Contains("norm_type"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::Embedding::from_pretrained(Array{1, 2, 3}),
                         Contains("Embedding::from_pretrained: weight must be 2-D [num, dim]; got [3]"),
                         std::invalid_argument);

    nn::Linear fc(4, 2);
    CHECK_THROWS_WITH_AS(fc(tg::zeros({3, 5})), Contains("[3, 5]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::init::kaiming_uniform_(tg::zeros({4})), Contains("at least 2 dims"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::init::uniform_(tg::zeros({4}), 1.0f, 0.0f), Contains("greater than high"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(nn::utils::clip_grad_norm_({}, 1.0f, -1.0f), Contains("norm_type"),
                         std::invalid_argument);
  }

  TEST_CASE("Embedding with rows of zero columns: a lookup and its backward touch no element") {
    // Runs under UBSan in ./scripts/test --sanitize: the backward bound a
    // reference to element (i, 0) of a [n, 0] array.
    nn::Embedding emb(3, 3);
    emb.weight = Tensor(Array(xt::zeros<float>({3, 0})), true);
    Tensor y = emb(Indices{0, 2, 0});
    CHECK(y.shape() == tg::Shape{3, 0});
    y.backward(Array(xt::zeros<float>({3, 0})));
    REQUIRE(!emb.weight.grad().empty());
    CHECK(emb.weight.grad().to_dense(tg::Shape{3, 0}).shape()[1] == 0);
  }

  TEST_CASE("Embedding and EmbeddingBag refuse a weight that is not 2-D (a public member anyone may set)") {
    using doctest::Contains;
    nn::Embedding emb(4, 3);
    emb.weight = Tensor(Array{1.0f, 2.0f, 3.0f}, true);  // the shape was read past its end before
    CHECK_THROWS_WITH_AS(emb(Indices{0}), Contains("Embedding: weight must be 2-D [num, dim]; got [3]"),
                         std::invalid_argument);
    nn::EmbeddingBag bag(4, 3, {.mode = nn::EmbeddingBagMode::sum});
    bag.weight = Tensor(Array(1.0f), true);
    CHECK_THROWS_WITH_AS(bag(Indices{0, 1}, Indices{0}), Contains("EmbeddingBag: weight must be 2-D"),
                         std::invalid_argument);
    CHECK_THROWS_AS(bag(Indices{{0, 1}}), std::invalid_argument);
    CHECK_THROWS_AS(bag(tg::CsrBatch{{0, 1}, {0}, {}}), std::invalid_argument);
    CHECK(emb.weight.grad().empty());
    CHECK(bag.weight.grad().empty());
  }

  // -------------------------------------------------------------------- init

  TEST_CASE("initialisation follows PyTorch's distributions and the generator") {
    tg::Generator gen(5);
    nn::Linear fc(100, 50, true, gen);  // bound 1/sqrt(100) = 0.1
    CHECK(xt::amax(xt::abs(fc.weight.value()))() <= 0.1f);
    CHECK(xt::amax(xt::abs(fc.weight.value()))() > 0.099f);  // 5000 draws reach the edge
    CHECK(xt::amax(xt::abs(fc.bias->value()))() <= 0.1f);

    nn::Embedding emb(1000, 10, {.padding_idx = 0}, gen);  // N(0, 1)
    const Array rest = xt::view(emb.weight.value(), xt::range(1, 1000));
    CHECK(std::abs(xt::mean(rest)()) < 0.05);
    CHECK(xt::stddev(rest)() == doctest::Approx(1.0).epsilon(0.05));
    CHECK(xt::view(emb.weight.value(), 0) == xt::zeros<float>({10}));

    tg::Generator a(9), b(9);
    CHECK(nn::Linear(3, 2, true, a).weight.value() == nn::Linear(3, 2, true, b).weight.value());
    tg::manual_seed(11);
    const Array first = nn::EmbeddingBag(4, 2).weight.value();
    tg::manual_seed(11);
    CHECK(nn::EmbeddingBag(4, 2).weight.value() == first);  // the default generator

    Tensor t = tg::zeros({3, 4});
    nn::init::normal_(t, 2.0f, 0.0f, gen);
    CHECK(t.value() == xt::full_like(t.value(), 2.0f));
    nn::init::zeros_(t);
    CHECK(t.value() == xt::zeros<float>({3, 4}));
    CHECK(nn::init::fan_in(tg::zeros({8, 3, 5})) == 15);
    CHECK(nn::Linear(0, 3).weight.numel() == 0);  // nothing to draw, no division by zero
  }

  // -------------------------------------------------------- clip_grad_norm_

  TEST_CASE("clip_grad_norm_ on paper: dense and sparse gradients together") {
    Tensor dense = tg::zeros({2}, true), table = tg::zeros({5, 1}, true), unused = tg::zeros({3}, true);
    dense.accumulate_grad(Array{3, 4});
    tg::SparseRows rows;
    rows.rows = {2};
    rows.values = xt::xtensor<float, 2>{{12}};
    rows.num_rows = 5;
    table.accumulate_grad(rows);
    const std::vector<Tensor> params{dense, table, unused};  // unused has no gradient: skipped

    CHECK(nn::utils::clip_grad_norm_(params, 100.0f) == doctest::Approx(13.0));  // sqrt(9 + 16 + 144)
    CHECK(dense.grad().dense() == Array{3, 4});                                  // below max_norm: untouched
    CHECK(nn::utils::clip_grad_norm_(params, 100.0f, 1.0f) == doctest::Approx(19.0));
    CHECK(nn::utils::clip_grad_norm_(params, 100.0f, std::numeric_limits<float>::infinity()) ==
          doctest::Approx(12.0));

    CHECK(nn::utils::clip_grad_norm_(params, 6.5f) == doctest::Approx(13.0));
    CHECK_ALLCLOSE(dense.grad().dense(), Array({1.5f, 2.0f}));  // scaled by 6.5 / 13
    REQUIRE(table.grad().is_sparse());                          // still sparse
    CHECK(table.grad().sparse().values(0, 0) == doctest::Approx(6.0));
    CHECK(unused.grad().empty());
    CHECK(nn::utils::clip_grad_norm_({unused}, 1.0f) == 0.0f);
  }

  TEST_CASE("clip_grad_norm_ matches PyTorch") {
    for (const json& c : tg::test::reference("nn_reference").at("clip_grad_norm")) {
      const float norm_type =
          c["norm_type"].is_string() ? std::numeric_limits<float>::infinity() : c["norm_type"].get<float>();
      INFO("norm_type " << norm_type << ", max_norm " << c["max_norm"].get<float>());
      auto emb = nn::Embedding::from_pretrained(to_array(c["emb_weight"]), {}, /*freeze=*/false);
      nn::Linear fc(3, 2);
      {
        tg::NoGradGuard no_grad;
        fc.weight.copy_(to_array(c["lin_weight"]));
        fc.bias->copy_(to_array(c["lin_bias"]));
      }
      Tensor loss = tg::sum(emb(to_int_array(c["input"])) * Tensor(to_array(c["w_emb"]))) +
                    tg::sum(fc(Tensor(to_array(c["x"]))) * Tensor(to_array(c["w_lin"])));
      loss.backward();
      const std::vector<Tensor> params{emb.weight, fc.weight, *fc.bias};
      const float total = nn::utils::clip_grad_norm_(params, c["max_norm"].get<float>(), norm_type);
      CHECK(total == doctest::Approx(c["total_norm"].get<double>()).epsilon(1e-5));
      CHECK(emb.weight.grad().is_sparse());
      for (std::size_t i = 0; i < params.size(); ++i)
        CHECK_ALLCLOSE(params[i].grad_dense(), to_array(c["grads"][i]));
    }
  }
}
