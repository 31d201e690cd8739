// operator<< for Tensor, Array, Indices, SparseRows and Grad: PyTorch's repr (torch/_tensor_str.py, with
// its default options: 4 digits, 80 columns, summaries past 1000 elements),
// followed by the shape and the tensor's place in autograd.
//
// What PyTorch does, and so what this does:
//   - one format for all elements: integers as "3." when every value is whole,
//     otherwise "%.4f", or "%.4e" when the values span more than 1000x or leave
//     [1e-4, 1e8); all padded to the widest;
//   - rows wrap at 80 columns, nested brackets indent by one;
//   - past 1000 elements each dim shows its first and last 3 entries around "...".
// tests/test_print.cpp compares the output with what PyTorch prints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "tape.hpp"
#include "tensor.hpp"

namespace tg {
namespace {

constexpr std::size_t kPrecision = 4, kThreshold = 1000, kEdgeItems = 3, kLineWidth = 80;

std::string printf_str(const char* fmt, int width, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, width, static_cast<int>(kPrecision), v);
  return buf;
}

// PyTorch's _Formatter: picks one format from the values that will be shown.
struct Formatter {
  bool floating = true;
  bool int_mode = true;
  bool sci_mode = false;
  std::size_t max_width = 1;

  explicit Formatter(const std::vector<int64_t>& values) : floating(false) {
    for (int64_t v : values) max_width = std::max(max_width, std::to_string(v).size());
  }

  explicit Formatter(const std::vector<float>& values) {
    std::vector<double> finite;  // the non-zero finite values decide the format
    for (double v : values)
      if (std::isfinite(v) && v != 0) finite.push_back(v);
    if (finite.empty()) return;
    double lo = std::abs(finite[0]), hi = lo;
    for (double v : finite) {
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode = false;
    }
    if (int_mode) {
      sci_mode = hi / lo > 1000.0 || hi > 1.0e8;
      for (double v : finite)  // "3" and the "." that says float
        max_width = std::max(max_width, sci_mode ? sci(v, 0).size() : fixed(v, 0).size() + 1);
    } else {
      sci_mode = hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4;
      for (double v : finite) max_width = std::max(max_width, (sci_mode ? sci(v, 0) : fixed(v)).size());
    }
  }

  static std::string sci(double v, std::size_t width) {
    return std::isnan(v) ? pad("nan", width) : printf_str("%*.*e", static_cast<int>(width), v);
  }
  static std::string fixed(double v, int precision = kPrecision) {
    if (std::isnan(v)) return "nan";  // never "-nan", as Python
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
    return buf;
  }
  static std::string pad(std::string s, std::size_t width) {
    return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
  }

  std::string format(int64_t v) const { return pad(std::to_string(v), max_width); }
  std::string format(double v) const {
    std::string s;
    if (sci_mode) {
      s = sci(v, max_width);
    } else if (int_mode) {
      s = fixed(v, 0);
      if (std::isfinite(v)) s += ".";
    } else {
      s = fixed(v);
    }
    return pad(std::move(s), max_width);
  }
};

// Row-major values of any shape, read through a flat offset.
template <class T>
struct Printer {
  const T* data;
  Shape shape;
  std::vector<std::size_t> strides;
  bool summarize;

  Printer(const T* d, Shape s) : data(d), shape(std::move(s)), strides(shape.size(), 1) {
    for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
    std::size_t n = 1;
    for (std::size_t x : shape) n *= x;
    summarize = n > kThreshold;
  }

  // Positions shown along one dim: all, or the first and last kEdgeItems with a
  // gap (npos) between.
  std::vector<std::size_t> shown(std::size_t size) const {
    std::vector<std::size_t> out;
    if (summarize && size > 2 * kEdgeItems) {
      for (std::size_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
      out.push_back(std::string::npos);
      for (std::size_t i = size - kEdgeItems; i < size; ++i) out.push_back(i);
    } else {
      for (std::size_t i = 0; i < size; ++i) out.push_back(i);
    }
    return out;
  }

  void collect(std::size_t d, std::size_t offset, std::vector<T>& out) const {
    if (d == shape.size()) {
      out.push_back(data[offset]);
      return;
    }
    for (std::size_t i : shown(shape[d]))
      if (i != std::string::npos) collect(d + 1, offset + i * strides[d], out);
  }

  std::string str(std::size_t d, std::size_t offset, std::size_t indent, const Formatter& f) const {
    if (d == shape.size()) return f.format(data[offset]);
    std::vector<std::string> items;
    if (d + 1 == shape.size()) {  // a row of numbers, wrapped at the line width
      for (std::size_t i : shown(shape[d]))
        items.push_back(i == std::string::npos ? " ..." : f.format(data[offset + i]));
      const std::size_t element = f.max_width + 2;
      const std::size_t per_line = std::max<std::size_t>(1, (kLineWidth - std::min(indent, kLineWidth)) / element);
      std::string s = "[";
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) s += i % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
        s += items[i];
      }
      return s + "]";
    }
    for (std::size_t i : shown(shape[d]))
      items.push_back(i == std::string::npos ? "..." : str(d + 1, offset + i * strides[d], indent + 1, f));
    // Between slices: a comma, one blank line fewer than the dims left, the indent.
    const std::string sep = "," + std::string(shape.size() - d - 1, '\n') + std::string(indent + 1, ' ');
    std::string s = "[";
    for (std::size_t i = 0; i < items.size(); ++i) s += (i > 0 ? sep : "") + items[i];
    return s + "]";
  }
};

