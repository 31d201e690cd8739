// The command line of the bench programs: `--name value` options written into
// the variables a table names, a bare `--flag` for a bool, and positional
// arguments (output paths) collected in order.
//
//   std::string tsv; int64_t docs = 4096; bool synthetic = false;
//   std::vector<std::string> rest = bench::read_options(argc, argv,
//       {{"--tsv", &tsv}, {"--docs", &docs}, {"--synthetic", &synthetic}});
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace bench {

using Option = std::variant<std::string*, int64_t*, uint64_t*, double*, bool*>;

// Throws std::invalid_argument naming the option for an unknown option, a
// missing value or a value that is not a number (all of it).
inline std::vector<std::string> read_options(int argc, char** argv, const std::map<std::string, Option>& options) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    if (name.rfind("--", 0) != 0) {
      positional.push_back(name);
      continue;
    }
    const auto it = options.find(name);
    if (it == options.end()) throw std::invalid_argument("unknown option " + name);
    if (bool* const* flag = std::get_if<bool*>(&it->second)) {
      **flag = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(name + " needs a value");
    const std::string text = argv[++i];
    bool ok = true;  // a number must be all of the text
    try {
      std::size_t used = 0;
      std::visit(
          [&](auto* target) {
            using T = std::remove_pointer_t<decltype(target)>;
            if constexpr (std::is_same_v<T, std::string>)
              *target = text, used = text.size();
            else if constexpr (std::is_same_v<T, int64_t>)
              *target = std::stoll(text, &used);
            else if constexpr (std::is_same_v<T, uint64_t>)
              *target = std::stoull(text, &used);
            else if constexpr (std::is_same_v<T, double>)
              *target = std::stod(text, &used);
          },
          it->second);
      ok = used == text.size();
    } catch (const std::logic_error&) {  // stoll & co. throw invalid_argument or out_of_range
      ok = false;
    }
    if (!ok) throw std::invalid_argument(name + ": not a number: '" + text + "'");
  }
  return positional;
}

}  // namespace bench
