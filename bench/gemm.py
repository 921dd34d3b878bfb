"""Matrix products: tapejit's BLAS calls, cut over its threads, against numpy and JAX.

The products of the MLP gradient in bench/mlp.py (1,797 samples, 64-256-256-10; the three
256-wide ones are 1797x256 @ 256x256, its transposed-left 256x1797 @ 1797x256 and its
transposed-right 1797x256 @ (256x256)^T), float64 and float32. Rows, each the summed time of
those products:
  - tapejit: `tapejit.codegen.blas.matmul(a, b, out, ta, tb, threads)`, the call compiled
    programs make, with threads = `tj.get_num_threads()` and BLAS's own threads held to one,
    as while a program runs (src/tapejit/threads.py): each product is cut into
    `blas.parts(m, n, k, threads)` blocks, one single-threaded BLAS call (scipy's OpenBLAS)
    per thread;
  - numpy's `@` (numpy's OpenBLAS, on its own threads);
  - JAX `jit(a @ b)` where installed;
  - where OPENBLAS_CORETYPE is set, tapejit's and numpy's rows again in a process without it
    (OpenBLAS's own choice of kernels for this CPU).
Default threading first (no pin, every library's default threads), then one thread (pinned
to one CPU), each in a process of its own, then every row's speed-up from one thread to all
cores. Every row is checked against numpy first. No goal of its own.

    .venv/bin/python bench/gemm.py [--repeats 9] [--quick] [--threads all|one|both]
"""
from __future__ import annotations

import _harness as H  # first: pins the process (unless TAPEJIT_BENCH_CPUS=all)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

# (label, m, n, k, transpose left, transpose right)
PRODUCTS = [("x @ w1", 1797, 256, 64, False, False), ("h1 @ w2", 1797, 256, 256, False, False),
            ("h1^T @ d2", 256, 256, 1797, True, False), ("d2 @ w2^T", 1797, 256, 256, False, True),
            ("x^T @ d1", 64, 256, 1797, True, False)]
# large enough for blas.parts to cut them in two (by rows, by columns) on 2 threads
QUICK = [("a @ b", 256, 256, 64, False, False), ("a^T @ b", 64, 256, 256, True, False)]
TAPEJIT = "tapejit blas.matmul"
UNSET = ", OPENBLAS_CORETYPE unset"


def operands(products, dtype):
    """[(a, b, out, ta, tb, want)] for `products`, with a (b) stored transposed where ta (tb)."""
    rng = np.random.default_rng(0)
    out = []
    for _, m, n, k, ta, tb in products:
        a = rng.normal(size=(k, m) if ta else (m, k)).astype(dtype)
        b = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
        out.append((a, b, np.empty((m, n), dtype), ta, tb, (a.T if ta else a) @ (b.T if tb else b)))
    return out


def tolerance(dtype) -> float:
    return 1e-4 if dtype == np.float32 else 1e-10


def all_products(label: str, matmul, cases):
    """A callable running `matmul(a, b, out, ta, tb)` over every case, checked first."""
    for a, b, out, ta, tb, want in cases:
        matmul(a, b, out, ta, tb)
        H.check_close(f"{label} {a.shape} {b.shape} {a.dtype}", out, want,
                      rtol=tolerance(a.dtype), atol=tolerance(a.dtype))
    return lambda: [matmul(a, b, out, ta, tb) for a, b, out, ta, tb, _ in cases]


def numpy_matmul(a, b, out, ta, tb):
    np.matmul(a.T if ta else a, b.T if tb else b, out=out)


def jax_row(table, products, dtype, repeats):
    def build():
        import jax
        jax.config.update("jax_enable_x64", True)
        cases = operands(products, dtype)
        mm = jax.jit(lambda a, b, ta, tb: (a.T if ta else a) @ (b.T if tb else b),
                     static_argnums=(2, 3))
        args = [(jax.numpy.asarray(a), jax.numpy.asarray(b), ta, tb)
                for a, b, _, ta, tb, _ in cases]
        H.check_close(f"jax {np.dtype(dtype).name}", [np.asarray(mm(*x)) for x in args],
                      [c[-1] for c in cases], rtol=tolerance(dtype), atol=tolerance(dtype))
        return lambda: [jax.block_until_ready(mm(*x)) for x in args]
    H.try_row(table, "jax jit(a @ b)", "jax", build, repeats)


