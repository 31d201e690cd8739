// An Embedding is a lookup table. Put the same numbers in an Embedding [V, D]
// and in a bias-free Linear [D, V]: reading rows by id gives what multiplying
// one-hot rows gives. Backward differs: the Embedding's gradient lists only the
// rows that were read, the Linear's covers the whole matrix.
//
//   embedding_is_a_lookup [--dot FILE]   FILE: Graphviz text of the loss's graph
#include <cstdio>
#include <fstream>
#include <string>

#include <xtensor/xmath.hpp>

#include <tapegrad/tapegrad.hpp>

namespace {

void print_rows(const char* title, const tg::Array& a) {
  std::printf("%s %s\n", title, tg::shape_str(tg::Shape(a.shape().begin(), a.shape().end())).c_str());
  for (std::size_t i = 0; i < a.shape()[0]; ++i) {
    std::printf("   ");
    for (std::size_t j = 0; j < a.shape()[1]; ++j) std::printf(" %8.4f", a(i, j));
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dot_file = argc == 3 && std::string(argv[1]) == "--dot" ? argv[2] : "";
  if (argc != 1 && dot_file.empty()) {
    std::fprintf(stderr, "usage: %s [--dot FILE]\n", argv[0]);
    return 2;
  }
  const std::size_t vocab = 6, dim = 3;

  // Two layers, one set of numbers. Linear stores [out, in], so the Embedding's
  // [vocab, dim] table goes in transposed.
  tg::Generator gen(0);
  tg::nn::Embedding emb(vocab, dim, {}, gen);  // sparse gradient (the default here)
  tg::nn::Linear fc(vocab, dim, /*bias=*/false, gen);
  emb.weight.set_name("emb.weight");
  fc.weight.set_name("fc.weight");
  {
    tg::NoGradGuard no_grad;  // overwriting a parameter is not part of the graph
    fc.weight.copy_(xt::transpose(emb.weight.value()));
  }
  std::printf("embedding weight %s  (one row per id)\n", tg::shape_str(emb.weight.shape()).c_str());
  std::printf("linear weight    %s  (the same numbers, transposed)\n",
              tg::shape_str(fc.weight.shape()).c_str());

  // A batch of ids; 3 appears twice, so row 3 is read twice.
  tg::Indices ids = {2, 3, 1, 3};
  std::printf("ids:");
  for (int64_t id : ids) std::printf(" %lld", (long long)id);
  std::printf("\n\n");

  // The lookup copies rows 2, 3, 1, 3 of emb.weight: no multiplication at all.
  tg::Tensor looked_up = emb(ids);  // [4] -> [4, dim]
  print_rows("embedding(ids)", looked_up.value());

  // The product multiplies every one-hot entry, zeros included, by a column of fc.weight.
  tg::Tensor one_hot = tg::one_hot(ids, vocab).set_name("one_hot(ids)");  // [4, vocab] of 0/1
  tg::Tensor multiplied = fc(one_hot);  // [4, vocab] x [vocab, dim] -> [4, dim]
  print_rows("linear(one_hot(ids))", multiplied.value());
  std::printf("allclose: %s\n\n", xt::allclose(looked_up.value(), multiplied.value()) ? "true" : "false");

  // One loss over both branches. Each branch is weighted by the same fixed
  // numbers, so both layers receive the same gradient at their output.
  tg::Tensor upstream = tg::randn({ids.size(), dim}, gen).set_name("upstream");  // a constant
  tg::Tensor loss = tg::sum(looked_up * upstream) + tg::sum(multiplied * upstream);
  if (!dot_file.empty()) {
    std::ofstream(dot_file) << tg::to_dot(loss);  // before backward(), which releases the graph
    std::printf("wrote %s\n\n", dot_file.c_str());
  }
  loss.backward();

  // The Embedding's gradient stores rows 1, 2, 3 only, each once: row 3 holds
  // the sum of the two gradients that reached its two lookups.
  const tg::SparseRows& sparse = emb.weight.grad().sparse();
  std::printf("embedding grad: sparse, rows {");
  for (std::size_t i = 0; i < sparse.rows.size(); ++i)
    std::printf(i ? ", %lld" : "%lld", (long long)sparse.rows[i]);
  std::printf("} of %zu, values %s, %zu bytes\n", sparse.num_rows,
              tg::shape_str(tg::Shape(sparse.values.shape().begin(), sparse.values.shape().end())).c_str(),
              emb.weight.grad().nbytes());
  for (std::size_t i = 0; i < sparse.rows.size(); ++i) {
    std::printf("    row %lld:", (long long)sparse.rows[i]);
    for (std::size_t c = 0; c < sparse.cols(); ++c) std::printf(" %8.4f", sparse.values(i, c));
    std::printf("\n");
  }

  // The Linear's gradient has every entry of [dim, vocab]: zeros for the ids not in the batch.
  const tg::Array& dense = fc.weight.grad().dense();
  std::printf("linear grad:    dense %s, %zu bytes\n",
              tg::shape_str(tg::Shape(dense.shape().begin(), dense.shape().end())).c_str(),
              fc.weight.grad().nbytes());
  const tg::Array dense_t = xt::transpose(dense);  // [dim, vocab] -> [vocab, dim], like the table
  print_rows("linear grad, transposed", dense_t);

  // Same numbers once the sparse rows are spread into a full [vocab, dim] matrix.
  const bool agree = xt::allclose(sparse.to_dense(), dense_t);
  std::printf("gradients agree (sparse densified vs dense transposed): %s\n", agree ? "true" : "false");
  return 0;
}
