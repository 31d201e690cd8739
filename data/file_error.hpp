#pragma once
// The error thrown for a data file that cannot be read or whose content is wrong.
// Bad arguments to a function are std::invalid_argument instead.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tg::data {

class FileError : public std::runtime_error {
 public:
  // what(): "<reader>: <path>:<line>: <reason>", or "<reader>: <path>: <reason>"
  // when line is 0 (the problem is the whole file, not one line).
  FileError(const std::string& reader, const std::string& path, std::int64_t line, const std::string& reason)
      : std::runtime_error(message(reader, path, line, reason)), path_(path), line_(line) {}

  const std::string& path() const { return path_; }
  // 1-based line number; 0 when the error is about the whole file.
  std::int64_t line() const { return line_; }

 private:
  static std::string message(const std::string& reader, const std::string& path, std::int64_t line,
                             const std::string& reason) {
    std::string text = reader + ": " + path;
    if (line > 0) {
      text += ':';
      text += std::to_string(line);
    }
    text += ": ";
    text += reason;
    return text;
  }

  std::string path_;
  std::int64_t line_;
};

}  // namespace tg::data
