// Checking text for UTF-8, for the library's .cpp files (not installed):
// names that end up in UTF-8 files (write_html's page, safetensors headers)
// are checked before anything is written, and a bad one is shown escaped.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace tg::detail {

// Byte offset of the first byte that makes text invalid UTF-8 (RFC 3629: no
// stray continuation bytes, no truncated sequences, no overlong forms, no
// surrogates, nothing above U+10FFFF), or text.size() when it is valid.
inline std::size_t first_invalid_utf8(std::string_view text) {
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

// Where text stops being UTF-8, for a message: "byte 4 is 0xE9" (counting
// from 1); "" when it is valid UTF-8.
inline std::string invalid_utf8_at(std::string_view text) {
  const std::size_t bad = first_invalid_utf8(text);
  if (bad == text.size()) return "";
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[bad]));
  return "byte " + std::to_string(bad + 1) + " is " + byte;
}

// `text` with each byte that is not part of valid UTF-8 written as \xE9, for a message.
inline std::string escape_invalid_utf8(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    const std::size_t bad = first_invalid_utf8(text);
    out.append(text.substr(0, bad));
    if (bad == text.size()) break;
    char hex[5];
    std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned char>(text[bad]));
    out += hex;
    text.remove_prefix(bad + 1);
  }
  return out;
}

}  // namespace tg::detail
