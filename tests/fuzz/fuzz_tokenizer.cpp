// Any byte string through the tokenizer and the UTF-8 checker.
//
// The first three bytes pick min_length, max_length and keep_case; the rest is
// the text. Promises checked (data/tokenizer.hpp):
//   - tokenize throws std::invalid_argument exactly when the lengths are bad
//     (min_length 0 or max_length < min_length), and otherwise returns tokens
//     that are runs of ASCII letters and digits, within the lengths,
//     lower-cased unless keep_case, appearing in the text in order;
//   - first_invalid_utf8 agrees with a decoder written differently (decode
//     the code point, then reject overlong forms, surrogates and values above
//     U+10FFFF), and valid_utf8 with it.
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "data/tokenizer.hpp"
#include "fuzz_common.hpp"

namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The reference: full decode of each sequence, then the RFC 3629 rules on the value.
std::size_t reference_first_invalid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len;
    uint32_t cp;
    if (b < 0x80) {
      ++i;
      continue;
    }
    if ((b & 0xE0) == 0xC0) {
      len = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cp = b & 0x07;
    } else {
      return i;  // a continuation byte with no lead, or F8..FF
    }
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < smallest[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return s.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  tg::data::TokenizerOptions o;
  o.min_length = in.byte() % 40;
  o.max_length = in.byte() % 40;
  o.keep_case = in.byte() & 1;
  const std::size_t skip = std::min<std::size_t>(size, 3);
  const std::string_view text(reinterpret_cast<const char*>(data) + skip, size - skip);

  const bool bad_options = o.min_length == 0 || o.max_length < o.min_length;
  try {
    const std::vector<std::string> tokens = tg::data::tokenize(text, o);
    FUZZ_EXPECT(!bad_options, "bad lengths were accepted");
    std::size_t from = 0;
    for (const std::string& t : tokens) {
      FUZZ_EXPECT(t.size() >= o.min_length && t.size() <= o.max_length, "token length out of bounds: " + t);
      for (char c : t) {
        FUZZ_EXPECT(is_alnum(c), "token holds a separator");
        FUZZ_EXPECT(o.keep_case || !(c >= 'A' && c <= 'Z'), "token not lower-cased: " + t);
      }
      // Each token is a whole run of the text, found after the previous one.
      std::size_t at = from;
      for (;; ++at) {
        FUZZ_EXPECT(at + t.size() <= text.size(), "token not found in order: " + t);
        bool same = true;
        for (std::size_t k = 0; k < t.size() && same; ++k) {
          const char c = text[at + k];
          same = (o.keep_case ? c : static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c)) == t[k];
        }
        const bool whole = (at == 0 || !is_alnum(text[at - 1])) &&
                           (at + t.size() == text.size() || !is_alnum(text[at + t.size()]));
        if (same && whole) break;
      }
      from = at + t.size();
    }
  } catch (const std::invalid_argument&) {
    FUZZ_EXPECT(bad_options, "good lengths were refused");
  }

  const std::size_t got = tg::data::first_invalid_utf8(text), want = reference_first_invalid(text);
  FUZZ_EXPECT(got == want,
              "first_invalid_utf8 " + std::to_string(got) + ", reference " + std::to_string(want));
  FUZZ_EXPECT(tg::data::valid_utf8(text) == (want == text.size()), "valid_utf8 disagrees");
  return 0;
}
