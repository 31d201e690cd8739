// Embedding and EmbeddingBag: lookup tables whose gradient touches only the
// rows that were looked up, as PyTorch's nn.Embedding / nn.EmbeddingBag.
//
//   tg::nn::Embedding emb(10000, 64);        // weight [10000, 64], N(0, 1)
//   tg::Tensor x = emb(ids);                 // ids [..] -> x [.., 64]
//
//   tg::nn::EmbeddingBag bag(10000, 64, {.mode = tg::nn::EmbeddingBagMode::sum});
//   tg::Tensor docs = bag(csr);              // one row per document, never densified
//
// With sparse = true (the default here) backward() gives the weight a
// SparseRows gradient that is already coalesced: sorted unique rows, repeats
// summed, (unique rows x dim) floats. No V x dim buffer is ever made. Looking
// up row r of W is the same as multiplying a one-hot row by W, so an Embedding
// equals a bias-free Linear on one-hot input (weight transposed), and an
// EmbeddingBag in sum mode equals a Linear on count or tf-idf rows; only the
// cost differs (tests/test_nn.cpp checks both).
//
// Differences from PyTorch:
//   - sparse defaults to true (PyTorch: false); sparse = false gives a dense
//     [num, dim] gradient.
//   - EmbeddingBag supports sparse gradients in max mode too (PyTorch refuses).
//   - scale_grad_by_freq is not supported.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "../core/csr_batch.hpp"
#include "../core/factories.hpp"
#include "../core/scoped.hpp"
#include "module.hpp"

namespace tg::nn {

struct EmbeddingOptions {
  // This row is returned as stored but never gets a gradient; the constructor
  // zeroes it. Negative counts from the end, as in PyTorch.
  std::optional<int64_t> padding_idx = std::nullopt;
  // Before each lookup, rows read by the input whose norm_type-norm exceeds
  // max_norm are scaled down to max_norm, in place and without a gradient.
  std::optional<float> max_norm = std::nullopt;
  float norm_type = 2.0f;  // > 0, or infinity
  bool sparse = true;
};

class Embedding : public Module {
 public:
  // weight N(0, 1), padding row zeroed.
  Embedding(std::size_t num_embeddings, std::size_t embedding_dim, EmbeddingOptions options = {},
            Generator& gen = default_generator());
  // Uses `weight` [num, dim] as it is (its padding row is not zeroed, as in
  // PyTorch). freeze = true: the weight gets no gradient.
  static Embedding from_pretrained(const Array& weight, EmbeddingOptions options = {}, bool freeze = true);

  // input of any shape [..] -> [.., dim]. Not const: max_norm rescales rows of weight.
  Tensor forward(const Indices& input);
  Tensor operator()(const Indices& input) { return forward(input); }

  // Row p of h dotted with the rows ids[p, 0..C) of the table: h [P, dim],
  // ids [P, C] -> scores [P, C]. The same values as
  //   tg::sum(emb(ids) * tg::reshape(h, {P, 1, dim}), 2)
  // in one op, without the [P, C, dim] lookup in between: word2vec's output
  // side, where h holds words' vectors and ids[p] the word to predict and its
  // negative samples. Backward: h gets sum_c g[p, c] weight[ids[p, c]]; the
  // weight gets a SparseRows gradient (dense with sparse = false) whose row r
  // is the sum of g[p, c] h[p] over the (p, c) with ids[p, c] == r. Each
  // score and each row is computed the same way on any number of threads.
  Tensor dot(const Tensor& h, const Indices& ids);
  std::shared_ptr<Module> clone() const override {
    return copy_into(
        std::make_shared<Embedding>(Embedding(weight.value(), options_, weight.requires_grad())));
  }

  std::size_t num_embeddings() const { return weight.shape()[0]; }
  std::size_t embedding_dim() const { return weight.shape()[1]; }
  const EmbeddingOptions& options() const { return options_; }  // padding_idx is >= 0 here

  Tensor weight;  // [num, dim]

