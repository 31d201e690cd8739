// read_tsv: label<TAB>text files, every error naming file and line.
#include "tsv.hpp"

#include "file_error.hpp"
#include "tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

namespace tg::data {

namespace {

constexpr std::string_view utf8_bom = "\xEF\xBB\xBF";

// Labels can be anything up to the TAB; cut long ones so the message stays readable.
std::string shown_label(const std::string& label) {
  constexpr std::size_t max_shown = 40;
  if (label.size() <= max_shown) return "'" + label + "'";
  return "'" + label.substr(0, max_shown) + "...'";
}

}  // namespace

TsvData read_tsv(const std::string& path, const TsvOptions& options) {
  std::map<std::string, std::int64_t> label_ids;
  for (std::size_t k = 0; k < options.label_names.size(); ++k) {
    const std::string& name = options.label_names[k];
    if (name.empty() || !label_ids.emplace(name, static_cast<std::int64_t>(k)).second) {
      throw std::invalid_argument("read_tsv: label_names must be non-empty and distinct, label " +
                                  std::to_string(k) + " is " + shown_label(name));
    }
  }

  std::error_code ignored;  // the overload without it throws for unreadable paths
  if (std::filesystem::is_directory(path, ignored)) {
    throw FileError("tsv", path, 0, "is a directory, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("tsv", path, 0, "cannot open file for reading");

  TsvData data;
  std::vector<std::string> labels;  // raw label per kept line; ids are given at the end
  std::int64_t line_number = 0;
  // Throws, or under the skip policy counts the line; the caller then moves on.
  auto bad_line = [&](BadLinePolicy policy, const std::string& reason) {
    if (policy == BadLinePolicy::error) throw FileError("tsv", path, line_number, reason);
    ++data.skipped_lines;
  };
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (line_number == 1 && line.starts_with(utf8_bom)) line.erase(0, utf8_bom.size());
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;

    if (options.invalid_utf8 != Utf8Policy::accept) {
      std::size_t at = first_invalid_utf8(line);
      if (at != line.size()) {
        auto policy = options.invalid_utf8 == Utf8Policy::error ? BadLinePolicy::error : BadLinePolicy::skip;
        bad_line(policy, "invalid UTF-8 at byte " + std::to_string(at + 1) + " of the line");
        continue;
      }
    }
    std::size_t tab = line.find('\t');
    if (tab == std::string::npos) {
      bad_line(options.bad_lines, "no TAB separating label and text");
      continue;
    }
    if (tab == 0) {
      bad_line(options.bad_lines, "empty label before the TAB");
      continue;
    }
    std::string label = line.substr(0, tab);
    if (!label_ids.empty() && !label_ids.contains(label)) {
      bad_line(options.bad_lines, "label " + shown_label(label) + " is not one of the " +
                                      std::to_string(label_ids.size()) + " given label names");
      continue;
    }
    labels.push_back(std::move(label));
    data.texts.push_back(line.substr(tab + 1));
    data.line_numbers.push_back(line_number);
  }
  if (in.bad()) throw FileError("tsv", path, line_number, "read error");
  if (data.texts.empty()) {
    throw FileError("tsv", path, 0,
                    line_number == 0 ? "empty file"
                                     : "no usable lines (" + std::to_string(line_number) + " lines, " +
                                           std::to_string(data.skipped_lines) + " skipped)");
  }

  if (label_ids.empty()) {
    // std::map keeps the distinct labels sorted: their rank is the class id.
    for (const std::string& label : labels) label_ids.emplace(label, 0);
    std::int64_t next = 0;
    for (auto& [name, id] : label_ids) {
      id = next++;
      data.label_names.push_back(name);
    }
  } else {
    data.label_names = options.label_names;
  }
  data.targets.reserve(labels.size());
  for (const std::string& label : labels) data.targets.push_back(label_ids.at(label));
  return data;
}

}  // namespace tg::data
