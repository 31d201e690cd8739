// The learner's examples, run as a learner runs them: each real binary, and the
// facts it prints checked against what the shapes and the maths say they must be.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.hpp"

namespace {

namespace fs = std::filesystem;

using Result = tg::test::CommandResult;

Result run(const std::string& command) {
  return tg::test::run_command(command);
}

// The built example, quoted for the shell.
std::string example(const std::string& name) {
  std::string quoted = "'";
  quoted += tg::test::example_path(name);
  return quoted += "'";
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("tapegrad-learn-" + std::to_string(::getpid()) + "-" + name);
}

std::vector<std::string> lines_of(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first line that starts with `prefix` (after any indentation), or "".
std::string line_starting(const std::string& out, const std::string& prefix) {
  for (const std::string& line : lines_of(out)) {
    const std::size_t text = line.find_first_not_of(' ');
    if (text != std::string::npos && line.compare(text, prefix.size(), prefix) == 0) return line.substr(text);
  }
  return "";
}

// Reads every field of `format` (sscanf) from the line starting with `prefix`;
// fails the test, naming the line, if the line is missing or does not match.
template <class... Fields>
void scan(const std::string& out, const std::string& prefix, const char* format, Fields*... fields) {
  const std::string line = line_starting(out, prefix);
  const int read = std::sscanf(line.c_str(), format, fields...);
  CHECK_MESSAGE(read == static_cast<int>(sizeof...(Fields)),
                "could not read \"" << format << "\" from: " << line);
}

std::vector<double> numbers(const std::string& text) {
  std::vector<double> out;
  std::istringstream s(text);
  for (double x; s >> x;) out.push_back(x);
  return out;
}

// "0, 1, 2" (a printed set, braces removed) -> {0, 1, 2}
std::set<int> int_set(const std::string& text) {
  std::string t = text;
  std::replace(t.begin(), t.end(), ',', ' ');
  std::set<int> out;
  for (double x : numbers(t)) out.insert(static_cast<int>(x));
  return out;
}

// The numbers on the line that starts with `prefix`, after it.
std::vector<double> line_after(const std::string& out, const std::string& prefix) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(prefix, 0) == 0) return numbers(line.substr(prefix.size()));
  return {};
}

// The printed "[a, b, c]" after `label` as numbers.
std::vector<double> bracketed_after(const std::string& out, const std::string& label) {
  const std::size_t at = out.find(label);
  if (at == std::string::npos) return {};
  const std::size_t open = out.find('[', at), close = out.find(']', open);
  std::string inside = out.substr(open + 1, close - open - 1);
  std::replace(inside.begin(), inside.end(), ',', ' ');
  return numbers(inside);
}

// The text inside the fenced block that starts with `opening` ("```sh\nmeson ...").
std::string fenced_block(const std::string& text, const std::string& opening) {
  const std::size_t at = text.find(opening);
  if (at == std::string::npos) return "";
  const std::size_t begin = text.find('\n', at) + 1, end = text.find("```", begin);
  return end == std::string::npos ? "" : text.substr(begin, end - begin);
}

using Rows = std::vector<std::vector<double>>;

// The rows printed under the line that starts with `header`: each indented line
// "    label:  1.0  2.0 ..." gives the numbers after its last ':'.
Rows rows_after(const std::string& out, const std::string& header) {
  Rows rows;
  bool inside = false;
  for (const std::string& line : lines_of(out)) {
    if (inside && (line.rfind("    ", 0) != 0)) break;
    if (inside) rows.push_back(numbers(line.substr(line.rfind(':') + 1)));
    if (line.rfind(header, 0) == 0) inside = true;
  }
  return rows;
}

// Reads the dot file, checks it names `must_name` and that graphviz parses it
// (when installed); returns its text.
std::string check_dot_file(const fs::path& file, const std::string& must_name) {
  const std::string text = tg::test::read_file(file);
  REQUIRE_MESSAGE(!text.empty(), "no dot file at " << file);
  CHECK(text.rfind("digraph", 0) == 0);
  CHECK(text.find(must_name) != std::string::npos);
  if (run("command -v dot").status != 0) {
    MESSAGE("graphviz's dot is not installed: not checking that " << file << " parses");
    return text;
  }
  const Result d = run("dot -Tsvg '" + file.string() + "' -o /dev/null");
  INFO(d.output);
  CHECK(d.status == 0);
  return text;
}

}  // namespace

