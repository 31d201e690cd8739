#!/usr/bin/env python3
"""Dense ops against PyTorch: bench/ops (tapegrad) and bench/ops_pytorch.py side by side.

    bench/ops.py [--build build-bench] [--rounds 3] [--only TEXT,TEXT] [--quick] [--sum-loss]
                 [--json FILE] [--write]

Runs every case of bench/ops.cpp (each differentiable op of core/ops.hpp, and nn's
Embedding and EmbeddingBag, forward + backward at [64, 64], [1024, 300], [4096, 1024]
and [32, 128, 300]) in tapegrad and in PyTorch, each side in its own process on one
thread, in interleaved rounds: round 1 tapegrad then PyTorch, round 2 PyTorch then
tapegrad, and so on. A case's time is the median over rounds of each run's median
(process CPU ms per iteration). Then:

  summary      per size: the geometric mean of tapegrad / PyTorch over the ops of
               core/ops.hpp, how many are at or under PyTorch's time, the worst ones;
  elementwise  add, mul, broadcast add, relu, tanh and exp at [4096, 1024]: the
               bytes each must move forward + backward over the bandwidth of a
               STREAM-like triad on a working set as large (bench/floor, best of a
               run before and one after the rounds), tapegrad's and PyTorch's time
               over that floor, and tapegrad on 1 and on 2 threads
               (tg::set_num_threads), alternating in each round, in wall time (the
               fastest sample of each run: CPU time adds up the threads);
  per op       every case's ratio, and per size the times and tapegrad's minor page
               faults per iteration (getrusage around the timed loop; PyTorch's too).

Needs BUILD configured with -Dbench=true (it runs `ninja -C BUILD bench/ops bench/floor`
first) and PyTorch under --python (Debian's /usr/bin/python3). --write puts the tables
into docs/benchmarks.md between <!-- ops:begin --> and <!-- ops:end -->.
"""
import argparse
import datetime
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time

from run import bandwidth_for, best_floor, render, sh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ["64x64", "1024x300", "4096x1024", "32x128x300"]
QUICK_SIZES = ["64x64", "1024x300"]
HEADS = {"64x64": "[64, 64]", "1024x300": "[1024, 300]", "4096x1024": "[4096, 1024]", "32x128x300": "[32, 128, 300]"}
# nn's modules are timed and shown, but the summary is over the ops of core/ops.hpp.
NN_OPS = {"embedding", "embedding_bag"}
# Copies here, views in PyTorch that move no data either way (the gradient reaching the
# leaf is a view of g): the summary also gives the geometric mean without them.
VIEW_OPS = {"reshape", "flatten"}
ENV_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
BEGIN, END = "<!-- ops:begin -->", "<!-- ops:end -->"
HEADING = "## Dense ops against PyTorch"

# The elementwise ops whose floor and thread speed-up are shown, at [4096, 1024] (N
# elements): the arrays of N floats each must stream through memory, forward +
# backward, and the arrays it touches (its working set). A leaf's gradient is a new
# array: it cannot be the seed g, which the caller keeps.
FLOOR_SIZE = "4096x1024"
FLOOR_OPS = {
    # op: (passes over N floats, arrays touched, what they are)
    "add": (6, 6, "read a, b, write y; read g, write a.grad, b.grad"),
    "mul": (8, 6, "read a, b, write y; read g, a, b, write a.grad, b.grad"),
    "add_row": (4, 4, "read a, write y; read g, write a.grad (row.grad, [1024], stays in cache)"),
    "relu": (5, 4, "read a, write y; read g, y, write a.grad"),
    "tanh": (5, 4, "read a, write y; read g, y, write a.grad"),
    "exp": (5, 4, "read a, write y; read g, y, write a.grad"),
}
FLOOR_MB = [16, 32, 64, 128, 256]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_cases(cmd, timeout):
    """The CASE lines of one run of a side, as {case: record}."""
    env = {k: v for k, v in os.environ.items() if k != "TAPEGRAD_NUM_THREADS"}
    env.update(ENV_ONE_THREAD)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SystemExit(f"ops.py: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-1500:]}")
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("CASE "):
            c = json.loads(line[5:])
            out[c["case"]] = c
            if "error" in c:
                log(f"  {c['case']}: {c['error']}")
    return out


