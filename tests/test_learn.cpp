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

// The numbers on the indented lines right after the line that starts with `header`.
std::vector<double> block_after(const std::string& out, const std::string& header) {
  std::istringstream lines(out);
  std::vector<double> values;
  bool inside = false;
  for (std::string line; std::getline(lines, line);) {
    if (inside && (line.empty() || line[0] != ' ')) break;
    if (inside)
      for (double x : numbers(line)) values.push_back(x);
    if (line.rfind(header, 0) == 0) inside = true;
  }
  return values;
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

void check_dot_file(const fs::path& file, const std::string& must_name) {
  std::ifstream in(file);
  REQUIRE_MESSAGE(in.good(), "no dot file at " << file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.rfind("digraph", 0) == 0);
  CHECK(text.find(must_name) != std::string::npos);
  if (run("command -v dot").status != 0) {
    MESSAGE("graphviz's dot is not installed: not checking that " << file << " parses");
    return;
  }
  const Result d = run("dot -Tsvg '" + file.string() + "' -o /dev/null");
  INFO(d.output);
  CHECK(d.status == 0);
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

    // Both outputs, number by number: one row per id.
    const std::vector<double> ids = line_after(r.output, "ids:");
    const std::vector<double> looked_up = block_after(r.output, "embedding(ids)");
    const std::vector<double> multiplied = block_after(r.output, "linear(one_hot(ids))");
    REQUIRE(looked_up.size() == ids.size() * dim);
    REQUIRE(multiplied.size() == looked_up.size());
    for (std::size_t i = 0; i < looked_up.size(); ++i) CHECK(multiplied[i] == doctest::Approx(looked_up[i]));

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
    std::size_t dense_rows = 0, dense_cols = 0, dense_bytes = 0;
    scan(r.output, "linear grad:", "linear grad: dense [%zu, %zu], %zu bytes", &dense_rows, &dense_cols,
         &dense_bytes);
    CHECK(dense_rows == dim);
    CHECK(dense_cols == vocab);
    CHECK(dense_bytes == vocab * dim * sizeof(float));
    CHECK(r.output.find("gradients agree (sparse densified vs dense transposed): true") != std::string::npos);

    // In the dense gradient, the rows of ids that were not looked up are zero.
    const std::vector<double> dense_t = block_after(r.output, "linear grad, transposed");
    REQUIRE(dense_t.size() == vocab * dim);
    for (std::size_t row = 0; row < vocab; ++row) {
      bool zero = true;
      for (std::size_t c = 0; c < dim; ++c) zero = zero && dense_t[row * dim + c] == 0.0;
      CHECK_MESSAGE(zero == !distinct.count(static_cast<int>(row)), "row " << row);
    }

    check_dot_file(dot, "emb.weight");
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

    check_dot_file(dot, "fc1.weight");
    fs::remove(dot);
  }

  TEST_CASE("sparse_vs_dense_updates: dense Adam moves rows outside the batch, the others do not") {
    const Result r = run(example("sparse_vs_dense_updates"));
    INFO(r.output);
    REQUIRE(r.status == 0);

    struct Step {
      std::set<int> batch, changed;
      std::size_t grad_bytes = 0;
    };
    std::map<std::string, std::vector<Step>> runs;  // "adam dense" -> its steps in order
    for (const std::string& line : lines_of(r.output)) {
      char optimizer[8], gradient[8], batch[64], changed[64];
      int step = 0;
      std::size_t bytes = 0;
      if (std::sscanf(line.c_str(),
                      "%7s %7s step %d batch {%63[^}]} changed rows: {%63[^}]} gradient %zu bytes", optimizer,
                      gradient, &step, batch, changed, &bytes) == 6)
        runs[std::string(optimizer) + " " + gradient].push_back({int_set(batch), int_set(changed), bytes});
    }
    REQUIRE(runs.size() == 4);
    const std::size_t steps = runs["sgd sparse"].size();
    REQUIRE(steps >= 2);
    for (auto& [name, s] : runs) REQUIRE_MESSAGE(s.size() == steps, name);
    CHECK(runs["adam dense"][1].batch != runs["adam dense"][0].batch);  // step 2 uses other ids

    // SGD either way, and lazy Adam: a step moves exactly the rows in its batch.
    for (const char* name : {"sgd sparse", "sgd dense", "adam sparse"})
      for (std::size_t k = 0; k < steps; ++k)
        CHECK_MESSAGE(runs[name][k].changed == runs[name][k].batch, name << " step " << k + 1);

    // Dense Adam: every row ever in a batch keeps moving on its momentum.
    std::set<int> seen;
    for (std::size_t k = 0; k < steps; ++k) {
      const Step& s = runs["adam dense"][k];
      seen.insert(s.batch.begin(), s.batch.end());
      CHECK_MESSAGE(s.changed == seen, "adam dense step " << k + 1);
    }
    const Step& second = runs["adam dense"][1];
    CHECK(!std::includes(second.batch.begin(), second.batch.end(), second.changed.begin(),
                         second.changed.end()));

    // Gradient bytes: a dense gradient is always the table; a sparse one grows with the batch.
    for (const char* name : {"sgd dense", "adam dense"})
      for (const Step& s : runs[name]) CHECK(s.grad_bytes == runs["sgd dense"][0].grad_bytes);
    const std::size_t per_row = runs["sgd sparse"][0].grad_bytes / runs["sgd sparse"][0].batch.size();
    for (const char* name : {"sgd sparse", "adam sparse"})
      for (const Step& s : runs[name]) {
        CHECK(s.grad_bytes == s.batch.size() * per_row);
        CHECK(s.grad_bytes < runs["sgd dense"][0].grad_bytes);
      }
  }
}
