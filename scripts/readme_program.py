#!/usr/bin/env python3
"""Write out a program that README.md shows, so the build compiles the README's text.

    python3 scripts/readme_program.py README.md NAME OUTPUT

The program is the ```cpp block that follows the line <!-- program: NAME --> in
the README. examples/meson.build builds each one (NAME digits: examples/readme_digits,
NAME module: examples/readme_module), and tests/test_examples.cpp runs them.
"""

import os
import sys


def main():
    readme, name, output = sys.argv[1:4]
    lines = open(readme, encoding="utf-8").read().split("\n")
    marker = "<!-- program: %s -->" % name
    try:
        start = lines.index(marker)
    except ValueError:
        sys.exit("readme_program: %s has no line %s" % (readme, marker))
    fence = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), None)
    if fence is None or lines[fence] != "```cpp":
        sys.exit("readme_program: %s: no ```cpp block after %s" % (readme, marker))
    end = next((i for i in range(fence + 1, len(lines)) if lines[i] == "```"), None)
    if end is None:
        sys.exit("readme_program: %s: the block after %s is not closed" % (readme, marker))
    with open(output, "w", encoding="utf-8") as out:
        out.write("#line %d \"%s\"\n" % (fence + 2, os.path.basename(readme)))
        out.write("\n".join(lines[fence + 1 : end]) + "\n")


if __name__ == "__main__":
    main()
