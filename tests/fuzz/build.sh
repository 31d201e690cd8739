#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.cpp) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer into DIR (default: build-fuzz/ at the top of the
# repository). The library sources are compiled again with the same flags (a
# fuzzer needs its code instrumented), into a static archive each target links
# against, so a target only carries the code it calls.
#
#   tests/fuzz/build.sh [DIR]        CXX_FUZZ=clang++-14 to pick the compiler
#
# It writes DIR/build.ninja and runs ninja, so a second run rebuilds only what
# changed (headers included).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/build-fuzz}
cxx=${CXX_FUZZ:-clang++}
command -v "$cxx" >/dev/null || { echo "tests/fuzz/build.sh: $cxx not found (apt-get install clang)" >&2; exit 1; }
mkdir -p "$dir"

sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all"
cflags="-std=c++20 -O1 -g -fno-omit-frame-pointer $sanitize -I$root $(pkg-config --cflags xtensor nlohmann_json openblas)"
libs=$(pkg-config --libs openblas)

{
  echo "cxx = $cxx"
  echo "cflags = $cflags"
  echo "rule cc"
  echo "  command = \$cxx -MD -MF \$out.d \$cflags -fsanitize=fuzzer-no-link -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "  description = CXX \$out"
  echo "rule ar"
  echo "  command = rm -f \$out && ar rcs \$out \$in"
  echo "  description = AR \$out"
  echo "rule link"
  echo "  command = \$cxx -fsanitize=fuzzer,address,undefined \$in -o \$out $libs"
  echo "  description = LINK \$out"
  objects=()
  for src in "$root"/core/*.cpp "$root"/core/ops/*.cpp "$root"/core/kernels/*.cpp "$root"/inspect/*.cpp \
             "$root"/io/*.cpp "$root"/nn/*.cpp "$root"/data/*.cpp; do
    rel=${src#"$root"/}
    obj="obj/${rel%.cpp}.o"
    echo "build $obj: cc $src"
    objects+=("$obj")
  done
  echo "build libtapegrad-fuzz.a: ar ${objects[*]}"
  for src in "$root"/tests/fuzz/fuzz_*.cpp; do
    name=$(basename "$src" .cpp)
    echo "build obj/fuzz/$name.o: cc $src"
    echo "build $name: link obj/fuzz/$name.o libtapegrad-fuzz.a"
  done
} > "$dir/build.ninja.new"
# Only replace the file when it changed, so ninja does not rebuild everything.
if cmp -s "$dir/build.ninja.new" "$dir/build.ninja"; then rm "$dir/build.ninja.new"
else mv "$dir/build.ninja.new" "$dir/build.ninja"; fi

ninja -C "$dir" -j "${FUZZ_JOBS:-2}"
