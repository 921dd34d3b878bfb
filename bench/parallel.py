"""Parallel loops: where numba.prange pays, the threshold TAPEJIT_PARALLEL_MIN_SIZE, and tapejit
against JAX and torch.compile with every core.

Not pinned: this script sets TAPEJIT_BENCH_CPUS=all before importing the harness, so the process
runs on every CPU it is allowed (the other benches pin theirs to one), and BLAS, XLA and
tapejit's parallel loops keep their defaults.

1. For each size n, the gradient of sum(sin(x)*exp(-x*x) + tanh(x)*x) (bench/elementwise.py's
   workload) and the Lennard-Jones gradient (bench/lennard_jones.py, n atoms: an n x n nest) run
   compiled twice: every loop serial (TAPEJIT_PARALLEL_MIN_SIZE=0) and every loop parallel (=1),
   on all of numba's threads. The ratio parallel / serial per size shows where the threads pay
   (< 1.0x), and so what TAPEJIT_PARALLEL_MIN_SIZE to set on a machine (default 131072).
2. Issue 6's threads goal: the elementwise gradient over 10^7 float64, then float32, "with the
   machine's threads, at most torch.compile's time and JAX's time in the same run". Rows:
   tapejit [numba] with the default settings (TAPEJIT_PARALLEL_MIN_SIZE 131072, numba's
   threads), tapejit with its loops serial (for scale), JAX jit(grad) and torch.compile
   (forward + backward, built by bench/elementwise.py's `_framework_calls`, then
   torch.set_num_threads(all cores)), each checked against the float64 derivative, then timed
   taking turns in every repeat. Ratio lines: tapejit / JAX and tapejit / torch.compile, goal
   <= 1.00x.

    .venv/bin/python bench/parallel.py [--repeats 7] [--quick] [--n 10000000] [--skip-sizes]
"""
from __future__ import annotations

import os

os.environ["TAPEJIT_BENCH_CPUS"] = "all"   # read by the harness on import: do not pin

import _harness as H  # noqa: E402  first: before numpy is imported

import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

import tapejit as tj  # noqa: E402
from tapejit import config  # noqa: E402
import elementwise as bench_ew  # noqa: E402
from elementwise import f as elementwise  # noqa: E402
from lennard_jones import energy, positions  # noqa: E402

SIZES = (2**12, 2**15, 2**17, 2**20, 2**23)
SIDES = (4, 6, 10)       # Lennard-Jones: side^3 atoms
GOAL_VS_PEERS = 1.0
TAPEJIT_DEFAULT = "tapejit [numba], parallel loops (defaults)"
TAPEJIT_SERIAL = "tapejit [numba], serial loops"


def compiled(fn, x: np.ndarray, min_size: int | None):
    """`tj.grad(fn)` on numba, built for `x` with its loops serial (min_size 0), all parallel
    (min_size 1) or as by default (None: TAPEJIT_PARALLEL_MIN_SIZE unset): the setting is read
    when the program is generated, on the first call."""
    if min_size is None:
        os.environ.pop("TAPEJIT_PARALLEL_MIN_SIZE", None)
    else:
        os.environ["TAPEJIT_PARALLEL_MIN_SIZE"] = str(min_size)
    config.reload()
    grad = tj.grad(fn, backend="numba")
    grad(x)
    return grad


def sizes_sweep(args) -> None:
    sizes, sides = (SIZES[:2], SIDES[:1]) if args.quick else (SIZES, SIDES)
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


def against_peers(dtype: type, n: int, args, threads: int) -> None:
    """Issue 6's threads row: tapejit (defaults), JAX jit(grad), torch.compile, all cores."""
    name = np.dtype(dtype).name
    x = np.random.default_rng(0).uniform(-3.0, 3.0, size=n).astype(dtype)
    exact = bench_ew.numba_grad(x.astype(np.float64))
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (2e-4, 2e-5)
    default = compiled(elementwise, x, None)
    serial = compiled(elementwise, x, 0)
    os.environ.pop("TAPEJIT_PARALLEL_MIN_SIZE", None)
    config.reload()
    calls = {TAPEJIT_DEFAULT: lambda: default(x), TAPEJIT_SERIAL: lambda: serial(x)}
    for label, call in bench_ew._framework_calls(x).items():
        calls[label] = call
    if H.have("torch"):
        import torch
        torch.set_num_threads(threads)   # _framework_calls set 1 (the single-core benches)
    for label, call in calls.items():
        got = call()
        if isinstance(got, tuple):       # torch.autograd.grad
            got = got[0].detach().numpy()
        H.check_close(f"{label} {name} vs float64 derivative", np.asarray(got), exact, rtol, atol)
    runs: dict = {label: [] for label in calls}
    for _ in range(H.WARMUP + args.repeats):   # taking turns: load swings hit every row alike
        for label, call in calls.items():
            t0 = time.perf_counter()
            call()
            runs[label].append(time.perf_counter() - t0)
    table = H.Table(f"gradient of sum(sin(x)*exp(-x*x) + tanh(x)*x), x: {n:,} {name}, all "
                    f"cores (rows taking turns)", ref=TAPEJIT_DEFAULT, ratio_name="x tapejit")
    goal = f"<= {GOAL_VS_PEERS:.2f}x JAX and torch.compile"
    for label, times in runs.items():
        table.add(label, H.Timing.of(times[H.WARMUP:]),
                  goal=goal if label == TAPEJIT_DEFAULT else "")
    for label in ("jax jit(grad)", "torch.compile (fwd+bwd)"):
        if label not in calls:
            table.add_missing(label, "not installed")
    table.print()
    mine = table.seconds(TAPEJIT_DEFAULT)
    for label, short in (("jax jit(grad)", "JAX jit(grad)"),
                         ("torch.compile (fwd+bwd)", "torch.compile")):
        H.ratio_line(f"tapejit [numba] / {short}, all cores ({name})", mine,
                     table.seconds(label), GOAL_VS_PEERS)


def main() -> None:
    parser = H.make_parser(__doc__)
    parser.add_argument("--n", type=int, default=None,
                        help="elements for the JAX / torch.compile rows (default 10^7; 10^5 "
                             "with --quick)")
    parser.add_argument("--dtypes", default="float64,float32",
                        help="dtypes of the JAX / torch.compile rows")
    parser.add_argument("--skip-sizes", action="store_true",
                        help="leave out part 1 (the serial / parallel sweep over sizes)")
    args = H.parse_args(parser)
    threads = numba.get_num_threads()
    torch_threads = threads
    H.print_header("bench/parallel.py: numba.prange against serial loops, and against JAX and "
                   "torch.compile on every core", args,
                   rows="tapejit [numba] serial / parallel / default",
                   extra=f"{threads} numba threads; torch threads {torch_threads}; "
                         f"TAPEJIT_NUM_THREADS={os.environ.get('TAPEJIT_NUM_THREADS', 'unset')}; "
                         f"XLA_FLAGS={os.environ.get('XLA_FLAGS', 'unset')}")
    if not args.skip_sizes:
        sizes_sweep(args)
    n = args.n or (100_000 if args.quick else 10_000_000)
    for dname in args.dtypes.split(","):
        against_peers(np.dtype(dname.strip()).type, n, args, torch_threads)


if __name__ == "__main__":
    main()
