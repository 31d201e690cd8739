#!/usr/bin/env python3
"""Counts code lines: lines that are neither blank nor only a // comment.

  scripts/code_lines.py FILE...      one line per file, then the total
  scripts/code_lines.py --over N DIR...   the library files above N code lines

docs/engine.md quotes its counts (the engine's size, the files one backward()
passes through, the largest files)."""
import os
import sys


def code_lines(path):
    n = 0
    for line in open(path, encoding="utf-8"):
        s = line.strip()
        if s and not s.startswith("//"):
            n += 1
    return n


def main(args):
    if args and args[0] == "--over":
        limit, dirs = int(args[1]), args[2:]
        over = []
        for d in dirs:
            for root, _, files in os.walk(d):
                for f in files:
                    if f.endswith((".cpp", ".hpp")):
                        p = os.path.join(root, f)
                        if code_lines(p) > limit:
                            over.append((code_lines(p), p))
        for n, p in sorted(over, reverse=True):
            print(f"{n:6d} {p}")
        print(f"{len(over)} files above {limit} code lines")
        return 0
    total = 0
    for p in args:
        n = code_lines(p)
        total += n
        print(f"{n:6d} {p}")
    print(f"{total:6d} total")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
