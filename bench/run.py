#!/usr/bin/env python3
"""Runs the step benchmarks of tapegrad, PyTorch and libtorch side by side, the
micro-benchmarks, prints one table and writes bench/RESULTS.md.

Called by ./scripts/bench (which builds first); standard library only, so any
python3 runs it. PyTorch runs under --python (Debian's /usr/bin/python3).

Every (corpus, path, optimizer) case runs the three systems one after another,
each in its own process (peak RSS is that process's ru_maxrss), in an order that
rotates from case to case, so that a burst of load on the machine does not always
hit the same system. Ratios compare runs made seconds apart.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time

SYSTEMS = ["tapegrad", "pytorch", "libtorch"]
CASES = [("embedding", "sgd"), ("embedding", "adam"), ("linear", "sgd"), ("linear", "adam")]
MAIN_VOCAB = 100_000
SCALING_VOCABS = [1_000, 10_000, 100_000, 1_000_000]
# The process's CPU time per step (all threads): on a shared machine it leaves out
# the time spent waiting for a core. Wall time is kept in RESULTS.json.
METRIC = "cpu_ms_per_step"
ENV_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_measured(cmd, timeout):
    """Runs cmd; returns (exit status, stdout, stderr, peak RSS in kB from wait4)."""
    env = dict(os.environ, **ENV_ONE_THREAD)
    with open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(cmd, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.monotonic() + timeout
    out, err = [], []
    # Read both pipes without deadlocking; they are small.
    readers = [threading.Thread(target=lambda f=f, acc=acc: acc.append(f.read())) for f, acc in
               ((p.stdout, out), (p.stderr, err))]
    for r in readers:
        r.start()
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            err.append(f"\nkilled after {timeout} s")
            break
        time.sleep(0.02)
    for r in readers:
        r.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, "".join(out), "".join(err), usage.ru_maxrss


# ------------------------------------------------------------------- corpora

def export(args, name, options):
    path = os.path.join(args.data, name + ".ids")
    cmd = [os.path.join(args.build, "bench", "export_ids")] + options + [path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"export_ids failed: {' '.join(cmd)}\n{r.stderr}")
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    stats.update(name=name, path=path, source=" ".join(options))
    return stats


def make_corpora(args):
    os.makedirs(args.data, exist_ok=True)
    corpora = []
    for v in SCALING_VOCABS:
        corpora.append(export(args, f"synthetic-{v}", ["--synthetic", "--vocab", str(v), "--docs", "4096",
                                                       "--tokens", "160", "--seed", "0"]))
    if args.tsv:
        corpora.append(export(args, "spamassassin", ["--tsv", args.tsv, "--min-df", "1", "--seed", "0"]))
    return corpora


# --------------------------------------------------------------------- runs

def command(args, system, corpus, model, optim, counts):
    opts = ["--ids", corpus["path"], "--model", model, "--optim", optim] + counts
    if system == "tapegrad":
        return [os.path.join(args.build, "bench", "step_tapegrad")] + opts
    if system == "libtorch":
        return [os.path.join(args.build, "bench", "step_libtorch")] + opts
    return [args.python, os.path.join(args.source, "bench", "step_pytorch.py")] + opts


def counts_for(args, system, corpus, model, optim):
    # At V = 1M a linear step multiplies [32, 1M] by [1M, 64] twice and updates a
    # 64M-float weight, and libtorch's embedding + Adam (dense gradient, dense Adam)
    # updates 3 x 64M floats: a second or so per step here, so few steps, K = 1.
    heavy = model == "linear" or (system == "libtorch" and optim == "adam")
    if heavy and corpus["vocab"] >= 1_000_000:
        return ["--warmup", "2", "--repeats", "3", "--target-ms", "0"]
    if args.quick:
        return ["--warmup", "4", "--repeats", "3", "--target-ms", "100"]
    return ["--warmup", "8", "--repeats", "5", "--target-ms", "300"]


def available_peers(args):
    peers = {"tapegrad": None}
    r = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    peers["pytorch"] = None if r.returncode == 0 else f"{args.python} cannot import torch (python3-torch)"
    lt = os.path.join(args.build, "bench", "step_libtorch")
    peers["libtorch"] = None if os.path.exists(lt) else "step_libtorch was not built (libtorch-dev not found)"
    return peers


def run_steps(args, corpora, peers):
    plan = []
    by_vocab = {c["vocab"]: c for c in corpora if c["name"].startswith("synthetic")}
    main = by_vocab[MAIN_VOCAB]
    ordered = [main] + [by_vocab[v] for v in SCALING_VOCABS if v != MAIN_VOCAB] + \
              [c for c in corpora if not c["name"].startswith("synthetic")]
    rotation = 0
    for corpus in ordered:
        for model, optim in CASES:
            systems = SYSTEMS[rotation % 3:] + SYSTEMS[:rotation % 3]
            rotation += 1
            for _ in range(args.rounds):
                for system in systems:
                    if peers[system] is None:
                        plan.append((corpus, model, optim, system))
    results = []
    for i, (corpus, model, optim, system) in enumerate(plan, 1):
        cmd = command(args, system, corpus, model, optim, counts_for(args, system, corpus, model, optim))
        status, out, err, rss = run_measured(cmd, args.timeout)
        line = next((l for l in out.splitlines() if l.startswith("RESULT ")), None)
        label = f"[{i}/{len(plan)}] {corpus['name']:<18} {model:<9} {optim:<4} {system:<8}"
        if status != 0 or line is None:
            log(f"{label} FAILED ({status}): {err.strip()[-400:]}")
            results.append(dict(corpus=corpus["name"], model=model, optim=optim, system=system, failed=err.strip()[-400:]))
            continue
        r = json.loads(line[len("RESULT "):])
        r.update(corpus=corpus["name"], rss_maxrss_kb=rss, corpus_bytes=os.path.getsize(corpus["path"]),
                 command=" ".join(shlex.quote(c) for c in cmd))
        log(f"{label} {r[METRIC]:9.3f} ms/step CPU, {r['ms_per_step']:9.3f} wall (K={r['steps_per_repeat']}), "
            f"peak RSS {rss / 1024:.0f} MB")
        results.append(r)
    return results


def merge_rounds(results):
    """One entry per (corpus, model, optim, system): the median over rounds."""
    groups = {}
    for r in results:
        if "failed" in r:
            continue
        groups.setdefault((r["corpus"], r["model"], r["optim"], r["system"]), []).append(r)
    merged = {}
    for key, rs in groups.items():
        best = sorted(rs, key=lambda r: r[METRIC])[len(rs) // 2]
        merged[key] = best
    return merged


# -------------------------------------------------------------------- micro

def run_micro(args):
    exe = os.path.join(args.build, "bench", "micro_tapegrad")
    if not os.path.exists(exe):
        return None, "micro_tapegrad was not built (libbenchmark-dev not found)"
    out = os.path.join(args.data, "micro.json")
    cmd = [exe, f"--benchmark_out={out}", "--benchmark_out_format=json", "--benchmark_repetitions=3",
           "--benchmark_report_aggregates_only=true", f"--benchmark_min_time={0.05 if args.quick else 0.1}"]
    log("micro-benchmarks: " + " ".join(cmd[1:]))
    status, _, err, _ = run_measured(cmd, args.timeout * 2)
    if status != 0:
        return None, f"micro_tapegrad failed: {err.strip()[-300:]}"
    with open(out) as f:
        data = json.load(f)
    rows = []
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")]
        rows.append(dict(name=b["run_name"], us=b["real_time"] * unit, cpu_us=b["cpu_time"] * unit,
                         label=b.get("label", ""),
                         counters={k: v for k, v in b.items() if k in ("items_per_second", "bytes_per_second")}))
    return rows, None


# ------------------------------------------------------------------- report

def machine(args):
    cpu = sh("lscpu | sed -n 's/^Model name: *//p'") or platform.processor()
    caches = sh("lscpu | grep -E '^L[123]' | sed 's/  */ /g' | paste -sd ';'")
    mem = sh("free -g | awk '/^Mem:/ {print $2}'")
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "caches": caches.replace(";", ", "),
        "memory": f"{mem} GB" if mem else "?",
        "kernel": platform.release(),
        "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
        "compiler": sh("c++ --version | head -1"),
        "openblas": sh("pkg-config --modversion openblas"),
        "pytorch": sh(f"{shlex.quote(args.python)} -c 'import torch, sys; print(torch.__version__, \"on Python\", sys.version.split()[0])' 2>/dev/null") or "unavailable",
        "libtorch": sh("dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null") or "unavailable",
        "google benchmark": sh("dpkg-query -W -f='${Version}' libbenchmark-dev 2>/dev/null") or "unavailable",
        "load average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def fmt_ms(r):
    if r is None:
        return "—"
    ms = r[METRIC]
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def fmt_ratio(a, b):
    if a is None or b is None:
        return "—"
    return f"{a[METRIC] / b[METRIC]:.2f}x"


def fmt_mb(r):
    return "—" if r is None else f"{r['rss_maxrss_kb'] / 1024:.0f}"


def main_table(corpora, merged):
    head = ["V", "path", "optimizer", "tapegrad ms", "PyTorch ms", "libtorch ms", "tg/PyTorch", "tg/libtorch",
            "RSS MB tg", "RSS MB py", "RSS MB lt"]
    rows = []
    names = [c for c in corpora if c["vocab"] == MAIN_VOCAB and c["name"].startswith("synthetic")] + \
            [c for c in corpora if c["vocab"] != MAIN_VOCAB and c["name"].startswith("synthetic")] + \
            [c for c in corpora if not c["name"].startswith("synthetic")]
    for c in names:
        for model, optim in CASES:
            tg, py, lt = (merged.get((c["name"], model, optim, s)) for s in SYSTEMS)
            if tg is None and py is None and lt is None:
                continue
            v = f"{c['vocab']:,}" + ("" if c["name"].startswith("synthetic") else " (spam)")
            opt = optim if model == "linear" or optim == "sgd" else "adam (lazy / SparseAdam / dense)"
            rows.append([v, model, opt, fmt_ms(tg), fmt_ms(py), fmt_ms(lt), fmt_ratio(tg, py), fmt_ratio(tg, lt),
                         fmt_mb(tg), fmt_mb(py), fmt_mb(lt)])
    return head, rows


def render(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep] + [line(r) for r in rows])


def targets(merged):
    """(description, measured, goal, met) for each target of the issue."""
    main = f"synthetic-{MAIN_VOCAB}"
    g = lambda corpus, model, optim, system: merged.get((corpus, model, optim, system))
    out = []

    def ratio(desc, a, b, goal):
        if a is None or b is None:
            out.append((desc, "not measured", f"<= {goal}x", None))
        else:
            x = a[METRIC] / b[METRIC]
            out.append((desc, f"{x:.2f}x ({a[METRIC]:.3f} / {b[METRIC]:.3f} ms)", f"<= {goal}x", x <= goal))

    ratio("embedding + SGD, tapegrad / libtorch", g(main, "embedding", "sgd", "tapegrad"),
          g(main, "embedding", "sgd", "libtorch"), 0.25)
    ratio("embedding + Adam, tapegrad (lazy) / PyTorch SparseAdam", g(main, "embedding", "adam", "tapegrad"),
          g(main, "embedding", "adam", "pytorch"), 0.15)
    ratio("linear + SGD, tapegrad / libtorch", g(main, "linear", "sgd", "tapegrad"),
          g(main, "linear", "sgd", "libtorch"), 1.0)
    ratio("linear + Adam, tapegrad / libtorch", g(main, "linear", "adam", "tapegrad"),
          g(main, "linear", "adam", "libtorch"), 1.0)
    for optim in ("sgd", "adam"):
        ratio(f"embedding + {optim}, tapegrad step at V = 1M / at V = 10k",
              g("synthetic-1000000", "embedding", optim, "tapegrad"),
              g("synthetic-10000", "embedding", optim, "tapegrad"), 1.5)
    for corpus in (main, "synthetic-1000000"):
        for optim in ("sgd", "adam"):
            r = g(corpus, "embedding", optim, "tapegrad")
            desc = f"embedding + {optim} at V = {corpus.split('-')[1]}, tapegrad peak RSS / (parameters + state)"
            if r is None:
                out.append((desc, "not measured", "<= 1.2x", None))
                continue
            need = r["param_bytes"] + r["state_bytes"]
            x = r["rss_maxrss_kb"] * 1024 / need
            out.append((desc, f"{x:.2f}x ({r['rss_maxrss_kb'] / 1024:.1f} MB / {need / 2**20:.1f} MB)", "<= 1.2x",
                        x <= 1.2))
            # The same without what the process holds before any model exists:
            # its libraries (RSS at start) and the corpus (the ids file, read whole).
            grown = r["rss_maxrss_kb"] * 1024 - r["rss_start_kb"] * 1024 - r["corpus_bytes"]
            y = grown / need
            out.append((desc + ", above the process's baseline and corpus",
                        f"{y:.2f}x ({grown / 2**20:.1f} MB / {need / 2**20:.1f} MB)", "(for reading the above)", None))
    return out


def loss_check(merged):
    """Largest warm-up loss difference between tapegrad and each peer, per case."""
    rows = []
    for (corpus, model, optim, system), r in sorted(merged.items()):
        if system != "tapegrad":
            continue
        cells = [corpus, model, optim]
        for peer in ("pytorch", "libtorch"):
            p = merged.get((corpus, model, optim, peer))
            if p is None:
                cells.append("—")
                continue
            # Warm-up lengths may differ (heavy cases warm up less): compare the common steps.
            n = min(len(r["losses"]), len(p["losses"]))
            d = max(abs(a - b) for a, b in zip(r["losses"][:n], p["losses"][:n]))
            cells.append(f"{d:.1e} ({n} steps)")
        rows.append(cells)
    return ["corpus", "path", "optimizer", "vs PyTorch", "vs libtorch"], rows


def phases_table(merged):
    head = ["corpus", "path", "optimizer", "system", "batch", "forward", "zero_grad+backward", "optimizer step",
            "total (wall)", "total (CPU)"]
    rows = []
    for (corpus, model, optim, system), r in sorted(merged.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                                                   SYSTEMS.index(kv[0][3]))):
        p = r["phases_ms"]
        rows.append([corpus, model, optim, system] + [f"{p[k]:.3f}" for k in ("batch", "forward", "backward", "step")]
                    + [f"{r['ms_per_step']:.3f}", f"{r[METRIC]:.3f}"])
    return head, rows


def write_results(args, corpora, merged, results, peers, micro, micro_note, mach, elapsed):
    head, rows = main_table(corpora, merged)
    t = targets(merged)
    lines = ["# Benchmarks: tapegrad, PyTorch and libtorch, side by side", "",
             f"Produced by `{args.command}` on {datetime.date.today().isoformat()} in {elapsed / 60:.1f} minutes.",
             "Regenerate with the same command; everything below is written by `bench/run.py`.", "",
             "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in mach.items()]
    lines += ["", "Every system runs on one thread (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, "
              "`torch.set_num_threads(1)`, `at::set_num_threads(1)`). The machine is shared and its load varies, "
              "so absolute times are noisy: read the ratios, which compare runs made seconds apart.", ""]
    missing = [f"- {s}: {why}" for s, why in peers.items() if why]
    if missing:
        lines += ["Skipped:", ""] + missing + [""]
    lines += ["## What is measured", "",
              "One training step of the bag-of-words classifier (`examples/bow_classifier`), the same work in "
              "each system: batch build (token ids -> the model's input), forward, cross-entropy, "
              "zero_grad (gradients set to none) + backward, optimizer step. Dim 64, batch 32, 2 classes.", "",
              "- **embedding**: ids -> EmbeddingBag(V, 64, sum) -> tanh -> Linear(64, 2). tapegrad and PyTorch use "
              "sparse gradients. Adam: tapegrad's one Adam (lazy on the embedding rows); PyTorch SparseAdam for the "
              "embedding + Adam for the head; libtorch has no SparseAdam, so it uses a dense [V, 64] gradient and dense "
              "Adam (its losses differ from the lazy ones by design).",
              "- **linear**: ids -> dense multi-hot rows [32, V] -> Linear(V, 64, no bias) -> tanh -> Linear(64, 2); "
              "dense gradients; one SGD or Adam.",
              "- SGD lr 0.1, Adam lr 0.01 (bow_classifier's defaults). All systems start from the same weights "
              "(a formula of each element's position) and read the same batches from one ids file written by "
              "`export_ids`, so their losses must agree (table \"Same work\").",
              "- Timing: 8 warm-up steps, then 5 timed runs of K steps (K set from the warm-up speed, about 0.3 s a "
              "run); ms/step is the median run, in CPU time of the process (all its threads): the machine is shared, "
              "and CPU time leaves out the waits for a core that inflate wall time. Wall times are in the phase table "
              "and in RESULTS.json. Cells that take about a second a step (linear at V = 1M, libtorch's dense Adam at "
              "V = 1M) warm up 2 steps and time 3 runs of 1 step.",
              "- Peak RSS is the process's `ru_maxrss` (one process per cell), so it includes the interpreter or "
              "libraries each system loads (PyTorch's and libtorch's are large) and the corpus.", "",
              "Corpora (tokens per batch are the same for every synthetic V):", ""]
    ch = ["corpus", "V", "documents", "ids per document", "distinct rows per batch", "made by"]
    cr = [[c["name"], f"{c['vocab']:,}", c["docs"], f"{c['ids_per_doc']:.1f}", f"{c['rows_per_batch']:.0f}",
           f"`export_ids {c['source']}`"] for c in corpora]
    lines += [render(ch, cr), "", "## Results (ms per step, lower is better)", "", render(head, rows), "",
              "Ratios are tapegrad's time over the peer's: below 1 means tapegrad is faster. "
              "V = 100,000 is the main corpus; the other synthetic rows are the vocabulary scaling.", "",
              "## Targets", ""]
    th = ["target", "measured", "goal", "met"]
    tr = [[d, m, goal, "—" if ok is None else ("yes" if ok else "**no**")] for d, m, goal, ok in t]
    lines += [render(th, tr), "", "## Same work", "",
              "Largest difference of the warm-up losses (same weights, same batches). SGD and linear + Adam must agree "
              "to float rounding; embedding + Adam differs slightly from SparseAdam (eps is applied after the bias "
              "correction, see optim/adam.hpp) and a lot from libtorch's dense Adam.", ""]
    lh, lr_ = loss_check(merged)
    lines += [render(lh, lr_), "", "## Where the time goes (ms per step)", ""]
    ph, pr = phases_table(merged)
    lines += ["Wall time, averaged over the timed steps; zero_grad is counted with backward.", "",
              render(ph, pr), ""]
    lines += ["## Micro-benchmarks (tapegrad, Google Benchmark, median of 3)", "",
              "Inputs shaped like the step's: 32 documents of 160 distinct Zipf ids, dim 64; the argument is V. "
              "ForwardBackward minus Forward is the backward pass. (Debian's libbenchmark is a debug build; "
              "that only affects the harness around the timed loop.)", ""]
    if micro:
        mh = ["benchmark", "CPU time (us)", "wall time (us)", "note"]
        mr = [[m["name"], f"{m['cpu_us']:.1f}", f"{m['us']:.1f}", m["label"]] for m in micro]
        lines += [render(mh, mr), ""]
    else:
        lines += [f"Not run: {micro_note}", ""]
    failed = [r for r in results if "failed" in r]
    if failed:
        lines += ["## Failed runs", ""] + [f"- {r['corpus']} {r['model']} {r['optim']} {r['system']}: "
                                            f"`{r['failed'][-200:]}`" for r in failed] + [""]
    lines += ["## Commands", "", "Each cell's command, for rerunning one by hand "
              "(with OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1):", "", "```"]
    lines += [r["command"] for r in merged.values()] + ["```", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(dict(machine=mach, corpora=corpora, results=results, micro=micro), f, indent=1)
    return head, rows, t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="meson build directory configured with -Dbench=true")
    p.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--data", default=None, help="where the ids files go (default: BUILD/bench-data)")
    p.add_argument("--tsv", default=None, help="also run on this label<TAB>text corpus (e.g. SpamAssassin)")
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter that has torch")
    p.add_argument("--rounds", type=int, default=1, help="runs of each cell (the median is kept)")
    p.add_argument("--quick", action="store_true", help="fewer steps, for trying things out")
    p.add_argument("--no-micro", action="store_true")
    p.add_argument("--timeout", type=int, default=300, help="seconds per process")
    p.add_argument("--out", default=None, help="default: SOURCE/bench/RESULTS.md")
    p.add_argument("--command", default="bench/run.py", help="the command to record in RESULTS.md")
    args = p.parse_args()
    args.data = args.data or os.path.join(args.build, "bench-data")
    args.out = args.out or os.path.join(args.source, "bench", "RESULTS.md")
    start = time.monotonic()

    mach = machine(args)
    peers = available_peers(args)
    for s, why in peers.items():
        if why:
            log(f"bench: skipping {s}: {why}")
    corpora = make_corpora(args)
    results = run_steps(args, corpora, peers)
    merged = merge_rounds(results)
    micro, micro_note = (None, "--no-micro") if args.no_micro else run_micro(args)
    if micro_note:
        log(f"bench: micro-benchmarks skipped: {micro_note}")
    mach["load average"] += " (start) / " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + " (end)"
    head, rows, t = write_results(args, corpora, merged, results, peers, micro, micro_note, mach,
                                  time.monotonic() - start)

    print(render(head, rows))
    print()
    for desc, measured, goal, ok in t:
        print(f"{'MET ' if ok else 'MISS' if ok is not None else '----'}  {desc}: {measured} (goal {goal})")
    print(f"\nwrote {args.out} ({(time.monotonic() - start) / 60:.1f} min)")


if __name__ == "__main__":
    main()
