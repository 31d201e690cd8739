"""The Brown corpus's tagged files -> plain text, one sentence a line.

    python3 scripts/brown_to_txt.py DIR OUTPUT

Reads DIR's files in the order of their names; keeps each token's word (the
text before its last '/'), lowercased (ASCII letters only), and drops the tag:
the same sentences tg::data::read_tagged_sentences reads (data/corpus.hpp).
"""
import os
import sys


def main():
    directory, output = sys.argv[1], sys.argv[2]
    sentences = words = 0
    with open(output, "w", encoding="latin-1", newline="\n") as out:
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name), encoding="latin-1") as f:
                for line in f:
                    tokens = [t[: t.rindex("/")] for t in line.split()]
                    if not tokens:
                        continue
                    out.write(" ".join(t.translate(LOWER) for t in tokens) + "\n")
                    sentences += 1
                    words += len(tokens)
    print(f"brown_to_txt: {sentences} sentences, {words} words -> {output}")


LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

if __name__ == "__main__":
    main()
