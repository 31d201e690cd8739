// Tests of the public headers as a user's project sees them. The build compiles
// every header on its own through <tapegrad/...> (tests/headers/write_checks.py),
// with a decoy file that #errors at each header's bare path (core/tensor.hpp, ...)
// first on the include path: a header that includes another one by anything but
// a path relative to itself fails to compile, as it would next to a user's own
// core/tensor.hpp. What is left to check at run time is the one-include promise.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_SUITE("headers") {
  TEST_CASE("tapegrad.hpp includes every public header of core/, inspect/, io/, nn/, optim/ and data/, not distributed/") {
    std::set<std::string> headers;
    std::stringstream list(read(TAPEGRAD_HEADER_LIST));
    for (std::string line; std::getline(list, line);)
      if (line != "tapegrad.hpp") headers.insert(line);
    REQUIRE(headers.size() > 20);
    std::set<std::string> dirs;
    for (const auto& h : headers) dirs.insert(h.substr(0, h.find('/')));
    CHECK(dirs == std::set<std::string>{"core", "data", "distributed", "inspect", "io", "nn", "optim"});
    // distributed/ is a library of its own, compiled on its own like the others
    // but left out of tapegrad.hpp: nothing in the rest depends on it.
    std::erase_if(headers, [](const std::string& h) { return h.rfind("distributed/", 0) == 0; });

    std::set<std::string> included;
    std::stringstream text(read(TAPEGRAD_SOURCE_DIR "/tapegrad.hpp"));
    for (std::string line; std::getline(text, line);)
      if (line.rfind("#include \"", 0) == 0) included.insert(line.substr(10, line.find('"', 10) - 10));
    for (const auto& h : headers) {
      INFO(h);
      CHECK(included.count(h) == 1);
    }
    for (const auto& h : included) {
      INFO(h);
      CHECK(headers.count(h) == 1);  // and nothing that is not installed, nor distributed/
    }
  }
}
