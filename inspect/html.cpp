// write_html() (inspect/debug.hpp): one backward pass as a page to step through.
//
// The page is one file made of three parts: the graph, laid out by Graphviz
// (`dot -Tsvg`, run here); the pass as JSON (every tensor of the graph, and for
// each step the gradient that reached the op, and each input's share and
// running total); and the page itself (inspect/html_page.cpp: CSS and a
// script that replays the steps up to the one shown). The pass is recorded
// through debug::StepObserverGuard, i.e. from the engine's own backward().
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "debug.hpp"
#include "../core/utf8.hpp"

extern char** environ;  // posix_spawnp passes it on

namespace tg {

namespace debug {
extern const char html_page[];  // inspect/html_page.cpp
}

namespace {

using json = nlohmann::json;

constexpr std::size_t shown_values = 64;  // a tensor with more shows its count and min / max / mean
constexpr std::size_t label_values = 8;   // a box in the graph lists at most this many

// 6 significant digits, as the backward trace prints (TraceBackwardGuard).
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// "[1.5, -2]" for at most label_values values, "(24 values)" for more.
std::string short_str(const float* p, std::size_t n) {
  if (n > label_values) return "(" + std::to_string(n) + " values)";
  std::string s = "[";
  for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + num(p[i]);
  return s + "]";
}

// Values as the page shows them: "v", every value as text, when there are at
// most shown_values; otherwise "min", "max" and "mean". "short" is the line a
// box in the graph shows.
json values_json(const float* p, std::size_t n) {
  json j = {{"n", n}, {"short", short_str(p, n)}};
  if (n <= shown_values) {
    std::vector<std::string> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(num(p[i]));
    j["v"] = v;
    return j;
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lo = std::fmin(lo, p[i]);
    hi = std::fmax(hi, p[i]);
    sum += p[i];
  }
  j["min"] = num(lo);
  j["max"] = num(hi);
  j["mean"] = num(sum / static_cast<double>(n));
  return j;
}

json array_json(const Array& a) {
  json j = values_json(a.data(), a.size());
  j["shape"] = shape_of(a);
  return j;
}

// A dense gradient as an array; SparseRows with its rows ("rows", at most
// shown_values of them listed; "nrows" counts them all) and its values.
json grad_json(const Grad& g) {
  if (g.empty()) return nullptr;
  if (g.is_dense()) return array_json(g.dense());
  const SparseRows& s = g.sparse();
  json j = values_json(s.values.data(), s.values.size());
  std::string rows = "rows {";
  for (std::size_t i = 0; i < s.rows.size() && i < label_values; ++i)
    rows += (i ? ", " : "") + std::to_string(s.rows[i]);
  j["short"] = rows + (s.rows.size() > label_values ? ", ...}" : "}");
  j["shape"] = g.shape();
  j["cols"] = s.cols();
  j["nrows"] = s.rows.size();
  j["rows"] = std::vector<int64_t>(s.rows.begin(), s.rows.begin() + std::min(s.rows.size(), shown_values));
  return j;
}

// ------------------------------------------------------------------ the graph

// What a box in the graph is called: "[3] sub" for an op's output (tape index
// and op), the name (or "leaf") for a leaf.
std::string title(const Tensor& t) {
  const std::shared_ptr<Node>& n = t.creator();
  if (!n) return t.name().empty() ? "leaf" : t.name();
  std::string s = "[";
  s += std::to_string(n->index);
  s += "] ";
  return s += n->op;
}

// Every tensor under the loss; [0] is the loss, then in the order found.
struct Graph {
  std::vector<Tensor> tensors;
  std::unordered_map<const TensorImpl*, std::size_t> ids;
  std::size_t ops = 0;

