"""The cost of calling an LLVM program from Python: the trampoline of
src/tapejit/codegen/llvm/runtime.py (`bind`: one METH_FASTCALL builtin that writes each array's
data pointer into the program's table and calls its entry) against the ways it replaces.

For 1, 2 and 8 float64 arrays of 10 elements, each row calls an entry that does nothing:
  trampoline        runtime.bind(entry, table, sizes, k)(*arrays)
  ctypes            table[j] = a_j.ctypes.data for each array, then a ctypes function with fixed
                    argtypes calls entry(table, sizes)
  numba @njit       an empty @njit function of k arrays (how programs are called today)
  python (floor)    an empty Python function of k arguments
and, for a program of one array that returns two new arrays of 10 float64: the trampoline
making them (`fresh=`), `np.empty` in Python then the trampoline, and @njit returning two
`np.empty`.
Rows run in interleaved rounds (each round times every row once, so load from other jobs falls
on all alike); the time is the median over rounds of the per-call time of a loop of calls
(timeit, no lambda in between). Goal: the trampoline <= 0.3 us for 2 arrays.

    .venv/bin/python bench/llvm_call.py [--quick] [--repeats 15]
"""
from __future__ import annotations

import _harness as H  # first: pins the process (unless TAPEJIT_BENCH_CPUS=all)

import ctypes  # noqa: E402
import timeit  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

from tapejit.codegen.llvm import jit, runtime  # noqa: E402

GOAL_S = 0.3e-6
ARITIES = (1, 2, 8)
ENTRY = "define void @tj_entry(ptr %table, ptr %sizes) {\n  ret void\n}\n"
NUMBA = "numba @njit"


def empty_entry() -> tuple[int, jit.Program]:
    """The address of an entry that returns at once, and the program that holds its code
    (compiled and loaded as generated programs are)."""
    code = jit.Program(jit.compile_object(ENTRY), ("tj_entry",))
    return code.address("tj_entry"), code


def callers(k: int, entry: int) -> tuple[dict[str, object], np.ndarray]:
    """The rows' functions of k arrays, and the trampoline's table."""
    table, sizes = np.zeros(k, np.int64), np.zeros(4, np.int64)
    names = ", ".join(f"a{j}" for j in range(k))
    stores = "; ".join(f"table[{j}] = a{j}.ctypes.data" for j in range(k))
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(entry)
    scope = {"table": table, "call": call, "T": table.ctypes.data, "S": sizes.ctypes.data}
    exec(f"def via_ctypes({names}):\n    {stores}\n    call(T, S)\n"
         f"def empty({names}):\n    return None\n", scope)
    ours = np.zeros(k, np.int64)
    return {"trampoline": runtime.bind(entry, ours, sizes, k),
            "ctypes, a.ctypes.data": scope["via_ctypes"],
            NUMBA: numba.njit(scope["empty"]),
            "python (floor)": scope["empty"]}, ours


def fresh_callers(entry: int) -> dict[str, object]:
    """The rows of a program of one array that returns two new arrays of 10 float64."""
    table, sizes = np.zeros(3, np.int64), np.zeros(4, np.int64)
    made = runtime.bind(entry, table, sizes, 1, fresh=[((10,), np.float64)] * 2)
    plain = runtime.bind(entry, np.zeros(3, np.int64), sizes, 3)

    def np_empty(a0):
        outs = (np.empty(10), np.empty(10))
        plain(a0, *outs)
        return outs

    def numba_empty(a0):
        return np.empty(10), np.empty(10)
    return {"trampoline, fresh=": made, "np.empty, then the trampoline": np_empty,
            NUMBA: numba.njit(numba_empty)}


def interleaved(fns: dict[str, object], arrays: list[np.ndarray], repeats: int,
                min_run_s: float) -> dict[str, H.Timing]:
    """Per-call seconds of `fn(*arrays)` for each row, in interleaved rounds."""
    names = {f"a{j}": a for j, a in enumerate(arrays)}
    stmt = f"f({', '.join(names)})"
    timers = {label: timeit.Timer(stmt, globals={"f": fn, **names}) for label, fn in fns.items()}
    number = {}
    for label, timer in timers.items():
        timer.timeit(1000)                                    # warm: numba compiles here
        count, seconds = timer.autorange()
        number[label] = max(1, int(count * min_run_s / seconds))
    runs: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(repeats):
        for label, timer in timers.items():
            runs[label].append(timer.timeit(number[label]) / number[label])
    return {label: H.Timing.of(r) for label, r in runs.items()}


def main() -> None:
    parser = H.make_parser(__doc__, repeats=15)
    args = H.parse_args(parser)
    min_run_s = 0.01 if args.quick else 0.1
    H.print_header("bench/llvm_call.py: calling an LLVM program from Python", args,
                   rows="trampoline, ctypes, numba @njit, python",
                   extra=f"each round loops each call for ~{min_run_s * 1e3:.0f} ms")
    entry, code = empty_entry()
    times = {}
    for k in ARITIES:
        arrays = [np.ones(10) for _ in range(k)]
        fns, table = callers(k, entry)
        fns["trampoline"](*arrays)
        H.check_close(f"trampoline wrote {k} data pointers", table,
                      np.array([a.ctypes.data for a in arrays]), rtol=0)
        timing = interleaved(fns, arrays, args.repeats, min_run_s)
        out = H.Table(f"an empty program of {k} array{'s' * (k > 1)} of 10 float64 -- time "
                      f"per call", ref=NUMBA)
        for label, t in timing.items():
            out.add(label, t, goal=f"<= {GOAL_S * 1e6:.1f} us" if
                    (label, k) == ("trampoline", 2) else "")
        out.print()
        times[k] = timing
    fresh = interleaved(fresh_callers(entry), [np.ones(10)], args.repeats, min_run_s)
    out = H.Table("an empty program of 1 array returning 2 new arrays of 10 float64 -- time "
                  "per call", ref=NUMBA)
    for label, t in fresh.items():
        out.add(label, t)
    out.print()
    for k in ARITIES:
        H.ratio_line(f"trampoline / numba @njit, {k} arrays", times[k]["trampoline"].median,
                     times[k][NUMBA].median)
    H.ratio_line("trampoline making 2 new arrays / np.empty then the trampoline",
                 fresh["trampoline, fresh="].median, fresh["np.empty, then the trampoline"].median)
    H.ratio_line(f"trampoline 2 arrays / goal {GOAL_S * 1e6:.1f} us",
                 times[2]["trampoline"].median, GOAL_S, goal=1.0,
                 record={"workload": "llvm call: empty program, 2 arrays", "row": "trampoline",
                         "reference": f"the {GOAL_S * 1e6:.1f} us goal"})
    code.close()


if __name__ == "__main__":
    main()
