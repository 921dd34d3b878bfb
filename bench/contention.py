"""tapejit and JAX on a busy machine: quiet, then beside one and two CPU-bound processes.

Default configuration for both, never pinned (all cores, each library's default threads:
tapejit's budget of threads.py, numba's threading layer, XLA's pool). Per condition the script starts that many
`while True: pass` processes (and stops them after), then times the workloads in interleaved
rounds: each round gives every (workload, library) pair a turn of TURN_S of single calls, each
call timed, after peers.py's SETTLE_S pause. Per condition and workload the table prints the
median and 90th percentile of the single calls, tapejit's median against JAX's, against its
own quiet median, and its p90 / median. Workloads (float64, defined in peers.py and vmap.py):

  mlp             grad of softmax cross-entropy of a 64-256-256-10 tanh MLP, 1,797 samples
  per_example     vmap(grad) of a 16-32-4 tanh MLP's squared error, batch 1,024
  lennard_jones   grad of an all-pairs Lennard-Jones energy, 1,000 atoms

Goals, beside one CPU-bound process: tapejit's median <= 1.0x JAX's and <= 2.5x its own quiet
median, its p90 <= 3x its median.

    .venv/bin/python bench/contention.py                  # about 2 min on 2 cores
    .venv/bin/python bench/contention.py --quick          # small sizes, 2 rounds
"""
from __future__ import annotations

import os

os.environ["TAPEJIT_BENCH_CPUS"] = "all"   # read by the harness on import: never pinned

import _harness as H  # noqa: E402  (first of the bench modules: reads the setting above)

import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import peers  # noqa: E402
import vmap as bench_vmap  # noqa: E402

CONDITIONS = (("quiet", 0), ("beside 1 CPU-bound", 1), ("beside 2 CPU-bound", 2))
GOAL_CONDITION = "beside 1 CPU-bound"
GOALS = {"tapejit / JAX": 1.0, "tapejit busy / quiet": 2.5, "tapejit p90 / median": 3.0}
TURN_S = 0.25                     # each (workload, library) turn of a round, seconds of calls
HOG = "while True: pass"


def peers_pair(name: str, quick: bool) -> tuple[Callable, Callable | None]:
    """tapejit's and JAX's gradient of a peers.py workload, each checked (JAX's: None where it
    is not installed)."""
    w = peers.workloads(quick)[name]()
    tapejit = peers.build_tapejit(w)[0]
    got = tapejit()
    H.check_close(f"{name}: tapejit vs {w.hand_label}", list(got), list(w.hand()),
                  rtol=w.tapejit_rtol, atol=1e-12)
    if not H.have("jax"):
        return tapejit, None
    jax = peers.build_jax(w)[0]
    H.check_close(f"{name}: JAX vs tapejit", jax(), list(got), rtol=1e-6, atol=1e-12)
    return tapejit, jax


def per_example_pair(quick: bool) -> tuple[Callable, Callable | None]:
    """tapejit's and JAX's per-example gradients (vmap.py), each checked."""
    import tapejit as tj
    params, xs, ys, want = bench_vmap.per_example_data(bench_vmap.QUICK_BATCH if quick
                                                        else bench_vmap.BATCH)
    g = tj.vmap(tj.grad(bench_vmap.loss), in_axes=(None, 0, 0), backend="numba")
    H.check_close("per_example: tapejit vs loop", list(g(params, xs, ys)), want, rtol=1e-9,
                  atol=1e-12)
    return (lambda: g(params, xs, ys)), (bench_vmap.jax_per_example(params, xs, ys, want)
                                         if H.have("jax") else None)


def workloads(quick: bool) -> dict[str, dict[str, Callable]]:
    pairs = {"mlp": peers_pair("mlp", quick), "per_example": per_example_pair(quick),
             "lennard_jones": peers_pair("lennard_jones", quick)}
    return {name: {"tapejit": t, **({"JAX": j} if j else {})} for name, (t, j) in pairs.items()}


