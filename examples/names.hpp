// The names data of names_mlp, names_gpt and names_gru: a name a line, letters
// a-z only. The first 90% of the lines train, the last 10% are dev.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

// The names of `path`; with max_letters > 0, each at most that long. Throws
// naming the file and the first bad line, or a file of fewer than 10 names.
inline std::vector<std::string> read_names(const std::string& path, std::size_t max_letters = 0) {
  std::ifstream in(path);
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || (max_letters > 0 && line.size() > max_letters) ||
        line.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos)
      throw std::runtime_error(path + ":" + std::to_string(names.size() + 1) + ": not a name of " +
                               (max_letters > 0 ? "1 to " + std::to_string(max_letters) + " " : "") +
                               "letters a-z");
    names.push_back(line);
  }
  if (names.size() < 10) throw std::runtime_error(path + ": cannot be read, or holds fewer than 10 names");
  return names;
}

// How many of `count` names train: the first 90%.
inline std::size_t train_count(std::size_t count) {
  return count * 9 / 10;
}
