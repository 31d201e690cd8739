#pragma once
// A numeric CSV file -> a features Tensor and a labels Indices.
//
//   tg::data::CsvData digits = tg::data::read_csv("digits.csv", {.header = true});
//   digits.features;   // Tensor [1797, 64], float32
//   digits.labels;     // Indices [1797], class ids 0 .. 9
//
// Every field is a number; one column (by default the last: label_column = -1)
// holds each row's class id, an integer >= 0 ("3" or "3.0"). Blank
// lines are skipped; "\r\n" line ends are fine; spaces around a field are
// ignored. Quoted fields, missing values, NaN and infinities are refused (a NaN
// feature would make every loss NaN), and so are numbers past float32's
// largest; a number below its smallest ("1e-50") reads as the nearest float32,
// 0 with its sign or a subnormal, as NumPy's loadtxt reads it. Reading stops at the first bad line and
// throws FileError naming the file and the line (data/file_error.hpp); nothing
// is returned then.

#include <cstdint>
#include <string>
#include <vector>

#include "../core/tensor.hpp"

namespace tg::data {

struct CsvOptions {
  int64_t label_column = -1;  // the column of class ids; negative counts from the end (-1: the last)
  // The first line (after skip_rows) is not data and is skipped whatever it
  // holds. Its fields become feature_names and label_name when there are as
  // many as the data rows have; otherwise (scikit-learn's breast_cancer.csv
  // starts with "569,30,malignant,benign") the names stay empty.
  bool header = false;
  std::size_t skip_rows = 0;  // lines skipped before anything else (blank ones count)
  char delimiter = ',';
};

struct CsvData {
  Tensor features;                         // [rows, columns - 1]
  Indices labels;                          // [rows]
  std::vector<std::string> feature_names;  // from a header with one name per column, else empty
  std::string label_name;                  // likewise

  std::size_t size() const { return labels.size(); }
  // One more than the largest label (0 when there are no rows).
  int64_t num_classes() const;
};

// Throws FileError for a file that cannot be read, an empty file or one with
// no data rows, fewer than two columns, a label_column outside the columns, a
// line with a different number of fields than the first data line, a field that is not a
// finite number, or a label that is not an integer >= 0.
CsvData read_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace tg::data
