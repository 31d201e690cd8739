// CsrBatch: a batch of id lists in compressed sparse rows, checked.
#include "csr_batch.hpp"

#include <stdexcept>
#include <string>

#include "check.hpp"

namespace tg {

void check_csr(const CsrBatch& batch, std::string_view caller) {
  auto fail = [&](const std::string& reason) {
    throw std::invalid_argument(message(caller, ": bad CSR batch: ", reason));
  };
  if (batch.num_cols < 0) fail("num_cols " + std::to_string(batch.num_cols) + " < 0");
  if (batch.indptr.empty()) fail("indptr is empty (it needs rows + 1 entries)");
  if (batch.indptr[0] != 0) fail("indptr[0] is " + std::to_string(batch.indptr[0]) + ", not 0");
  if (batch.values.size() != batch.indices.size()) {
    fail("indices has " + std::to_string(batch.indices.size()) + " entries but values has " +
         std::to_string(batch.values.size()));
  }
  for (std::size_t r = 0; r + 1 < batch.indptr.size(); ++r) {
    if (batch.indptr[r + 1] < batch.indptr[r]) {
      fail("indptr decreases at row " + std::to_string(r) + " (" + std::to_string(batch.indptr[r]) + " -> " +
           std::to_string(batch.indptr[r + 1]) + ")");
    }
  }
  if (batch.indptr.back() != batch.nnz()) {
    fail("indptr ends at " + std::to_string(batch.indptr.back()) + " but there are " +
         std::to_string(batch.nnz()) + " indices");
  }
  // indptr is now known to stay within [0, nnz], so these reads are in bounds.
  for (std::int64_t r = 0; r < batch.rows(); ++r) {
    for (std::int64_t k = batch.indptr[r]; k < batch.indptr[r + 1]; ++k) {
      std::int64_t col = batch.indices[k];
      if (col < 0 || col >= batch.num_cols) {
        fail("row " + std::to_string(r) + ": column " + std::to_string(col) + " outside [0, " +
             std::to_string(batch.num_cols) + ")");
      }
      if (k > batch.indptr[r] && col <= batch.indices[k - 1]) {
        fail("row " + std::to_string(r) + ": columns not sorted and unique (" +
             std::to_string(batch.indices[k - 1]) + " then " + std::to_string(col) + ")");
      }
    }
  }
}

}  // namespace tg
