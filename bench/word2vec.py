#!/usr/bin/env python3
"""Word vectors: tapegrad's examples/word2vec, fastText and gensim side by side on
the Brown corpus, with the same settings, in one run.

    bench/word2vec.py [--build build] [--rounds 3] [--threads 1,2] [--epochs 5] [--jobs word,subword]

Installs the Debian packages fasttext and python3-gensim when they are missing,
and fetches the corpus with ./scripts/fetch-brown when examples/data/brown.txt
is missing. Every round runs each job once per thread count, in an order that
alternates from round to round, so that the jobs see the same machine load; the
seed of round r is r. The jobs, all on examples/data/brown.txt (1,161,192 words,
one sentence a line) with dim 100, window 5, 5 negatives, subsampling 1e-4,
min count 5, lr 0.025 decaying linearly, 5 epochs:

  word     skip-gram over words: `word2vec` (tapegrad), `fasttext skipgram -minn 0
           -maxn 0`, gensim's Word2Vec(sg=1);
  subword  fastText's subword model (3- to 6-grams, 2M buckets): `word2vec
           --subwords` (tapegrad), `fasttext skipgram` with its default n-grams.

On more than one thread fastText's and gensim's threads update the shared
tables as they go, without locks; tapegrad runs twice: `word2vec
--data-parallel` (every step split over the threads, which then update the
rows each owns: the same vectors every run) and, as the tool
`tapegrad-hogwild`, `word2vec --hogwild` (fastText's way, a lock on each row).

Time: the whole process' wall time (reading the corpus, the vocabulary, training,
writing the vectors), and words/s/thread = epochs x corpus words / wall s / threads;
and its CPU time (user + system, all threads, from wait4), which a machine shared
with other work stretches far less than wall time. The ratios between tools and
between thread counts are medians of each round's ratio (runs side by side).

Quality, the same code over every job's .vec file, loaded with gensim's
KeyedVectors.load_word2vec_format:

  tag-10nn  the Brown corpus tags each word: for the words seen at least 20 times
            whose most frequent tag (without the title, headline and cited-word
            markers: nn-tl -> nn) covers at least 90% of their uses, the share
            whose 10 nearest words (by cosine, among those words) vote for their
            tag. The labels come from the corpus, not from any of the models, and
            every job is scored on the same words (those in every .vec file).
  agree@10  for the 1,000 most frequent words, the mean share of their 10
            nearest words that two .vec files have in common: between two tools
            with the same seed, and between two seeds of one tool (its own noise).

Prints markdown tables (docs/benchmarks.md#word-vectors shows a run).
"""
import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TEXT = os.path.join(ROOT, "examples", "data", "brown.txt")
TAGGED = os.path.join(ROOT, "examples", "data", "brown")
SETTINGS = dict(dim=100, window=5, negative=5, sample=1e-4, min_count=5, lr=0.025)


def ensure_packages():
    missing = []
    if not shutil.which("fasttext"):
        missing.append("fasttext")
    if subprocess.run(["/usr/bin/python3", "-c", "import gensim"], capture_output=True).returncode != 0:
        missing.append("python3-gensim")
    if missing:
        print("word2vec.py: installing", " ".join(missing), file=sys.stderr)
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing, check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if not os.path.exists(TEXT) or not os.path.isdir(TAGGED):
        subprocess.run([os.path.join(ROOT, "scripts", "fetch-brown")], check=True)


GENSIM = """
import sys
from gensim.models import Word2Vec
from gensim.models.word2vec import LineSentence
text, out, threads, seed, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = Word2Vec(LineSentence(text), vector_size={dim}, window={window}, negative={negative}, sg=1, hs=0,
             min_count={min_count}, sample={sample}, alpha={lr}, min_alpha={lr} * 1e-4, epochs=epochs,
             workers=threads, seed=seed)
m.wv.save_word2vec_format(out)
""".format(**SETTINGS)