  std::size_t id(const TensorImpl* t) const {
    const auto it = ids.find(t);
    if (it == ids.end())
      throw std::logic_error("write_html: a backward step reached a tensor outside the graph");
    return it->second;
  }
};

Graph gather(const Tensor& loss) {
  Graph g;
  g.tensors.push_back(loss);
  g.ids[loss.impl().get()] = 0;
  for (std::size_t k = 0; k < g.tensors.size(); ++k) {
    const std::shared_ptr<Node>& n = g.tensors[k].creator();
    if (!n) continue;
    ++g.ops;
    if (n->released)
      throw std::invalid_argument(
          "write_html: op '" + n->op + "' (tape entry " + std::to_string(n->index) +
          ") was released by an earlier backward(); call write_html before backward(), "
          "or pass retain_graph = true to that backward()");
    for (const Node::Input& in : n->inputs)
      if (g.ids.emplace(in.tensor.impl().get(), g.tensors.size()).second) g.tensors.push_back(in.tensor);
  }
  // The page is UTF-8 text: a name that is not would stop the JSON writer.
  for (const Tensor& t : g.tensors) {
    const bool leaf = !t.creator();
    const std::string& name = leaf ? t.name() : t.creator()->op;
    const std::string bad = detail::invalid_utf8_at(name);
    if (bad.empty()) continue;
    throw std::invalid_argument("write_html: the name of " +
                                (leaf ? "a tensor in the graph, '" + detail::escape_invalid_utf8(name) +
                                            "' (a leaf of shape " + shape_str(t.shape()) + "),"
                                      : "op '" + detail::escape_invalid_utf8(name) + "' (tape entry " +
                                            std::to_string(t.creator()->index) + ")") +
                                " is not UTF-8 (" + bad + "); a page holds UTF-8 text: give it a UTF-8 name" +
                                (leaf ? " with set_name()" : ""));
  }
  if (g.ops > html_max_ops)
    throw std::invalid_argument(
        "write_html: the graph under the loss has " + std::to_string(g.ops) + " recorded ops and " +
        std::to_string(g.tensors.size()) + " tensors; a page steps through at most " +
        std::to_string(html_max_ops) +
        " ops (tg::html_max_ops), beyond that it is too big to follow. Write one for a "
        "smaller model or batch, or list the tape with tg::print_tape()");
  return g;
}

// ------------------------------------------------------------------ the pass

// What each backward step did, kept as the page will show it.
struct Recorder {
  const Graph& graph;
  std::unordered_map<const TensorImpl*, Grad> totals;  // what each tensor has received so far
  json steps = json::array();

  void operator()(const Node& n, const Array& grad_output, const Grads& grads) {
    // The totals first: a tensor that is two of the inputs (x * x) gets both shares.
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].empty()) continue;
      const Tensor& in = n.inputs[i].tensor;
      Grad share = grads[i];
      totals[in.impl().get()].accumulate(std::move(share), in.value().shape());
    }
    // To keep the page small, "total" is left out where it reads the same as
    // the share (the tensor's first), and "arriving" where it reads the same
    // as the total the steps so far sent to the output (as it always should).
    json inputs = json::array();
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const TensorImpl* in = n.inputs[i].tensor.impl().get();
      json input = {{"t", graph.id(in)}, {"share", grad_json(grads[i])}};
      if (!grads[i].empty()) {
        json total = grad_json(totals.at(in));
        if (total != input["share"]) input["total"] = std::move(total);
      }
      inputs.push_back(std::move(input));
    }
    // The op's local rule for each input, worked out with this step's numbers.
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const std::optional<debug::RuleInput> rule = debug::rule_input(n.op, i);
      if (!rule || grads[i].empty()) continue;
      inputs[i]["rule"] = rule->name + ".grad += " + rule->formula;
      json lines = json::array();
      for (const debug::Worked& w : debug::worked(n, grad_output, grads, i))
        lines.push_back(w.at + ": " + w.text);
      inputs[i]["worked"] = std::move(lines);
    }
    const TensorImpl* out = n.output.lock().get();
    json step = {{"t", graph.id(out)}, {"inputs", std::move(inputs)}};
    json arriving = array_json(grad_output);
    const auto sent = totals.find(out);
    if (sent == totals.end() || grad_json(sent->second) != arriving) step["arriving"] = std::move(arriving);
    steps.push_back(std::move(step));
  }
};

