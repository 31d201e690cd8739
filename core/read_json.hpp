// JSON read from a file (a safetensors header, a checkpoint's metadata), for
// the library's .cpp files only: it is not installed, so nlohmann/json stays
// out of the public headers.
//
// Text that nests deeper than max_json_depth is refused before it is parsed.
// nlohmann's parser takes any depth, but dump() and comparisons recurse once
// per level: a message quoting a value nested 200,000 levels deep would
// overflow the stack.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tg::detail {

// serde_json's limit, which the reference safetensors reader has.
inline constexpr std::size_t max_json_depth = 128;

// The deepest nesting of [ and { in `text`, outside strings.
inline std::size_t json_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// The value of `text`, or, for text that nests too deep or is not JSON, a
// discarded value (is_discarded()) and `why` saying which ("nests deeper than
// 128 levels", "is not valid JSON"), to follow what the text is in a message.
inline nlohmann::json parse_json(std::string_view text, std::string& why,
                                 const nlohmann::json::parser_callback_t& callback = nullptr) {
  if (json_depth(text) > max_json_depth) {
    why = "nests deeper than " + std::to_string(max_json_depth) + " levels";
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  nlohmann::json j = nlohmann::json::parse(text, callback, /*allow_exceptions=*/false);
  if (j.is_discarded()) why = "is not valid JSON";
  return j;
}

// The start of `text` for a message: at most 80 characters.
inline std::string json_excerpt(std::string_view text) {
  return text.size() <= 80 ? std::string(text) : std::string(text.substr(0, 80)) + "...";
}

}  // namespace tg::detail
