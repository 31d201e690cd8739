#pragma once
// Splitting text into word tokens, and checking that text is valid UTF-8.
//
// A token is a run of ASCII letters and digits. Everything else separates tokens,
// including every byte >= 0x80: multi-byte UTF-8 characters and invalid bytes alike.
// That keeps the tokenizer total (any byte string is fine input) and simple, at the
// price of splitting words with accents ("café" -> "caf").

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tg::data {

struct TokenizerOptions {
  // Tokens shorter than min_length or longer than max_length (in bytes, which
  // here are characters) are dropped, not cut.
  std::size_t min_length = 1;
  // Long runs are mostly encoded blobs (base64, hex ids), not words.
  std::size_t max_length = 32;
  // false: "Free" and "FREE" both become "free".
  bool keep_case = false;
};

// Throws std::invalid_argument when min_length is 0 or max_length < min_length.
std::vector<std::string> tokenize(std::string_view text, const TokenizerOptions& options = {});

// tokenize() applied to each text in turn.
std::vector<std::vector<std::string>> tokenize_all(const std::vector<std::string>& texts,
                                                   const TokenizerOptions& options = {});

// True when text is well-formed UTF-8 (RFC 3629): no stray continuation bytes,
// no truncated sequences, no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view text);

// Byte offset of the first byte that makes text invalid UTF-8, or text.size()
// when it is valid. Used for error messages.
std::size_t first_invalid_utf8(std::string_view text);

}  // namespace tg::data