 private:
  Embedding(Array weight, EmbeddingOptions options, bool requires_grad);
  EmbeddingOptions options_;
};

enum class EmbeddingBagMode { sum, mean, max };

struct EmbeddingBagOptions {
  EmbeddingBagMode mode = EmbeddingBagMode::mean;
  // offsets has one entry per bag plus a last one, which must be the input's
  // length (scipy's indptr). Without it, the last bag runs to the end of the
  // input. (PyTorch 1.13 accepts a smaller last offset, but its backward then
  // reads uninitialised memory; we refuse it.)
  bool include_last_offset = false;
  // Entries equal to padding_idx are left out of their bag: mean divides by the
  // number of other entries, and a bag of padding only gives zeros.
  std::optional<int64_t> padding_idx = std::nullopt;
  std::optional<float> max_norm = std::nullopt;  // as in EmbeddingOptions
  float norm_type = 2.0f;
  bool sparse = true;
};

// The CSR input is CsrBatch (core/csr_batch.hpp), what data::to_csr and
// Tfidf::transform produce: row i holds the entries indptr[i] .. indptr[i + 1]
// of indices (columns = rows of the weight) and values. values act as
// per-sample weights (counts, tf-idf, ...; sum mode only), or may be empty for
// plain bags. Columns within a row may repeat and come in any order here.
// num_cols, when not 0, must equal num_embeddings (a vocabulary that does not
// match the table is an error, even when every index happens to fit).

class EmbeddingBag : public Module {
 public:
  // weight N(0, 1), padding row zeroed.
  EmbeddingBag(std::size_t num_embeddings, std::size_t embedding_dim, EmbeddingBagOptions options = {},
               Generator& gen = default_generator());
  static EmbeddingBag from_pretrained(const Array& weight, EmbeddingBagOptions options = {},
                                      bool freeze = true);

  // input [n] of rows, offsets [B] (or [B + 1] with include_last_offset) where
  // each bag starts -> [B, dim]: each bag's sum, mean or max of its rows.
  // per_sample_weights [n] (sum mode only) scales each row and gets a gradient
  // if it requires one. An empty bag gives zeros.
  Tensor forward(const Indices& input, const Indices& offsets,
                 const std::optional<Tensor>& per_sample_weights = std::nullopt);
  // input [B, N]: B bags of N entries each; per_sample_weights [B, N].
  Tensor forward(const Indices& input, const std::optional<Tensor>& per_sample_weights = std::nullopt);
  // One bag per CSR row -> [rows, dim].
  Tensor forward(const CsrBatch& batch);

  Tensor operator()(const Indices& input, const Indices& offsets,
                    const std::optional<Tensor>& per_sample_weights = std::nullopt) {
    return forward(input, offsets, per_sample_weights);
  }
  Tensor operator()(const Indices& input, const std::optional<Tensor>& per_sample_weights = std::nullopt) {
    return forward(input, per_sample_weights);
  }
  Tensor operator()(const CsrBatch& batch) { return forward(batch); }
  std::shared_ptr<Module> clone() const override {
    return copy_into(
        std::make_shared<EmbeddingBag>(EmbeddingBag(weight.value(), options_, weight.requires_grad())));
  }

  std::size_t num_embeddings() const { return weight.shape()[0]; }
  std::size_t embedding_dim() const { return weight.shape()[1]; }
  const EmbeddingBagOptions& options() const { return options_; }  // padding_idx is >= 0 here

  Tensor weight;  // [num, dim]

 private:
  EmbeddingBag(Array weight, EmbeddingBagOptions options, bool requires_grad);
  // All entries of input, where each bag starts (B + 1 entries), and the
  // per-sample weights if any; every argument already checked.
  Tensor forward_bags(Indices entries, std::vector<std::size_t> starts,
                      const std::optional<Tensor>& per_sample_weights);
  EmbeddingBagOptions options_;
};

namespace detail {
// While one lives (this thread), Embedding and EmbeddingBag build their weight
// gradients the plain way instead of the fast one (nn/embedding_grad.cpp); the tests
// run both and compare them bit for bit.
class PlainRowGradsGuard : ScopedSetting<bool> {
 public:
  PlainRowGradsGuard();
};
}  // namespace detail

}  // namespace tg::nn
