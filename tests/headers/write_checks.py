#!/usr/bin/env python3
"""Writes, for each public header SRC_ROOT/<path>, the files tests/meson.build
compiles to check that header (run when the build is configured):

  OUT/decoy/<path>       an #error: a header reached through the include path
                         under its bare name (`#include "core/tensor.hpp"` from
                         nn/) instead of relative to itself lands here;
  OUT/alone/<path>.cpp   a file that includes only <tapegrad/<path>>, twice;
  OUT/headers.txt        the paths, one a line.

Prints the .cpp files, one a line.

    write_checks.py OUT SRC_ROOT HEADER...
"""
import os
import sys


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Rewrite only what changed, so a reconfigure does not rebuild the checks.
    if os.path.exists(path) and open(path).read() == text:
        return
    with open(path, "w") as f:
        f.write(text)


def main():
    out, root, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    rels = sorted(os.path.relpath(h, root) for h in headers)
    sources = []
    for rel in rels:
        write(os.path.join(out, "decoy", rel),
              f'#error "{rel} was found through the include path, not relative to the header including it"\n')
        source = os.path.join(out, "alone", rel + ".cpp")
        write(source, "// Generated (tests/headers/write_checks.py): this header on its own, twice.\n"
                      f"#include <tapegrad/{rel}>\n#include <tapegrad/{rel}>\n")
        sources.append(source)
    write(os.path.join(out, "headers.txt"), "".join(r + "\n" for r in rels))
    print("\n".join(sources))


if __name__ == "__main__":
    main()