def child(args: argparse.Namespace) -> None:
    """One configuration (`--config`) in this process: a table per dtype, and the medians as
    JSON (`--results`)."""
    # scipy's BLAS (the one tapejit calls), loaded before threadpoolctl looks for libraries
    import scipy.linalg.cython_blas  # noqa: F401
    from threadpoolctl import threadpool_limits

    import tapejit as tj
    from tapejit.codegen import blas
    threads = tj.get_num_threads()
    products = QUICK if args.quick else PRODUCTS
    H.print_header(f"bench/gemm.py, {H.THREADS[args.config]}: matrix products, tapejit's BLAS "
                   f"calls against numpy and JAX", args,
                   rows=f"{TAPEJIT}, numpy @" + ("" if args.no_jax else ", jax jit(a @ b)"),
                   extra=f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"   blas.parts on {threads} threads: "
          + ", ".join(f"{p[0]} {blas.parts(*p[1:4], threads)}" for p in products))

    def tapejit_matmul(a, b, out, ta, tb):
        blas.matmul(a, b, out, ta, tb, threads)

    medians = {}
    for dtype in (np.float64, np.float32):
        name, cases = np.dtype(dtype).name, operands(products, dtype)
        table = H.Table(f"[{H.THREADS[args.config]}] {name}: "
                        f"{', '.join(p[0] for p in products)} (summed)",
                        ref="numpy @", ratio_name="x numpy @")
        with threadpool_limits(limits=1, user_api="blas"):     # as in a program's call
            table.add(TAPEJIT, H.measure(all_products(TAPEJIT, tapejit_matmul, cases),
                                         args.repeats), note=H.threads_text(threads))
        table.add("numpy @", H.measure(all_products("numpy @", numpy_matmul, cases),
                                       args.repeats))
        if not args.no_jax:
            jax_row(table, products, dtype, args.repeats)
        table.print()
        medians[name] = {row.label: row.seconds for row in table.rows}
    with open(args.results, "w") as fh:
        json.dump(medians, fh)


def summary(runs: dict[str, dict | None]) -> None:
    """Per dtype: every row's medians, default threading first, and its speed-up from one
    thread to all cores; then the ratio lines."""
    done = {threads: run for threads, run in runs.items() if run is not None}
    for name in ("float64", "float32"):
        labels = list(dict.fromkeys(label for run in done.values() for label in run[name]))
        heads = ["row", *(H.THREADS[t] for t in done)]
        if len(done) == 2:
            heads.append("1 thread -> all cores")
        rows = []
        for label in labels:
            times = [run[name].get(label) for run in done.values()]
            row = [label, *(H.fmt_time(t) for t in times)]
            if len(done) == 2:
                row.append(f"{times[1] / times[0]:.2f}x" if None not in times else "-")
            rows.append(row)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
        print(f"\n{name}, summed over the products")
        for row in (heads, ["-" * w for w in widths], *rows):
            print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(row, widths))))
    print()
    for threads, run in done.items():
        for name, times in run.items():
            for ref in ("numpy @", "jax jit(a @ b)", TAPEJIT + UNSET):
                if times.get(ref) is not None:
                    H.ratio_line(f"{TAPEJIT} / {ref} ({name}, {H.THREADS[threads]})",
                                 times[TAPEJIT], times[ref])


def main() -> None:
    parser = H.make_parser(__doc__, repeats=9)
    H.add_child_flags(parser)
    parser.add_argument("--no-jax", action="store_true", help=argparse.SUPPRESS)
    args = H.parse_args(parser)
    if args.config:
        child(args)
        return
    argv = ["--repeats", str(args.repeats), "--warmup", str(args.warmup)] + ["--quick"] * args.quick
    script = os.path.abspath(__file__)
    runs, failed = {}, False
    for threads in H.threads_wanted(args.threads):
        runs[threads] = H.run_child(script, argv, threads)
        failed |= runs[threads] is None
        if os.environ.get("OPENBLAS_CORETYPE") and runs[threads] is not None:
            unset = H.run_child(script, argv + ["--no-jax"], threads,
                                drop_env=("OPENBLAS_CORETYPE",))
            failed |= unset is None
            for name, times in (unset or {}).items():
                runs[threads][name].update({label + UNSET: t for label, t in times.items()})
    summary(runs)
    if failed:
        raise SystemExit("a child process failed (see above)")


if __name__ == "__main__":
    main()