TEST_SUITE("learn") {
  TEST_CASE("embedding_is_a_lookup: rows by id equal one-hot rows times the transposed table") {
    const fs::path dot = temp_file("lookup.dot");
    const Result r = run(example("embedding_is_a_lookup") + " --dot '" + dot.string() + "'");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("allclose: true") != std::string::npos);

    // [V, D] and [D, V]
    std::size_t vocab = 0, dim = 0, lin_out = 0, lin_in = 0;
    scan(r.output, "embedding weight", "embedding weight [%zu, %zu]", &vocab, &dim);
    scan(r.output, "linear weight", "linear weight [%zu, %zu]", &lin_out, &lin_in);
    CHECK(lin_out == dim);
    CHECK(lin_in == vocab);
    const Rows table = rows_after(r.output, "embedding weight");
    REQUIRE(table.size() == vocab);
    for (const auto& row : table) REQUIRE(row.size() == dim);

    // Both outputs, number by number: output row k is table row ids[k].
    const std::vector<double> ids = line_after(r.output, "ids:");
    const Rows looked_up = rows_after(r.output, "embedding(ids)");
    const Rows multiplied = rows_after(r.output, "linear(one_hot(ids))");
    REQUIRE(looked_up.size() == ids.size());
    REQUIRE(multiplied.size() == ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      CHECK(looked_up[k] == table.at(static_cast<std::size_t>(ids[k])));
      for (std::size_t c = 0; c < dim; ++c) CHECK(multiplied[k][c] == doctest::Approx(looked_up[k][c]));
    }

    // The sparse gradient lists each distinct id once; the dense one is the whole table.
    const std::set<int> distinct(ids.begin(), ids.end());
    REQUIRE(distinct.size() < ids.size());  // a repeated id is part of the demonstration
    char rows[64] = "";
    std::size_t of = 0, stored = 0, cols = 0, sparse_bytes = 0;
    scan(r.output,
         "embedding grad:", "embedding grad: sparse, rows {%63[^}]} of %zu, values [%zu, %zu], %zu bytes",
         rows, &of, &stored, &cols, &sparse_bytes);
    CHECK(int_set(rows) == distinct);
    CHECK(of == vocab);
    CHECK(stored == distinct.size());
    CHECK(cols == dim);
    CHECK(sparse_bytes == distinct.size() * (sizeof(int64_t) + dim * sizeof(float)));

    // Each listed row is the sum of the upstream rows of the outputs that read it
    // (to the printed 4 decimals).
    const Rows upstream = rows_after(r.output, "upstream gradient");
    const Rows sparse_values = rows_after(r.output, "embedding grad:");
    REQUIRE(upstream.size() == ids.size());
    REQUIRE(sparse_values.size() == distinct.size());
    std::size_t i = 0;
    for (int row : distinct) {
      for (std::size_t c = 0; c < dim; ++c) {
        double sum = 0;
        for (std::size_t k = 0; k < ids.size(); ++k) sum += ids[k] == row ? upstream[k][c] : 0.0;
        CHECK_MESSAGE(std::abs(sparse_values[i][c] - sum) <= 5e-5, "row " << row << " col " << c);
      }
      ++i;
    }
    // The repeated id's row, spelled out: upstream out a + out b = its gradient row.
    std::size_t a = 0, b = 0;
    scan(r.output, "row 3 = upstream", "row 3 = upstream out %zu + out %zu", &a, &b);
    REQUIRE(a < ids.size());
    REQUIRE(b < ids.size());
    CHECK(ids[a] == 3);
    CHECK(ids[b] == 3);
    const std::string sum_line = line_starting(r.output, "row 3 = upstream");
    const std::size_t eq = sum_line.find(" = [");
    const std::vector<double> lhs = bracketed_after(sum_line, " = ["),
                              rhs = bracketed_after(sum_line, " + [");
    const std::vector<double> total = bracketed_after(sum_line.substr(sum_line.rfind(" = ")), " = ");
    REQUIRE(eq != std::string::npos);
    REQUIRE(lhs.size() == dim);
    REQUIRE(rhs.size() == dim);
    REQUIRE(total.size() == dim);
    for (std::size_t c = 0; c < dim; ++c) {
      CHECK(lhs[c] == upstream[a][c]);
      CHECK(rhs[c] == upstream[b][c]);
      CHECK(std::abs(total[c] - (lhs[c] + rhs[c])) <= 5e-5);
      CHECK(total[c] ==
            sparse_values[static_cast<std::size_t>(std::distance(distinct.begin(), distinct.find(3)))][c]);
    }
    // Its bytes: int64 row ids beside float32 values.
    std::size_t total_bytes = 0, n_ids = 0, id_bytes = 0, n_rows = 0, n_cols = 0, value_bytes = 0,
                ids_part = 0, values_part = 0;
    scan(r.output, std::to_string(sparse_bytes) + " bytes =",
         "%zu bytes = %zu row ids x %zu bytes (int64) + %zu x %zu values x %zu bytes (float32) = %zu + %zu",
         &total_bytes, &n_ids, &id_bytes, &n_rows, &n_cols, &value_bytes, &ids_part, &values_part);
    CHECK(total_bytes == sparse_bytes);
    CHECK(n_ids == distinct.size());
    CHECK(id_bytes == sizeof(int64_t));
    CHECK(n_rows == distinct.size());
    CHECK(n_cols == dim);
    CHECK(value_bytes == sizeof(float));
    CHECK(ids_part == n_ids * id_bytes);
    CHECK(values_part == n_rows * n_cols * value_bytes);
    CHECK(ids_part + values_part == sparse_bytes);

    std::size_t dense_rows = 0, dense_cols = 0, dense_bytes = 0;
    scan(r.output, "linear grad:", "linear grad: dense [%zu, %zu], %zu bytes", &dense_rows, &dense_cols,
         &dense_bytes);
    CHECK(dense_rows == dim);
    CHECK(dense_cols == vocab);
    CHECK(dense_bytes == vocab * dim * sizeof(float));
    CHECK(r.output.find("gradients agree (sparse densified vs dense transposed): true") != std::string::npos);

    // In the dense gradient, the rows of ids that were not looked up are zero.
    const Rows dense_t = rows_after(r.output, "linear grad, transposed");
    REQUIRE(dense_t.size() == vocab);
    for (std::size_t row = 0; row < vocab; ++row) {
      bool zero = true;
      for (std::size_t c = 0; c < dim; ++c) zero = zero && dense_t[row][c] == 0.0;
      CHECK_MESSAGE(zero == !distinct.count(static_cast<int>(row)), "row " << row);
    }

    // The same ids against a large vocabulary: the sparse side does not grow.
    std::size_t big = 0, big_sparse = 0, big_dense = 0, big_mults = 0;
    scan(r.output, "with a", "with a %zu-word vocabulary", &big);
    scan(r.output, "embedding grad still", "embedding grad still %zu bytes, linear grad %zu bytes",
         &big_sparse, &big_dense);
    scan(r.output, "the product does", "the product does %zu multiplications", &big_mults);
    CHECK(big > vocab);
    CHECK(big_sparse == sparse_bytes);
    CHECK(big_dense == big * dim * sizeof(float));
    CHECK(big_mults == ids.size() * big * dim);

    // The picture is drawn after backward(): the table's gradient by its rows,
    // and a gradient at the intermediate nodes too (the loss's is 1).
    const std::string text = check_dot_file(dot, "emb.weight");
    CHECK(text.find("grad sparse rows {" + std::string(rows) + "}") != std::string::npos);
    CHECK(text.find("\\ngrad [1]") != std::string::npos);
    CHECK(text.find("embedding [") != std::string::npos);
    fs::remove(dot);
  }

  TEST_CASE("embedding_is_a_lookup refuses an unknown argument") {
    const Result r = run(example("embedding_is_a_lookup") + " --dott x");
    CHECK(r.status == 2);
    CHECK(r.output.find("usage:") != std::string::npos);
  }

  TEST_CASE("sparse_rows: a CSR row through Linear and through EmbeddingBag, and the work each did") {
    const Result r = run(example("sparse_rows"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("same result: true") != std::string::npos);
    const std::vector<double> by_linear = line_after(r.output, "linear(densified row)");
    const std::vector<double> by_bag = line_after(r.output, "embedding_bag(sum)");
    REQUIRE(!by_linear.empty());
    REQUIRE(by_linear.size() == by_bag.size());
    for (std::size_t i = 0; i < by_linear.size(); ++i) CHECK(by_bag[i] == doctest::Approx(by_linear[i]));

    std::size_t out = 0, in = 0, bag_rows = 0, bag_cols = 0, nnz = 0;
    scan(r.output, "linear weight", "linear weight [%zu, %zu], bag weight [%zu, %zu]", &out, &in, &bag_rows,
         &bag_cols);
    CHECK(bag_rows == in);  // the bag's table is the Linear's weight transposed
    CHECK(bag_cols == out);
    scan(r.output, "document", "document %*u: %zu non-zero entries", &nnz);
    const std::vector<double> densified = line_after(r.output, "densified row:");
    REQUIRE(densified.size() == in);
    CHECK(static_cast<std::size_t>(
              std::count_if(densified.begin(), densified.end(), [](double v) { return v != 0; })) == nnz);

    std::size_t linear_mults = 0, linear_in = 0, linear_out = 0, by_zero = 0, linear_bytes = 0;
    scan(r.output,
         "linear:", "linear: %zu multiplications (in %zu x out %zu, %zu of them by zero), %zu bytes",
         &linear_mults, &linear_in, &linear_out, &by_zero, &linear_bytes);
    CHECK(linear_mults == in * out);
    CHECK(linear_in == in);
    CHECK(linear_out == out);
    CHECK(by_zero == (in - nnz) * out);
    CHECK(linear_bytes == in * out * sizeof(float));
    std::size_t bag_mults = 0, bag_nnz = 0, bag_dim = 0, bag_bytes = 0;
    scan(r.output, "bag:", "bag: %zu multiplications (nnz %zu x dim %zu), %zu bytes", &bag_mults, &bag_nnz,
         &bag_dim, &bag_bytes);
    CHECK(bag_mults == nnz * out);
    CHECK(bag_nnz == nnz);
    CHECK(bag_dim == out);
    CHECK(bag_bytes == nnz * out * sizeof(float));
    CHECK(bag_mults < linear_mults);
  }

  TEST_CASE("backprop_by_hand: the tape forward, the traced backward, the hand-made chain rule, gradcheck") {
    const fs::path dot = temp_file("backprop.dot");
    const Result r = run(example("backprop_by_hand") + " --dot '" + dot.string() + "'");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("gradcheck passed") != std::string::npos);
    CHECK(r.output.find("FAILED") == std::string::npos);
    CHECK(r.output.find("by hand == backward(): true") != std::string::npos);

    // Backward visits exactly the forward entries, in reverse order.
    std::vector<int> forward, backward;
    for (const std::string& line : lines_of(r.output)) {
      int index = -1;
      if (std::sscanf(line.c_str(), "  [%d] ", &index) == 1) forward.push_back(index);
      if (std::sscanf(line.c_str(), "backward [%d] ", &index) == 1) backward.push_back(index);
    }
    REQUIRE(forward.size() >= 4);  // linear, tanh, linear, and the loss's entries
    std::reverse(backward.begin(), backward.end());
    CHECK(backward == forward);

    // The network's numbers redone here: pre = W1 x + b1, h = tanh(pre), out = W2 h + b2.
    const double h0 = std::tanh(0.5 * 1 - 0.4 * 2 + 0.1), h1 = std::tanh(0.3 * 1 + 0.8 * 2 - 0.2);
    const double out = 1.0 * h0 - 0.7 * h1 + 0.2, d_out = 2 * (out - 0.5);
    const double d_pre0 = d_out * 1.0 * (1 - h0 * h0), d_pre1 = d_out * -0.7 * (1 - h1 * h1);
    const std::vector<double> expected_w1 = {d_pre0 * 1, d_pre0 * 2, d_pre1 * 1, d_pre1 * 2};
    const std::vector<double> w1 = bracketed_after(r.output, "\n  fc1.weight ");
    const std::vector<double> b2 = bracketed_after(r.output, "\n  fc2.bias ");
    REQUIRE(w1.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) CHECK(w1[i] == doctest::Approx(expected_w1[i]).epsilon(1e-3));
    REQUIRE(b2.size() == 1);
    CHECK(b2[0] == doctest::Approx(d_out).epsilon(1e-3));

    // gradcheck checks the loss as it is; the example then redoes one slope,
    // fc1.weight[1, 1], whose analytic value is the gradient printed above,
    // digit for digit, and whose central difference agrees to its 3 digits.
    CHECK(r.output.find("gradcheck passed for 'loss' (L = fn(inputs), output made by op '") != std::string::npos);
    double analytic = 0, numeric = 0;
    scan(r.output, "fc1.weight[1, 1]:", "fc1.weight[1, 1]: analytic %lf (printed above), numeric %lf", &analytic,
         &numeric);
    REQUIRE(w1.size() == 4);
    CHECK(analytic == w1[3]);
    CHECK(std::abs(analytic - numeric) <= 1e-3);  // 0.403 printed: half a unit in its last digit, plus noise

    // The picture holds a gradient at every node: the loss's 1 and the tanh output's.
    const std::string text = check_dot_file(dot, "fc1.weight");
    CHECK(text.find("mse_loss [") != std::string::npos);
    std::size_t with_grad = 0, boxes = 0;
    for (const std::string& line : lines_of(text)) {
      if (line.find("[label=") == std::string::npos || line.find("shape=box") == std::string::npos) continue;
      ++boxes;
      with_grad += line.find("\\ngrad [") != std::string::npos;
    }
    CHECK(boxes >= 4);
    CHECK(with_grad == boxes);
    fs::remove(dot);
  }

  TEST_CASE(
      "sparse_vs_dense_updates: with a dense gradient, any optimizer state or weight decay moves absent "
      "rows") {
    const Result r = run(example("sparse_vs_dense_updates"));
    INFO(r.output);
    REQUIRE(r.status == 0);

    std::size_t vocab = 0, dim = 0;
    double w00 = 0, lr = 0, lr2 = 0, lr3 = 0, lr4 = 0, momentum = 0, weight_decay = 0;
    scan(r.output, "embedding", "embedding %zu x %zu, the same starting table for every run (w[0,0] = %lf)",
         &vocab, &dim, &w00);
    scan(r.output, "sgd ", "sgd SGD(lr %lf)", &lr);
    scan(r.output, "sgd+momentum ", "sgd+momentum SGD(lr %lf, momentum %lf)", &lr2, &momentum);
    scan(r.output, "sgd+decay ", "sgd+decay SGD(lr %lf, weight_decay %lf)", &lr3, &weight_decay);
    scan(r.output, "adam ", "adam Adam(lr %lf)", &lr4);
    CHECK(lr2 == lr);
    CHECK(lr3 == lr);
    CHECK(lr4 == lr);
    REQUIRE(momentum > 0);
    REQUIRE(weight_decay > 0);

    struct Step {
      std::set<int> batch, moved;
      double w00_moved = 0;
      std::size_t grad_bytes = 0, state_bytes = 0;
    };
    std::map<std::string, std::vector<Step>> runs;  // "adam dense" -> its steps in order
    for (const std::string& line : lines_of(r.output)) {
      char optimizer[16], gradient[8], batch[64], moved[64];
      int step = 0;
      Step s;
      if (std::sscanf(line.c_str(), "%15s %7s %d {%63[^}]} {%63[^}]} %lf %zu %zu", optimizer, gradient, &step,
                      batch, moved, &s.w00_moved, &s.grad_bytes, &s.state_bytes) == 8) {
        s.batch = int_set(batch);
        s.moved = int_set(moved);
        runs[std::string(optimizer) + " " + gradient].push_back(s);
      }
    }
    REQUIRE(runs.size() == 8);
    const std::size_t steps = runs["sgd sparse"].size();
    REQUIRE(steps == 3);
    for (auto& [name, s] : runs) REQUIRE_MESSAGE(s.size() == steps, name);
    std::set<int> all;
    for (std::size_t row = 0; row < vocab; ++row) all.insert(static_cast<int>(row));
    const std::vector<Step>& batches = runs["sgd sparse"];
    CHECK(batches[0].batch.count(0) == 1);  // row 0 is in the first batch only
    CHECK(batches[1].batch.count(0) == 0);
    CHECK(batches[2].batch.count(0) == 0);

    for (const char* optimizer : {"sgd", "sgd+momentum", "sgd+decay", "adam"}) {
      // A sparse gradient, any optimizer: a step moves exactly the rows in its batch.
      const std::string sparse = std::string(optimizer) + " sparse",
                        dense = std::string(optimizer) + " dense";
      std::set<int> seen;
      for (std::size_t k = 0; k < steps; ++k) {
        CAPTURE(k);
        const Step& s = runs[sparse][k];
        CHECK_MESSAGE(s.moved == s.batch, sparse);
        if (!s.batch.count(0)) CHECK_MESSAGE(s.w00_moved == 0.0, sparse);
        // A dense gradient: plain SGD moves the batch; momentum and Adam every row
        // ever in a batch; weight decay every row at every step.
        const Step& d = runs[dense][k];
        seen.insert(d.batch.begin(), d.batch.end());
        const std::set<int> expected = std::string(optimizer) == "sgd"         ? d.batch
                                       : std::string(optimizer) == "sgd+decay" ? all
                                                                               : seen;
        CHECK_MESSAGE(d.moved == expected, dense);
        // Gradient bytes: a dense gradient is always the table; a sparse one grows with the batch.
        CHECK(d.grad_bytes == vocab * dim * sizeof(float));
        CHECK(s.grad_bytes == s.batch.size() * (sizeof(int64_t) + dim * sizeof(float)));
      }
    }
    // Step 2 of dense momentum: rows outside the batch {2, 5} moved.
    const Step& second = runs["sgd+momentum dense"][1];
    CHECK(!std::includes(second.batch.begin(), second.batch.end(), second.moved.begin(), second.moved.end()));

    // Row 0's moves, redone from the formulas (gradient 1 at step 1, then 0).
    // Printed with 4 decimals.
    auto near = [](double printed, double exact) { return std::abs(printed - exact) <= 6e-5; };
    const auto& mom = runs["sgd+momentum dense"];
    CHECK(near(mom[0].w00_moved, -lr));                        // buf = 1
    CHECK(near(mom[1].w00_moved, -lr * momentum));             // buf = momentum * 1 + 0
    CHECK(near(mom[2].w00_moved, -lr * momentum * momentum));  // buf = momentum^2
    const auto& decay = runs["sgd+decay dense"];
    const double after1 = w00 - lr * (1 + weight_decay * w00);
    CHECK(near(decay[0].w00_moved, after1 - w00));
    CHECK(near(decay[1].w00_moved, -lr * weight_decay * after1));  // g = 0 + weight_decay * p
    const auto& adam = runs["adam dense"];
    double m = 0, v = 0;
    for (std::size_t k = 0; k < steps; ++k) {
      const double g = k == 0 ? 1 : 0, t = static_cast<double>(k + 1);
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double step =
          lr * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
      CHECK_MESSAGE(near(adam[k].w00_moved, -step), "adam dense step " << k + 1);
    }
    for (const char* name : {"sgd sparse", "sgd dense"}) CHECK(runs[name][1].w00_moved == 0.0);

    // Optimizer state: none for plain SGD; a buffer plus a flag per row for
    // momentum; m and v for every row for Adam, lazy or not.
    for (const char* gradient : {" sparse", " dense"}) {
      CHECK(runs[std::string("sgd") + gradient][2].state_bytes == 0);
      CHECK(runs[std::string("sgd+decay") + gradient][2].state_bytes == 0);
      CHECK(runs[std::string("sgd+momentum") + gradient][2].state_bytes ==
            vocab * dim * sizeof(float) + vocab);
      CHECK(runs[std::string("adam") + gradient][2].state_bytes == 2 * vocab * dim * sizeof(float));
    }

    std::size_t big_vocab = 0, big_dim = 0, ids = 0, dense_bytes = 0, sparse_bytes = 0;
    scan(r.output, "at ",
         "at %zu x %zu with %zu distinct ids per batch: dense gradient %zu bytes, sparse %zu bytes",
         &big_vocab, &big_dim, &ids, &dense_bytes, &sparse_bytes);
    CHECK(dense_bytes == big_vocab * big_dim * sizeof(float));
    CHECK(sparse_bytes == ids * (sizeof(int64_t) + big_dim * sizeof(float)));
  }

  TEST_CASE("skipgram_step: word2vec's network and two Embeddings give the same step; the Embeddings' gradient is 1 + K rows a pair") {
    const auto r = tg::test::run_command(tg::test::example_path("skipgram_step") +
                                         " --sizes 1000,20000 --pairs 8 --dim 16 --negative 3 --repeats 1");
    REQUIRE(r.status == 0);
    std::size_t at = 0, runs = 0;
    while ((at = r.output.find("same loss and gradients: yes", at)) != std::string::npos) ++runs, ++at;
    CHECK(runs == 2);
    CHECK(r.output.find("NO") == std::string::npos);
    for (std::size_t v : {1000, 20000}) {
      CAPTURE(v);
      std::size_t dense = 0, sparse = 0;
      std::istringstream lines(r.output);
      for (std::string line; std::getline(lines, line);) {
        std::size_t vocab = 0, bytes = 0;
        float loss = 0;
        char path[64];
        if (std::sscanf(line.c_str(), "%zu %63s %*[^0-9-]%f %zu", &vocab, path, &loss, &bytes) == 4 && vocab == v)
          (std::string(path) == "one-hot" ? dense : sparse) = bytes;
      }
      CHECK(dense == 2 * v * 16 * sizeof(float));  // both weights, every row
      // at most 8 input rows and 8 x (1 + 3) output rows, each an id and 16 floats
      CHECK(sparse > 0);
      CHECK(sparse <= (8 + 8 * 4) * (sizeof(int64_t) + 16 * sizeof(float)));
    }
  }

  TEST_CASE("docs/learn.md's printed blocks are what the examples print") {
    // Each "```text\n$ ./build/examples/NAME" block between the learn markers is
    // a whole run, pasted: the program's output now must be the same, byte for byte.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    MESSAGE("sanitizer build: the blocks are pasted from, and checked against, the release build");
    return;
#endif
    const std::string page = tg::test::read_file(tg::test::source_path("docs/learn.md"));
    REQUIRE(!page.empty());
    const std::size_t begin = page.find("<!-- learn:begin -->"), end = page.find("<!-- learn:end -->");
    REQUIRE(begin != std::string::npos);
    REQUIRE(end != std::string::npos);
    const std::string learn = page.substr(begin, end - begin);
    const std::string opening = "```text\n$ ./build/examples/";
    std::size_t blocks = 0;
    for (std::size_t at = learn.find(opening); at != std::string::npos; at = learn.find(opening, at + 1)) {
      const std::size_t name_at = at + opening.size(), line_end = learn.find('\n', name_at);
      const std::string name = learn.substr(name_at, line_end - name_at);
      const std::string pasted = learn.substr(line_end + 1, learn.find("```", line_end) - line_end - 1);
      CAPTURE(name);
      REQUIRE(name.find(' ') == std::string::npos);  // no arguments
      const Result r = run(example(name));
      REQUIRE(r.status == 0);
      CHECK(r.output == pasted);
      ++blocks;
    }
    CHECK(blocks == 4);
  }

  TEST_CASE("docs/learn.md's gdb recipe runs as written (skipped without gdb)") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    MESSAGE("sanitizer build: the recipe is checked by the plain suite");
    return;
