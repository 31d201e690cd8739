// Vocabulary: tokens to ids with min-df and a cap, saved and loaded.
#include "vocabulary.hpp"

#include "file_error.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace tg::data {

namespace {

constexpr std::string_view format_name = "tapegrad-vocabulary";
constexpr std::string_view format_version = "1";

std::string policy_name(UnknownPolicy policy) {
  return policy == UnknownPolicy::map_to_unk ? "map_to_unk" : "drop";
}

std::string header_line(UnknownPolicy policy) {
  return std::string(format_name) + " " + std::string(format_version) + " unknown=" + policy_name(policy);
}

}  // namespace

Vocabulary::Vocabulary(UnknownPolicy unknown) : unknown_(unknown) {
  if (unknown_ == UnknownPolicy::map_to_unk) add(std::string(unk_token));
}

void Vocabulary::add(std::string token) {
  ids_.emplace(token, size());
  tokens_.push_back(std::move(token));
}

Vocabulary Vocabulary::build(const std::vector<std::vector<std::string>>& documents,
                             const VocabularyOptions& options) {
  if (options.min_df < 1) {
    throw std::invalid_argument("Vocabulary::build: min_df must be >= 1, got " +
                                std::to_string(options.min_df));
  }
  if (options.max_size < 0) {
    throw std::invalid_argument("Vocabulary::build: max_size must be >= 0 (0 = no limit), got " +
                                std::to_string(options.max_size));
  }

  std::unordered_map<std::string_view, std::int64_t> document_frequency;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    // A token repeated inside one document counts once.
    std::unordered_set<std::string_view> seen;
    for (const std::string& token : documents[d]) {
      if (token.empty() || token.find_first_of("\r\n") != std::string::npos) {
        throw std::invalid_argument("Vocabulary::build: document " + std::to_string(d) +
                                    " has an empty token or one containing a line break");
      }
      if (seen.insert(token).second) ++document_frequency[token];
    }
  }

  Vocabulary vocabulary(options.unknown);
  std::vector<std::pair<std::string_view, std::int64_t>> kept;
  for (const auto& [token, df] : document_frequency) {
    if (df < options.min_df) continue;
    // Under map_to_unk "<unk>" already has id 0.
    if (vocabulary.contains(token)) continue;
    kept.emplace_back(token, df);
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first < b.first;
  });
  if (options.max_size > 0 && static_cast<std::int64_t>(kept.size()) > options.max_size) {
    kept.resize(static_cast<std::size_t>(options.max_size));
  }
  for (const auto& entry : kept) vocabulary.add(std::string(entry.first));
  return vocabulary;
}

std::optional<std::int64_t> Vocabulary::find(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& Vocabulary::token(std::int64_t id) const {
  if (id < 0 || id >= size()) {
    throw std::out_of_range("Vocabulary::token: id " + std::to_string(id) + " outside [0, " +
                            std::to_string(size()) + ")");
  }
  return tokens_[static_cast<std::size_t>(id)];
}

std::vector<std::int64_t> Vocabulary::encode(const std::vector<std::string>& tokens) const {
  std::vector<std::int64_t> ids;
  ids.reserve(tokens.size());
  for (const std::string& token : tokens) {
    auto id = find(token);
    if (id) {
      ids.push_back(*id);
    } else if (unknown_ == UnknownPolicy::map_to_unk) {
      ids.push_back(0);
    }
  }
  return ids;
}

std::vector<std::vector<std::int64_t>> Vocabulary::encode_all(
    const std::vector<std::vector<std::string>>& documents) const {
  std::vector<std::vector<std::int64_t>> ids;
  ids.reserve(documents.size());
  for (const auto& document : documents) ids.push_back(encode(document));
  return ids;
}

void Vocabulary::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw FileError("vocabulary", path, 0, "cannot open file for writing");
  out << header_line(unknown_) << '\n';
  for (const std::string& token : tokens_) out << token << '\n';
  out.close();
  if (!out) throw FileError("vocabulary", path, 0, "write failed");
}

Vocabulary Vocabulary::load(const std::string& path) {
  std::error_code ignored;  // the overload without it throws for unreadable paths
  if (std::filesystem::is_directory(path, ignored)) {
    throw FileError("vocabulary", path, 0, "is a directory, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("vocabulary", path, 0, "cannot open file for reading");

  std::string line;
  if (!std::getline(in, line)) throw FileError("vocabulary", path, 1, "empty file, expected a header");
  if (!line.empty() && line.back() == '\r') line.pop_back();

  std::istringstream header(line);
  std::string name, version, unknown, extra;
  header >> name >> version >> unknown;
  if (name != format_name || (header >> extra)) {
    throw FileError(
        "vocabulary", path, 1,
        "expected a header like '" + header_line(UnknownPolicy::map_to_unk) + "', got '" + line + "'");
  }
  if (version != format_version) {
    throw FileError(
        "vocabulary", path, 1,
        "format version '" + version + "' is not supported (only " + std::string(format_version) + ")");
  }
  UnknownPolicy policy;
  if (unknown == "unknown=map_to_unk") {
    policy = UnknownPolicy::map_to_unk;
  } else if (unknown == "unknown=drop") {
    policy = UnknownPolicy::drop;
  } else {
    throw FileError("vocabulary", path, 1,
                    "expected 'unknown=map_to_unk' or 'unknown=drop', got '" + unknown + "'");
  }

  Vocabulary vocabulary(policy);
  std::unordered_map<std::string, std::int64_t> first_line;
  std::int64_t line_number = 1;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) throw FileError("vocabulary", path, line_number, "empty token");
    if (policy == UnknownPolicy::map_to_unk && line_number == 2) {
      if (line != unk_token) {
        throw FileError("vocabulary", path, 2,
                        "expected '" + std::string(unk_token) + "' (id 0), got '" + line + "'");
      }
      first_line.emplace(line, 2);
      continue;  // the constructor already added it
    }
    auto [it, inserted] = first_line.emplace(line, line_number);
    if (!inserted) {
      throw FileError("vocabulary", path, line_number,
                      "duplicate token '" + line + "' (first on line " + std::to_string(it->second) + ")");
    }
    vocabulary.add(line);
  }
  if (in.bad()) throw FileError("vocabulary", path, line_number, "read error");
  if (policy == UnknownPolicy::map_to_unk && line_number < 2) {
    throw FileError("vocabulary", path, 2, "missing '" + std::string(unk_token) + "' (id 0)");
  }
  return vocabulary;
}

}  // namespace tg::data
