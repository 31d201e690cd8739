// Command-line flags of the small examples (digits_mlp, names_mlp, and the
// lessons' --dot and --html): each flag takes one value, `--name value`; an
// unknown flag or a missing value throws. --help (or -h) prints what the
// program does, its flags and their defaults, and exits with status 0.
//
//   Flags flag(argc, argv, {{"--epochs", "40"}, {"--save", ""}},  // "" = off unless given
//              "what the program does, for --help");
//   int epochs = flag.number("--epochs");
//   if (flag.given("--save")) save(flag["--save"]);
//
// The lessons take only files to write their graph to (picture_files below);
// --threads goes through use_threads().
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tapegrad/core/kernels/parallel.hpp>

class Flags {
 public:
  // `switches` take no value: given, they read "1" (their default is "").
  Flags(int argc, char** argv, std::map<std::string, std::string> defaults, const std::string& about = "",
        std::vector<std::string> switches = {})
      : values_(std::move(defaults)), switches_(std::move(switches)) {
    for (const std::string& s : switches_) values_[s] = "";
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
        std::fputs(usage(argv[0], about).c_str(), stdout);
        std::exit(0);
      }
    for (int i = 1; i < argc;) {
      if (is_switch(argv[i])) {
        values_[argv[i++]] = "1";
        continue;
      }
      if (!values_.count(argv[i]) || i + 1 == argc)
        throw std::invalid_argument(std::string("bad flag ") + argv[i]);
      values_[argv[i]] = argv[i + 1];
      i += 2;
    }
  }

  // What --help prints: the program's name, what it does, each flag and its default.
  std::string usage(const std::string& program, const std::string& about) const {
    std::string s =
        "usage: " + program.substr(program.rfind('/') + 1) + (values_.empty() ? "" : " [--FLAG VALUE]...");
    s += "\n" + (about.empty() ? "" : about + "\n");
    if (values_.empty()) return s + "It takes no flags.\n";
    s += "flags, and their defaults:\n";
    std::size_t width = 0;
    for (const auto& [name, value] : values_) width = std::max(width, name.size());
    for (const auto& [name, value] : values_)
      s += "  " + name + std::string(width + 2 - name.size(), ' ') +
           (is_switch(name) ? "(a switch: off unless given)" : value.empty() ? "(not set)" : value) + "\n";
    return s;
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

  // A number such as 0.025 or 1e-4; the error names the flag.
  double real(const std::string& name) const {
    const std::string& text = values_.at(name);
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) throw std::invalid_argument(name + ": not a number: '" + text + "'");
    return v;
  }

 private:
  bool is_switch(const std::string& name) const {
    return std::find(switches_.begin(), switches_.end(), name) != switches_.end();
  }
  std::map<std::string, std::string> values_;
  std::vector<std::string> switches_;
};

// The lessons' flags: `--dot FILE` (Graphviz text of the graph, tg::to_dot) and
// `--html FILE` (a page that steps through the backward pass, tg::write_html);
// "" where not asked for.
struct PictureFiles {
  std::string dot, html;
};

// Reads the flags in `accepted` ("--dot", "--html", both or none). --help
// prints `about` and the flags; anything else prints a usage line and exits
// with status 2.
//
//   const PictureFiles files = picture_files(argc, argv, {"--dot", "--html"}, "what the lesson shows");
inline PictureFiles picture_files(int argc, char** argv, const std::vector<std::string>& accepted,
                                  const std::string& about) {
  std::map<std::string, std::string> defaults;
  std::string usage = std::string("usage: ") + argv[0];
  for (const std::string& name : accepted) {
    defaults[name] = "";
    usage += " [" + name + " FILE]";
  }
  try {
    const Flags flag(argc, argv, defaults, about);
    return {defaults.count("--dot") ? flag["--dot"] : "", defaults.count("--html") ? flag["--html"] : ""};
  } catch (const std::invalid_argument&) {
    std::fprintf(stderr, "%s\n", usage.c_str());
    std::exit(2);
  }
}

// A program that takes no flags: --help prints `about`; any argument else prints
// a usage line and exits with status 2.
inline void no_flags(int argc, char** argv, const std::string& about) {
  picture_files(argc, argv, {}, about);
}

// --threads N: tapegrad's loops and OpenBLAS use N threads (core/kernels/parallel.hpp).
// 0, the examples' default, means TAPEGRAD_NUM_THREADS where it is set, else
// every core: the embedding path gives the same bits on any number of threads,
// and a program run by hand should use the machine.
inline void use_threads(std::size_t n) {
  if (n == 0 && std::getenv("TAPEGRAD_NUM_THREADS") != nullptr) return;  // the library has read it
  tg::set_num_threads(n > 0 ? n : std::max(1u, std::thread::hardware_concurrency()));
}

// The flags of the training programs (digits_mlp, names_mlp, names_gpt), with
// the program's default data and epochs, plus any flags of its own; "": off
// unless given.
inline std::map<std::string, std::string> training_flags(const std::string& data, const std::string& epochs,
                                                         std::map<std::string, std::string> own = {}) {
  own.insert({{"--data", data},
              {"--epochs", epochs},
              {"--seed", "0"},
              {"--save", ""},
              {"--load", ""},
              {"--stop-after", ""},
              {"--threads", ""}});
  return own;
}

// Their --threads T: T threads for nn::data_parallel's shards and the split
// loops. Not given: the library's default (1, or TAPEGRAD_NUM_THREADS), since
// the results differ in rounding from one thread count to another, and the
// tables that the docs show are one thread's.
inline void training_threads(const Flags& flag) {
  if (flag.given("--threads")) tg::set_num_threads(flag.number("--threads"));
}
