"""Parallel loops: where numba.prange pays, and the threshold TAPEJIT_PARALLEL_MIN_SIZE.

For each size n, the gradient of sum(sin(x)*exp(-x*x) + tanh(x)*x) (bench/elementwise.py's
workload) and the Lennard-Jones gradient (bench/lennard_jones.py, n atoms: an n x n nest) run
compiled twice: every loop serial (TAPEJIT_PARALLEL_MIN_SIZE=0) and every loop parallel (=1),
on all of numba's threads. The ratio parallel / serial per size shows where the threads pay
(< 1.0x), and so what TAPEJIT_PARALLEL_MIN_SIZE to set on a machine (default 131072; the
other benches set 0: single-threaded rows).

    .venv/bin/python bench/parallel.py [--repeats 7] [--quick]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import os

import numba
import numpy as np

import tapejit as tj
from tapejit import config
from elementwise import f as elementwise
from lennard_jones import energy, positions

SIZES = (2**12, 2**15, 2**17, 2**20, 2**23)
SIDES = (4, 6, 10)       # Lennard-Jones: side^3 atoms


def compiled(fn, x: np.ndarray, min_size: int):
    """`tj.grad(fn)` on numba, built for `x` with its loops serial (min_size 0) or all parallel
    (min_size 1): the setting is read when the program is generated, on the first call."""
    os.environ["TAPEJIT_PARALLEL_MIN_SIZE"] = str(min_size)
    config.reload()
    grad = tj.grad(fn, backend="numba")
    grad(x)
    return grad


def main() -> None:
    args = H.parse_args(H.make_parser(__doc__))
    sizes, sides = (SIZES[:2], SIDES[:1]) if args.quick else (SIZES, SIDES)
    H.print_header("bench/parallel.py: numba.prange against serial loops", args,
                   extra=f"{numba.get_num_threads()} threads")
    cases = [(f"elementwise n={n}", elementwise, np.linspace(-3.0, 3.0, n), n) for n in sizes]
    cases += [(f"Lennard-Jones {s ** 3} atoms", energy, positions(s), s ** 6) for s in sides]
    results = []
    for label, fn, x, elements in cases:
        serial, parallel = compiled(fn, x, 0), compiled(fn, x, 1)
        H.check_close(label, parallel(x), serial(x), rtol=1e-9, atol=1e-12)
        t_serial = H.measure(lambda: serial(x), args.repeats, min_run_s=0.02)
        t_parallel = H.measure(lambda: parallel(x), args.repeats, min_run_s=0.02)
        results.append((label, elements, t_serial.median, t_parallel.median))
    for label, elements, s, p in results:
        print(f"  {label:<40} serial {H.fmt_time(s):>10}  parallel {H.fmt_time(p):>10}  "
              f"parallel / serial = {p / s:.2f}x")
    paying = [e for _, e, s, p in results if p < 0.9 * s]
    print(f"\nsmallest nest where parallel loops paid (>10% faster): "
          f"{min(paying) if paying else 'none'} elements "
          f"(TAPEJIT_PARALLEL_MIN_SIZE: default 131072 elements; 0 keeps loops serial)")

if __name__ == "__main__":
    main()