def rounds(fns: dict[str, dict[str, Callable]], count: int, turn_s: float
           ) -> dict[tuple[str, str], list[float]]:
    """Seconds of each single call, per (workload, library), over `count` interleaved rounds."""
    calls: dict[tuple[str, str], list[float]] = {}
    for _ in range(count):
        for name, libraries in fns.items():
            for library, fn in libraries.items():
                time.sleep(peers.SETTLE_S)
                fn()
                seconds, end = calls.setdefault((name, library), []), time.perf_counter() + turn_s
                while True:
                    t0 = time.perf_counter()
                    fn()
                    seconds.append(time.perf_counter() - t0)
                    if t0 + seconds[-1] >= end:
                        break
    return calls


def beside(hogs: int, measure: Callable[[], Any]) -> Any:
    """`measure()` while `hogs` CPU-bound processes run (stopped after, whatever happens)."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    try:
        time.sleep(0.3 if hogs else 0.0)       # the scheduler has seen them
        return measure()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def p90(seconds: list[float]) -> float:
    return float(np.percentile(seconds, 90))


def median(calls: dict[tuple[str, str], list[float]] | None, key: tuple[str, str]
           ) -> float | None:
    """The median of the calls of `key` (workload, library); None where it did not run."""
    return statistics.median(calls[key]) if calls and key in calls else None


def ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}x" if num is not None and den else "-"


def table(results: dict[str, dict[tuple[str, str], list[float]]]) -> list[list[str]]:
    """One row per condition and workload (see the module docstring)."""
    rows = []
    for condition, calls in results.items():
        for name in dict.fromkeys(n for n, _ in calls):
            t = calls[(name, "tapejit")]
            med, jax = statistics.median(t), median(calls, (name, "JAX"))
            quiet = median(results.get("quiet"), (name, "tapejit"))
            rows.append([condition, name, H.fmt_time(med), H.fmt_time(p90(t)),
                         H.fmt_time(jax) if jax else "not installed", ratio(med, jax),
                         ratio(med, quiet), ratio(p90(t), med), str(len(t))])
    return rows


def print_table(rows: list[list[str]]) -> None:
    heads = ["condition", "workload", "tapejit median", "tapejit p90", "JAX median",
             "tapejit / JAX", "busy / quiet", "p90 / median", "calls"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    print()
    for line in [heads, ["-" * w for w in widths]] + rows:
        print("  " + "  ".join(c.rjust(w) if i > 1 else c.ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths))).rstrip())
    print()


def goal_lines(results: dict[str, dict[tuple[str, str], list[float]]]) -> None:
    calls = results.get(GOAL_CONDITION)
    for name in dict.fromkeys(n for n, _ in calls or {}):
        t = calls[(name, "tapejit")]
        med = statistics.median(t)
        values = {"tapejit / JAX": (med, median(calls, (name, "JAX")), "JAX median"),
                  "tapejit busy / quiet": (med, median(results.get("quiet"), (name, "tapejit")),
                                           "tapejit quiet median"),
                  "tapejit p90 / median": (p90(t), med, "tapejit median")}
        for what, (num, den, reference) in values.items():
            H.ratio_line(f"{name} {GOAL_CONDITION}: {what}", num, den, goal=GOALS[what],
                         record={"workload": f"contention {name}, {GOAL_CONDITION}: {what}",
                                 "row": "tapejit", "reference": reference})


def main() -> None:
    parser = H.make_parser(__doc__, repeats=5)
    parser.add_argument("--hogs", default="0,1,2",
                        help="the conditions: how many CPU-bound processes beside (default 0,1,2)")
    args = H.parse_args(parser)
    wanted = {int(n) for n in args.hogs.split(",")}
    H.print_header("bench/contention.py: tapejit and JAX beside CPU-bound processes", args,
                   rows="tapejit [numba] (default threads), JAX jit (default threads)")
    fns = workloads(args.quick)
    for libraries in fns.values():              # warm: compiled, pools started
        for fn in libraries.values():
            for _ in range(H.WARMUP + 1):
                fn()
    turn = TURN_S / 10 if args.quick else TURN_S
    results = {condition: beside(hogs, lambda: rounds(fns, args.repeats, turn))
               for condition, hogs in CONDITIONS if hogs in wanted}
    print_table(table(results))
    goal_lines(results)


if __name__ == "__main__":
    main()
