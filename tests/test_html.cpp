// write_html(): the page of one backward pass. Its data is checked against
// what backward() computes; then the pages are opened in headless Chromium
// (tests/browser.py drives it) and what they show at step 0, a middle step and
// the last step is checked against the engine's numbers, with no script errors
// and no request beyond the file itself. The browser part is skipped, with a
// message, where chromium is not installed, and in sanitizer builds (the plain
// build runs it).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <tapegrad/tapegrad.hpp>

#include "helpers.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool installed(const std::string& program) {
  return tg::test::run_command("command -v " + program).status == 0;
}

// 6 significant digits, as the page (and the backward trace) print a number.
std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
std::vector<std::string> fmt_all(const float* p, std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(fmt(p[i]));
  return out;
}
std::vector<std::string> fmt_all(const tg::Array& a) {
  return fmt_all(a.data(), a.size());
}
// The line a box in the graph shows: "[1, 2]" up to 8 values.
std::string short_str(const tg::Array& a) {
  std::string s = "[";
  for (std::size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + fmt(a.data()[i]);
  return s + "]";
}

// The JSON the page carries (its <script id="data">).
json page_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const std::size_t begin = page.find(open), end = page.find("</script>", begin);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  return json::parse(page.substr(begin + open.size(), end - begin - open.size()));
}

// The gradient step k + 1 shows arriving at its op's output: its own, or the
// total the steps before sent to that tensor (inspect/html_page.cpp).
json arriving(const json& data, std::size_t k) {
  const json& step = data["steps"][k];
  if (step.contains("arriving")) return step["arriving"];
  json total = step["t"] == 0 ? data["seed"] : json();
  for (std::size_t s = 0; s < k; ++s)
    for (const json& in : data["steps"][s]["inputs"])
      if (in["t"] == step["t"] && !in["share"].is_null()) total = in.value("total", in["share"]);
  return total;
}

// The ops under `root`, latest first: the order backward() runs them in.
std::vector<std::shared_ptr<tg::Node>> ops_under(const tg::Tensor& root) {
  std::vector<std::shared_ptr<tg::Node>> ops;
  std::set<const tg::Node*> seen;
  std::vector<tg::Tensor> todo{root};
  while (!todo.empty()) {
    const tg::Tensor t = todo.back();
    todo.pop_back();
    if (!t.creator() || !seen.insert(t.creator().get()).second) continue;
    ops.push_back(t.creator());
    for (const auto& in : t.creator()->inputs) todo.push_back(in.tensor);
  }
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a->index > b->index; });
  return ops;
}
std::string label(const tg::Node& n) {
  std::string s = "[";
  s += std::to_string(n.index);
  s += "] ";
  return s += n.op;
}

// examples/backprop_by_hand.cpp's network and numbers.
struct BackpropByHand {
  tg::nn::Linear fc1{2, 2}, fc2{2, 1};
  tg::Tensor x, y, loss;
  BackpropByHand() {
    {
      tg::NoGradGuard no_grad;
      fc1.weight.copy_({{0.5f, -0.4f}, {0.3f, 0.8f}});
      fc1.bias->copy_({0.1f, -0.2f});
      fc2.weight.copy_({{1.0f, -0.7f}});
      fc2.bias->copy_({0.2f});
    }
    fc1.weight.set_name("fc1.weight");
    fc1.bias->set_name("fc1.bias");
    fc2.weight.set_name("fc2.weight");
    fc2.bias->set_name("fc2.bias");
    x = tg::Tensor({{1.0f, 2.0f}}).set_name("x");
    y = tg::full({1, 1}, 0.5f).set_name("y");
    loss = tg::mse_loss(fc2(tg::tanh(fc1(x))), y);
  }
  std::vector<tg::Tensor> params() const { return {fc1.weight, *fc1.bias, fc2.weight, *fc2.bias}; }
};

// examples/digits_mlp.cpp's first training step: its model, its first batch.
struct DigitsFirstStep {
  tg::Generator gen{0};
  tg::nn::Sequential model{tg::nn::Linear(64, 128, true, gen), tg::nn::ReLU(), tg::nn::Dropout(0.2f, gen),
                           tg::nn::Linear(128, 10, true, gen)};
  tg::Tensor loss;
  DigitsFirstStep() {
    tg::data::CsvData data =
        tg::data::read_csv(tg::test::source_path("examples/data/digits.csv"), {.header = true});
    tg::Tensor images = data.features / 16.0f;
    tg::data::Split split = tg::data::train_test_split(data.size(), 0.2, 0);
    tg::data::BatchSampler batches(split.train, {.batch_size = 32, .shuffle = true}, gen);
    model.train();
    const tg::Indices idx = *batches.begin();
    loss = tg::cross_entropy(model(tg::index_select(images, 0, idx)), tg::data::take(data.labels, idx));
  }
};

