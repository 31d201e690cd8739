#pragma once
// CsrBatch: a sparse [rows, num_cols] matrix in scipy's csr_matrix layout, the
// input of nn::EmbeddingBag. data/batch.hpp makes it from documents (counts,
// 0/1 presence or tf-idf weights); it lives here, beside Tensor and Indices,
// because it is a model input like them.

#include <cstdint>
#include <string_view>
#include <vector>

namespace tg {

// Row r holds the columns indices[indptr[r] .. indptr[r+1]) with the matching
// values. Within a row the columns are sorted and unique (scipy's "canonical
// format"). An empty document is a row with no entries.
//
// The one CSR type: data/batch.hpp's functions make it, and nn::EmbeddingBag takes it
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

}  // namespace tg
