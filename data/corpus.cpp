// Corpora as sentences of words: the Brown corpus's tagged files and plain text.
#include "corpus.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace tg::data {

namespace {

void lower(std::string& word) {
  for (char& c : word)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
}

// The whitespace-separated tokens of a line ("\r" of a "\r\n" end included).
std::vector<std::string> split_line(const std::string& line) {
  std::vector<std::string> tokens;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) tokens.push_back(line.substr(i, j - i));
    i = j;
  }
  return tokens;
}

std::ifstream open(const char* reader, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(reader, path, 0, "cannot open the file");
  return in;
}

void read_tagged_file(const std::string& path, const CorpusOptions& options, std::vector<Sentence>& out) {
  std::ifstream in = open("tagged", path);
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    Sentence sentence;
    for (std::string& token : split_line(line)) {
      const std::size_t slash = token.rfind('/');
      if (slash == std::string::npos || slash == 0)
        throw FileError("tagged", path, number, "token '" + token + "' is not word/tag");
      token.resize(slash);
      if (options.lowercase) lower(token);
      sentence.push_back(std::move(token));
    }
    if (!sentence.empty()) out.push_back(std::move(sentence));
  }
}

}  // namespace

std::vector<Sentence> read_tagged_sentences(const std::string& path, const CorpusOptions& options) {
  namespace fs = std::filesystem;
  std::vector<Sentence> out;
  if (!fs::is_directory(path)) {
    read_tagged_file(path, options, out);
    return out;
  }
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(path))
    if (e.is_regular_file()) files.push_back(e.path().string());
  if (files.empty()) throw FileError("tagged", path, 0, "the directory holds no files");
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) read_tagged_file(file, options, out);
  return out;
}

std::vector<Sentence> read_text_sentences(const std::string& path, const CorpusOptions& options) {
  std::ifstream in = open("text", path);
  std::vector<Sentence> out;
  for (std::string line; std::getline(in, line);) {
    Sentence sentence = split_line(line);
    if (options.lowercase)
      for (std::string& w : sentence) lower(w);
    if (!sentence.empty()) out.push_back(std::move(sentence));
  }
  return out;
}

}  // namespace tg::data
