"""Run every compiler-issue benchmark in sequence and write one combined table, bench/RESULTS.md.

Runs peers.py in both configurations (default threading, then one thread: each in a child
process of its own, see peers.py), then elementwise.py, dispatch.py, mlp.py, lennard_jones.py,
first_call.py and vmap.py (full sizes, `--repeats 5` by default), one after the other, each in
its own process pinned to one CPU (the harness's sched_setaffinity and one-thread settings;
this process pins itself and its children inherit the pin; TAPEJIT_BENCH_CPUS=all runs them
unpinned): their goals compare tapejit with single-threaded hand-written loops, so their table
is a one-thread table (compile.py, issue 34's first compiled calls against JAX's, runs between
lennard_jones.py and first_call.py and unpins itself as unrolled.py does). Then unrolled.py
(issue 20: re-rolled loops, compile time and memory), which unpins itself (default threading;
its table rows say so) unless TAPEJIT_BENCH_CPUS is set, and dask_scaling.py (issue 23: local
Dask clusters against one process) and contention.py (issue 33: tapejit and JAX beside
CPU-bound processes), which always unpin themselves (they measure every core); last, where
$AUTOGRAD_EXAMPLES names HIPS autograd's examples folder, autograd_examples.py (issue 35: the
29 published examples under autograd and under tapejit, default threading; its table gets a
section).
Every script gets a
fresh empty TAPEJIT_CACHE_DIR (so every "tapejit [numba]" first call is a real compile; pass
--keep-cache to use the environment's cache instead). It benchmarks the *committed* src/ at git
HEAD (exported with `git archive` into a temp dir, first on PYTHONPATH), so edits in progress
in the working tree do not leak into the numbers; --working-tree benchmarks src/ as it is.

RESULTS.md gets, after the date, the machine (CPU model, nproc, load average) and the versions:
peers.py's default-threading table first, with each row's speed-up from one thread to all
cores, its one-thread table second and its goal lines; then the compiler goals (one thread),
built from the numbers behind each script's `ratio ...` lines (a JSON-lines file,
$TAPEJIT_BENCH_RESULTS): for each workload the tapejit [numba] time, the tapejit [interpret]
time, the reference and its time, the ratio, the goal and whether it is met; then every
script's full output (in collapsed sections).

    .venv/bin/python bench/run_all.py                      # full sizes, many minutes
    .venv/bin/python bench/run_all.py --quick --out /tmp/RESULTS.md    # a fast dry run
"""
from __future__ import annotations

import _harness as H  # first: pins the process (and the pinned scripts it runs) to one CPU

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ["peers.py", "elementwise.py", "dispatch.py", "mlp.py", "lennard_jones.py",
           "compile.py", "first_call.py", "vmap.py", "unrolled.py", "dask_scaling.py",
           "contention.py", "autograd_examples.py"]
EXAMPLES_ENV = "AUTOGRAD_EXAMPLES"     # autograd's examples folder (bench/README.md)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nproc() -> str:
    """The CPUs this run may use (before the harness pinned this process to one of them)."""
    if os.environ.get(H.ALLOWED_ENV):
        return str(len(os.environ[H.ALLOWED_ENV].split(",")))
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return str(os.cpu_count())


def loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def versions(commit: str | None) -> str:
    import llvmlite
    import numba
    import numpy as np

    import tapejit as tj
    if commit is not None:
        where = f"src/ of git commit {commit[:10]} (committed code only)"
    else:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../src"], cwd=HERE,
                               capture_output=True, text=True).stdout.strip()
        where = f"the working tree at git {head}" + (" with uncommitted src/ changes" if dirty
                                                     else "")
    return (f"tapejit {tj.__version__} from {where}; python {platform.python_version()}, "
            f"numpy {np.__version__}, numba {numba.__version__}, llvmlite {llvmlite.__version__}")


def fmt(seconds: float | None) -> str:
    return H.fmt_time(seconds) if seconds is not None else "-"