#endif
    if (run("command -v gdb").status != 0) {
      MESSAGE("gdb is not installed: not checking the gdb recipe of docs/learn.md");
      return;
    }
    const std::string page = tg::test::read_file(tg::test::source_path("docs/learn.md"));
    REQUIRE(!page.empty());
    // The shell block that builds the stepped example, and the gdb commands.
    const std::string build = fenced_block(page, "```sh\nmeson setup build-debug");
    const std::string commands = fenced_block(page, "```gdb\n");
    REQUIRE(!build.empty());
    REQUIRE(!commands.empty());

    // The same commands, in a build directory of the test's own.
    const std::string dir = std::string(TAPEGRAD_BUILD_DIR) + "/gdb-recipe";
    const std::string source = "cd '" + tg::test::source_path("") + "' && ";
    std::string gdb_line;
    for (const std::string& line : lines_of(build)) {
      std::string command = line;
      for (const std::string name : {"./build-debug", "build-debug"})
        for (std::size_t at; (at = command.find(name)) != std::string::npos;)
          command.replace(at, name.size(), "'" + dir + "'");
      if (line.rfind("gdb ", 0) == 0) {
        gdb_line = command;
        continue;
      }
      if (line.rfind("meson setup", 0) == 0 && fs::exists(dir + "/build.ninja")) continue;  // set up once
      const Result step = run(source + command);
      INFO(command);
      INFO(step.output);
      REQUIRE(step.status == 0);
    }
    REQUIRE(gdb_line.rfind("gdb ", 0) == 0);
    REQUIRE(gdb_line.find(" --args ") != std::string::npos);
    const fs::path script = temp_file("recipe.gdb");
    std::ofstream(script) << commands;
    // -batch: run the commands, then quit. stdbuf: the program's own prints are
    // line-buffered as on a terminal, so its lines and gdb's show up in order.
    // `meson test` points LD_LIBRARY_PATH at the release library, which would
    // win over the debug program's own (no debug information, no tape.cpp):
    // a learner's shell has no such setting.
    const Result r = run(source + "env -u LD_LIBRARY_PATH stdbuf -oL gdb -batch -nx -x '" + script.string() +
                         "' " + gdb_line.substr(std::string("gdb ").size()));
    fs::remove(script);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("not defined") == std::string::npos);
    CHECK(r.output.find("No symbol") == std::string::npos);

    // Both breakpoints are hit, and what gdb prints is the example's last forward
    // entry (its op and tape index), with run_closure called from run_backward.
    const Result plain = run(example("backprop_by_hand"));
    std::string last;
    int last_index = -1;
    for (const std::string& line : lines_of(plain.output)) {
      int index = -1;
      if (std::sscanf(line.c_str(), "  [%d] ", &index) == 1) {
        last = line.substr(2);
        last_index = index;
      }
    }
    REQUIRE(!last.empty());
    const std::string op = last.substr(last.find("] ") + 2, last.find('(') - last.find("] ") - 2);
    bool in_run_backward = false, in_step = false, called_from_walk = false;
    for (const std::string& line : lines_of(r.output)) {
      called_from_walk = called_from_walk || (line.rfind("#1 ", 0) == 0 && line.find("tg::run_backward (") != std::string::npos);
      if (line.find("hit Breakpoint") == std::string::npos) continue;
      in_run_backward = in_run_backward || line.find("tg::run_backward (") != std::string::npos;
      in_step = in_step || line.find("tg::run_closure (") != std::string::npos;
    }
    CHECK(in_run_backward);
    CHECK(in_step);
    CHECK(called_from_walk);
    CHECK(r.output.find("$1 = \"" + op + "\"") != std::string::npos);
    CHECK(r.output.find("$2 = " + std::to_string(last_index) + "\n") != std::string::npos);
    // The pretty-printers, loaded from next to the library: the entry as the
    // listing prints it, and the seed that reached the loss.
    CHECK(r.output.find("$3 = Node " + last.substr(0, last.find(" -> "))) != std::string::npos);
    CHECK(r.output.find("$4 = Array [] = 1\n") != std::string::npos);
    // The page's printed stops name lines of core/tape.cpp: gdb stops at the same ones today.
    const std::string printed = fenced_block(page.substr(page.find("What gdb prints")), "```text\n");
    std::size_t lines_named = 0;
    for (std::size_t at = 0; (at = printed.find("core/tape.cpp:", at)) != std::string::npos; ++lines_named) {
      at += std::string("core/tape.cpp:").size();
      const std::string where = "core/tape.cpp:" + printed.substr(at, printed.find_first_not_of("0123456789", at) - at);
      CAPTURE(where);
      CHECK(r.output.find(where) != std::string::npos);
    }
    CHECK(lines_named == 4);
  }

  TEST_CASE("docs/learn.md's own-program gdb recipe: compiled against the debug library, the printers show values") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    MESSAGE("sanitizer build: the recipe is checked by the plain suite");
    return;