def command(tool, job, threads, seed, epochs, build, out):
    s = SETTINGS
    if tool.startswith("tapegrad"):
        mode = "--hogwild" if tool == "tapegrad-hogwild" else "--data-parallel"
        return ([os.path.join(build, "examples", "word2vec"), "--data", TEXT, "--dim", str(s["dim"]), "--window",
                 str(s["window"]), "--negative", str(s["negative"]), "--sample", str(s["sample"]), "--min-count",
                 str(s["min_count"]), "--lr", str(s["lr"]), "--epochs", str(epochs), "--threads", str(threads),
                 "--seed", str(seed), "--output", out + ".vec"] + (["--subwords"] if job == "subword" else []) +
                ([mode] if threads > 1 else []))
    if tool == "fasttext":
        return (["fasttext", "skipgram", "-input", TEXT, "-output", out, "-dim", str(s["dim"]), "-ws",
                 str(s["window"]), "-neg", str(s["negative"]), "-t", str(s["sample"]), "-minCount",
                 str(s["min_count"]), "-lr", str(s["lr"]), "-epoch", str(epochs), "-thread", str(threads), "-seed",
                 str(seed), "-verbose", "0"] + (["-minn", "0", "-maxn", "0"] if job == "word" else []))
    return ["/usr/bin/python3", "-c", GENSIM, TEXT, out + ".vec", str(threads), str(seed), str(epochs)]


