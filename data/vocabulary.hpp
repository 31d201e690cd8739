#pragma once
// A token <-> id mapping learned from training documents.
//
// Ids are given in order of document frequency (the number of documents a token
// appears in), most frequent first, ties broken by the token string, so the same
// documents always give the same ids. With UnknownPolicy::map_to_unk, id 0 is the
// token "<unk>" and every token not in the vocabulary encodes to it; with
// UnknownPolicy::drop, unknown tokens are left out and real tokens start at id 0.

#include "file_error.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tg::data {

enum class UnknownPolicy { map_to_unk, drop };

struct VocabularyOptions {
  // Keep only tokens that appear in at least min_df documents.
  std::int64_t min_df = 1;
  // Keep at most this many tokens (the most frequent); 0 means no limit.
  // "<unk>" is not counted: with map_to_unk, size() can be max_size + 1.
  std::int64_t max_size = 0;
  UnknownPolicy unknown = UnknownPolicy::map_to_unk;
};

class Vocabulary {
 public:
  static constexpr std::string_view unk_token = "<unk>";

  // An empty vocabulary: just "<unk>" under map_to_unk, nothing under drop.
  explicit Vocabulary(UnknownPolicy unknown = UnknownPolicy::map_to_unk);

  // documents: one token list per training document. A token that appears several
  // times in one document counts once towards its document frequency.
  // Throws std::invalid_argument for bad options, and for an empty token or one
  // containing '\n' or '\r' (it could not be saved one per line).
  static Vocabulary build(const std::vector<std::vector<std::string>>& documents,
                          const VocabularyOptions& options = {});

  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  UnknownPolicy unknown_policy() const { return unknown_; }

  // The id of token, or nothing when it is not in the vocabulary (whatever the
  // policy; encode() is where the policy applies).
  std::optional<std::int64_t> find(std::string_view token) const;
  bool contains(std::string_view token) const { return find(token).has_value(); }

  // id -> token; throws std::out_of_range naming the id and size() when id is not in [0, size()).
  const std::string& token(std::int64_t id) const;

  // Tokens -> ids, unknown tokens mapped to 0 or dropped by the policy.
  std::vector<std::int64_t> encode(const std::vector<std::string>& tokens) const;
  // encode() applied to each document in turn.
  std::vector<std::vector<std::int64_t>> encode_all(
      const std::vector<std::vector<std::string>>& documents) const;

  // Plain text: a header line "tapegrad-vocabulary 1 unknown=map_to_unk" (or
  // "unknown=drop"), then one token per line in id order.
  void save(const std::string& path) const;
  // Throws FileError naming the file and line for a file that cannot be opened, a
  // wrong header, an empty or duplicated token, or a missing "<unk>" on line 2.
  static Vocabulary load(const std::string& path);

 private:
  // Appends token with the next id; the caller has checked it is new.
  void add(std::string token);

  UnknownPolicy unknown_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int64_t> ids_;
};

}  // namespace tg::data
