// Looking inside the tape: a listing of recorded entries, a trace of every
// backward step, a Graphviz picture of a graph, a web page that steps through a
// backward pass, and anomaly mode.
//
//   tg::print_tape();                       // what is recorded right now, in order
//   { tg::TraceBackwardGuard trace; loss.backward(); }   // prints each backward step
//   { tg::RetainAllGradsGuard keep; loss.backward(std::nullopt, /*retain_graph=*/true); }
//   std::ofstream("g.dot") << tg::to_dot(loss);          // then: dot -Tpng g.dot -o g.png
//   tg::write_html(loss, "backward.html");   // before loss.backward(): a page to step through
//   { tg::DetectAnomalyGuard anomaly; ... }  // throw at the first NaN/Inf, naming the op
//
// Setting the environment variable TAPEGRAD_TRACE=1 traces every backward() of
// the program to stderr, without changing the code.
//
// The engine knows none of this: these attach through its step hook
// (core/tape.hpp) while one of the guards below lives. The tape listing
// itself, tg::Tape, is the engine's (core/tape.hpp).
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>

#include "../core/scoped.hpp"
#include "../core/tape.hpp"

namespace tg {

// One line per live tape entry: index, op, input shapes (an input that
// requires grad is marked '*', a named one shows its name), output shape.
void print_tape(std::ostream& os);
void print_tape();                       // to std::cout
std::string describe(const Node& node);  // the line print_tape() prints for one entry

// The local rule of an op's backward, what it adds to each input's gradient
// given `grad`, the gradient that reached its output y, one input after another:
//   local_rule("tanh") == "x.grad += grad · (1 - y²)   (y = tanh(x))"
//   local_rule("mul")  == "a.grad += grad · b | b.grad += grad · a"
// Empty for an op it does not know. The rules are one table, inspect/rules.cpp.
std::string local_rule(const std::string& op);

// Prints each step of backward() while it lives: the entry, the gradient that
// arrived at its output, and what it passed to each input (values shown for
// tensors of at most 8 elements).
class TraceBackwardGuard : ScopedSetting<std::ostream*> {
 public:
  explicit TraceBackwardGuard(std::ostream& os);
  TraceBackwardGuard();  // to std::cout
};

// While one lives (this thread), backward() keeps the gradient of every tensor
// it walks, as if retain_grad() had been called on each, so that to_dot() can
// draw the gradient at every node and not only at the leaves. For pictures and
// the debugger: it keeps a copy of every intermediate gradient.
class RetainAllGradsGuard : ScopedSetting<bool> {
 public:
  RetainAllGradsGuard();
};

// Graphviz text of the graph from `root` back to its leaves. Each node shows the
// op (or the leaf's name), its tape index and shape, its value, and the gradient
// it holds: values for small tensors, "sparse rows {1, 2, 3}" for SparseRows.
// After backward(), leaves hold theirs; intermediate tensors only with
// retain_grad() or RetainAllGradsGuard. Draw after a backward() with
// retain_graph = true: a released op no longer knows its inputs.
std::string to_dot(const Tensor& root);

// Writes `path`: one HTML file (no network needed) that steps through a
// backward pass of the graph under `loss`, one tape entry at a time. It shows
// the graph (ops, leaves with their names, shapes, values of small tensors),
// and at each step the entry being run, the gradient that arrived at its
// output, each input's share, the running total at every tensor (for SparseRows
// the rows it touches), and at the last step the leaves' gradients. Arrow keys
// step; `backward.html#step=K` opens at step K.
//
// It runs that backward pass itself, with retain_graph, and puts every
// gradient back as it was: call it before loss.backward() (or after one with
// retain_graph = true); the graph and the tensors' gradients are unchanged.
// The loss must hold one element. The layout is Graphviz's (`dot` is run;
// Debian package graphviz). Graphs of more than html_max_ops recorded ops are
// refused (std::invalid_argument naming the count): such a page would be too
// big to step through. Tensors of more than 64 elements show their shape and
// min / max / mean, not every value. Throws std::runtime_error naming the
// path or dot when either fails.
inline constexpr std::size_t html_max_ops = 200;
void write_html(const Tensor& loss, const std::string& path);

// While one lives (this thread), every op's forward value and every gradient a
// backward step produces is checked; the first NaN or Inf throws AnomalyError
// naming the op and its tape entry. Off by default: then the checks cost one
// flag test per op.
struct AnomalyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class DetectAnomalyGuard : ScopedSetting<bool> {
 public:
  DetectAnomalyGuard();
};

// Used inside the library (the inspector's step hook, to_dot, write_html and
// data_parallel); not needed by users.
namespace debug {
bool anomaly_enabled();
bool retain_all_grads();
// An op's value in anomaly mode: throws AnomalyError at a NaN or Inf.
void check_forward(const std::string& op, const Array& value, std::size_t index, bool recorded);
// After each backward step: checks its gradients in anomaly mode, passes it
// to the step observer if one is set, and traces it.
void on_step(const Node& node, const Array& grad_output, const Grads& grads);

// The rule table (inspect/rules.cpp), for the trace, the tape listing and the page.
struct RuleInput {
  std::string name;     // what the rule calls the input: "x", "weight"
  std::string formula;  // what it adds to its gradient: "grad · (1 - y²)"
};
std::optional<RuleInput> rule_input(const std::string& op, std::size_t input);
std::vector<std::string> ops_with_rules();
bool rule_has_numbers(const std::string& op);  // whether worked() can write it out with numbers (all can)

// One element of an input's share at a backward step, worked out from the
// rule with the step's numbers: at "x[0, 1]", text "1.61303 · (1 - 0.935409²)
// = 1.61303 · 0.125010 = 0.201644", value {0.201644}. A lookup's (embedding,
// index_select) is a whole row: at "weight row 3", value the row.
struct Worked {
  std::size_t input = 0, element = 0;  // element: flat index, or the row
  std::string at, text;
  std::vector<double> value;
};
// Input `input`'s elements at this step (node, the gradient at its output, the
// shares its closure gave): every element of an input of at most max_elements,
// else the one with the largest share (a lookup: the first rows it hit). Empty
// where the input takes no share, or the step's numbers cannot be read back
// (an op's sizes or options that its values do not show).
std::vector<Worked> worked(const Node& node, const Array& grad_output, const Grads& grads, std::size_t input,
                           std::size_t max_elements = 4);

// `s` as the inside of a double-quoted Graphviz string: " and \ escaped, a
// newline as \n (a line break in a label). For to_dot and write_html.
std::string dot_escape(const std::string& s);

// While one lives (this thread), `observer` sees every backward step, after
// the anomaly checks (write_html records a pass this way).
using StepObserver = std::function<void(const Node& node, const Array& grad_output, const Grads& grads)>;
class StepObserverGuard : ScopedSetting<StepObserver> {
 public:
  explicit StepObserverGuard(StepObserver observer);
};
}  // namespace debug

}  // namespace tg
