// Which rows of an embedding does an optimizer step move? Three steps, each
// on a different batch of ids, four ways: SGD and Adam, each with a sparse
// gradient (Embedding sparse = true) and with a dense one (sparse = false).
//
// Rows outside the batch get a zero gradient. SGD moves a row by lr * gradient,
// so those rows stay put either way. Adam moves a row by its running mean m,
// which is not zero once the row has been in an earlier batch: with a dense
// gradient such rows keep drifting (pytorch#18404). A sparse gradient does not
// list them, and Adam's lazy update leaves them, and their m and v, alone.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include <tapegrad/tapegrad.hpp>

namespace {

std::string set_str(const std::vector<int64_t>& rows) {  // "{0, 1, 2}"
  std::string s = "{";
  for (std::size_t i = 0; i < rows.size(); ++i) s += (i ? ", " : "") + std::to_string(rows[i]);
  return s + "}";
}

}  // namespace

int main() {
  const std::size_t vocab = 8, dim = 4;
  const std::vector<std::vector<int64_t>> batches = {{0, 1, 2}, {2, 5}, {3}};  // step 1, 2, 3

  for (const std::string optimizer_name : {"sgd", "adam"}) {
    for (const bool sparse : {true, false}) {
      // The same starting table for all four runs.
      tg::Generator gen(0);
      tg::nn::Embedding emb(vocab, dim, {.sparse = sparse}, gen);
      std::unique_ptr<tg::optim::Optimizer> optimizer;
      if (optimizer_name == "sgd")
        optimizer = std::make_unique<tg::optim::SGD>(emb.parameters(), tg::optim::SGDOptions{.lr = 0.1});
      else
        optimizer = std::make_unique<tg::optim::Adam>(emb.parameters(), tg::optim::AdamOptions{.lr = 0.1});

      for (std::size_t step = 0; step < batches.size(); ++step) {
        const std::vector<int64_t>& batch = batches[step];
        const tg::Array before = emb.weight.value();  // a copy, to compare with after the step

        // Any loss will do: each looked-up row gets gradient 1 in every entry.
        optimizer->zero_grad();
        tg::sum(emb(tg::Indices(xt::adapt(batch)))).backward();
        const std::size_t grad_bytes = emb.weight.grad().nbytes();
        optimizer->step();

        // A row changed if any of its entries differs from before the step.
        std::vector<int64_t> changed;
        for (std::size_t r = 0; r < vocab; ++r)
          for (std::size_t c = 0; c < dim; ++c)
            if (emb.weight.value()(r, c) != before(r, c)) {
              changed.push_back(static_cast<int64_t>(r));
              break;
            }
        std::printf("%-4s %-6s step %zu  batch %-9s changed rows: %-15s gradient %3zu bytes (%s)\n",
                    optimizer_name.c_str(), sparse ? "sparse" : "dense", step + 1, set_str(batch).c_str(),
                    set_str(changed).c_str(), grad_bytes, sparse ? "rows + values" : "the full table");
      }
      // Lazy or not, Adam keeps m and v for every row of the table.
      std::printf("%-4s %-6s optimizer state: %zu bytes\n\n", optimizer_name.c_str(),
                  sparse ? "sparse" : "dense", optimizer->state_bytes());
    }
  }

  // The gradient's size at a realistic scale: a dense one is the whole table every step.
  const std::size_t big_vocab = 50000, big_dim = 64, batch_rows = 32;
  std::printf("at %zu x %zu with %zu distinct ids per batch: dense gradient %zu bytes, sparse %zu bytes\n",
              big_vocab, big_dim, batch_rows, big_vocab * big_dim * sizeof(float),
              batch_rows * (sizeof(int64_t) + big_dim * sizeof(float)));
  return 0;
}