// Every gradient in the graph, set aside while write_html runs its pass, and
// put back however it ends: the user's gradients are left as they were.
struct SetAside {
  std::vector<std::pair<Tensor, Grad>> saved;
  explicit SetAside(const Graph& g) {
    for (Tensor t : g.tensors) saved.emplace_back(t, std::exchange(t.grad_mut(), Grad()));
  }
  ~SetAside() {
    for (auto& [t, grad] : saved) t.grad_mut() = std::move(grad);
  }
  SetAside(const SetAside&) = delete;
  SetAside& operator=(const SetAside&) = delete;
};

// -------------------------------------------------------------------- layout

// The ops of one call that recorded several (cross_entropy: log_softmax and
// nll_loss; Node::group) as a Graphviz cluster around their boxes, labelled
// with the call: ops of one group that feed each other are one cluster.
std::string clusters(const Graph& g) {
  std::vector<std::size_t> root(g.tensors.size());
  std::iota(root.begin(), root.end(), 0);
  auto find = [&](std::size_t k) {
    while (root[k] != k) k = root[k] = root[root[k]];
    return k;
  };
  auto group = [&](std::size_t k) {
    return g.tensors[k].creator() ? g.tensors[k].creator()->group : std::string();
  };
  for (std::size_t k = 0; k < g.tensors.size(); ++k) {
    if (group(k).empty()) continue;
    for (const Node::Input& in : g.tensors[k].creator()->inputs) {
      const std::size_t i = g.id(in.tensor.impl().get());
      if (group(i) == group(k)) root[find(i)] = find(k);
    }
  }
  std::map<std::size_t, std::vector<std::size_t>> members;
  for (std::size_t k = 0; k < g.tensors.size(); ++k)
    if (!group(k).empty()) members[find(k)].push_back(k);
  std::ostringstream out;
  for (const auto& [r, ks] : members) {
    out << "  subgraph cluster_" << r << " {\n    label=\"" << debug::dot_escape(group(r))
        << "\"; style=\"rounded,dashed\"; color=\"#7b1fa2\"; fontcolor=\"#7b1fa2\"; "
           "fontname=\"monospace\";\n";
    for (std::size_t k : ks) out << "    \"t" << k << "\";\n";
    out << "  }\n";
  }
  return out.str();
}

