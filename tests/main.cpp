// The doctest main, one static library linked into each test binary (tests/meson.build).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