#endif
    if (run("command -v gdb").status != 0 || run("command -v g++").status != 0) {
      MESSAGE("gdb or g++ is not installed: not checking the own-program recipe of docs/learn.md");
      return;
    }
    const std::string page = tg::test::read_file(tg::test::source_path("docs/learn.md"));
    const std::size_t marker = page.find("<!-- gdb-own-program -->");
    REQUIRE(marker != std::string::npos);
    const std::string own = page.substr(marker);
    const std::string program = fenced_block(own, "```cpp\n");
    const std::string build = fenced_block(own, "```sh\nninja -C build-debug libtapegrad.so");
    const std::string commands = fenced_block(own, "```gdb\n");
    REQUIRE(!program.empty());
    REQUIRE(!build.empty());
    REQUIRE(!commands.empty());

    // The debug library of the recipe above (the same directory) is the
    // program's build-debug: a directory of the test's own holds my_net.cpp and
    // a link named build-debug to it, and every command runs there as written.
    const std::string lib = std::string(TAPEGRAD_BUILD_DIR) + "/gdb-recipe";
    const fs::path dir = temp_file("own-program");
    fs::create_directories(dir);
    std::ofstream(dir / "my_net.cpp") << program;
    if (!fs::exists(lib + "/build.ninja")) {
      const Result setup = run("cd '" + tg::test::source_path("") + "' && meson setup '" + lib + "' --buildtype=debug");
      INFO(setup.output);
      REQUIRE(setup.status == 0);
    }
    fs::create_directory_symlink(lib, dir / "build-debug");
    std::string gdb_line, compile_line;
    for (const std::string& line : lines_of(build)) {
      if (line.rfind("gdb ", 0) == 0) {
        gdb_line = line;
        continue;
      }
      if (line.rfind("g++ ", 0) == 0) compile_line = line;
      const Result step = run("cd '" + dir.string() + "' && " + line);
      INFO(line);
      INFO(step.output);
      REQUIRE(step.status == 0);
    }
    REQUIRE(!gdb_line.empty());
    const Result plain = run("cd '" + dir.string() + "' && env -u LD_LIBRARY_PATH ./my_net");
    INFO(plain.output);
    REQUIRE(plain.status == 0);
    std::ofstream(dir / "commands.gdb") << commands;
    const Result r =
        run("cd '" + dir.string() + "' && env -u LD_LIBRARY_PATH gdb -batch -nx -x commands.gdb " +
            gdb_line.substr(std::string("gdb ").size()));
    INFO(r.output);
    CHECK(r.status == 0);
    // The first step is h * h's, with the seed; the second tanh's, with 2 h.
    const double h = std::tanh(0.5 * 1.0 - 1.0 * 2.0);
    char value[128];
    CHECK(r.output.find("$1 = Node [3] mul([]*, []*) -> []\n") != std::string::npos);
    CHECK(r.output.find("$2 = Array [] = 1\n") != std::string::npos);
    CHECK(r.output.find("$3 = Node [2] tanh([]*) -> []\n") != std::string::npos);
    std::snprintf(value, sizeof value, "$4 = Array [] = %g\n", 2 * h);
    CHECK(r.output.find(value) != std::string::npos);
    // main's tensors: w's name, shape and values; h made by tanh, with its value.
    CHECK(r.output.find("$5 = Tensor \"w\" [1, 2] requires_grad = [[0.5, -1]], grad None") != std::string::npos);
    std::snprintf(value, sizeof value, "$6 = Tensor [] requires_grad = %g, grad_fn=<tanh>, grad None\n", h);
    CHECK(r.output.find(value) != std::string::npos);

    // Gradients of both kinds, through the same commands: a program compiled
    // as my_net was, stopped after its backward pass.
    std::ofstream(dir / "rows.cpp") << R"(#include <tapegrad/tapegrad.hpp>