// The graph as Graphviz text. Box tK is tensor K (the op that made it, or a
// leaf) and edge eK_I its input I; the page finds them by these ids. A leaf
// used by several ops gets a box beside each (tK, tK_2, tK_3, ...): one box
// with edges to ops far apart makes the layout slow (dot routes each long
// edge through every rank it spans) and hard to read. A tensor that takes a
// gradient gets a last line "grad ...", laid out with the longest text it
// will show, so that the box fits it at every step (the page rewrites it).
std::string graph_dot(const Graph& g, const json& seed, const json& steps) {
  std::vector<std::string> grad_text(g.tensors.size(), "-");
  grad_text[0] = seed["short"];
  for (const json& step : steps)
    for (const json& in : step["inputs"]) {
      if (in["share"].is_null()) continue;
      const std::string text = in.value("total", in["share"])["short"];
      std::string& longest = grad_text[in["t"].get<std::size_t>()];
      if (text.size() > longest.size()) longest = text;
    }
  std::vector<std::size_t> uses(g.tensors.size(), 0);
  std::ostringstream edges;
  for (std::size_t k = 0; k < g.tensors.size(); ++k) {
    const std::shared_ptr<Node>& n = g.tensors[k].creator();
    if (!n) continue;
    for (std::size_t i = 0; i < n->inputs.size(); ++i) {
      const std::size_t in = g.id(n->inputs[i].tensor.impl().get());
      edges << "  \"t" << in;
      if (g.tensors[in].is_leaf() && uses[in]++ > 0) edges << "_" << uses[in];
      edges << "\" -> \"t" << k << "\" [id=\"e" << k << "_" << i << "\"];\n";
    }
  }
  std::ostringstream out;
  out << "digraph backward {\n  rankdir=BT;\n  bgcolor=\"transparent\";\n"
      << "  node [shape=box, fontname=\"monospace\", fontsize=10];\n  edge [color=\"#888888\"];\n";
  for (std::size_t k = 0; k < g.tensors.size(); ++k) {
    const Tensor& t = g.tensors[k];
    std::string label = title(t) + "\n";
    if (t.creator() && !t.name().empty()) label += t.name() + " ";
    label += shape_str(t.shape()) + "\nvalue " + short_str(t.value().data(), t.value().size());
    if (t.creator() && t.creator()->ids) {  // a lookup's ids
      std::vector<float> ids(t.creator()->ids->begin(), t.creator()->ids->end());
      label += "\nids " + short_str(ids.data(), ids.size());
    }
    if (t.requires_grad()) label += "\ngrad " + grad_text[k];
    const char* style = t.creator()         ? "style=\"rounded,filled\", fillcolor=\"#ffffff\""  // an op
                        : t.requires_grad() ? "style=filled, fillcolor=\"#dde8ff\""   // a parameter
                                            : "style=filled, fillcolor=\"#f2f2f2\"";  // a constant
    for (std::size_t use = 1; use <= std::max<std::size_t>(uses[k], 1); ++use) {
      std::ostringstream id;  // tK, tK_2, ...
      id << 't' << k;
      if (use > 1) id << '_' << use;
      out << "  \"" << id.str() << "\" [id=\"" << id.str() << "\", label=\"" << debug::dot_escape(label)
          << "\", " << style << "];\n";
    }
  }
  out << clusters(g) << edges.str() << "}\n";
  return out.str();
}

