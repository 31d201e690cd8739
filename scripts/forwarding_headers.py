#!/usr/bin/env python3
"""Writes BUILD/tapegrad/<path> for each library header SRC_ROOT/<path>: a one-line
header that includes the real file by its absolute path.

meson runs this when it configures the build and adds `-I BUILD` to the library's
dependency, so code built against the source tree (our examples, tests and bench,
or a project using tapegrad as a subproject) writes `#include <tapegrad/...>`
exactly as it would against the installed headers, and the source tree's own
directory names (core/, nn/, ...) never reach anyone's include path.

    forwarding_headers.py BUILD SRC_ROOT HEADER...
"""
import os
import sys


def main():
    out, root, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    target = os.path.join(out, "tapegrad")
    wanted = {}
    for header in headers:
        rel = os.path.relpath(header, root)
        wanted[rel] = ("// Generated when the build is configured (scripts/forwarding_headers.py).\n"
                       f'#include "{os.path.abspath(header)}"\n')
    # A header that left the list leaves the directory too.
    if os.path.isdir(target):
        for dirpath, _, files in os.walk(target):
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), target)
                if rel not in wanted:
                    os.remove(os.path.join(dirpath, f))
    for rel, text in wanted.items():
        path = os.path.join(target, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Rewrite only what changed, so a reconfigure does not rebuild everything.
        if os.path.exists(path) and open(path).read() == text:
            continue
        with open(path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
