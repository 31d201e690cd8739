// Batches: id lists to CSR batches and multi-hot rows, and the batch sampler.
#include "batch.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include <xtensor/xbuilder.hpp>

#include "../core/kernels/parallel.hpp"
#include "../core/kernels/radix_sort.hpp"

namespace tg::data {

namespace {

void check_num_cols(std::int64_t num_cols, std::string_view caller) {
  if (num_cols < 0) {
    throw std::invalid_argument(std::string(caller) + ": num_cols must be >= 0, got " +
                                std::to_string(num_cols));
  }
}

void check_ids(const std::vector<std::vector<std::int64_t>>& documents, std::int64_t num_cols,
               std::string_view caller) {
  for (std::size_t d = 0; d < documents.size(); ++d) {
    for (std::size_t k = 0; k < documents[d].size(); ++k) {
      std::int64_t id = documents[d][k];
      if (id < 0 || id >= num_cols) {
        throw std::invalid_argument(std::string(caller) + ": document " + std::to_string(d) + ", position " +
                                    std::to_string(k) + ": token id " + std::to_string(id) + " outside [0, " +
                                    std::to_string(num_cols) + ")");
      }
    }
  }
}

}  // namespace

CsrBatch to_csr(const std::vector<std::vector<std::int64_t>>& documents, std::int64_t num_cols,
                CsrValues values) {
  check_num_cols(num_cols, "to_csr");
  check_ids(documents, num_cols, "to_csr");
  // Each document's ids sorted, on every thread (tg::parallel_for), so that
  // equal ids are adjacent...
  std::vector<std::vector<std::int64_t>> sorted(documents.size());
  parallel_for(documents.size(), 8, [&](std::size_t lo, std::size_t hi) {
    std::vector<std::int64_t> scratch;
    for (std::size_t d = lo; d < hi; ++d) {
      sorted[d] = documents[d];
      if (std::ranges::is_sorted(sorted[d])) continue;  // ids files come sorted
      // A byte a pass: two passes for a vocabulary under 65,536 words.
      kernels::radix_sort<8>(sorted[d], scratch,
                             static_cast<uint64_t>(std::max<std::int64_t>(num_cols - 1, 0)),
                             [](std::int64_t id) { return id; });
    }
  });
  // ...then the rows end to end, each run of equal ids one entry.
  CsrBatch batch;
  batch.num_cols = num_cols;
  batch.indptr.reserve(documents.size() + 1);
  for (const std::vector<std::int64_t>& row : sorted) {
    for (std::size_t k = 0; k < row.size();) {
      std::size_t end = k + 1;
      while (end < row.size() && row[end] == row[k]) ++end;
      batch.indices.push_back(row[k]);
      batch.values.push_back(values == CsrValues::binary ? 1.0f : static_cast<float>(end - k));
      k = end;
    }
    batch.indptr.push_back(batch.nnz());
  }
  return batch;
}

Tfidf Tfidf::fit(const std::vector<std::vector<std::int64_t>>& documents, std::int64_t num_cols) {
  check_num_cols(num_cols, "Tfidf::fit");
  if (documents.empty()) throw std::invalid_argument("Tfidf::fit: no documents to fit on");
  // Presence per document is what document frequency counts, so fit on the binary batch.
  CsrBatch presence = to_csr(documents, num_cols, CsrValues::binary);
  std::vector<std::int64_t> df(static_cast<std::size_t>(num_cols), 0);
  for (std::int64_t col : presence.indices) ++df[static_cast<std::size_t>(col)];

  Tfidf tfidf;
  tfidf.idf.resize(df.size());
  double n = static_cast<double>(documents.size());
  for (std::size_t t = 0; t < df.size(); ++t) {
    tfidf.idf[t] = std::log((1.0 + n) / (1.0 + static_cast<double>(df[t]))) + 1.0;
  }
  return tfidf;
}

CsrBatch Tfidf::transform(const CsrBatch& counts) const {
  check_csr(counts, "Tfidf::transform");
  if (counts.num_cols != num_cols()) {
    throw std::invalid_argument("Tfidf::transform: batch has " + std::to_string(counts.num_cols) +
                                " columns, the idf was fitted for " + std::to_string(num_cols()));
  }
  CsrBatch out = counts;
  std::vector<double> row;
  for (std::int64_t r = 0; r < out.rows(); ++r) {
    std::int64_t begin = out.indptr[r], end = out.indptr[r + 1];
    row.clear();
    double sum_squares = 0.0;
    for (std::int64_t k = begin; k < end; ++k) {
      double w = static_cast<double>(counts.values[k]) * idf[static_cast<std::size_t>(out.indices[k])];
      row.push_back(w);
      sum_squares += w * w;
    }
    // An empty row (or one of zero counts) stays as it is, as in scikit-learn.
    double norm = std::sqrt(sum_squares);
    if (norm == 0.0) norm = 1.0;
    for (std::int64_t k = begin; k < end; ++k) {
      out.values[k] = static_cast<float>(row[static_cast<std::size_t>(k - begin)] / norm);
    }
  }
  return out;
}

CsrBatch Tfidf::transform(const std::vector<std::vector<std::int64_t>>& documents) const {
  return transform(to_csr(documents, num_cols(), CsrValues::counts));
}

xt::xarray<float> to_dense(const CsrBatch& batch) {
  check_csr(batch, "to_dense");
  auto rows = static_cast<std::size_t>(batch.rows());
  auto cols = static_cast<std::size_t>(batch.num_cols);
  if (cols > 0 && rows > std::numeric_limits<std::size_t>::max() / sizeof(float) / cols) {
    throw std::invalid_argument("to_dense: " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " floats do not fit in memory");
  }
  xt::xarray<float> dense = xt::zeros<float>({rows, cols});
  float* out = dense.data();
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::int64_t k = batch.indptr[r]; k < batch.indptr[r + 1]; ++k) {
      out[r * cols + static_cast<std::size_t>(batch.indices[k])] = batch.values[k];
    }
  }
  return dense;
}

}  // namespace tg::data