// PyTorch's _add_suffixes: ", suffix" on the same line while it fits in 80
// columns (the first on a line of its own with force_newline, as for sparse tensors).
std::string with_suffixes(std::string s, const std::vector<std::string>& suffixes, std::size_t indent,
                          bool force_newline = false) {
  const std::size_t nl = s.rfind('\n');
  // PyTorch counts len - rfind + 1, with rfind = -1 when there is no newline.
  std::size_t last_line = nl == std::string::npos ? s.size() + 2 : s.size() - nl + 1;
  for (const std::string& suffix : suffixes) {
    if (force_newline || last_line + suffix.size() + 2 > kLineWidth) {
      s += ",\n" + std::string(indent, ' ') + suffix;
      last_line = indent + suffix.size();
      force_newline = false;
    } else {
      s += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return s + ")";
}

// The values of `data` (row-major, `shape`) as PyTorch's _tensor_str lays them
// out, for text that starts `indent` columns in: "[[1., 2.],\n [3., 4.]]".
template <class T>
std::string body_str(const T* data, const Shape& shape, std::size_t indent) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return "[]";
  Printer<T> p(data, shape);
  std::vector<T> shown;
  p.collect(0, 0, shown);
  return p.str(0, 0, indent, Formatter(shown));
}

template <class T>
std::string repr(const xt::xarray<T>& a, std::vector<std::string> suffixes) {
  const std::string prefix = "tensor(";
  const Shape shape = shape_of(a);
  suffixes.insert(suffixes.begin(), "shape=" + shape_str(shape));
  return with_suffixes(prefix + body_str(a.data(), shape, prefix.size()), suffixes, prefix.size());
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  std::vector<std::string> suffixes;
  if (t.creator())
    suffixes.push_back("grad_fn=<" + t.creator()->op + ">");
  else if (t.requires_grad())
    suffixes.push_back("requires_grad=True");
  return os << repr(t.value(), suffixes);
}

std::ostream& print_values(std::ostream& os, const Array& a) {
  return os << repr(a, {});
}

std::ostream& print_values(std::ostream& os, const Indices& a) {
  return os << repr(a, {});
}

// PyTorch's repr of a sparse COO tensor (the "if self.is_sparse" branch of
// _str_intern), with this library's names for the size and the layout.
std::ostream& operator<<(std::ostream& os, const SparseRows& s) {
  const std::string prefix = "tensor(", indices_prefix = "indices=tensor(", values_prefix = "values=tensor(";
  const Shape indices_shape{1, s.rows.size()}, values_shape = shape_of(s.values);
  std::string indices = body_str(s.rows.data(), indices_shape, prefix.size() + indices_prefix.size());
  if (s.rows.empty()) indices += ", shape=" + shape_str(indices_shape);
  std::string values = body_str(s.values.data(), values_shape, prefix.size() + values_prefix.size());
  if (s.values.size() == 0) values += ", shape=" + shape_str(values_shape);
  const std::string text = prefix + indices_prefix + indices + "),\n" + std::string(prefix.size(), ' ') +
                           values_prefix + values + ")";
  const std::vector<std::string> suffixes = {"shape=" + shape_str(Shape{s.num_rows, s.cols()}),
                                             "nnz=" + std::to_string(s.rows.size()), "layout=sparse_rows"};
  return os << with_suffixes(text, suffixes, prefix.size(), /*force_newline=*/true);
}

std::ostream& operator<<(std::ostream& os, const Grad& g) {
  if (g.is_dense()) return print_values(os, g.dense());
  if (g.is_sparse()) return os << g.sparse();
  return os << "None";
}

}  // namespace tg
