#include "csv.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "file_error.hpp"

namespace tg::data {

namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view line, char delimiter) {
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    const std::size_t end = line.find(delimiter, start);
    fields.push_back(trim(line.substr(start, end - start)));
    if (end == std::string_view::npos) return fields;
    start = end + 1;
  }
}

// The whole field as a finite number, or nothing (also when it is past T's
// largest). from_chars reads the same text the same way everywhere (no locale)
// and rounds once, to T; it takes no leading '+', so that is skipped here.
template <class T>
std::optional<T> number(std::string_view field) {
  if (field.size() > 1 && field[0] == '+' && field[1] != '-') field.remove_prefix(1);
  const char* const last = field.data() + field.size();
  T x = 0;
  std::from_chars_result r = std::from_chars(field.data(), last, x);
  if (r.ec == std::errc::result_out_of_range) {
    // from_chars refuses a number whose nearest T is 0 ("1e-50" for a float)
    // as it refuses one past the largest. NumPy reads the first as 0, with its
    // sign: read it wider, and round that to T (0 or -0).
    long double wide = 0;
    r = std::from_chars(field.data(), last, wide);
    if (r.ec == std::errc() && std::fabs(wide) < 1)
      x = static_cast<T>(wide);
    else
      r.ec = std::errc::result_out_of_range;
  }
  if (r.ec != std::errc() || r.ptr != last || !std::isfinite(x)) return std::nullopt;
  return x;
}

// Fields are shown in messages; cut long ones so the message stays readable.
std::string shown(std::string_view field) {
  constexpr std::size_t max_shown = 40;
  std::string out = "'";
  out.append(field.substr(0, max_shown));
  out.append(field.size() > max_shown ? "...'" : "'");
  return out;
}

}  // namespace

int64_t CsvData::num_classes() const {
  int64_t n = 0;
  for (int64_t y : labels) n = std::max(n, y + 1);
  return n;
}

CsvData read_csv(const std::string& path, const CsvOptions& options) {
  std::error_code ignored;  // the overload without it throws for unreadable paths
  if (std::filesystem::is_directory(path, ignored))
    throw FileError("csv", path, 0, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("csv", path, 0, "cannot open file for reading");

  CsvData data;
  std::vector<float> features;
  std::vector<int64_t> labels;
  std::vector<std::string> header;
  bool header_pending = options.header;
  std::size_t columns = 0, label = 0;  // known from the first data line
  int64_t line_number = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // a UTF-8 byte order mark
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (static_cast<std::size_t>(line_number) <= options.skip_rows || trim(line).empty()) continue;
    const std::vector<std::string_view> fields = split(line, options.delimiter);
    auto fail = [&](const std::string& reason) { throw FileError("csv", path, line_number, reason); };

    if (header_pending) {  // kept aside: whether it names the columns is known at the first data line
      header_pending = false;
      for (std::string_view f : fields) {
        std::string name(f);
        if (name.size() >= 2 && name.front() == '"' && name.back() == '"') name = name.substr(1, name.size() - 2);
        header.push_back(name);
      }
      continue;
    }
    if (columns == 0) {  // the first data line sets the number of columns and which one is the label
      columns = fields.size();
      if (columns < 2)
        fail("found 1 column; a CSV here needs feature columns and a label column (delimiter '" +
             std::string(1, options.delimiter) + "')");
      const int64_t c = options.label_column < 0 ? options.label_column + static_cast<int64_t>(columns)
                                                 : options.label_column;
      if (c < 0 || c >= static_cast<int64_t>(columns))
        fail("label_column " + std::to_string(options.label_column) + " is outside the " +
             std::to_string(columns) + " columns");
      label = static_cast<std::size_t>(c);
      if (header.size() == columns)
        for (std::size_t i = 0; i < columns; ++i)
          (i == label ? data.label_name : data.feature_names.emplace_back()) = header[i];
    } else if (fields.size() != columns) {
      fail(std::to_string(fields.size()) + " fields, but the first data line has " + std::to_string(columns));
    }
    for (std::size_t i = 0; i < columns; ++i) {
      // Features are read as float32 directly (no double rounding), labels as double.
      std::optional<double> x;
      if (i == label)
        x = number<double>(fields[i]);
      else if (const std::optional<float> f = number<float>(fields[i]))
        x = *f;
      const std::string where = "column " + std::to_string(i + 1) +
                                (data.feature_names.empty() ? ""
                                 : i == label               ? " (" + data.label_name + ")"
                                              : " (" + data.feature_names[i - (i > label)] + ")");
      if (!x) {
        std::string reason = where + ": " + shown(fields[i]) + " is not a finite number";
        if (labels.empty() && !options.header) reason += "; if the first line names the columns, pass header = true";
        fail(reason);
      }
      if (i != label) {
        features.push_back(static_cast<float>(*x));
      } else {
        if (*x < 0 || *x != std::floor(*x) || *x > 9.0e15)
          fail(where + ": label " + shown(fields[i]) + " is not a class id (an integer >= 0)");
        labels.push_back(static_cast<int64_t>(*x));
      }
    }
  }
  if (in.bad()) throw FileError("csv", path, 0, "could not read the file");
  if (line_number == 0) throw FileError("csv", path, 0, "empty file");
  if (labels.empty())
    throw FileError("csv", path, 0, "no data rows (" + std::to_string(line_number) + " lines)");

  const std::size_t rows = labels.size();
  Array x = xt::empty<float>({rows, columns - 1});
  std::copy(features.begin(), features.end(), x.begin());
  data.features = Tensor(std::move(x));
  data.labels = xt::empty<int64_t>({rows});
  std::copy(labels.begin(), labels.end(), data.labels.begin());
  return data;
}

}  // namespace tg::data
