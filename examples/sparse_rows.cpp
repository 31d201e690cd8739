// One row of a sparse count matrix (a document as word counts) two ways:
// densified and multiplied by a bias-free Linear, or as its (index, count)
// pairs through an EmbeddingBag in sum mode. Same numbers; the work differs.
//
// The matrix is in CSR form, as scipy and data/batch.hpp keep it: row i holds
// entries indptr[i] .. indptr[i + 1] of `indices` (word ids) and `values` (counts).
//
//   sparse_rows [--html FILE]   FILE: a page that steps through a backward pass
//                               of both (tg::write_html; needs graphviz)
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xmath.hpp>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

namespace {

void print_row(const char* title, const tg::Array& a) {  // a is [1, n]
  std::printf("%-26s", title);
  for (std::size_t j = 0; j < a.shape()[1]; ++j) std::printf(" %7.4f", a(0, j));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string html_file =  // "": not asked for
      picture_files(argc, argv, {"--html"},
                    "A sparse row, two ways: a CSR batch through a Linear and through an EmbeddingBag\n"
                    "(--html FILE: a page that steps through the backward pass).")
          .html;
  // 3 documents x 8 words; each document uses only a few of the words.
  const std::size_t vocab = 8, dim = 4;
  const tg::CsrBatch docs = {
      .indptr = {0, 2, 5, 7},
      .indices = {0, 3, 1, 3, 6, 2, 7},
      .values = {1, 2, 1, 1, 3, 2, 1},
  };
  const std::size_t row = 1;  // document 1: word 1 once, word 3 once, word 6 three times
  const auto begin = docs.indptr[row], end = docs.indptr[row + 1];
  const std::size_t nnz = static_cast<std::size_t>(end - begin);
  std::printf("counts: 3 documents x %zu words in CSR, %zu stored entries\n", vocab, docs.indices.size());
  std::printf("document %zu: %zu non-zero entries (word:count)", row, nnz);
  for (auto k = begin; k < end; ++k) std::printf(" %lld:%g", (long long)docs.indices[k], docs.values[k]);
  std::printf("\n\n");

  // Layers with the same numbers: the bag's table [vocab, dim] is the Linear's weight transposed.
  tg::Generator gen(0);
  tg::nn::Linear fc(vocab, dim, /*bias=*/false, gen);  // weight [dim, vocab]
  const tg::Array table = xt::transpose(fc.weight.value());
  tg::nn::EmbeddingBag bag =
      tg::nn::EmbeddingBag::from_pretrained(table, {.mode = tg::nn::EmbeddingBagMode::sum}, /*freeze=*/false);
  std::printf("linear weight %s, bag weight %s\n", tg::shape_str(fc.weight.shape()).c_str(),
              tg::shape_str(bag.weight.shape()).c_str());

  // Linear needs the row dense: vocab numbers, most of them zero.
  tg::Array dense_row = xt::zeros<float>({std::size_t{1}, vocab});
  for (auto k = begin; k < end; ++k) dense_row(0, docs.indices[k]) = docs.values[k];
  std::printf("densified row:");
  for (std::size_t j = 0; j < vocab; ++j) std::printf(" %g", dense_row(0, j));
  std::printf("\n");
  const tg::Tensor row_tensor = tg::Tensor(dense_row).set_name("densified row");
  tg::Tensor by_linear = fc(row_tensor);  // [1, vocab] x [vocab, dim] -> [1, dim]

  // The bag reads only the listed rows of its table and adds them, each scaled by its count.
  const tg::CsrBatch one_doc = {
      .indptr = {0, end - begin},
      .indices = {docs.indices.begin() + begin, docs.indices.begin() + end},
      .values = {docs.values.begin() + begin, docs.values.begin() + end},
  };
  tg::Tensor by_bag = bag(one_doc);  // [1, dim]: sum of count * table[word]

  print_row("linear(densified row)", by_linear.value());
  print_row("embedding_bag(sum)", by_bag.value());
  std::printf("same result: %s\n\n", xt::allclose(by_linear.value(), by_bag.value()) ? "true" : "false");

  // The work, counted from the shapes. Linear multiplies every input entry,
  // zeros included, by a whole row of weights (in * out per row); the bag
  // scales only the nnz looked-up rows (nnz * dim).
  const std::size_t linear_mults = fc.in_features() * fc.out_features();
  const std::size_t bag_mults = nnz * bag.embedding_dim();
  const std::size_t linear_bytes = fc.weight.numel() * sizeof(float);       // the whole matrix
  const std::size_t bag_bytes = nnz * bag.embedding_dim() * sizeof(float);  // nnz rows of it
  const std::size_t by_zero = (vocab - nnz) * dim;  // the input's zeros times their weights
  std::printf(
      "linear: %zu multiplications (in %zu x out %zu, %zu of them by zero), %zu bytes of weights read\n",
      linear_mults, fc.in_features(), fc.out_features(), by_zero, linear_bytes);
  std::printf("bag:    %zu multiplications (nnz %zu x dim %zu), %zu bytes of weights read\n", bag_mults, nnz,
              bag.embedding_dim(), bag_bytes);

  // The gap grows with the vocabulary; the bag's work does not.
  const std::size_t big_vocab = 50000;
  std::printf("with a %zu-word vocabulary: linear %zu multiplications, bag still %zu\n", big_vocab,
              big_vocab * dim, bag_mults);

  if (!html_file.empty()) {
    // Backward through both: d loss / d output is 1 everywhere, so the Linear's
    // weight gets the densified row in every one of its rows (a dense [4, 8]
    // gradient), and the bag's table each word's count in the rows it read
    // (sparse: rows {1, 3, 6} only).
    fc.weight.set_name("fc.weight");  // names for the page's boxes
    bag.weight.set_name("bag.weight");
    const tg::Tensor loss = tg::sum(by_linear) + tg::sum(by_bag);
    try {
      tg::write_html(loss, html_file);
    } catch (const std::exception& e) {  // no graphviz, or the file cannot be written
      std::fprintf(stderr, "sparse_rows: %s\n", e.what());
      return 1;
    }
    std::printf("wrote %s (open it in a browser; the arrow keys step)\n", html_file.c_str());
  }
  return 0;
}