def run(cmd):
    """Runs cmd; returns (wall s, CPU s): the CPU time (user + system) of the
    process and its threads, from wait4, which a loaded machine does not stretch
    the way it stretches wall time."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "TAPEGRAD_NUM_THREADS")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            sys.exit(f"word2vec.py: {' '.join(cmd[:3])} ... failed ({p.returncode}):\n"
                     f"{err.read().decode(errors='replace')[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------- quality

def base_tag(tag):
    """nn-tl -> nn, fw-nn -> nn, nn+bez -> nn+bez: the tag without its title (-tl),
    headline (-hl), cited-word (-nc) and foreign-word (fw-) markers."""
    for mark in ("-tl", "-hl", "-nc"):
        tag = tag.replace(mark, "")
    return tag[3:] if tag.startswith("fw-") else tag


def tag_labels():
    """word -> its most frequent base tag, for the words seen at least 20 times
    whose most frequent tag covers at least 90% of their uses."""
    tags = collections.defaultdict(collections.Counter)
    for name in sorted(os.listdir(TAGGED)):
        with open(os.path.join(TAGGED, name), encoding="latin-1") as f:
            for line in f:
                for token in line.split():
                    slash = token.rindex("/")
                    tags[token[:slash].lower()][base_tag(token[slash + 1:])] += 1
    labels = {}
    for word, c in tags.items():
        n = sum(c.values())
        tag, top = c.most_common(1)[0]
        if n >= 20 and top >= 0.9 * n:
            labels[word] = tag
    return labels


def load(path):
    from gensim.models import KeyedVectors
    return KeyedVectors.load_word2vec_format(path, binary=False)


def unit_rows(kv, words):
    import numpy as np
    m = np.stack([kv[w] for w in words]).astype(np.float64)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def tag_knn(kv, words, labels, k=10):
    import numpy as np
    m = unit_rows(kv, words)
    sim = m @ m.T
    np.fill_diagonal(sim, -np.inf)
    nearest = np.argpartition(-sim, k, axis=1)[:, :k]
    right = 0
    for i, row in enumerate(nearest):
        votes = collections.Counter(labels[words[j]] for j in row)
        best = max(votes.values())
        # a tie goes to the nearest of the tied tags
        winners = {t for t, v in votes.items() if v == best}
        pick = next(labels[words[j]] for j in sorted(row, key=lambda j: -sim[i, j]) if labels[words[j]] in winners)
        right += pick == labels[words[i]]
    return right / len(words)


def neighbours(kv, words, k=10):
    import numpy as np
    m = unit_rows(kv, words)
    sim = m @ m.T
    np.fill_diagonal(sim, -np.inf)
    return [set(r) for r in np.argpartition(-sim, k, axis=1)[:, :k]]


def agreement(a, b):
    return statistics.mean(len(x & y) / len(x) for x, y in zip(a, b))


# ------------------------------------------------------------------------ main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--jobs", default="word,subword")
    a = p.parse_args()
    ensure_packages()
    thread_counts = [int(t) for t in a.threads.split(",")]
    tools = {"word": ["tapegrad", "fasttext", "gensim"], "subword": ["tapegrad", "fasttext"]}
    # tapegrad-hogwild: more than one thread only (on one, --hogwild is the plain run's steps).
    runs = [(job, tool, n) for job in a.jobs.split(",") for tool in tools[job] + ["tapegrad-hogwild"]
            for n in thread_counts if tool != "tapegrad-hogwild" or n > 1]
    words = sum(len(l.split()) for l in open(TEXT, encoding="latin-1"))
    labels = tag_labels()
    walls = collections.defaultdict(list)  # (job, tool, threads) -> wall s of each round
    cpus = collections.defaultdict(list)   # the same, CPU s
    scores = collections.defaultdict(list)
    tmp = tempfile.mkdtemp(prefix="bench-word2vec-")
    vec = {}
    load_before = os.getloadavg()
    start = time.monotonic()
    for r in range(a.rounds):
        order = runs if r % 2 == 0 else runs[::-1]
        for job, tool, n in order:
            out = os.path.join(tmp, f"{job}-{tool}-{n}-{r}")
            wall, cpu = run(command(tool, job, n, r, a.epochs, a.build, out))
            walls[job, tool, n].append(wall)
            cpus[job, tool, n].append(cpu)
            vec[job, tool, n, r] = out + ".vec"
            print(f"round {r}: {job} {tool} {n} thread(s): {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)
    load_after = os.getloadavg()

    # quality: on the words every file has
    kvs = {key: load(path) for key, path in vec.items()}
    common = [w for w in labels if all(w in kv.key_to_index for kv in kvs.values())]
    for key, kv in kvs.items():
        scores[key[:3]].append(tag_knn(kv, common, labels))

    def ratio(num, den):
        """The median over rounds of num's time / den's time, each round's two
        runs taken side by side."""
        return statistics.median(x / y for x, y in zip(num, den))

    print(f"`bench/word2vec.py --rounds {a.rounds} --threads {a.threads} --epochs {a.epochs}`: "
          f"{words:,} words, {a.epochs} epochs, {a.rounds} rounds (seeds 0..{a.rounds - 1}), "
          f"{(time.monotonic() - start) / 60:.1f} minutes; load average {load_before[0]:.1f} at the start, "
          f"{load_after[0]:.1f} at the end, on {os.cpu_count()} cores.\n")
    print(f"tag-10nn over {len(common)} words ({len(set(labels[w] for w in common))} tags).\n")
    print("| job | tool | threads | wall s | words/s/thread | CPU s | words per CPU s | speed-up over "
          f"{thread_counts[0]} thread | tapegrad's words/s over this | tag-10nn (mean over seeds) |")
    print("| --- " * 10 + "|")
    for job, tool, n in runs:
        wall, cpu = statistics.median(walls[job, tool, n]), statistics.median(cpus[job, tool, n])
        q = scores[job, tool, n]
        base = "tapegrad" if tool == "tapegrad-hogwild" else tool  # the one-thread run it is compared with
        speedup = ratio(walls[job, base, thread_counts[0]], walls[job, tool, n])
        over = ""
        if tool != "tapegrad" and (job, "tapegrad", n) in walls:
            over = (f"{ratio(walls[job, tool, n], walls[job, 'tapegrad', n]):.2f}x wall, "
                    f"{ratio(cpus[job, tool, n], cpus[job, 'tapegrad', n]):.2f}x CPU")
        print(f"| {job} | {tool} | {n} | {wall:.1f} | {a.epochs * words / wall / n:,.0f} | {cpu:.1f} | "
              f"{a.epochs * words / cpu:,.0f} | {speedup:.2f}x | {over} | "
              f"{statistics.mean(q):.3f} ({', '.join(f'{x:.3f}' for x in q)}) |")
    print("\nwall s and CPU s: medians over the rounds; the ratios: medians of each round's ratio.")

    # neighbour agreement, one thread, between tools (seed 0) and between seeds 0 and 1 of each tool
    n = thread_counts[0]
    for job in a.jobs.split(","):
        top = [w for w in kvs[job, tools[job][0], n, 0].index_to_key
               if all(w in kvs[job, t, n, 0].key_to_index for t in tools[job])][:1000]
        near = {(t, r): neighbours(kvs[job, t, n, r], top) for t in tools[job] for r in range(min(2, a.rounds))}
        print(f"\nagree@10, {job}, {n} thread(s), the 1,000 most frequent words:\n")
        print("| | " + " | ".join(tools[job]) + " |")
        print("| --- " * (len(tools[job]) + 1) + "|")
        for t in tools[job]:
            cells = []
            for u in tools[job]:
                if t == u:
                    cells.append(f"{agreement(near[t, 0], near[t, 1]):.3f} (seeds 0, 1)" if a.rounds > 1 else "")
                else:
                    cells.append(f"{agreement(near[t, 0], near[u, 0]):.3f}")
            print(f"| {t} | " + " | ".join(cells) + " |")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
