"""The gathers and scatters under a memory checker: the op table's rows of the index ops
(tests/op_db.py) run compiled, and programs with traced indices out of range must raise
IndexOutOfBoundsError on their compiled calls without reading or writing outside an array.

    export TAPEJIT_CACHE_DIR=/tmp/mc NUMBA_CPU_NAME=generic
    python tests/bounds_memcheck.py                                    # compiles, runs
    PYTHONMALLOC=malloc valgrind --tool=memcheck --error-limit=no \\
        python tests/bounds_memcheck.py 2> memcheck.log                # loads, runs again
    grep -A3 "Invalid read\\|Invalid write" memcheck.log                 # none in "???" frames

The first run fills the disk cache, so the run under valgrind loads the programs instead of
compiling them (about 45 s a program under valgrind; NUMBA_CPU_NAME=generic, because numba's
cache is per CPU and valgrind's CPU is another). Measured 2026-12-06: 41 programs loaded, 4
invalid reads, all in glibc's loader (strncmp in dl-load.c, a known false report), none in
generated code. The control, `TAPEJIT_BOUNDSCHECK=0 ... bounds_memcheck.py range --only
take_along` (both runs): its two bad calls return, and valgrind reports two invalid reads in
generated code ("???" frames) besides the loader's four. numba's own `NUMBA_BOUNDSCHECK=1` is a
second oracle (tests/test_bounds.py runs it). Prints one line per program and `memcheck driver:
N rows, M out-of-range calls raised, K did not`; exits 1 if a call failed to raise.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tapejit as tj  # noqa: E402
from tapejit.ops import index as I  # noqa: E402
from tapejit.ops import sort as ST  # noqa: E402
from op_db import ROWS  # noqa: E402
from test_bounds import _add_at, _assign, _cross_entropy  # noqa: E402  (the same programs)

INDEX_OPS = {"take", "scatter_add", "check_index", "take_along", "scatter_add_along",
             "searchsorted"}
# the rows indexing with traced indices (the others' are constants, checked while tracing)
INDEX_ROWS = ("traced_index", "traced_two_axes", "traced_negative", "add_at_traced",
              "searchsorted_traced")
FAR = 1000          # past the end by this much: outside the array's heap block


def _summed(fn):
    def total(*args):
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(np.sum(o) for o in outs if np.asarray(o).dtype.kind == "f")
    return total


def run_rows() -> int:
    """The index ops' rows and the rows indexing with traced indices: each forward program,
    and its gradient where it has one, compiled."""
    count = 0
    for row in ROWS:
        if row.prim not in INDEX_OPS and not any(k in row.name for k in INDEX_ROWS):
            continue
        for args in row.samples("float64"):
            transforms = [tj.jit(row.fn)] + ([tj.grad(_summed(row.fn))] if row.diff else [])
            for f in transforms:
                for _ in range(3):            # interpreted, compiled, compiled again
                    f(*args)
        count += 1
    return count


def out_of_range_programs():
    """(name, transform, good arguments, bad arguments): the bad ones index past an end."""
    a, m, n = np.arange(5.0), np.arange(20.0).reshape(4, 5), 5
    w, x = np.ones((2, 3)), np.ones((4, 2))
    i2 = lambda *v: np.array(v)   # noqa: E731
    return [
        ("getitem", tj.jit(lambda a, i: a[i] * 2.0), (a, 1), (a, n + FAR)),
        ("getitem below", tj.jit(lambda a, i: a[i] * 2.0), (a, -1), (a, -n - FAR)),
        ("one-hot grad", tj.grad(_cross_entropy), (w, x, i2(0, 1, 2, 1)),
         (w, x, i2(0, 3 + FAR, 2, 1))),
        ("np.take", tj.jit(lambda a, i: np.take(a, i)), (a, i2(1, 4)), (a, i2(1, n + FAR))),
        ("take_along_axis", tj.jit(lambda m, i: np.take_along_axis(m, i, axis=1)),
         (m, i2([0], [1], [2], [4])), (m, i2([0], [1], [n + FAR], [4]))),
        ("two axes", tj.jit(lambda m, i, j: m[i, j]), (m, i2(0, 3), i2(4, 0)),
         (m, i2(0, 3), i2(n + FAR, 0))),
        ("add.at", tj.jit(_add_at), (a, i2(1, 1)), (a, i2(1, n + FAR))),
        ("x[idx] += v", tj.jit(_assign), (a, i2(1, 2)), (a, i2(-n - FAR, 2))),
        ("searchsorted", tj.jit(lambda a, e, v: a[np.searchsorted(e, v)]),
         (a, np.arange(5.0), i2(0.5)), (a, np.arange(5.0), i2(9.0))),
        ("vmap", tj.jit(tj.vmap(lambda r, i: r[i])), (m, i2(0, 1, 2, 4)),
         (m, i2(0, 1, n + FAR, 4))),
        ("fori_loop", tj.jit(lambda a, i: tj.fori_loop(0, 2, lambda k, c: c + a[i[k]], 0.0)),
         (a, i2(0, 4)), (a, i2(0, n + FAR))),
        ("gather grad", tj.grad(lambda a, i: np.sum(a[i] ** 2)), (a, i2(0, 4)),
         (a, i2(0, n + FAR))),
        ("take", tj.jit(lambda m, i: I.take(m, i, axis=1)), (m, i2(0, 4)), (m, i2(0, n + FAR))),
        ("scatter_add", tj.jit(lambda m, i: I.scatter_add(m, i, np.ones((4, 2)), axis=1)),
         (m, i2(0, 4)), (m, i2(-FAR, 4))),
        ("take_along", tj.jit(lambda m, i: ST.take_along(m, i, axis=1)),
         (m, np.zeros((4, 2), np.int64)), (m, np.full((4, 2), n + FAR))),
        ("scatter_add_along", tj.jit(lambda u, i: ST.scatter_add_along(i, u, axis=1, size=5)),
         (m, np.zeros((4, 5), np.int64)), (m, np.full((4, 5), n + FAR))),
    ]


def run_out_of_range(only: str | None = None) -> tuple[int, list[str]]:
    """Each program's bad call, twice on its compiled program: tapejit's error, or a failure
    (no error, or numba's own bounds check's IndexError: an access the checks let through)."""
    raised, failed = 0, []
    for name, f, good, bad in out_of_range_programs():
        if only not in (None, name):
            continue
        f(*good)
        f(*good)                        # compiled from here on
        for _ in range(2):
            try:
                f(*bad)
            except tj.IndexOutOfBoundsError as err:
                raised += 1
                print(f"{name}: {str(err).split(' (')[0]}", flush=True)
                continue
            except IndexError as err:
                print(f"FAIL {name}: numba's bounds check: {err}", flush=True)
            else:
                print(f"FAIL {name}: no IndexOutOfBoundsError", flush=True)
            failed.append(name)
        f(*good)
    return raised, failed


def main(argv: list[str]) -> int:
    """`bounds_memcheck.py [rows|range] [--only NAME]`: both parts by default."""
    part = argv[0] if argv and not argv[0].startswith("-") else None
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    rows = run_rows() if part in (None, "rows") else 0
    raised, failed = run_out_of_range(only) if part in (None, "range") else (0, [])
    print(f"memcheck driver: {rows} rows, {raised} out-of-range calls raised, "
          f"{len(failed)} did not")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
