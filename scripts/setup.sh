# Shared set-up for scripts/test, scripts/demo and scripts/bench (sourced, not run).
# Installs the Debian packages that are missing (nothing when all are present),
# then configures and builds the project in $build_dir.

# gnuplot-nox draws the example's PNG plot (pngcairo, without X11).
packages=(g++ meson ninja-build pkg-config
          xtensor-dev xtl-dev libxtensor-blas-dev libopenblas-dev
          nlohmann-json3-dev doctest-dev python3 python3-numpy gnuplot-nox)

# Optional: tests/test_html.cpp lays out pages with Graphviz and opens them in
# headless Chromium, tests/test_learn.cpp runs docs/learn.md's gdb recipes, and
# each skips (saying so) what is not installed.
# scripts/test installs these when it can, and goes on without them when it cannot.
optional_packages=(graphviz chromium gdb)

# The sanitizer builds (scripts/test --sanitize and --threads, scripts/leakcheck):
# -O1 with line tables only (-g1) is what the sanitizers' own documentation
# suggests, and it compiles about twice as fast as -O2 -g, with reports that
# still name file and line. The doctest programs themselves, whose compiling is
# most of a build, are compiled at -O0 under ASan (-Dtests_optimization=0: half
# the time of -O1; the library and the examples they run stay at -O1). The
# header checks are left out: they are compile-time checks, done by the release build.
asan_options=(-Doptimization=1 -Ddebug=false "-Dcpp_args=['-g1']" -Db_sanitize=address,undefined
              -Db_lundef=false -Dheader_checks=false -Dtests_optimization=0)
tsan_options=(-Doptimization=1 -Ddebug=false "-Dcpp_args=['-g1']" -Db_sanitize=thread -Dheader_checks=false)

install_missing_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# configure_and_build DIR [meson setup options...] [-- targets...]
# Without targets, builds everything; one compile job per core.
configure_and_build() {
  local dir=$1; shift
  local setup=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do setup+=("$1"); shift; done
  [ $# -gt 0 ] && shift && targets=("$@")
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "${setup[@]}" >&2
  fi
  meson compile -C "$dir" -j "$(nproc)" "${targets[@]}" >&2
}

# install_optional_packages PACKAGE...: as install_missing_packages, but a
# failure (no network, no sudo without a password) is only reported.
install_optional_packages() {
  if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
    local p missing=()
    for p in "$@"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] ||
      echo "setup: not installing optional ${missing[*]} (needs sudo); the tests that use them skip" >&2
    return 0
  fi
  install_missing_packages "$@" ||
    echo "setup: could not install optional $*; the tests that use them skip" >&2
}