// Runs `dot -Tsvg` on the text and returns the SVG.
std::string run_dot(const std::string& source) {
  std::string path = (std::filesystem::temp_directory_path() / "tapegrad-html-XXXXXX").string();
  const int fd = ::mkstemp(path.data());
  if (fd < 0)
    throw std::runtime_error("write_html: cannot create a temporary file in " + path + ": " +
                             std::strerror(errno));
  const bool written = ::write(fd, source.data(), source.size()) == static_cast<ssize_t>(source.size());
  ::close(fd);
  struct Remove {
    const std::string& path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{path};
  if (!written) throw std::runtime_error("write_html: cannot write the temporary file " + path);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("write_html: pipe: " + std::string(std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::string dot = "dot", format = "-Tsvg";
  char* argv[] = {dot.data(), format.data(), path.data(), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, "dot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    if (spawned == ENOENT)
      throw std::runtime_error(
          "write_html: Graphviz's `dot` was not found on PATH; it lays out the graph. "
          "Install it (Debian: sudo apt-get install graphviz)");
    throw std::runtime_error("write_html: cannot run dot: " + std::string(std::strerror(spawned)));
  }
  std::string svg;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    svg.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || svg.find("<svg") == std::string::npos)
    throw std::runtime_error("write_html: `dot -Tsvg` failed" +
                             (WIFEXITED(status) ? " with exit status " + std::to_string(WEXITSTATUS(status))
                                                : std::string(" (killed by a signal)")));
  // Inline in HTML: from <svg on, without the XML prolog and dot's comments.
  std::string inline_svg;
  for (std::size_t from = svg.find("<svg"), at; from < svg.size(); from = svg.find("-->", at) + 3) {
    at = svg.find("<!--", from);
    inline_svg.append(svg, from, at - from);  // to the end when there is no comment left
    if (at == std::string::npos || svg.find("-->", at) == std::string::npos) break;
  }
  return inline_svg;
}

// ---------------------------------------------------------------------- page

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// The page template with its holes filled. The template is scanned once, so a
// hole's text that looks like another hole stays as it is.
std::string fill_page(const std::string& title, const std::string& svg, const std::string& data) {
  const std::string_view page = debug::html_page;
  std::string out;
  std::size_t from = 0;
  for (std::size_t at; (at = page.find('@', from)) != std::string_view::npos;) {
    out += page.substr(from, at - from);
    from = at + 1;
    for (const auto& [hole, text] : {std::pair<std::string_view, const std::string*>{"@TITLE@", &title},
                                     {"@SVG@", &svg},
                                     {"@DATA@", &data}})
      if (page.substr(at, hole.size()) == hole) {
        out += *text;
        from = at + hole.size();
        break;
      }
    if (from == at + 1) out += '@';
  }
  return out += page.substr(from);
}

}  // namespace

void write_html(const Tensor& loss, const std::string& path) {
  if (!loss.requires_grad())
    throw std::invalid_argument(
        "write_html: the loss does not require grad: there is no graph to step through");
  if (loss.numel() != 1)
    throw std::invalid_argument(
        "write_html: the loss must hold one element (backward() seeds it with 1); "
        "this one has shape " +
        shape_str(loss.shape()));
  const Graph graph = gather(loss);

  // The pass, recorded step by step, from the engine's own backward().
  Recorder recorder{graph, {}, json::array()};
  recorder.totals[loss.impl().get()] = Grad(Array(xt::ones<float>(loss.shape())));
  json final_grads = json::object();
  {
    SetAside set_aside(graph);
    debug::StepObserverGuard observe(std::ref(recorder));
    loss.backward(std::nullopt, /*retain_graph=*/true);
    for (std::size_t k = 0; k < graph.tensors.size(); ++k)  // what backward() gave each leaf
      if (graph.tensors[k].is_leaf() && graph.tensors[k].requires_grad())
        final_grads[std::to_string(k)] = grad_json(graph.tensors[k].grad());
  }

  json tensors = json::array();
  for (const Tensor& t : graph.tensors) {
    const std::shared_ptr<Node>& n = t.creator();
    json j = {{"label", title(t)},
              {"shape", t.shape()},
              {"requires_grad", t.requires_grad()},
              {"value", array_json(t.value())}};
    if (n) {
      j["op"] = n->op;
      j["index"] = n->index;
      if (!n->group.empty()) j["group"] = n->group;
      const std::string rule = local_rule(n->op);
      if (!rule.empty()) j["rule"] = rule;
      if (n->ids) {  // a lookup: the ids it read, and the rows (or classes) they name
        const std::vector<int64_t> ids(n->ids->begin(), n->ids->end());
        std::vector<int64_t> rows = ids;
        std::sort(rows.begin(), rows.end());
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
        j["ids"] = std::vector<int64_t>(ids.begin(), ids.begin() + std::min(ids.size(), shown_values));
        j["nids"] = ids.size();
        j["rows_hit"] =
            std::vector<int64_t>(rows.begin(), rows.begin() + std::min(rows.size(), shown_values));
        j["nrows_hit"] = rows.size();
      }
      std::vector<std::size_t> inputs;
      for (const Node::Input& in : n->inputs) inputs.push_back(graph.id(in.tensor.impl().get()));
      j["inputs"] = inputs;
    }
    tensors.push_back(std::move(j));
  }
  const json seed = array_json(xt::ones<float>(loss.shape()));
  const json data = {{"tensors", tensors}, {"steps", recorder.steps}, {"seed", seed}, {"final", final_grads}};
  std::string data_text = data.dump();
  for (std::size_t at; (at = data_text.find('<')) != std::string::npos;)  // no "</script>" inside the script
    data_text.replace(at, 1, "\\u003c");

  const std::string svg = run_dot(graph_dot(graph, seed, recorder.steps));
  const std::string page = fill_page(html_escape(title(loss)), svg, data_text);

  std::ofstream out(path, std::ios::binary);
  if (!out)
    throw std::runtime_error("write_html: cannot open " + path + " for writing: " + std::strerror(errno));
  out << page;
  out.close();
  if (!out) throw std::runtime_error("write_html: writing " + path + " failed");
}

}  // namespace tg
