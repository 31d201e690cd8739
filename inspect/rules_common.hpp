// What the files of the backward rules share (inside the library, not
// installed): a backward step as a rule sees it, the numbers and indices
// written out, a sum of terms, and each op family's worked rule, which the
// table in inspect/rules.cpp plugs in. Defined in rules_common.cpp and the
// family files named below.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "debug.hpp"

namespace tg::debug::rules {

// ------------------------------------------------------------ formatting

// 6 significant digits, as the trace prints them (%g: 0.5, -2.30432), but
// with the trailing zeros that are digits of the number (0.125010 for
// 0.1250104, where %g's 0.12501 would read as exact).
std::string num(double x);
// A number inside an expression: negative ones in parentheses, 2 · (-0.5).
std::string par(double x);
std::vector<std::size_t> unravel(std::size_t k, const Array::shape_type& shape);
std::size_t ravel(const std::vector<std::size_t>& idx, const Array::shape_type& shape);
std::string index_str(const std::vector<std::size_t>& idx);  // [1, 2]
// The flat index in `in` (broadcast against `out`) that output element j reads.
std::size_t source_of(std::size_t j, const Array::shape_type& out, const Array::shape_type& in);

// One term of a sum: its text with numbers (`text`), the same with its local
// factor evaluated (`mid`, empty when there is nothing to evaluate), its value.
struct Term {
  std::string text, mid;
  double value = 0;
};

// What a rule sees of one backward step.
struct Ctx {
  const Node& n;
  const Array& g;  // the gradient that reached the output
  const Array& x(std::size_t i) const { return n.input(i); }
  const Array& y() const { return n.output_value(); }
  double gv(std::size_t j) const { return g.data()[j]; }
};

// An element's terms added up: "t1 + t2 = v", or "t = mid = v" for one term.
Worked sum_of(std::vector<Term> terms, std::size_t max_shown = 4);

// g times a factor written out: "g · text" = "g · value".
Term times(double g, const std::string& text, double factor, bool evaluate = true);
Term just(double g);

double sigmoid(double x);

// -------------------------------------------------- reductions along one dim

// Element r along dim ax of the column that reduced output element j reads.
std::size_t column_at(const Array::shape_type& in, std::size_t ax, std::size_t j, std::size_t r);
// The dim `in` was reduced along to give `out` (keepdim or not), picked among
// those the shapes allow by recomputing the output with `reduce`.
std::optional<std::size_t> reduced_dim(const Ctx& c,
                                       const std::function<double(const std::vector<double>&)>& reduce);
// Input element k of a reduction along ax: its column r and output element j.
std::pair<std::size_t, std::size_t> column_of(const Array::shape_type& in, std::size_t ax, std::size_t k);

// ------------------------------------------------------------ the rules

// A rule worked out for element k (or row k) of input `input`; empty when the
// values do not say enough.
using Plug = std::function<std::optional<Worked>(const Ctx&, std::size_t input, std::size_t k)>;

// rules_math.cpp
std::optional<Worked> matmul_at(const Ctx& c, std::size_t i, std::size_t k);
std::optional<Worked> linear_at(const Ctx& c, std::size_t i, std::size_t k);
std::optional<Worked> reduce_at(const Ctx& c, std::size_t k, const std::string& op);
std::optional<Worked> softmax_at(const Ctx& c, std::size_t k, bool log);
std::optional<Worked> mse_at(const Ctx& c, std::size_t i, std::size_t k);
std::optional<Worked> nll_at(const Ctx& c, std::size_t k);
std::optional<Worked> bce_at(const Ctx& c, std::size_t i, std::size_t k, bool logits);

// rules_lookups.cpp
std::optional<Worked> permute_at(const Ctx& c, std::size_t i, std::size_t k);
std::optional<Worked> narrow_at(const Ctx& c, std::size_t i, std::size_t k);
std::optional<Worked> join_at(const Ctx& c, std::size_t i, std::size_t k, bool stack);
std::optional<Worked> gather_at(const Ctx& c, std::size_t k);
std::optional<Worked> rows_hit(const Ctx& c, std::size_t, std::size_t r);
std::optional<Worked> embedding_bag_at(const Ctx& c, std::size_t i, std::size_t k);
std::optional<Worked> embedding_dot_at(const Ctx& c, std::size_t i, std::size_t k);

// rules_windows.cpp
std::optional<Worked> max_pool_at(const Ctx& c, std::size_t k);
std::optional<Worked> avg_pool_at(const Ctx& c, std::size_t k);
std::optional<Worked> unfold_at(const Ctx& c, std::size_t k);
std::optional<Worked> conv_at(const Ctx& c, std::size_t i, std::size_t k);

// rules_norms.cpp
std::optional<Worked> norm_at(const Ctx& c, std::size_t i, std::size_t k, bool layer);

}  // namespace tg::debug::rules
