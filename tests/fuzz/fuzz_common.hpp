// Shared by the fuzz targets: a scratch file for readers that take a path, a
// cursor that turns fuzz bytes into numbers, and the way a target reports a
// broken promise (an abort, which libFuzzer records as a crash with its input).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace fuzz {

// Prints what went wrong and aborts: libFuzzer saves the input as a crash.
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "\nfuzz: broken promise: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_EXPECT(cond, what)                                             \
  do {                                                                      \
    if (!(cond)) ::fuzz::broken(std::string(#cond " is false: ") + (what)); \
  } while (0)

// One file per process and name, in memory (/dev/shm) when there is one: the
// readers under test take paths, and a disk write per run would be the bottleneck.
inline std::string scratch_path(const std::string& name) {
  const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/tapegrad-fuzz-" + std::to_string(::getpid()) + "-" + name;
}

inline void write_file(const std::string& path, const uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) broken("cannot write the scratch file " + path);
}

// Reads the fuzz input front to back; past the end it yields zeros, so every
// input, however short, describes some call.
class Bytes {
 public:
  Bytes(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t raw64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return static_cast<int64_t>(v);
  }
  bool empty() const { return pos_ >= size_; }
  std::size_t left() const { return pos_ < size_ ? size_ - pos_ : 0; }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace fuzz
