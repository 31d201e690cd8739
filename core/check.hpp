// Error messages and the checks that throw them (inside the library).
//
//   check(x.numel() == 1, "item: tensor of shape ", x.value().shape(), " has ", x.numel(), " elements");
//   check<std::out_of_range>(i < n, "index ", i, " out of range for size ", n);
//   throw std::logic_error(message("backward: ", what, " was released"));
//
// message() joins its parts: text as it is, a shape (a Shape, an array's
// shape(), a span of sizes) as shape_str() writes it, "[2, 3]", and a number
// as std::to_string() writes it (a float with six decimals, 0.500000), so a
// message reads as the hand-built concatenation it replaced. (GCC 12 has no
// std::format.) check() builds the message only when it throws, but its parts
// are evaluated on every call: pass references (x.value().shape(), not
// x.shape(), which copies) on a hot path.
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "array.hpp"

namespace tg {

namespace detail {
template <class T>
void append_part(std::string& out, const T& part) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>)
    out += std::string_view(part);
  else if constexpr (std::is_same_v<T, char>)
    out += part;
  else if constexpr (std::is_arithmetic_v<T>)
    out += std::to_string(part);
  else if constexpr (std::is_convertible_v<const T&, std::span<const std::size_t>>)
    out += shape_str(std::span<const std::size_t>(part));
  else
    static_assert(!sizeof(T), "message(): a part must be text, a number or a shape");
}
}  // namespace detail

// The parts, one after the other, as one string.
template <class... A>
std::string message(const A&... parts) {
  std::string out;
  (detail::append_part(out, parts), ...);
  return out;
}

// Throws E(message(parts...)) unless ok.
template <class E = std::invalid_argument, class... A>
void check(bool ok, const A&... parts) {
  if (!ok) [[unlikely]]
    throw E(message(parts...));
}

}  // namespace tg
