// An Embedding is a lookup table. Put the same numbers in an Embedding [V, D]
// and in a bias-free Linear [D, V]: reading rows by id gives what multiplying
// one-hot rows gives. Backward differs: the Embedding's gradient lists only the
// rows that were read, the Linear's covers the whole matrix.
//
//   embedding_is_a_lookup [--dot FILE] [--html FILE]
//     --dot FILE    Graphviz text of the loss's graph, with gradients
//     --html FILE   a page that steps through the backward pass (tg::write_html; needs graphviz)
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <xtensor/xmath.hpp>

#include <tapegrad/tapegrad.hpp>

#include "flags.hpp"

namespace {

// One line per row: "    <label>  0.1234  -0.5678 ...", with labels[i] for row i.
void print_rows(const tg::Array& a, const std::vector<std::string>& labels) {
  for (std::size_t i = 0; i < a.shape()[0]; ++i) {
    std::printf("    %-13s", labels[i].c_str());
    for (std::size_t j = 0; j < a.shape()[1]; ++j) std::printf(" %8.4f", a(i, j));
    std::printf("\n");
  }
}

std::string row_str(const tg::Array& a, std::size_t i) {  // "[0.1234, -0.5678, 1.0000]"
  std::string s = "[";
  char buf[32];
  for (std::size_t j = 0; j < a.shape()[1]; ++j) {
    std::snprintf(buf, sizeof buf, "%s%.4f", j ? ", " : "", a(i, j));
    s += buf;
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  const PictureFiles files = picture_files(  // "": not asked for
      argc, argv, {"--dot", "--html"},
      "An embedding is a lookup: an Embedding and a one-hot Linear give the same numbers and gradients\n"
      "(--dot FILE: the graph for Graphviz; --html FILE: a page that steps through the backward pass).");
  const std::size_t vocab = 6, dim = 3;

  // Two layers, one set of numbers. Linear stores [out, in], so the Embedding's
  // [vocab, dim] table goes in transposed.
  tg::Generator gen(0);
  tg::nn::Embedding emb(vocab, dim, {}, gen);  // sparse gradient (the default here)
  tg::nn::Linear fc(vocab, dim, /*bias=*/false, gen);
  emb.weight.set_name("emb.weight");
  fc.weight.set_name("fc.weight");
  {
    tg::NoGradGuard no_grad;  // copy_ into a tensor that requires grad: only under the guard, as in PyTorch
    fc.weight.copy_(xt::transpose(emb.weight.value()));
  }
  std::vector<std::string> row_labels;
  for (std::size_t r = 0; r < vocab; ++r) row_labels.push_back("row " + std::to_string(r) + ":");
  std::printf("embedding weight %s  (one row per id)\n", tg::shape_str(emb.weight.shape()).c_str());
  print_rows(emb.weight.value(), row_labels);
  std::printf("linear weight    %s  (the same numbers, transposed)\n\n",
              tg::shape_str(fc.weight.shape()).c_str());

  // A batch of ids; 3 appears twice, so row 3 is read twice.
  tg::Indices ids = {2, 3, 1, 3};
  std::printf("ids:");
  for (int64_t id : ids) std::printf(" %lld", (long long)id);
  std::printf("\n\n");
  std::vector<std::string> out_labels;  // "out 0 (id 2):": output row k belongs to ids[k]
  for (std::size_t k = 0; k < ids.size(); ++k)
    out_labels.push_back("out " + std::to_string(k) + " (id " + std::to_string(ids(k)) + "):");

  // The lookup copies rows 2, 3, 1, 3 of emb.weight: no multiplication at all.
  tg::Tensor looked_up = emb(ids);  // [4] -> [4, dim]
  std::printf("embedding(ids) %s  (out k is table row ids[k])\n", tg::shape_str(looked_up.shape()).c_str());
  print_rows(looked_up.value(), out_labels);

  // The product multiplies every one-hot entry, zeros included, by a column of fc.weight.
  tg::Tensor one_hot = tg::one_hot(ids, vocab).set_name("one_hot(ids)");  // [4, vocab] of 0/1
  tg::Tensor multiplied = fc(one_hot);  // [4, vocab] x [vocab, dim] -> [4, dim]
  std::printf("linear(one_hot(ids)) %s\n", tg::shape_str(multiplied.shape()).c_str());
  print_rows(multiplied.value(), out_labels);
  std::printf("allclose: %s\n\n", xt::allclose(looked_up.value(), multiplied.value()) ? "true" : "false");

  // One loss over both branches: loss = sum(looked_up * upstream) + sum(multiplied * upstream),
  // so d loss / d looked_up = d loss / d multiplied = upstream. Any constant
  // would do; round numbers keep the sums below easy to redo by hand.
  const tg::Tensor upstream = tg::Tensor({{0.1f, 0.2f, 0.3f},  // [4, dim]
                                          {1.0f, -1.0f, 0.5f},
                                          {-0.2f, 0.4f, 0.0f},
                                          {2.0f, 0.5f, -1.5f}})
                                  .set_name("upstream");
  tg::Tensor loss = tg::sum(looked_up * upstream) + tg::sum(multiplied * upstream);
  std::printf("upstream gradient, d loss / d output %s  (the same for both outputs)\n",
              tg::shape_str(upstream.shape()).c_str());
  print_rows(upstream.value(), out_labels);
  std::printf("\n");
  // For --html: the page runs this backward pass step by step, then puts the
  // gradients back as they were, so the backward() below is unchanged.
  if (!files.html.empty()) {
    try {
      tg::write_html(loss, files.html);
    } catch (const std::exception& e) {  // no graphviz, or the file cannot be written
      std::fprintf(stderr, "embedding_is_a_lookup: %s\n", e.what());
      return 1;
    }
  }
  {
    // For --dot: keep the graph (retain_graph) and every tensor's gradient, so
    // the picture shows what reached each node.
    tg::RetainAllGradsGuard keep;
    loss.backward(std::nullopt, /*retain_graph=*/!files.dot.empty());
  }

  // The Embedding's gradient stores rows 1, 2, 3 only, each once: out k's
  // upstream row went to table row ids[k], and row 3 holds the sum of two.
  const tg::SparseRows& sparse = emb.weight.grad().sparse();
  std::printf("embedding grad: sparse, rows {");
  for (std::size_t i = 0; i < sparse.rows.size(); ++i)
    std::printf(i ? ", %lld" : "%lld", (long long)sparse.rows[i]);
  std::printf("} of %zu, values %s, %zu bytes\n", sparse.num_rows,
              tg::shape_str(tg::Shape(sparse.values.shape().begin(), sparse.values.shape().end())).c_str(),
              emb.weight.grad().nbytes());
  std::vector<std::string> grad_labels;
  for (int64_t r : sparse.rows) grad_labels.push_back("row " + std::to_string(r) + ":");
  const tg::Array values = sparse.values;
  print_rows(values, grad_labels);
  // Id 3 was read by two outputs: its row is the sum of their upstream rows.
  std::vector<std::size_t> reads;  // the outputs that read id 3
  for (std::size_t k = 0; k < ids.size(); ++k)
    if (ids(k) == 3) reads.push_back(k);
  const std::size_t at = std::find(sparse.rows.begin(), sparse.rows.end(), 3) - sparse.rows.begin();
  std::printf("row 3 = upstream out %zu + out %zu = %s + %s = %s\n", reads[0], reads[1],
              row_str(upstream.value(), reads[0]).c_str(), row_str(upstream.value(), reads[1]).c_str(),
              row_str(values, at).c_str());
  // SparseRows holds its row ids (int64) beside the values (float32).
  std::printf(
      "%zu bytes = %zu row ids x %zu bytes (int64) + %zu x %zu values x %zu bytes (float32) = %zu + %zu\n",
      emb.weight.grad().nbytes(), sparse.rows.size(), sizeof(int64_t), sparse.rows.size(), dim, sizeof(float),
      sparse.rows.size() * sizeof(int64_t), sparse.values.size() * sizeof(float));

  // The Linear's gradient has every entry of [dim, vocab]: zeros for the ids not in the batch.
  const tg::Array& dense = fc.weight.grad().dense();
  std::printf("linear grad:    dense %s, %zu bytes\n",
              tg::shape_str(tg::Shape(dense.shape().begin(), dense.shape().end())).c_str(),
              fc.weight.grad().nbytes());
  const tg::Array dense_t = xt::transpose(dense);  // [dim, vocab] -> [vocab, dim], like the table
  std::printf("linear grad, transposed %s\n", tg::shape_str({vocab, dim}).c_str());
  print_rows(dense_t, row_labels);

  // Same numbers once the sparse rows are spread into a full [vocab, dim] matrix.
  const bool agree = xt::allclose(sparse.to_dense(), dense_t);
  std::printf("gradients agree (sparse densified vs dense transposed): %s\n\n", agree ? "true" : "false");

  // The same batch against a realistic vocabulary: the lookup's costs do not change.
  const std::size_t big_vocab = 50000;
  std::printf("with a %zu-word vocabulary and the same ids:\n", big_vocab);
  std::printf("    embedding grad still %zu bytes, linear grad %zu bytes\n", emb.weight.grad().nbytes(),
              big_vocab * dim * sizeof(float));
  std::printf("    the product does %zu multiplications ([%zu, %zu] x [%zu, %zu]), the lookup none\n",
              ids.size() * big_vocab * dim, ids.size(), big_vocab, big_vocab, dim);

  if (!files.dot.empty()) {
    std::ofstream(files.dot) << tg::to_dot(loss);
    std::printf("wrote %s (render: dot -Tpng %s -o graph.png)\n", files.dot.c_str(), files.dot.c_str());
  }
  if (!files.html.empty())
    std::printf("wrote %s (open it in a browser; the arrow keys step)\n", files.html.c_str());
  return 0;
}
