#include "tokenizer.hpp"

#include "../core/utf8.hpp"

#include <stdexcept>

namespace tg::data {

namespace {

// Not std::isalnum: its answer depends on the C locale and it is undefined for
// negative char values, which every byte >= 0x80 is where char is signed.
bool is_token_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

char to_lower_ascii(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

std::vector<std::string> tokenize(std::string_view text, const TokenizerOptions& options) {
  if (options.min_length == 0 || options.max_length < options.min_length) {
    throw std::invalid_argument(
        "tokenize: need 1 <= min_length <= max_length, got min_length=" + std::to_string(options.min_length) +
        ", max_length=" + std::to_string(options.max_length));
  }
  std::vector<std::string> tokens;
  std::size_t i = 0;
  while (i < text.size()) {
    if (!is_token_byte(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && is_token_byte(static_cast<unsigned char>(text[end]))) {
      ++end;
    }
    std::size_t length = end - i;
    if (length >= options.min_length && length <= options.max_length) {
      std::string token(text.substr(i, length));
      if (!options.keep_case) {
        for (char& c : token) c = to_lower_ascii(c);
      }
      tokens.push_back(std::move(token));
    }
    i = end;
  }
  return tokens;
}

std::vector<std::vector<std::string>> tokenize_all(const std::vector<std::string>& texts,
                                                   const TokenizerOptions& options) {
  std::vector<std::vector<std::string>> documents;
  documents.reserve(texts.size());
  for (const std::string& text : texts) documents.push_back(tokenize(text, options));
  return documents;
}

std::size_t first_invalid_utf8(std::string_view text) {
  return tg::detail::first_invalid_utf8(text);
}

bool valid_utf8(std::string_view text) {
  return first_invalid_utf8(text) == text.size();
}

}  // namespace tg::data
