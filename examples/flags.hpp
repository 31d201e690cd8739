// Command-line flags of the small examples (digits_mlp, names_mlp, and the
// lessons' --dot and --html): each flag takes one value, `--name value`; an
// unknown flag or a missing value throws.
//
//   Flags flag(argc, argv, {{"--epochs", "40"}, {"--save", ""}});  // "" = off unless given
//   int epochs = flag.number("--epochs");
//   if (flag.given("--save")) save(flag["--save"]);
#pragma once

#include <map>
#include <stdexcept>
#include <string>

class Flags {
 public:
  Flags(int argc, char** argv, std::map<std::string, std::string> defaults) : values_(std::move(defaults)) {
    for (int i = 1; i < argc; i += 2) {
      if (!values_.count(argv[i]) || i + 1 == argc)
        throw std::invalid_argument(std::string("bad flag ") + argv[i]);
      values_[argv[i]] = argv[i + 1];
    }
  }

  const std::string& operator[](const std::string& name) const { return values_.at(name); }
  bool given(const std::string& name) const { return !values_.at(name).empty(); }

  // A whole number >= 0; the error names the flag (std::stoi says only "stoi").
  int number(const std::string& name) const {
    const std::string& text = values_.at(name);
    std::size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(text, &used);
    } catch (const std::exception&) {
    }
    if (v < 0 || used != text.size())
      throw std::invalid_argument(name + ": not a whole number >= 0: '" + text + "'");
    return v;
  }

 private:
  std::map<std::string, std::string> values_;
};

// --threads N: tapegrad's loops and OpenBLAS use N threads (core/parallel.hpp).
// 0, the examples' default, means TAPEGRAD_NUM_THREADS where it is set, else
// every core: the embedding path gives the same bits on any number of threads,
// and a program run by hand should use the machine.
#include <cstdlib>
#include <thread>

#include <tapegrad/tapegrad.hpp>

inline void use_threads(std::size_t n) {
  if (n == 0 && std::getenv("TAPEGRAD_NUM_THREADS") != nullptr) return;  // the library has read it
  tg::set_num_threads(n > 0 ? n : std::max(1u, std::thread::hardware_concurrency()));
}