def table(entries: list[dict]) -> list[str]:
    lines = ["| workload | tapejit [numba] | tapejit [interpret] | reference | reference time "
             "| ratio (numba / reference) | goal | met? | numba first calls |",
             "|---|---:|---:|---|---:|---:|---|---|---|"]
    for e in entries:
        ratio = f"{e['ratio']:.2f}x" if e.get("ratio") is not None else "n/a"
        goal = (f"{'<=' if e.get('lower_is_better', True) else '>='} {e['goal']:.2f}x"
                if e.get("goal") is not None else "-")
        met = {True: "met", False: "**not met**", None: "-"}[e.get("met")]
        lines.append(f"| {e['workload']} | {fmt(e.get('seconds'))} | "
                     f"{fmt(e.get('interpret_seconds'))} | {e.get('reference', '')} | "
                     f"{fmt(e.get('ref_seconds'))} | {ratio} | {goal} | {met} | "
                     f"{e.get('first_call', '')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="passed to every script (5)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--keep-cache", action="store_true",
                        help="use the environment's TAPEJIT_CACHE_DIR, not a fresh empty one")
    parser.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"),
                        help="where to write the table (default bench/RESULTS.md)")
    parser.add_argument("--working-tree", action="store_true",
                        help="benchmark src/ as it is in the working tree, not git HEAD's")
    parser.add_argument("--scripts", default=",".join(SCRIPTS),
                        help="comma-separated subset of " + ",".join(SCRIPTS))
    args = parser.parse_args()

    started = datetime.datetime.now().astimezone()
    load_before = loadavg()
    work = tempfile.mkdtemp(prefix="tapejit-run-all-")
    results = os.path.join(work, "results.jsonl")
    peers_md, examples_md = os.path.join(work, "peers.md"), os.path.join(work, "examples.md")
    env = dict(os.environ, **{H.RESULTS_ENV: results})
    commit = None
    if not args.working_tree:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, check=True,
                                capture_output=True, text=True).stdout.strip()
        archive = subprocess.run(["git", "archive", commit, "src"], cwd=os.path.dirname(HERE),
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", work], input=archive, check=True)
        src = os.path.join(work, "src")
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        sys.path.insert(0, src)          # versions() imports tapejit from there too
        print(f"benchmarking src/ at git HEAD {commit[:10]} (exported to {src})", flush=True)
    if not args.keep_cache:
        env["TAPEJIT_CACHE_DIR"] = os.path.join(work, "cache")
        env.pop("NUMBA_CACHE_DIR", None)
    outputs: list[tuple[str, str, float, int]] = []
    try:
        for script in [s.strip() for s in args.scripts.split(",") if s.strip()]:
            cmd = [sys.executable, os.path.join(HERE, script), "--repeats", str(args.repeats)]
            if args.quick:
                cmd.append("--quick")
            if script == "peers.py":
                cmd += ["--markdown", peers_md] + ["--keep-cache"] * args.keep_cache
            if script == "autograd_examples.py":
                if not os.environ.get(EXAMPLES_ENV):
                    print(f"### {script}: not run (set {EXAMPLES_ENV})", flush=True)
                    continue
                cmd = [c for c in cmd if c != "--quick"] + ["--markdown", examples_md]
            print(f"### {' '.join(cmd[1:])}", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, cwd=HERE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            wall = time.perf_counter() - t0
            print(proc.stdout, flush=True)
            print(f"### {script}: exit {proc.returncode}, {wall:.1f} s wall", flush=True)
            outputs.append((script, proc.stdout, wall, proc.returncode))
        version_line = versions(commit)
        entries = []
        if os.path.exists(results):
            with open(results) as fh:
                entries = [json.loads(line) for line in fh if line.strip()]
        peers = []
        if os.path.exists(peers_md):
            with open(peers_md) as fh:
                peers = fh.read().splitlines()
        examples = []
        if os.path.exists(examples_md):
            with open(examples_md) as fh:
                examples = fh.read().splitlines()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    finished = datetime.datetime.now().astimezone()
    md = [
        "# Benchmark results",
        "",
        "Written by `bench/run_all.py` (do not edit by hand; rerun it). "
        "Times are medians of repeated runs after warm-up calls; the tapejit [numba] row's first "
        "two calls (by default the first runs on the interpreter and the second compiles; "
        "programs with loops or over 128 MiB of interpreter arrays compile on the first) are "
        "made before timing and shown in the last column. Ratios are "
        "tapejit [numba] / the reference; the goals are those of the compiler issue "
        "(see [README.md](README.md)).",
        "",
        "Two configurations. **Default threading** (the first table): no CPU pin and no thread "
        "settings from the bench, every library at its defaults, as users run it. **One thread** "
        "(the second): the process pinned to one CPU, BLAS, XLA and torch on one thread, "
        "tapejit's thread budget 1. `peers.py` measures both, each in a process of its own, "
        "and the first table shows each row's speed-up from one thread to all cores; the "
        "compiler goals and the other scripts ran pinned only (their references are "
        "single-threaded loops): one thread, but for `compile.py` (issue 34's first "
        "compiled calls), `unrolled.py` (issue 20's re-rolled "
        "loops), `dask_scaling.py` (issue 23's local clusters), `contention.py` (issue "
        "33's busy machine) and `autograd_examples.py` (issue 35's examples), which run with "
        "default threading, as their rows say.",
        "",
        f"- date: {started:%Y-%m-%d %H:%M %Z} (took {(finished - started).total_seconds():.0f} s)",
        f"- machine: {nproc()} cpus (nproc), {cpu_model()}; load average {load_before} before, "
        f"{loadavg()} after (a shared machine: other jobs run too)",
        f"- versions: {version_line}",
        f"- run: {'--quick, ' if args.quick else 'full sizes, '}--repeats {args.repeats}, "
        f"peers.py in both configurations, the other scripts: {H.PIN_NOTE.split(':')[0]}; "
        + ("the environment's TAPEJIT_CACHE_DIR" if args.keep_cache
           else "a fresh empty TAPEJIT_CACHE_DIR (first calls compile)"),
        "",
    ]
    if peers:
        md += ["## Peers (`peers.py`): default threading, then one thread", "", *peers, ""]
    md += ["## Compiler goals: one thread (pinned to one CPU; compile.py's, unrolled.py's, "
           "dask_scaling.py's and contention.py's: default threading)",
           "", *table(entries), ""]
    if examples:
        md += ["## HIPS autograd's examples (`autograd_examples.py`, issue 35): default threading", "",
               *examples, ""]
    failed = [s for s, _, _, rc in outputs if rc != 0]
    if failed:
        md += [f"**Failed scripts (non-zero exit): {', '.join(failed)}**", ""]
    md += ["## Full output of each script", ""]
    for script, out, wall, rc in outputs:
        md += [f"<details><summary>{script} (exit {rc}, {wall:.0f} s)</summary>", "", "```",
               out.rstrip(), "```", "", "</details>", ""]
    with open(args.out, "w") as fh:
        fh.write("\n".join(md))
    print("\n".join(peers + table(entries)))
    print(f"\nwrote {args.out}")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
