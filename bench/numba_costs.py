"""What numba's compile time costs on this machine: per loop nest, per array access, per scalar
op, and for two numpy features that generated code avoids (np.transpose with axes, slice
assignment). These explain the tapejit [numba] first-call times in the other benches, and why
tapejit's generated code is written as explicit loops (docs/performance.md).

Method. Every function is generated as source text and compiled with `numba.njit(cache=False)`
on its first call (its run time is negligible: arrays of 8 elements); the time is that call.
  - per loop nest: k nests `for i in range(n): s += a[i]` (one read and one add each), k in
    --nests; the least-squares slope over k.
  - per array access: one nest whose body adds m reads `a[j, i]` (j = 0..m-1) of a 2-D array;
    the slope over m.
  - per scalar op: one nest whose body is `t = t * c + d` repeated (2 ops a line); the slope
    over the number of ops.
One warm-up compile comes first, so numba's one-off costs in the process are not counted. The
numpy features are each timed in a fresh subprocess (numba compiles its own implementation of
`np.transpose(x, axes)` or slice assignment once per process, the first time it is used), as the
compile time minus that of a baseline doing the same work with an explicit loop.

    .venv/bin/python bench/numba_costs.py [--repeats 3] [--quick]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
_counter = [0]


def compile_time(src: str, name: str, *args) -> float:
    import numba
    _counter[0] += 1
    ns: dict = {"np": np}
    exec(compile(src, f"<numba_costs {_counter[0]}>", "exec"), ns)
    fn = numba.njit(cache=False)(ns[name])
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def nests_src(k: int) -> str:
    body = "".join("    for i in range(a.shape[0]):\n        s += a[i]\n" for _ in range(k))
    return f"def f(a):\n    s = 0.0\n{body}    return s\n"


def reads_src(m: int) -> str:
    terms = " + ".join(f"a[{j}, i]" for j in range(m))
    return f"def f(a):\n    s = 0.0\n    for i in range(a.shape[1]):\n        s += {terms}\n    return s\n"


def ops_src(lines: int) -> str:
    body = "".join("        t = t * 1.0001 + 0.5\n" for _ in range(lines))
    return (f"def f(a):\n    s = 0.0\n    for i in range(a.shape[0]):\n        t = a[i]\n{body}"
            f"        s += t\n    return s\n")


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def sweep(what: str, make, sizes: list[int], arg, repeats: int, unit: int = 1) -> float:
    xs, ys = [], []
    for size in sizes:
        ts = [compile_time(make(size), "f", arg) for _ in range(repeats)]
        xs.append(size * unit)
        ys.append(statistics.median(ts))
        print(f"   {what}: {size * unit:4d} -> compile {H.fmt_time(ys[-1])}", flush=True)
    s = slope(xs, ys)
    print(f"   => {H.fmt_time(s)} of compile time per {what.split(' (')[0]}", flush=True)
    return s


# numpy features, each in a fresh process: (name, source, baseline source, argument builder)
FEATURES = {
    "np.transpose(x, (2, 0, 1)) of a 3-D array": (
        "def f(x):\n    return np.transpose(x, (2, 0, 1)).copy()\n",
        "def f(x):\n    out = np.empty((x.shape[2], x.shape[0], x.shape[1]))\n"
        "    for i in range(x.shape[0]):\n        for j in range(x.shape[1]):\n"
        "            for k in range(x.shape[2]):\n                out[k, i, j] = x[i, j, k]\n"
        "    return out\n",
        "np.ones((2, 3, 4))"),
    "slice assignment out[1:, :] = x[:-1, :] (2-D)": (
        "def f(x):\n    out = np.zeros_like(x)\n    out[1:, :] = x[:-1, :]\n    return out\n",
        "def f(x):\n    out = np.zeros_like(x)\n    for i in range(1, x.shape[0]):\n"
        "        for j in range(x.shape[1]):\n            out[i, j] = x[i - 1, j]\n"
        "    return out\n",
        "np.ones((3, 4))"),
}


def feature_child(which: str, variant: str) -> None:
    import numba  # noqa: F401  (imported before timing)
    src, base, arg = FEATURES[which]
    x = eval(arg, {"np": np})
    compile_time("def g(a):\n    return a[0] + 1.0\n", "g", np.ones(2))   # one-off costs
    t = compile_time(src if variant == "feature" else base, "f", x)
    print("RESULT " + json.dumps({"seconds": t}), flush=True)


def feature_cost(which: str, repeats: int) -> tuple[float, float]:
    out = {}
    for variant in ("feature", "baseline"):
        ts = []
        for _ in range(repeats):
            proc = subprocess.run([sys.executable, __file__, "--child", which, variant],
                                  capture_output=True, text=True, cwd=HERE, check=True)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
            ts.append(json.loads(line[7:])["seconds"])
        out[variant] = statistics.median(ts)
    return out["feature"], out["baseline"]


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        feature_child(sys.argv[i + 1], sys.argv[i + 2])
        return
    parser = H.make_parser(__doc__, repeats=3)
    parser.add_argument("--no-features", action="store_true",
                        help="skip the np.transpose / slice assignment subprocesses")
    args = H.parse_args(parser)
    import numba
    H.print_header("bench/numba_costs.py: numba compile cost per construct", args,
                   rows=f"numba {numba.__version__} only")
    a1, a2 = np.ones(8), np.ones((80, 8))
    compile_time(nests_src(1), "f", a1)                                   # one-off costs
    nests = [1, 2, 4] if args.quick else [1, 5, 10, 20]
    reads = [1, 4, 8] if args.quick else [1, 10, 20, 40]
    ops = [1, 4, 8] if args.quick else [1, 10, 20, 40]
    per_nest = sweep("loop nest (one read, one add)", nests_src, nests, a1, args.repeats)
    per_read = sweep("array access (a[j, i])", reads_src, reads, a2, args.repeats)
    per_op = sweep("scalar op (mul or add)", ops_src, ops, a1, args.repeats, unit=2)
    rows = [("per loop nest", per_nest), ("per array access", per_read),
            ("per scalar op", per_op)]
    if not args.no_features:
        for which in FEATURES:
            feat, base = feature_cost(which, 1 if args.quick else args.repeats)
            print(f"   {which}: compile {H.fmt_time(feat)} in a fresh process, explicit-loop "
                  f"baseline {H.fmt_time(base)}", flush=True)
            rows.append((f"{which}, minus the explicit loop", feat - base))
    print()
    print("numba compile cost on this machine (median of "
          f"{args.repeats}; slopes are least-squares fits)")
    for what, s in rows:
        print(f"  {what:72s} {H.fmt_time(s):>10s}")


if __name__ == "__main__":
    main()