int main() {
  tg::Generator gen(0);
  tg::nn::EmbeddingOptions options;
  options.sparse = true;
  tg::nn::Embedding emb(6, 3, options, gen);
  tg::Tensor w = tg::Tensor({{0.5f, -1.0f}}, true).set_name("w");
  const tg::Indices ids = xt::xarray<int64_t>{3, 1, 3};
  tg::Tensor loss = tg::sum(emb(ids)) + tg::sum(w * w);
  loss.backward();
  const tg::Grad& rows = emb.weight.grad();
  const tg::Grad& dense = w.grad();
  const tg::SparseRows& sparse = rows.sparse();
  return static_cast<int>(sparse.rows.size() + dense.shape().size()) - 4;  // stop here: line 14
}
)";
    std::string rows_line = compile_line;
    for (std::size_t at; (at = rows_line.find("my_net")) != std::string::npos;)
      rows_line.replace(at, 6, "rows");
    const Result built = run("cd '" + dir.string() + "' && " + rows_line);
    INFO(built.output);
    REQUIRE(built.status == 0);
    std::ofstream(dir / "rows.gdb") << "break rows.cpp:14\nrun\np w\np dense\np rows\np sparse\n";
    std::string rows_gdb = gdb_line;
    rows_gdb.replace(rows_gdb.find("./my_net"), 8, "./rows");
    const Result g = run("cd '" + dir.string() + "' && env -u LD_LIBRARY_PATH " + rows_gdb.substr(0, 4) +
                         "-batch -nx -x rows.gdb " + rows_gdb.substr(4));
    fs::remove_all(dir);
    INFO(g.output);
    CHECK(g.output.find(
              "$1 = Tensor \"w\" [1, 2] requires_grad = [[0.5, -1]], grad dense [1, 2] = [[1, -2]]\n") !=
          std::string::npos);
    CHECK(g.output.find("$2 = Grad dense [1, 2] = [[1, -2]]\n") != std::string::npos);
    CHECK(g.output.find("$3 = Grad sparse rows {1, 3} of 6 x 3 = [[1, 1, 1], [2, 2, 2]]\n") !=
          std::string::npos);
    CHECK(g.output.find("$4 = rows {1, 3} of 6 x 3 = [[1, 1, 1], [2, 2, 2]]\n") != std::string::npos);
  }
}
