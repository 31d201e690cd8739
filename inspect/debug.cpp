// The inspector: tape listing, traces, anomaly mode and Graphviz, attached through the engine's step hook.
#include "debug.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <utility>

namespace tg {

// ------------------------------------------------------------ formatting

// "[1.5, -2, 0]" for small arrays (flattened), "(24 values)" for larger ones.
static std::string values_str(const Array& a) {
  if (a.size() > 8) return std::string("(") + std::to_string(a.size()) + " values)";
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < a.size(); ++i) s << (i ? ", " : "") << a.data()[i];
  s << ']';
  return s.str();
}

static std::string tensor_str(const Tensor& t) {
  std::string s = t.name().empty() ? "" : t.name() + " ";
  return s + shape_str(t.shape()) + (t.requires_grad() ? "*" : "");
}

std::string describe(const Node& node) {
  std::ostringstream s;
  s << '[' << node.index << "] " << node.op << '(';
  for (std::size_t i = 0; i < node.inputs.size(); ++i)
    s << (i ? ", " : "") << tensor_str(node.inputs[i].tensor);
  s << ") -> " << shape_str(node.output_shape);
  if (!node.group.empty()) s << " (in " << node.group << ')';  // the call that recorded it: cross_entropy
  return s.str();
}

void print_tape(std::ostream& os) {
  auto entries = Tape::current().live_entries();
  os << "tape: " << entries.size() << " recorded entries (* = requires grad)\n";
  for (const auto& n : entries) {
    os << "  " << describe(*n) << '\n';
    const std::string rule = local_rule(n->op);
    if (!rule.empty()) os << "      backward: " << rule << '\n';
  }
}
void print_tape() {
  print_tape(std::cout);
}

// ---------------------------------------------------------------- modes
//
// Each mode is a flag of this thread's. While any is on, this thread's step
// hook (core/tape.hpp) is the inspector below, which reads them; with none on
// there is no hook, and the engine pays one test per op.

static std::ostream* env_trace() {  // TAPEGRAD_TRACE=1 traces to stderr
  const char* v = std::getenv("TAPEGRAD_TRACE");
  return v && *v && std::string(v) != "0" ? &std::cerr : nullptr;
}
static thread_local std::ostream* trace_to = env_trace();
static thread_local bool anomaly = false;
static thread_local bool retain_all = false;
static thread_local debug::StepObserver observer;  // empty: none

namespace {

class Inspector final : public StepHook {
 public:
  void forward(const std::string& op, const Array& value, std::size_t index, bool recorded) override {
    if (anomaly) debug::check_forward(op, value, index, recorded);
  }
  void backward(const Node& node, const Array& grad_output, const Grads& grads) override {
    debug::on_step(node, grad_output, grads);
  }
  bool retains_all_grads() const override { return retain_all; }
};

Inspector inspector;

// TAPEGRAD_TRACE traces every thread from its start: the inspector is the
// hook each new thread begins with.
const bool traced_from_the_start = [] {
  if (env_trace()) set_default_step_hook(&inspector);
  return true;
}();

// This thread's hook: the inspector while some mode is on.
void attach_if_needed() {
  step_hook() = trace_to || anomaly || retain_all || observer ? &inspector : nullptr;
}

}  // namespace

TraceBackwardGuard::TraceBackwardGuard(std::ostream& os) : ScopedSetting(trace_to, &os, attach_if_needed) {}
TraceBackwardGuard::TraceBackwardGuard() : TraceBackwardGuard(std::cout) {}
RetainAllGradsGuard::RetainAllGradsGuard() : ScopedSetting(retain_all, true, attach_if_needed) {}
DetectAnomalyGuard::DetectAnomalyGuard() : ScopedSetting(anomaly, true, attach_if_needed) {}

