"""Trace overhead: microseconds per recorded op, against the 20 us/op goal.

A ~1,000-op program (a chain of elementwise ops, reductions, broadcasts and matmuls over small
arrays, so that numpy's own work is negligible and the time is tapejit's bookkeeping) is
  - traced:                 `tj.make_tape(f)(*args)`  (trace + dead-code elimination)
  - traced + differentiated: the first call of a fresh `tj.value_and_grad(f)` (trace, reverse
    transform, and one run of the joint tape on the interpreter); the steady-state call (the
    cached tape only) is shown too, and subtracted, to isolate the one-off cost.
Each time is the median of --repeats runs, divided by the number of recorded forward eqns.

    OPENBLAS_NUM_THREADS=1 python bench/trace_overhead.py [--repeats 9] [--blocks 40]
    OPENBLAS_NUM_THREADS=1 python bench/trace_overhead.py --profile    # cProfile the tracer
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from typing import Any, Callable

import numpy as np

import tapejit as tj

GOAL_US_PER_OP = 20.0


def program(blocks: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], Any]:
    """A loss whose trace has about 34 eqns per block."""
    def f(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
        h = x
        total = 0.0
        for i in range(blocks):
            z = h @ w + b                            # matmul, broadcast add
            a = np.tanh(z) * 0.5 + np.sin(z) ** 2    # elementwise mix with constants
            a = np.where(a > 0, a, 0.1 * a)          # comparison, select
            m = a.mean(axis=1, keepdims=True)        # reduction
            s = np.sqrt(((a - m) ** 2).sum(axis=1, keepdims=True) + 1e-5)
            h = (a - m) / s + np.exp(-np.abs(h)) * 0.01
            total = total + np.max(h) * 1e-3 + np.sum(h[:, 0]) * (1.0 / (i + 1))
        return total + np.sum(h * h)
    return f


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description="tapejit trace overhead per recorded op")
    parser.add_argument("--blocks", type=int, default=30, help="program size (~34 ops each)")
    parser.add_argument("--repeats", type=int, default=9, help="median of this many runs")
    parser.add_argument("--profile", action="store_true", help="cProfile one trace+grad")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(8, 16)), rng.normal(size=(16, 16)) * 0.3, rng.normal(size=16)
    f = program(args.blocks)
    n_ops = len(tj.make_tape(f)(x, w, b).eqns)

    trace_s = median_time(lambda: tj.make_tape(f)(x, w, b), args.repeats)
    first_s = median_time(lambda: tj.value_and_grad(f, argnums=(0, 1, 2))(x, w, b),
                          args.repeats)
    cached = tj.value_and_grad(f, argnums=(0, 1, 2))
    cached(x, w, b)
    run_s = median_time(lambda: cached(x, w, b), args.repeats)

    rows = [("trace (make_tape)", trace_s),
            ("trace + differentiate + run (value_and_grad, 1st call)", first_s),
            ("  of which run of the cached joint tape (2nd call)", run_s),
            ("trace + differentiate (1st call - 2nd call)", first_s - run_s)]
    print(f"program: {n_ops} recorded forward eqns; median of {args.repeats} repeats; "
          f"goal {GOAL_US_PER_OP:.0f} us/op")
    print(f"{'measurement':56s} {'total ms':>9s} {'us/op':>8s} {'x goal':>7s}")
    for label, seconds in rows:
        us = 1e6 * seconds / n_ops
        print(f"{label:56s} {1e3 * seconds:9.2f} {us:8.2f} {us / GOAL_US_PER_OP:7.2f}")

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(3):
            tj.value_and_grad(f, argnums=(0, 1, 2))(x, w, b)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
