#pragma once
// Turning documents (lists of token ids) into model inputs:
//   - CsrBatch (core/csr_batch.hpp): a sparse [rows, num_cols] matrix in
//     scipy's csr_matrix layout, holding counts, 0/1 presence, or tf-idf
//     weights (bag of words);
//   - to_dense(): the same matrix as a dense array, for a plain Linear layer.
//
// Every function checks that ids are in [0, num_cols) and throws
// std::invalid_argument naming the document, the position and the id otherwise.

#include <cstdint>
#include <string_view>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../core/csr_batch.hpp"

namespace tg::data {

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

// [rows, num_cols] dense array with zeros where the batch has no entry.
xt::xarray<float> to_dense(const CsrBatch& batch);

}  // namespace tg::data