namespace debug {

bool anomaly_enabled() {
  return anomaly;
}
bool retain_all_grads() {
  return retain_all;
}

StepObserverGuard::StepObserverGuard(StepObserver o)
    : ScopedSetting(observer, std::move(o), attach_if_needed) {}

static bool finite(const float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

static bool finite(const Grad& g) {
  if (g.is_dense()) return finite(g.dense().data(), g.dense().size());
  if (g.is_sparse()) return finite(g.sparse().values.data(), g.sparse().values.size());
  return true;
}

void check_forward(const std::string& op, const Array& value, std::size_t index, bool recorded) {
  if (finite(value.data(), value.size())) return;
  throw AnomalyError("anomaly: op '" + op + "' (" +
                     (recorded ? "tape entry " + std::to_string(index) : std::string("not recorded")) +
                     ") produced NaN or Inf in its forward value " + shape_str(value.shape()) + " " +
                     values_str(value));
}

// Under an input's line in the trace: the op's rule for it, and up to two of
// its elements worked out with this step's numbers.
static void print_rule(std::ostream& os, const Node& node, const Array& grad_output, const Grads& grads,
                       std::size_t i) {
  const std::optional<RuleInput> rule = rule_input(node.op, i);
  if (!rule || grads[i].empty()) return;
  os << "    rule: " << rule->name << ".grad += " << rule->formula << '\n';
  for (const Worked& w : worked(node, grad_output, grads, i, 2))
    os << "    " << w.at << ": " << w.text << '\n';
}

void on_step(const Node& node, const Array& grad_output, const Grads& grads) {
  if (anomaly)
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (node.needs_grad(i) && !finite(grads[i]))
        throw AnomalyError("anomaly: backward of op '" + node.op + "' (tape entry " +
                           std::to_string(node.index) +
                           ") produced NaN or Inf in the gradient of its input " + std::to_string(i) + " " +
                           tensor_str(node.inputs[i].tensor));
  if (observer) observer(node, grad_output, grads);
  if (!trace_to) return;
  std::ostream& os = *trace_to;
  os << "backward " << describe(node) << "\n  grad of output: " << values_str(grad_output) << '\n';
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& in = node.inputs[i].tensor;
    os << "  input " << i << ' ' << tensor_str(in);
    if (!node.needs_grad(i)) {
      os << ": needs no gradient\n";
      continue;
    }
    std::size_t first = 0;  // x * x: both shares go to one tensor; show their sum at its first input
    while (!node.inputs[first].tensor.is_same(in)) ++first;
    if (first < i) {
      os << ": same tensor as input " << first << ", its share is counted there\n";
      print_rule(os, node, grad_output, grads, i);
      continue;
    }
    Array added = xt::zeros<float>(in.shape());
    for (std::size_t k = i; k < grads.size(); ++k)
      if (node.inputs[k].tensor.is_same(in) && !grads[k].empty()) added += grads[k].to_dense(in.shape());
    os << (in.is_leaf() ? " (leaf)"
                        : " (from [" + std::to_string(in.creator()->index) + "] " + in.creator()->op + ")")
       << " += " << values_str(added) << '\n';
    print_rule(os, node, grad_output, grads, i);
  }
}

}  // namespace debug

// ------------------------------------------------------------------- dot

std::string debug::dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";  // Graphviz's line break inside a label
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// "[4, 5]" for a small dense gradient, "sparse rows {1, 2, 3}" for SparseRows.
static std::string grad_str(const Grad& g) {
  if (g.is_dense()) return values_str(g.dense());
  const std::vector<int64_t>& rows = g.sparse().rows;
  std::string s = "sparse rows {";
  for (std::size_t i = 0; i < rows.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(rows[i]);
  if (rows.size() > 8) s += ", ... (" + std::to_string(rows.size()) + " rows)";
  return s + "}";
}

std::string to_dot(const Tensor& root) {
  std::map<const TensorImpl*, int> ids;
  std::vector<Tensor> todo{root};
  std::ostringstream nodes, edges;
  ids[root.impl().get()] = 0;
  for (std::size_t k = 0; k < todo.size(); ++k) {
    const Tensor t = todo[k];
    const int id = ids[t.impl().get()];
    std::string label;
    if (const auto& n = t.creator())
      label = n->op + " [" + std::to_string(n->index) + "]" + (n->released ? " (released)" : "");
    else
      label = t.name().empty() ? "leaf" : t.name();
    label += "\n";
    label += shape_str(t.shape());
    label += "\nvalue " + values_str(t.value());
    if (!t.grad().empty()) label += "\ngrad " + grad_str(t.grad());
    nodes << "  t" << id << " [label=\"" << debug::dot_escape(label)
          << "\", shape=" << (t.is_leaf() ? "ellipse" : "box")
          << (t.is_leaf() && t.requires_grad() ? ", style=filled, fillcolor=\"#dde8ff\"" : "") << "];\n";
    if (!t.creator()) continue;
    for (const Node::Input& input : t.creator()->inputs) {
      const Tensor& in = input.tensor;
      auto [it, fresh] = ids.emplace(in.impl().get(), static_cast<int>(ids.size()));
      if (fresh) todo.push_back(in);
      edges << "  t" << it->second << " -> t" << id << ";\n";
    }
  }
  return "digraph tape {\n  rankdir=BT;\n  node [fontname=\"monospace\", fontsize=10];\n" + nodes.str() +
         edges.str() + "}\n";
}

}  // namespace tg
