#include "tokenizer.hpp"

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
  std::size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte, from the table
    // in RFC 3629 section 4. The narrowed ranges after E0, ED, F0 and F4 are what
    // exclude overlong forms, surrogates and code points above U+10FFFF.
    std::size_t length = 0;
    unsigned char second_min = 0x80, second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) second_min = 0xA0;
      if (lead == 0xED) second_max = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) second_min = 0x90;
      if (lead == 0xF4) second_max = 0x8F;
    } else {
      return i;  // a continuation byte with no lead, C0/C1 (overlong), or F5..FF
    }
    if (text.size() - i < length) return i;  // truncated at the end of the text
    auto second = static_cast<unsigned char>(text[i + 1]);
    if (second < second_min || second > second_max) return i;
    for (std::size_t k = 2; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if (next < 0x80 || next > 0xBF) return i;
    }
    i += length;
  }
  return text.size();
}

bool valid_utf8(std::string_view text) {
  return first_invalid_utf8(text) == text.size();
}

}  // namespace tg::data