// The largest graph write_html takes: html_max_ops ops on [8, 8] tensors
// (64 values each, every one listed), with one weight used by a third of them.
struct BigGraph {
  tg::Generator gen{0};
  tg::Tensor w = tg::randn({8, 8}, gen, true).set_name("w");
  tg::Tensor x, loss;
  BigGraph() {
    x = w;
    for (std::size_t i = 0; i + 1 < tg::html_max_ops; ++i)
      x = i % 3 == 0 ? tg::tanh(x) : i % 3 == 1 ? x * 1.1f : x + w;
    loss = tg::sum(x);
  }
};

// Where the pages and screenshots go: kept after the run, to look at.
std::string out_dir() {
  const std::string dir = std::string(TAPEGRAD_BUILD_DIR) + "/tests/step-through";
  fs::create_directories(dir);
  return dir;
}

std::string example(const std::string& name) {
  return "'" + tg::test::example_path(name) + "'";
}

// Every value the page shows for a gradient, engine side: dense values, or a
// sparse gradient's listed rows.
std::vector<std::string> grad_values(const tg::Grad& g) {
  if (g.is_dense()) return fmt_all(g.dense());
  return fmt_all(g.sparse().values.data(), g.sparse().values.size());
}

}  // namespace

TEST_SUITE("html") {
  TEST_CASE("write_html: the recorded steps are the engine's, and every gradient is left as it was") {
    if (!installed("dot")) {
      MESSAGE("graphviz's dot is not installed (Debian package graphviz): not writing pages");
      return;
    }
    BackpropByHand net;
    // A gradient from before: write_html must neither add to it nor drop it.
    net.fc1.weight.accumulate_grad(tg::Array(xt::ones<float>({2, 2})));
    tg::test::TempDir dir;
    const std::string file = dir.file("by_hand.html");
    tg::write_html(net.loss, file);
    CHECK_ALLCLOSE(net.fc1.weight.grad().dense(), tg::Array(xt::ones<float>({2, 2})));
    CHECK(net.fc2.weight.grad().empty());
    const std::string page = tg::test::read_file(file);
    const json data = page_data(page);

    // The engine's own numbers: every tensor's gradient, from a plain backward().
    net.fc1.weight.zero_grad();
    {
      tg::RetainAllGradsGuard keep;
      net.loss.backward(std::nullopt, /*retain_graph=*/true);  // the graph is still there
    }
    const auto ops = ops_under(net.loss);
    REQUIRE(data["steps"].size() == ops.size());
    const json& tensors = data["tensors"];
    for (std::size_t k = 0; k < ops.size(); ++k) {
      CAPTURE(k);
      const json& step = data["steps"][k];
      CHECK(tensors[step["t"].get<std::size_t>()]["label"] == label(*ops[k]));
      CHECK(arriving(data, k)["v"] == fmt_all(ops[k]->output.lock()->grad.dense()));
      REQUIRE(step["inputs"].size() == ops[k]->inputs.size());
    }
    // Each parameter's gradient on the page, at the last step, is backward()'s.
    for (const tg::Tensor& p : net.params()) {
      CAPTURE(p.name());
      bool found = false;
      for (const auto& [id, grad] : data["final"].items())
        if (tensors[std::stoul(id)]["label"] == p.name()) {
          CHECK(grad["v"] == fmt_all(p.grad().dense()));
          found = true;
        }
      CHECK(found);
    }
    // mul(d, d): an op that takes one tensor twice gives it two shares, and its
    // total is their sum.
    tg::Tensor a = tg::Tensor({1.0f, -2.0f}, true).set_name("a");
    tg::Tensor d = a * 3.0f;
    const tg::Tensor twice = tg::sum(d * d);
    const std::string twice_file = dir.file("twice.html");
    tg::write_html(twice, twice_file);
    const json twice_data = page_data(tg::test::read_file(twice_file));
    {
      tg::RetainAllGradsGuard keep;
      twice.backward();
    }
    const json& mul = twice_data["steps"][1];
    REQUIRE(mul["inputs"].size() == 2);
    CHECK(mul["inputs"][0]["t"] == mul["inputs"][1]["t"]);
    CHECK(mul["inputs"][0]["total"]["v"] == fmt_all(d.grad().dense()));
    CHECK(mul["inputs"][0]["share"]["v"] == fmt_all(tg::Array(d.grad().dense() / 2.0f)));
  }

  TEST_CASE("write_html: a sparse gradient shows its rows, and the leaves' gradients are backward()'s") {
    if (!installed("dot")) {
      MESSAGE("graphviz's dot is not installed (Debian package graphviz): not writing pages");
      return;
    }
    // examples/sparse_vs_dense_updates.cpp's graph: sum(embedding(batch)).
    tg::Generator gen(0);
    tg::nn::Embedding emb(8, 4, {}, gen);
    emb.weight.set_name("emb.weight");
    const tg::Tensor loss = tg::sum(emb(tg::Indices{0, 1, 2, 1}));
    tg::test::TempDir dir;
    const std::string file = dir.file("sparse_vs_dense_updates.html");
    tg::write_html(loss, file);
    CHECK(emb.weight.grad().empty());
    loss.backward();
    const json data = page_data(tg::test::read_file(file));
    const json& share = data["steps"].back()["inputs"][0]["share"];
    CHECK(share["rows"] == std::vector<int64_t>{0, 1, 2});
    CHECK(share["shape"] == std::vector<std::size_t>{8, 4});
    CHECK(share["v"] == grad_values(emb.weight.grad()));
    CHECK(share["short"] == "rows {0, 1, 2}");
  }

  TEST_CASE("write_html: the largest graph it takes makes a page under 1 MB; one more op is refused") {
    if (!installed("dot")) {
      MESSAGE("graphviz's dot is not installed (Debian package graphviz): not writing pages");
      return;
    }
    BigGraph big;
    tg::test::TempDir dir;
    tg::write_html(big.loss, dir.file("big.html"));
    const std::string page = tg::test::read_file(dir.file("big.html"));
    const json data = page_data(page);
    CHECK(data["steps"].size() == tg::html_max_ops);
    CHECK(page.size() < 1'000'000);
    MESSAGE(tg::html_max_ops << " ops on [8, 8] tensors: " << page.size() << " bytes");
    // w has a box beside each of the 67 ops that use it (tanh(w), then every
    // third op): "tK", "tK_2", ..., "tK_67".
    std::size_t w_id = 0;
    while (data["tensors"][w_id]["label"] != "w") ++w_id;
    const std::string box = "id=\"t" + std::to_string(w_id);
    CHECK(page.find(box + "\"") != std::string::npos);
    CHECK(page.find(box + "_67\"") != std::string::npos);
    CHECK(page.find(box + "_68\"") == std::string::npos);
    std::size_t boxes = 0;  // one per op, one per use of w: no box that dot made up for a stray edge
    for (std::size_t at = 0; (at = page.find("class=\"node\"", at)) != std::string::npos; ++at) ++boxes;
    CHECK(boxes == tg::html_max_ops + 67);

    CHECK_THROWS_WITH_AS(tg::write_html(tg::sum(big.x * 1.0f), dir.file("bigger.html")),
                         doctest::Contains((std::to_string(tg::html_max_ops + 1) + " recorded ops").c_str()),
                         std::invalid_argument);
  }

  TEST_CASE("write_html: bad input is named, and nothing changes") {
    BackpropByHand net;
    CHECK_THROWS_WITH_AS(tg::write_html(net.x, "unused.html"), doctest::Contains("does not require grad"),
                         std::invalid_argument);
    const tg::Tensor two = net.fc1.weight * 2.0f;
    CHECK_THROWS_WITH_AS(tg::write_html(two, "unused.html"), doctest::Contains("shape [2, 2]"),
                         std::invalid_argument);

    // More ops than a page steps through: refused, with the count.
    tg::Tensor chain = net.fc2.weight;
    for (std::size_t i = 0; i <= tg::html_max_ops; ++i) chain = chain * 1.0f;
    CHECK_THROWS_WITH_AS(tg::write_html(tg::sum(chain), "unused.html"),
                         doctest::Contains((std::to_string(tg::html_max_ops + 2) + " recorded ops").c_str()),
                         std::invalid_argument);
    CHECK(!fs::exists("unused.html"));

    // Without dot on PATH: the error names the Debian package.
    tg::test::TempDir dir;
    const std::string path = std::getenv("PATH");
    ::setenv("PATH", dir.path.c_str(), 1);
    CHECK_THROWS_WITH_AS(tg::write_html(net.loss, dir.file("page.html")),
                         doctest::Contains("apt-get install graphviz"), std::runtime_error);
    ::setenv("PATH", path.c_str(), 1);
    CHECK(!fs::exists(dir.file("page.html")));
    if (installed("dot"))
      CHECK_THROWS_WITH_AS(tg::write_html(net.loss, dir.file("no/such/dir/page.html")),
                           doctest::Contains("no/such/dir/page.html"), std::runtime_error);
    for (const tg::Tensor& p : net.params()) CHECK(p.grad().empty());  // every failure left them alone

    // A name that is not UTF-8 (Latin-1's e-acute, 0xE9): the page is UTF-8 text.
    net.fc2.bias->set_name("caf\xE9.bias");
    CHECK_THROWS_WITH_AS(
        tg::write_html(net.loss, dir.file("page.html")),
        "write_html: the name of a tensor in the graph, 'caf\\xE9.bias' (a leaf of shape [1]), is "
        "not UTF-8 (byte 4 is 0xE9); a page holds UTF-8 text: give it a UTF-8 name with set_name()",
        std::invalid_argument);
    CHECK(!fs::exists(dir.file("page.html")));
    for (const tg::Tensor& p : net.params()) CHECK(p.grad().empty());
    net.fc2.bias->set_name("fc2.bias");

    // After a backward() that released the graph there is nothing to replay.
    net.loss.backward();
    CHECK_THROWS_WITH_AS(tg::write_html(net.loss, dir.file("page.html")),
                         doctest::Contains("released by an earlier backward()"), std::invalid_argument);
  }

  TEST_CASE("pages of every lesson's graph and of digits_mlp's first step, opened in headless Chromium") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    MESSAGE("sanitizer build: the pages are opened in a browser by the plain build's suite");
    return;
#endif
    if (!installed("dot")) {
      MESSAGE("graphviz's dot is not installed (Debian package graphviz): not writing pages");
      return;
    }
    const std::string dir = out_dir();
    // Each page: its file, its number of steps, and what it is checked for.
    std::map<std::string, std::size_t> step_count;
    auto check_size = [&](const std::string& name) {
      const std::string page = tg::test::read_file(dir + "/" + name + ".html");
      REQUIRE_MESSAGE(!page.empty(), name);
      CHECK_MESSAGE(page.size() < 1'000'000, name);
      MESSAGE(name << ".html: " << page.size() << " bytes, " << page_data(page)["steps"].size() << " steps");
      step_count[name] = page_data(page)["steps"].size();
    };

    // The three lessons with --html, as a learner runs them.
    std::map<std::string, std::string> printed;
    for (const std::string name : {"backprop_by_hand", "embedding_is_a_lookup", "sparse_rows"}) {
      const auto r = tg::test::run_command(example(name) + " --html '" + dir + "/" + name + ".html'");
      INFO(r.output);
      REQUIRE(r.status == 0);
      CHECK(r.output.find("wrote " + dir + "/" + name + ".html") != std::string::npos);
      printed[name] = r.output;
      check_size(name);
    }
    // The backprop_by_hand graph, in this process, to compare with the engine.
    BackpropByHand net;
    tg::write_html(net.loss, dir + "/by_hand.html");
    check_size("by_hand");
    // The fourth lesson's graph, sum(embedding(batch)).
    tg::Generator gen(0);
    tg::nn::Embedding emb(8, 4, {}, gen);
    emb.weight.set_name("emb.weight");
    const tg::Tensor emb_loss = tg::sum(emb(tg::Indices{0, 1, 2}));
    tg::write_html(emb_loss, dir + "/sparse_vs_dense_updates.html");
    check_size("sparse_vs_dense_updates");
    // digits_mlp's first step.
    DigitsFirstStep digits;
    tg::write_html(digits.loss, dir + "/digits_mlp.html");
    check_size("digits_mlp");
    // The largest graph it takes, and the first step that adds to its shared weight w.
    BigGraph big;
    tg::write_html(big.loss, dir + "/big.html");
    check_size("big");
    const json big_data = page_data(tg::test::read_file(dir + "/big.html"));
    std::size_t big_step = 0;
    for (std::size_t k = 0; k < big_data["steps"].size() && !big_step; ++k)
      for (const json& in : big_data["steps"][k]["inputs"])
        if (big_data["tensors"][in["t"].get<std::size_t>()]["label"] == "w") big_step = k + 1;
    REQUIRE(big_step > 0);

    if (!installed("chromium")) {
      MESSAGE(
          "chromium is not installed (Debian package chromium; ./scripts/test installs it): "
          "not opening the pages in a browser");
      return;
    }

    // What the test reads off a page: the page's own text, by element.
    const std::string expr = R"js((() => {
      const text = e => e ? e.textContent : null;
      const cells = e => e ? [...e.querySelectorAll('td.v')].map(td => td.textContent) : null;
      const first = g => g.querySelector('text').textContent;
      const active = document.querySelector('#graph .node.active');
      const grad_lines = {};
      for (const g of document.querySelectorAll('#graph .node'))
        grad_lines[first(g)] = [...g.querySelectorAll('text')].map(t => t.textContent)
                                   .find(l => l.startsWith('grad ')) || null;
      return {
        counter: text(document.getElementById('counter')),
        hash: location.hash,
        op: text(document.getElementById('step-op')),
        active: active ? first(active) : null,
        receiving: [...document.querySelectorAll('#graph .node.receiving')].map(first),
        arriving: cells(document.getElementById('arriving')),
        shares: [...document.querySelectorAll('#shares .share')].map(r => ({
          input: Number(r.dataset.input), text: r.textContent,
          share: cells(r.querySelector('.share-value')), total: cells(r.querySelector('.total-value'))})),
        final: Object.fromEntries([...document.querySelectorAll('#final tr.leaf')].map(
          r => [r.dataset.name, {text: r.textContent, cells: cells(r)}])),
        grad_lines,
        page_errors: document.querySelectorAll('.page-error').length,
        step_text: text(document.getElementById('step')),
        rule: text(document.getElementById('rule')),
        worked: [...document.querySelectorAll('#step .worked li')].map(li => li.textContent),
        ids: text(document.getElementById('ids')),
        font_px: Math.min(...[...document.querySelectorAll('#graph svg text')].map(
          t => t.getBoundingClientRect().height)),
        graph_fits: (() => { const g = document.getElementById('graph');
                             return g.scrollWidth <= g.clientWidth + 1; })(),
      };
    })())js";

    const auto ops = ops_under(net.loss);
    const std::size_t last = ops.size();
    std::size_t middle = 0;  // the step of fc2's linear: three inputs, each with a share
    for (std::size_t k = 0; k < ops.size(); ++k)
      for (const auto& in : ops[k]->inputs)
        if (in.tensor.is_same(net.fc2.weight)) middle = k + 1;
    REQUIRE(middle > 0);
    REQUIRE(middle < last);

    auto url = [&](const std::string& name, std::size_t step) {
      return "file://" + dir + "/" + name + ".html#step=" + std::to_string(step);
    };
    auto shot = [&](const std::string& name, std::size_t step) {
      return dir + "/" + name + "-step-" + std::to_string(step) + ".png";
    };
    // Each load has a name; its result is page[name].
    json loads = json::array();
    std::vector<std::string> names;
    auto load = [&](const std::string& name, json spec) {
      spec["expr"] = expr;
      loads.push_back(std::move(spec));
      names.push_back(name);
    };
    load("start", {{"url", url("by_hand", 0)}, {"screenshot", shot("by_hand", 0)}});
    load("middle", {{"url", url("by_hand", middle)},
                    {"screenshot", shot("by_hand", middle)},
                    {"actions", json::array({{{"key", "ArrowRight"}},
                                             {{"key", "ArrowLeft"}},
                                             {{"click", "#next"}},
                                             {{"key", "End"}},
                                             {{"click", "#first"}}})}});
    load("end", {{"url", url("by_hand", last)}, {"screenshot", shot("by_hand", last)}});
    // The lesson's own page, mid-way.
    load("lesson middle",
         {{"url", url("backprop_by_hand", middle)}, {"screenshot", shot("backprop_by_hand", middle)}});
    for (const std::string name : {"backprop_by_hand", "embedding_is_a_lookup", "sparse_rows",
                                   "sparse_vs_dense_updates", "digits_mlp"})
      load(name, {{"url", url(name, step_count[name])}});
    load("digits_mlp middle", {{"url", url("digits_mlp", step_count["digits_mlp"] / 2)}});
    load("big", {{"url", url("big", big_step)}});
    // The lesson's tanh step and the embedding's step, as a learner sees them at 1400 x 900
    // (docs/step-through.png is the first screenshot).
    auto step_of = [&](const std::string& name, const std::string& op) {
      const json d = page_data(tg::test::read_file(dir + "/" + name + ".html"));
      for (std::size_t k = 0; k < d["steps"].size(); ++k)
        if (d["tensors"][d["steps"][k]["t"].get<std::size_t>()]["op"] == op) return k + 1;
      return std::size_t(0);
    };
    const std::size_t tanh_step = step_of("backprop_by_hand", "tanh"),
                      lookup_step = step_of("embedding_is_a_lookup", "embedding");
    REQUIRE(tanh_step > 0);
    REQUIRE(lookup_step > 0);
    load("tanh", {{"url", url("backprop_by_hand", tanh_step)}, {"width", 1400}, {"height", 900},
                  {"screenshot", dir + "/backprop_by_hand-tanh-1400x900.png"}});
    load("lookup", {{"url", url("embedding_is_a_lookup", lookup_step)}, {"width", 1400}, {"height", 900},
                    {"screenshot", dir + "/embedding_is_a_lookup-1400x900.png"}});
    load("digits 1400", {{"url", url("digits_mlp", 1)}, {"width", 1400}, {"height", 900},
                         {"screenshot", dir + "/digits_mlp-1400x900.png"}});

    tg::test::write_file(dir + "/loads.json", loads.dump());
    const auto r =
        tg::test::run_command("python3 '" + tg::test::source_path("tests/browser.py") + "' chromium < '" +
                              dir + "/loads.json' > '" + dir + "/results.json'");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const json results = json::parse(tg::test::read_file(dir + "/results.json"));
    REQUIRE(results.size() == loads.size());
    std::map<std::string, json> page;
    for (std::size_t i = 0; i < results.size(); ++i) {
      CAPTURE(loads[i]["url"]);
      CHECK(results[i]["errors"] == json::array());    // no exception, console error or warning
      CHECK(results[i]["requests"] == json::array());  // nothing fetched: the page is self-contained
      CHECK(results[i]["value"]["page_errors"] == 0);
      page[names[i]] = results[i];
    }

    // The engine's numbers for the in-process graph: every tensor's gradient.
    {
      tg::RetainAllGradsGuard keep;
      net.loss.backward(std::nullopt, /*retain_graph=*/true);
    }
    const std::string loss_label = label(*ops[0]);
    const std::string of_last = " of " + std::to_string(last);

    {
      INFO("step 0: the seed at the loss");
      const json& v = page["start"]["value"];
      CHECK(v["counter"] == "step 0" + of_last);
      CHECK(v["op"].is_null());
      CHECK(v["active"].is_null());
      CHECK(v["receiving"] == std::vector<std::string>{loss_label});
      CHECK(v["arriving"] == std::vector<std::string>{"1"});
      CHECK(v["grad_lines"][loss_label] == "grad [1]");
      CHECK(v["grad_lines"]["fc1.weight"] == "grad -");
    }
    {
      INFO("a middle step: the op, the gradient at its output, each input's share and total");
      const json& v = page["middle"]["value"];
      const tg::Node& op = *ops[middle - 1];
      CHECK(v["counter"] == "step " + std::to_string(middle) + of_last);
      CHECK(v["op"] == label(op));
      CHECK(v["active"] == label(op));
      CHECK(v["arriving"] == fmt_all(op.output.lock()->grad.dense()));
      REQUIRE(v["shares"].size() == op.inputs.size());
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        CAPTURE(i);
        // Each input of this op is used by it alone: its share is all it gets.
        const std::vector<std::string> expected = fmt_all(op.inputs[i].tensor.grad().dense());
        CHECK(v["shares"][i]["share"] == expected);
        CHECK(v["shares"][i]["total"] == expected);
      }
      CHECK(v["shares"][1]["text"].get<std::string>().find("fc2.weight") != std::string::npos);
      CHECK(v["receiving"].size() == op.inputs.size());
      CHECK(v["grad_lines"]["fc2.weight"] == "grad " + short_str(net.fc2.weight.grad().dense()));
      CHECK(v["grad_lines"]["fc1.weight"] == "grad -");  // its op has not run yet
      // Keys and buttons: right, left, the next button, End, the first button.
      const json& after = page["middle"]["after_keys"];
      REQUIRE(after.size() == 5);
      CHECK(after[0]["counter"] == "step " + std::to_string(middle + 1) + of_last);
      CHECK(after[0]["hash"] == "#step=" + std::to_string(middle + 1));
      CHECK(after[0]["op"] == label(*ops[middle]));
      CHECK(after[1]["op"] == label(op));
      CHECK(after[2]["op"] == label(*ops[middle]));
      CHECK(after[3]["counter"] == "step " + std::to_string(last) + of_last);
      CHECK(after[4]["counter"] == "step 0" + of_last);
      CHECK(after[4]["hash"] == "#step=0");
      // The lesson's own page (tape indices from 0) shows the same numbers.
      const json& lesson = page["lesson middle"]["value"];
      CHECK(lesson["op"] == "[" + std::to_string(last - middle) + "] " + op.op);
      CHECK(lesson["arriving"] == v["arriving"]);
      REQUIRE(lesson["shares"].size() == op.inputs.size());
      for (std::size_t i = 0; i < op.inputs.size(); ++i)
        CHECK(lesson["shares"][i]["share"] == v["shares"][i]["share"]);
    }
    {
      INFO("the last step: every leaf shows backward()'s gradient");
      const json& v = page["end"]["value"];
      CHECK(v["op"] == label(*ops.back()));
      CHECK(v["final"].size() == 4);
      for (const tg::Tensor& p : net.params()) {
        CAPTURE(p.name());
        CHECK(v["final"][p.name()]["cells"] == fmt_all(p.grad().dense()));
        CHECK(v["grad_lines"][p.name()] == "grad " + short_str(p.grad().dense()));
      }
      // The lesson's own page shows the same.
      CHECK(page["backprop_by_hand"]["value"]["final"] == v["final"]);
    }
    {
      INFO("the screenshots differ between steps");
      const std::string s0 = tg::test::read_file(shot("by_hand", 0)),
                        sm = tg::test::read_file(shot("by_hand", middle)),
                        sl = tg::test::read_file(shot("by_hand", last));
      REQUIRE(s0.rfind("\x89PNG", 0) == 0);
      REQUIRE(sm.rfind("\x89PNG", 0) == 0);
      REQUIRE(sl.rfind("\x89PNG", 0) == 0);
      CHECK(s0 != sm);
      CHECK(sm != sl);
      CHECK(s0 != sl);
    }
    {
      INFO("embedding_is_a_lookup: the table's sparse rows, as the lesson prints them");
      const json& leaf = page["embedding_is_a_lookup"]["value"]["final"]["emb.weight"];
      const std::string text = leaf["text"];
      CHECK(text.find("rows {1, 2, 3} of 6") != std::string::npos);
      CHECK(text.find("a dense gradient would write all 18 (6 x 3)") != std::string::npos);
      // The lesson prints the rows with 4 decimals under "embedding grad: sparse".
      const std::string& out = printed["embedding_is_a_lookup"];
      std::vector<double> lesson;
      std::istringstream lines(out.substr(out.find("embedding grad: sparse")));
      std::string line;
      std::getline(lines, line);
      for (int row = 0; row < 3 && std::getline(lines, line); ++row) {
        std::istringstream numbers(line.substr(line.find(':') + 1));
        for (double x; numbers >> x;) lesson.push_back(x);
      }
      REQUIRE(lesson.size() == 9);
      REQUIRE(leaf["cells"].size() == 9);
      for (std::size_t i = 0; i < 9; ++i)
        CHECK(std::stod(leaf["cells"][i].get<std::string>()) == doctest::Approx(lesson[i]).epsilon(1e-4));
    }
    {
      INFO("sparse_rows: the bag's rows are the document's words, each holding its count");
      const json& leaf = page["sparse_rows"]["value"]["final"]["bag.weight"];
      CHECK(leaf["text"].get<std::string>().find("rows {1, 3, 6} of 8") != std::string::npos);
      const std::vector<std::string> counts = {"1", "1", "1", "1", "1", "1", "1", "1", "3", "3", "3", "3"};
      CHECK(leaf["cells"] == counts);
      CHECK(page["sparse_rows"]["value"]["final"]["fc.weight"]["cells"].size() == 32);
    }
    {
      INFO("sparse_vs_dense_updates: rows {0, 1, 2}, as backward() gives them");
      emb_loss.backward();
      const json& leaf = page["sparse_vs_dense_updates"]["value"]["final"]["emb.weight"];
      CHECK(leaf["text"].get<std::string>().find("rows {0, 1, 2} of 8") != std::string::npos);
      CHECK(leaf["cells"] == grad_values(emb.weight.grad()));
    }
    {
      INFO("digits_mlp's first step: large tensors as min / max / mean, as backward() computes them");
      const json& v = page["digits_mlp"]["value"];
      CHECK(v["counter"] == "step " + std::to_string(step_count["digits_mlp"]) + " of " +
                                std::to_string(step_count["digits_mlp"]));
      digits.loss.backward();
      const auto params = digits.model.parameters();
      CHECK(v["final"].size() == params.size());
      for (const tg::Tensor& p : params) {
        CAPTURE(p.name());
        const tg::Array& g = p.grad().dense();
        const std::string text = v["final"][p.name()]["text"];
        if (g.size() <= 64) {
          CHECK(v["final"][p.name()]["cells"] == fmt_all(g));
          continue;
        }
        double sum = 0;
        for (float x : g) sum += x;
        CHECK(text.find("min " + fmt(xt::amin(g)()) + ", max " + fmt(xt::amax(g)()) + ", mean " +
                        fmt(sum / static_cast<double>(g.size()))) != std::string::npos);
      }
      CHECK(page["digits_mlp middle"]["value"]["op"].is_string());
    }
    {
      INFO("the tanh step at 1400 x 900: the rule, with 1 - y² worked out for both elements");
      const json& v = page["tanh"]["value"];
      CHECK(v["rule"] == "x.grad += grad · (1 - y²)   (y = tanh(x))");
      const std::string text = v["step_text"];
      CHECK(text.find("0.961043") != std::string::npos);
      CHECK(text.find("0.125010") != std::string::npos);
      REQUIRE(v["worked"].size() == 2);
      CHECK(v["worked"][0] == "x[0, 0]: -2.30432 · (1 - (-0.197375)²) = -2.30432 · 0.961043 = -2.21455");
      CHECK(v["worked"][1] == "x[0, 1]: 1.61303 · (1 - 0.935409²) = 1.61303 · 0.125010 = 0.201644");
      CHECK(v["font_px"].get<double>() >= 9.0);  // the graph's text, as drawn
      CHECK(v["graph_fits"] == true);
    }
    {
      INFO("the embedding's step: the ids looked up and the rows they hit, each row worked out");
      const json& v = page["lookup"]["value"];
      CHECK(v["ids"] == "ids looked up: [2, 3, 1, 3] \u2192 rows hit {1, 2, 3}");
      REQUIRE(v["worked"].size() == 3);
      CHECK(v["worked"][2].get<std::string>().rfind("weight row 3: grad row 1 + grad row 3 = ", 0) == 0);
      CHECK(v["worked"][2].get<std::string>().find("= [3, -0.5, -1]") != std::string::npos);
    }
    {
      INFO("digits_mlp's first step at 1400 x 900: text readable; cross_entropy's two ops in one frame");
      const json& v = page["digits 1400"]["value"];
      CHECK(v["font_px"].get<double>() >= 9.0);
      CHECK(v["step_text"].get<std::string>().find("part of cross_entropy") != std::string::npos);
      const json d = page_data(tg::test::read_file(dir + "/digits_mlp.html"));
      std::size_t grouped = 0;
      for (const json& t : d["tensors"]) grouped += t.value("group", "") == "cross_entropy";
      CHECK(grouped == 2);
    }
    {
      INFO("the largest graph: a step that adds to w lights all 67 of w's boxes");
      const json& v = page["big"]["value"];
      CHECK(v["counter"] == "step " + std::to_string(big_step) + " of " + std::to_string(tg::html_max_ops));
      CHECK(std::count(v["receiving"].begin(), v["receiving"].end(), "w") == 67);
    }
  }
}