def run_floor(args):
    cmd = [os.path.join(args.build, "bench", "floor"), "--sizes", ",".join(map(str, FLOOR_MB)),
           "--seconds", "0.2" if args.quick else "0.5"]
    log("floor: " + " ".join(cmd[1:]))
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **ENV_ONE_THREAD))
    if r.returncode != 0:
        raise SystemExit(f"ops.py: floor failed: {r.stderr.strip()[-400:]}")
    f = json.loads(r.stdout.strip().splitlines()[-1])
    f["command"] = " ".join(shlex.quote(x) for x in cmd)
    return f


def build(args):
    if not os.path.exists(os.path.join(args.build, "build.ninja")):
        raise SystemExit(f"ops.py: no build in {args.build}: meson setup {args.build} -Dbench=true --buildtype=release")
    r = subprocess.run(["ninja", "-C", args.build, "bench/ops", "bench/floor"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ops.py: building bench/ops failed:\n{r.stdout[-2000:]}{r.stderr[-1000:]}")


def machine(args):
    return {
        "cpu": sh("lscpu | sed -n 's/^Model name: *//p'") or "?",
        "cores": os.cpu_count(),
        "pytorch": sh(f"{shlex.quote(args.python)} -c 'import torch; print(torch.__version__)' 2>/dev/null") or "?",
        "openblas": sh("pkg-config --modversion openblas") or "?",
        "compiler": sh("c++ --version | head -1"),
        "load_start": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


# ------------------------------------------------------------------- rounds

def run_rounds(args, sizes, threads_only):
    """{side: [{case: record} per round]}; sides tapegrad, pytorch, and the thread runs."""
    ops = os.path.join(args.build, "bench", "ops")
    common = ["--target-ms", str(args.target_ms), "--min-samples", str(args.min_samples)]
    if args.only:
        common += ["--only", args.only]
    if args.sum_loss:
        common += ["--sum-loss"]
    cmds = {
        "tapegrad": [ops, "--sizes", ",".join(sizes)] + common,
        "pytorch": [args.python, os.path.join(ROOT, "bench", "ops_pytorch.py"), "--sizes", ",".join(sizes)] + common,
    }
    # Twice the samples: the thread table reads each run's fastest one.
    threaded = ["--cases", ",".join(f"{op}@{FLOOR_SIZE}" for op in threads_only), "--target-ms", str(args.target_ms),
                "--min-samples", str(2 * args.min_samples)]
    if threads_only:
        cmds["tapegrad 1 thread"] = [ops, "--threads", "1"] + threaded
        cmds[f"tapegrad {args.threads} threads"] = [ops, "--threads", str(args.threads)] + threaded
    results = {side: [] for side in cmds}
    for r in range(args.rounds):
        main = ["tapegrad", "pytorch"] if r % 2 == 0 else ["pytorch", "tapegrad"]
        extra = [s for s in cmds if s not in main]
        for side in main + (extra if r % 2 == 0 else extra[::-1]):
            start = time.monotonic()
            results[side].append(run_cases(cmds[side], args.timeout))
            log(f"round {r + 1}/{args.rounds}: {side}: {len(results[side][-1])} cases, "
                f"{time.monotonic() - start:.0f} s")
    return results, cmds


def merge(runs, key):
    """{case: median over rounds of record[key]}, and the cases that failed in any round."""
    values, errors = {}, {}
    for run in runs:
        for case, rec in run.items():
            if "error" in rec:
                errors[case] = rec["error"]
            else:
                values.setdefault(case, []).append(rec[key])
    return {c: statistics.median(v) for c, v in values.items() if c not in errors}, errors


# ------------------------------------------------------------------- tables

def fmt_ms(ms):
    return "—" if ms is None else f"{ms:.4f}" if ms < 0.1 else f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def fmt_ratio(x):
    return "—" if x is None else f"{x:.2f}x" if x < 10 else f"{x:.0f}x"


def ratios(tg, py, size):
    """{op: tapegrad / PyTorch} at one size, for the cases both sides timed."""
    out = {}
    for case in tg:
        op, s = case.split("@")
        if s == size and case in py and py[case] > 0:
            out[op] = tg[case] / py[case]
    return out


def summary_table(tg, py, sizes, worst_n=5):
    head = ["tapegrad / PyTorch, forward + backward"] + [HEADS[s] for s in sizes]
    geomean = lambda xs: fmt_ratio(math.exp(statistics.fmean(math.log(x) for x in xs))) if xs else "—"
    geo = ["geometric mean over the ops of core/ops.hpp"]
    geo_copies = ["the same without " + " and ".join(f"`{op}`" for op in sorted(VIEW_OPS)) + " (views in PyTorch)"]
    under = ["ops at or under PyTorch's time"]
    worst = [f"worst {worst_n}"]
    for s in sizes:
        r = {op: x for op, x in ratios(tg, py, s).items() if op not in NN_OPS}
        top = sorted(r.items(), key=lambda kv: -kv[1])[:worst_n]
        geo.append(geomean(list(r.values())))
        geo_copies.append(geomean([x for op, x in r.items() if op not in VIEW_OPS]))
        under.append(f"{sum(x <= 1.0 for x in r.values())} of {len(r)}" if r else "—")
        worst.append(", ".join(f"`{op}` {fmt_ratio(x)}" for op, x in top) if r else "—")
    return head, [geo, geo_copies, under, worst]


def per_op_table(tg, py, sizes, whats, order):
    head = ["op", "what it computes (at [1024, 300]; other sizes below)"] + [HEADS[s] for s in sizes]
    rows = []
    per_size = {s: ratios(tg, py, s) for s in sizes}
    for op in order:
        what = whats.get(f"{op}@1024x300") or next((whats[f"{op}@{s}"] for s in sizes if f"{op}@{s}" in whats), "")
        rows.append([f"`{op}`", what] + [fmt_ratio(per_size[s].get(op)) for s in sizes])
    return head, rows


def size_table(tg, py, tg_faults, py_faults, size, whats, order):
    head = ["op", "what it computes", "tapegrad ms", "PyTorch ms", "tapegrad / PyTorch", "page faults / iter, tapegrad",
            "PyTorch"]
    rows = []
    for op in order:
        case = f"{op}@{size}"
        if case not in whats:
            continue
        t, p = tg.get(case), py.get(case)
        rows.append([f"`{op}`", whats[case], fmt_ms(t), fmt_ms(p), fmt_ratio(t / p if t and p else None),
                     "—" if case not in tg_faults else f"{tg_faults[case]:.0f}",
                     "—" if case not in py_faults else f"{py_faults[case]:.0f}"])
    return head, rows


def elementwise_table(tg, py, floor, results, args):
    """The elementwise ops at [4096, 1024]: their floor (when measured) and tapegrad's thread speed-up."""
    n = 4096 * 1024
    t1, _ = merge(results.get("tapegrad 1 thread", []), "wall_ms_min")
    tn, _ = merge(results.get(f"tapegrad {args.threads} threads", []), "wall_ms_min")
    head = ["op", "must move (forward; backward)", "MB moved", "working set MB", "triad GB/s (at MB)", "floor ms",
            "tapegrad ms", "tapegrad / floor", "PyTorch ms", "PyTorch / floor",
            f"tapegrad wall ms, 1 / {args.threads} threads", f"{args.threads} threads speed-up"]
    rows, out = [], {}
    for op, (passes, arrays, what) in FLOOR_OPS.items():
        case = f"{op}@{FLOOR_SIZE}"
        if case not in tg and case not in t1:
            continue
        moved, working_set = passes * n * 4, arrays * n * 4
        t, p = tg.get(case), py.get(case)
        row = out[op] = dict(bytes=moved, working_set=working_set, tapegrad_ms=t, pytorch_ms=p)
        cells = [f"`{op}`", what, f"{moved / 2**20:.0f}", f"{working_set / 2**20:.0f}"]
        if floor:
            bw = bandwidth_for(floor, working_set)
            ms = moved / bw["bytes_per_s"] * 1e3
            row.update(bandwidth=bw["bytes_per_s"], floor_ms=ms)
            cells += [f"{bw['bytes_per_s'] / 1e9:.1f} ({bw['mb']:g})", f"{ms:.2f}", fmt_ms(t),
                      fmt_ratio(t / ms if t else None), fmt_ms(p), fmt_ratio(p / ms if p else None)]
        else:
            cells += ["—", "—", fmt_ms(t), "—", fmt_ms(p), "—"]
        if case in t1 and case in tn:
            row.update(wall_ms_1_thread=t1[case], wall_ms_threads=tn[case], speedup=t1[case] / tn[case])
            cells += [f"{fmt_ms(t1[case])} / {fmt_ms(tn[case])}", f"{t1[case] / tn[case]:.2f}x"]
        else:
            cells += ["—", "—"]
        rows.append(cells)
    return head, rows, out


# ------------------------------------------------------------------- report

def report(args, mach, sizes, merged, faults, whats, order, floor, results, elapsed):
    tg, py = merged["tapegrad"], merged["pytorch"]
    summary_head, summary_rows = summary_table(tg, py, sizes)
    lines = [f"`{args.command}` on {mach['cpu']} ({mach['cores']} cores, shared with other jobs; load average "
             f"{mach['load_start']} at the start, {mach['load_end']} at the end), "
             f"{datetime.date.today().isoformat()}, {elapsed / 60:.1f} minutes; PyTorch {mach['pytorch']}, "
             f"OpenBLAS {mach['openblas']}.", "",
             "Every differentiable op of `core/ops.hpp`, and nn's Embedding and EmbeddingBag, timed forward + "
             "backward on one thread (`tg::set_num_threads(1)`, `torch.set_num_threads(1)`, "
             "`OPENBLAS_NUM_THREADS=1`): an iteration clears the leaves' gradients (`zero_grad()`; "
             "`x.grad = None`), runs the op and " + ("`sum(y).backward()` (`--sum-loss`: the op followed by a "
                                                    "scalar loss, whose sum is timed too)" if args.sum_loss else
                                                    "`y.backward(g)` with a `g` made once") + ". The cases and what each "
             "computes are in `bench/ops.cpp` and `bench/ops_pytorch.py`; each case runs in a process of its own "
             "(a fork), so that it does not inherit the malloc state the cases before it left "
             "([bench/README.md](../bench/README.md#dense-ops-against-pytorch)). A run times each case in samples of "
             f"about 1 ms for about {args.target_ms:g} ms (at least {args.min_samples} samples) and keeps the median "
             "sample, in process CPU time; the tables hold the median of "
             f"{args.rounds} interleaved rounds (tapegrad then PyTorch, then PyTorch then tapegrad, ...). "
             "Ratios below 1 mean tapegrad is faster.", "",
             render(summary_head, summary_rows), "",
             "The summary leaves out nn's `embedding` and `embedding_bag` (both with sparse gradients, which "
             "tapegrad coalesces and PyTorch does not); they are in the tables below. `reshape` and `flatten` "
             "return copies here and views in PyTorch, whose backward hands the leaf a view of `g`: PyTorch "
             "moves no data at all, so their ratio is the cost of a copy over a few microseconds of Python.", ""]
    eh, er, _ = elementwise_table(tg, py, floor, results, args)
    load = max(float(mach["load_start"].split()[0]), float(mach["load_end"].split()[0]))
    busy = (f" **The load average ({load:.1f}) was above the {mach['cores']} cores**: a second thread mostly waited "
            "for a core, so this column says little about the code." if load > mach["cores"] else "")
    if er:
        lines += ["**The elementwise ops at [4096, 1024]** (4M floats, 16 MB an array). Their memory floor: the "
                  "bytes each must move forward + backward over the bandwidth of a STREAM-like triad "
                  "(`bench/floor`, best of a run before and one after the rounds; neither counts write-allocate "
                  "traffic) on the smallest measured working set at least as large as the arrays the op touches" +
                  (" (triad: " + ", ".join(f"{b['bytes_per_s'] / 1e9:.1f} GB/s at {b['mb']:g} MB"
                                           for b in floor["bandwidth"]) + ")" if floor else "") +
                  f". Threads: tapegrad on 1 and on {args.threads} threads (`bench/ops --threads N`), alternating "
                  "in each round; wall ms of each run's fastest sample (CPU time would add the threads up, and on "
                  "cores shared with other jobs the fastest sample is the one least disturbed), median over the "
                  "rounds." + busy, "", render(eh, er), ""]
    ph, pr = per_op_table(tg, py, sizes, whats, order)
    lines += ["**Every op**, tapegrad / PyTorch (at 3-d a binary op's `b` is [128, 1], in the `_row` forms [300]; "
              "sums, means and max along a dim reduce the middle dim at 3-d):", "", render(ph, pr), ""]
    for s in sizes:
        h, rows = size_table(tg, py, faults["tapegrad"], faults["pytorch"], s, whats, order)
        lines += ["<details>", f"<summary>{HEADS[s]}: CPU ms per iteration and minor page faults per iteration"
                  "</summary>", "", render(h, rows), "", "</details>", ""]
    errors = merged.get("errors", {})
    if errors:
        lines += ["Cases that failed: " + "; ".join(f"`{c}` ({side}): {e}" for (c, side), e in errors.items()), ""]
    return "\n".join(lines).rstrip() + "\n"


def write_doc(path, text):
    with open(path) as f:
        doc = f.read()
    block = f"{BEGIN}\n{text}{END}"
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
    with open(path, "w") as f:
        f.write(doc)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build-bench"), help="meson build configured with -Dbench=true")
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter that has torch")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; 1 with --quick)")
    p.add_argument("--only", default="", help="only the cases (op@size) that contain one of these, comma-separated")
    p.add_argument("--quick", action="store_true", help=f"sizes {', '.join(QUICK_SIZES)} only, shorter runs")
    p.add_argument("--threads", type=int, default=2, help="the thread count set against 1 (default 2)")
    p.add_argument("--sum-loss", action="store_true",
                   help="time sum(op(..)).backward() instead of op(..).backward(g): each op followed by a scalar loss")
    p.add_argument("--json", default=None, metavar="FILE", help="write every measurement to FILE")
    p.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md")
    p.add_argument("--command", default=None, help="the command to name in the report (default: this one)")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per process")
    args = p.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.target_ms, args.min_samples = (10, 3) if args.quick else (30, 5)
    args.command = args.command or "bench/ops.py" + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
    start = time.monotonic()

    build(args)
    mach = machine(args)
    sizes = QUICK_SIZES if args.quick else SIZES
    only = [t for t in args.only.split(",") if t]
    # The elementwise ops at [4096, 1024] that --only keeps: their thread runs, and
    # their floor when the main runs time that size.
    threads_only = [op for op in FLOOR_OPS if not only or any(t in f"{op}@{FLOOR_SIZE}" for t in only)]
    with_floor = bool(threads_only) and FLOOR_SIZE in sizes
    floor_before = run_floor(args) if with_floor else None
    results, cmds = run_rounds(args, sizes, threads_only)
    floor = best_floor(floor_before, run_floor(args)) if with_floor else None
    mach["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())

    merged, faults, errors = {}, {}, {}
    for side in ("tapegrad", "pytorch"):
        merged[side], err = merge(results[side], "cpu_ms")
        faults[side], _ = merge(results[side], "minflt_per_iter")
        errors.update({(c, side): e for c, e in err.items()})
    # The two sides must compute the same thing: at least, outputs of the same shape.
    for run_tg, run_py in zip(results["tapegrad"], results["pytorch"]):
        for case in run_tg.keys() & run_py.keys():
            if run_tg[case].get("out") != run_py[case].get("out"):
                errors[(case, "both")] = f"output shapes differ: {run_tg[case].get('out')} and {run_py[case].get('out')}"
                merged["tapegrad"].pop(case, None)
    merged["errors"] = errors
    first = results["tapegrad"][0]
    whats = {c: r["what"] for c, r in first.items() if "what" in r}
    order = list(dict.fromkeys(c.split("@")[0] for c in first))
    text = report(args, mach, sizes, merged, faults, whats, order, floor, results, time.monotonic() - start)
    print(text)

    for s in sizes:
        r = sorted(((op, x) for op, x in ratios(merged["tapegrad"], merged["pytorch"], s).items()), key=lambda kv: -kv[1])
        log(f"worst at {HEADS[s]}: " + ", ".join(f"{op} {fmt_ratio(x)}" for op, x in r[:10]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(command=args.command, machine=mach, commands=cmds, rounds=results, floor=floor,
                           elementwise=elementwise_table(merged["tapegrad"], merged["pytorch"], floor, results,
                                                         args)[2],
                           merged={k: v for k, v in merged.items() if k != "errors"},
                           errors={f"{c} ({s})": e for (c, s), e in errors.items()}, faults=faults), f, indent=1)
        log(f"wrote {args.json}")
    if args.write:
        path = os.path.join(ROOT, "docs", "benchmarks.md")
        write_doc(path, text)
        log(f"wrote {path}")
    log(f"ops.py: {(time.monotonic() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
