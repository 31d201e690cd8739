#pragma once
// Reading labelled text from "label<TAB>text" files, one example per line.
//
// Everything after the first TAB is the text, further TABs included. Line ends may
// be "\n" or "\r\n"; a UTF-8 byte order mark at the start of the file is ignored;
// blank lines are ignored. Problems with the file throw FileError naming the file
// and the 1-based line: "tsv: data/x.tsv:17: no TAB separating label and text".

#include "file_error.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tg::data {

enum class BadLinePolicy {
  error,  // throw FileError at the first bad line
  skip,   // leave the line out and count it in TsvData::skipped_lines
};

enum class Utf8Policy {
  accept,  // keep the line as bytes; tokenize() treats bytes >= 0x80 as separators
  error,   // an invalid line is a bad line and throws
  skip,    // an invalid line is left out and counted in TsvData::skipped_lines
};

struct TsvOptions {
  // For lines with no TAB, an empty label, or (with given labels) an unknown label.
  BadLinePolicy bad_lines = BadLinePolicy::error;
  Utf8Policy invalid_utf8 = Utf8Policy::accept;
  // Empty: the classes are the distinct labels in the file, sorted, numbered from 0.
  // Given: label_names[k] is class k (so ids match across files) and any other
  // label is a bad line.
  std::vector<std::string> label_names;
};

struct TsvData {
  std::vector<std::string> texts;
  std::vector<std::int64_t> targets;       // class id of each text
  std::vector<std::int64_t> line_numbers;  // 1-based line each text came from
  std::vector<std::string> label_names;    // class id -> label
  std::int64_t skipped_lines = 0;

  std::int64_t size() const { return static_cast<std::int64_t>(texts.size()); }
};

// Throws FileError when the file cannot be opened, for a bad line (under
// BadLinePolicy::error), and when no example is left; std::invalid_argument for
// given label_names that are empty strings or repeated.
TsvData read_tsv(const std::string& path, const TsvOptions& options = {});

}  // namespace tg::data
