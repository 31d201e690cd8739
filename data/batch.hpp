#pragma once
// Turning documents (lists of token ids) into model inputs:
//   - CsrBatch: a sparse [rows, num_cols] matrix in scipy's csr_matrix layout,
//     holding counts, 0/1 presence, or tf-idf weights (bag of words);
//   - Bags: the (indices, offsets, per_sample_weights) triple that PyTorch's
//     EmbeddingBag takes;
//   - to_dense(): the same matrix as a dense array, for a plain Linear layer.
//
// Every function checks that ids are in [0, num_cols) and throws
// std::invalid_argument naming the document, the position and the id otherwise.

#include <cstdint>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

namespace tg::data {

// Row r holds the columns indices[indptr[r] .. indptr[r+1]) with the matching
// values. Within a row the columns are sorted and unique (scipy's "canonical
// format"). An empty document is a row with no entries.
//
// The one CSR type: the functions here make it, and nn::EmbeddingBag takes it
// as input (one bag per row, values as per-sample weights), so a batch goes
// from to_csr() or Tfidf::transform() straight into the model. EmbeddingBag is
// less strict (see nn/embedding.hpp): columns may repeat or come unsorted,
// values may be empty, and num_cols = 0 skips its check against the table.
struct CsrBatch {
  std::vector<std::int64_t> indptr{0};  // rows + 1 entries, indptr[0] == 0
  std::vector<std::int64_t> indices;
  std::vector<float> values;
  std::int64_t num_cols = 0;

  std::int64_t rows() const { return static_cast<std::int64_t>(indptr.size()) - 1; }
  std::int64_t nnz() const { return static_cast<std::int64_t>(indices.size()); }
};

// Throws std::invalid_argument, starting with caller, when batch breaks the layout
// above. Every function taking a CsrBatch calls it, so a hand-made batch is safe.
void check_csr(const CsrBatch& batch, std::string_view caller);

enum class CsrValues {
  counts,  // how often the column's token appears in the document
  binary,  // 1 when it appears at all (multi-hot)
};

CsrBatch to_csr(const std::vector<std::vector<std::int64_t>>& documents, std::int64_t num_cols,
                CsrValues values = CsrValues::counts);

// Tf-idf as scikit-learn's TfidfTransformer computes it by default
// (norm="l2", use_idf=True, smooth_idf=True, sublinear_tf=False):
//   idf[t]   = ln((1 + n) / (1 + df[t])) + 1    n documents, df[t] of them contain t
//   w[d, t]  = count[d, t] * idf[t], then each row divided by its L2 norm.
// The "1 +" terms act as if one extra document contained every token once, so no
// idf is infinite. Fit on the training documents only, then transform any split.
struct Tfidf {
  std::vector<double> idf;  // one per column

  static Tfidf fit(const std::vector<std::vector<std::int64_t>>& documents, std::int64_t num_cols);
  std::int64_t num_cols() const { return static_cast<std::int64_t>(idf.size()); }

  // counts: a batch from to_csr(..., CsrValues::counts) with num_cols() columns.
  CsrBatch transform(const CsrBatch& counts) const;
  CsrBatch transform(const std::vector<std::vector<std::int64_t>>& documents) const;
};

// What EmbeddingBag(mode="sum" or "mean") takes: bag b is
// indices[offsets[b] .. offsets[b+1]) (the last bag runs to the end), each index
// scaled by its per_sample_weights entry. An empty document is an empty bag.
struct Bags {
  std::vector<std::int64_t> indices;
  std::vector<std::int64_t> offsets;  // one per document, offsets[0] == 0
  std::vector<float> per_sample_weights;

  std::int64_t size() const { return static_cast<std::int64_t>(offsets.size()); }
};

// Token ids as they come: order and repeats kept, every weight 1.
Bags to_bags(const std::vector<std::vector<std::int64_t>>& documents, std::int64_t num_cols);
// From a CSR batch: indices = batch.indices, offsets = indptr without its last
// entry, weights = batch.values (so the bag sum equals the CSR row times the table).
Bags to_bags(const CsrBatch& batch);

// [rows, num_cols] dense array with zeros where the batch has no entry.
xt::xarray<float> to_dense(const CsrBatch& batch);

}  // namespace tg::data
