"""Shared helpers for the compiler-issue benchmarks in bench/.

Every script imports this module *before* numpy, jax or torch: importing it pins the whole
process to one CPU and BLAS to one thread (unless TAPEJIT_BENCH_CPUS=all; see "Two
configurations" below), then:

    args = make_parser(__doc__).parse_args()
    print_header("elementwise gradient", args)
    t = measure(fn, repeats=args.repeats)          # warm-up calls, then the median of N
    table = Table("...", ref="numba loop")
    table.add("tapejit", t, goal="<= 1.00x numba loop")
    table.add("numba loop", t_ref)
    table.add_missing("jax jit(grad)", "not installed")
    table.print()
    ratio_line("tapejit / numba loop", t.median, t_ref.median, goal=1.0)

`ratio_line` prints one line starting with "ratio " (the smoke test looks for it). Timings are
medians of repeated runs: the machines these run on are shared, so never look at one run.
Nothing here asserts on a time; the scripts assert only on correctness (`check_close`).

Two configurations. Users run tapejit with every core and each library's default threads,
so the headline of bench/peers.py and bench/gemm.py is "default threading"; "one thread" comes
second (it shows each library's single-core code, and with the first the speed-up from one
thread to all cores). Thread pools are sized at import, so each configuration runs in a
child process of its own (`run_child`), one after the other. The other scripts run pinned.

One thread means one CPU, not one thread setting: JAX 0.10 ignores XLA_FLAGS'
`--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1` (a jitted
1797x256 @ 256x256 float64 product took 1.88 ms wall and 3.33 ms CPU on 2 cores). So importing
this module pins the process with `os.sched_setaffinity` to one CPU, before numpy, jax or torch
create their thread pools; child processes inherit the pin. A pinned process also sets
OPENBLAS_NUM_THREADS=1, MKL_NUM_THREADS=1 and those XLA_FLAGS, the torch rows call
`torch.set_num_threads(1)`, and tapejit's thread budget follows the pin (1): tapejit runs the
program a user on one core gets, its parallel nests on one thread. $TAPEJIT_BENCH_CPUS chooses:
  unset or "one"  pin to the CPU the process is running on now (the scheduler's pick);
  "<n>"           pin to CPU n;
  "all"           default threading: do not pin, and leave BLAS, XLA, torch and tapejit at
                  their defaults. A process a pinned bench started gets back every CPU its
                  parent was allowed ($TAPEJIT_BENCH_ALLOWED_CPUS, set when pinning), and the
                  one-thread settings its parent set are dropped.
The header (`print_header`) says which, and says so where `os.sched_setaffinity` is missing
(macOS, Windows): there the JAX rows may use more than one core.
"""
from __future__ import annotations

import os

CPUS_ENV = "TAPEJIT_BENCH_CPUS"
ALLOWED_ENV = "TAPEJIT_BENCH_ALLOWED_CPUS"
# what a pinned bench sets (before numpy is imported anywhere in the process): single-threaded
# BLAS and tapejit loops, and XLA's one-thread flags (kept although JAX 0.10 ignores them: the
# pin is what holds JAX to one core)
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def _current_cpu() -> int | None:
    """The CPU this process is running on (field 39 of /proc/self/stat), or None."""
    try:
        with open("/proc/self/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def _pin() -> tuple[bool, str]:
    """Pin this process to one CPU, or (TAPEJIT_BENCH_CPUS=all) widen it to every allowed CPU.
    Returns (pinned, what to print in the header)."""
    want = os.environ.get(CPUS_ENV, "one").strip().lower() or "one"
    if not hasattr(os, "sched_setaffinity"):
        return False, ("NOT pinned to one CPU: os.sched_setaffinity is unavailable on this "
                       "platform, so JAX and torch.compile rows may use more than one core")
    allowed = set(os.sched_getaffinity(0))
    if os.environ.get(ALLOWED_ENV):
        allowed = {int(c) for c in os.environ[ALLOWED_ENV].split(",")}
    if want == "all":
        if ALLOWED_ENV in os.environ:        # started by a pinned bench: undo its settings too
            for name, value in _ONE_THREAD.items():
                if os.environ.get(name) == value:
                    del os.environ[name]
        try:
            os.sched_setaffinity(0, allowed)
        except OSError as err:
            return False, f"not pinned ({CPUS_ENV}=all), but could not widen: {err}"
        return False, (f"not pinned ({CPUS_ENV}=all): all {len(os.sched_getaffinity(0))} "
                       f"allowed CPUs")
    os.environ.setdefault(ALLOWED_ENV, ",".join(map(str, sorted(allowed))))
    if want == "one":
        now = set(os.sched_getaffinity(0))
        cpu = _current_cpu()
        if cpu not in now:
            cpu = min(now)
    else:
        try:
            cpu = int(want)
        except ValueError:
            raise SystemExit(f"{CPUS_ENV}={want!r}: expected 'one', 'all' or a CPU number")
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as err:
        raise SystemExit(f"{CPUS_ENV}: cannot pin to CPU {cpu}: {err}")
    return True, (f"process pinned to CPU {cpu}, one of {len(allowed)} allowed, with "
                  f"sched_setaffinity: every row (JAX's and torch's threads too) shares one "
                  f"core; {CPUS_ENV}=all to not pin")


PINNED, PIN_NOTE = _pin()
# one-thread settings: pinned, or asked for one CPU where pinning is unavailable
ONE_THREAD = PINNED or (not hasattr(os, "sched_setaffinity")
                        and os.environ.get(CPUS_ENV, "one").strip().lower() != "all")

if ONE_THREAD:
    # Single-threaded BLAS for every bench (tapejit's budget follows the pin), unless the caller
    # asked otherwise (bench/parallel.py, TAPEJIT_BENCH_CPUS=all, measures what threads give).
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    os.environ.setdefault("XLA_FLAGS", _ONE_THREAD["XLA_FLAGS"])

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402

# ---------------------------------------------------------------------------------------------
# command line


def make_parser(doc: str | None, repeats: int = 7) -> argparse.ArgumentParser:
    """An argument parser with the flags every bench shares: --quick and --repeats."""
    parser = argparse.ArgumentParser(
        description=(doc or "").strip().splitlines()[0] if doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and 2 repeats (the smoke test uses this)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"median of this many timed runs (default {repeats}, 2 with --quick)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed calls before timing each row (default 2)")
    parser.add_argument("--with-numba", action="store_true",
                        help="with --quick: time the tapejit [numba] row too (left out of quick "
                             "runs by default: each program compiles once, seconds each)")
    parser.add_argument("--no-numba", action="store_true",
                        help="leave out the tapejit [numba] row (its first call compiles each "
                             "program once: seconds)")
    parser.set_defaults(_default_repeats=repeats)
    return parser


def parse_args(parser: argparse.ArgumentParser,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else args._default_repeats
    args.repeats = max(1, args.repeats)
    global WARMUP
    WARMUP = max(0, args.warmup)
    return args


# ---------------------------------------------------------------------------------------------
# what is installed, what tapejit can do


def have(module: str) -> bool:
    """Whether `module` is importable (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


NUMBA_LABEL = "tapejit [numba]"
INTERPRET_LABEL = "tapejit [interpret]"


def tapejit_variants(args: argparse.Namespace | None = None) -> list[tuple[str, dict]]:
    """(row label, transform kwargs), one explicit row per backend: "tapejit [numba]"
    (`backend="numba"`, the row the goals are about) first, then "tapejit [interpret]".
    `--quick` leaves the numba row out unless `--with-numba` is given (each numba program compiles
    once per process: seconds); `--no-numba` always leaves it out."""
    rows = []
    if args is None or numba_row_wanted(args):
        rows.append((NUMBA_LABEL, {"backend": "numba"}))
    rows.append((INTERPRET_LABEL, {"backend": "interpret"}))
    return rows


def numba_row_wanted(args: argparse.Namespace) -> bool:
    if getattr(args, "no_numba", False):
        return False
    return not getattr(args, "quick", False) or getattr(args, "with_numba", False)


def main_label(variants: Sequence[tuple[str, dict]]) -> str:
    """The row the ratio lines are computed from: the numba row, else (--no-numba, or --quick
    without --with-numba) the interpreter row."""
    return variants[0][0]


@dataclasses.dataclass
class FirstCall:
    """The first two calls of a fresh transform: the second call's result (by default the first
    ran on the interpreter and the second compiled: the result of compiled code is the one to
    check), each call's seconds, and what `cache_info()` says each did (run on the
    interpreter, a numba compile, a load from the disk cache, or a program this process had
    already compiled for another transform)."""

    result: Any
    seconds: float
    second: float
    how: tuple[str, str]

    @property
    def note(self) -> str:
        return (f"first call {fmt_time(self.seconds)} ({self.how[0]}), second "
                f"{fmt_time(self.second)} ({self.how[1]})")


def first_call(label: str, fn: Callable[..., Any], *call_args: Any) -> FirstCall:
    """Call a fresh transform twice (trace + differentiate + run on the interpreter or compile
    or disk load; then compile or disk load or a plain call), each timed, and print one line
    with its `cache_info()`."""
    infos, times = [dict(getattr(fn, "cache_info", dict)())], []
    for _ in range(2):
        t0 = time.perf_counter()
        result = fn(*call_args)
        times.append(time.perf_counter() - t0)
        infos.append(dict(getattr(fn, "cache_info", dict)()))
    if "[interpret]" in label:
        how = ("trace + differentiate + run", "run")
    else:
        from tapejit.transforms.cached import what_ran
        how = (what_ran(infos[0], infos[1]), what_ran(infos[1], infos[2]))
    fc = FirstCall(result, times[0], times[1], how)
    counts = {k: infos[2][k] for k in ("traces", "interpreted", "compiles", "disk_loads")
              if k in infos[2]}
    print(f"   {label}: {fc.note}; cache_info {counts}")
    return fc


def print_header(title: str, args: argparse.Namespace | None = None, extra: str = "",
                 rows: str | None = None) -> None:
    import tapejit as tj
    try:
        import numba
        numba_v = numba.__version__
    except ImportError:  # pragma: no cover - numba is a dependency
        numba_v = "missing"
    mode = "quick" if args is not None and getattr(args, "quick", False) else "full"
    reps = f", median of {args.repeats}" if args is not None else ""
    rows = rows or ", ".join(label for label, _ in tapejit_variants(args))
    print(f"== {title} ==")
    print(f"   tapejit {tj.__version__} (rows: {rows}; TAPEJIT_CACHE_DIR="
          f"{os.environ.get('TAPEJIT_CACHE_DIR', 'default')}), numpy {np.__version__}, "
          f"numba {numba_v}, "
          f"python {platform.python_version()}; {os.cpu_count()} cpus; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; "
          f"tapejit threads {tj.get_num_threads()}; {mode} run{reps}"
          + (f"; {extra}" if extra else ""))
    print(f"   {PIN_NOTE}")


# ---------------------------------------------------------------------------------------------
# timing


@dataclasses.dataclass
class Timing:
    """Seconds per call: the median over `repeats` timed runs of `number` calls each."""

    median: float
    low: float
    high: float
    number: int
    runs: list[float]

    @classmethod
    def of(cls, runs: Sequence[float]) -> "Timing":
        """A Timing from per-call seconds measured elsewhere (e.g. one per subprocess)."""
        runs = list(runs)
        return cls(statistics.median(runs), min(runs), max(runs), 1, runs)

    @property
    def spread(self) -> str:
        return f"{fmt_time(self.low)}..{fmt_time(self.high)}"


WARMUP = 2  # set by parse_args from --warmup


def settle(fn: Callable[[], Any]) -> None:
    """Call `fn` until a call runs no tapejit program on the numpy interpreter (a new program's
    first calls do, as many as its compile would about pay for: transforms/first_call.py), so
    that what is timed next is the steady state."""
    if "tapejit" not in sys.modules:
        return
    from tapejit.transforms.cached import calls_interpreted
    from tapejit.transforms.first_call import MAX_INTERPRETED_CALLS
    for _ in range(MAX_INTERPRETED_CALLS + 1):
        before = calls_interpreted()
        fn()
        if calls_interpreted() == before:
            return


def measure(fn: Callable[[], Any], repeats: int, warmup: int | None = None, min_run_s: float = 0.0,
            number: int | None = None) -> Timing:
    """Call `fn` `warmup` (default --warmup) times untimed (first-call compiles, caches) and until
    it runs compiled code (`settle`), then time `repeats` runs and return per-call seconds.
    With `min_run_s` > 0 each run loops `fn` enough times to last at least that long (for
    microsecond-scale calls); `number` fixes the count."""
    for _ in range(WARMUP if warmup is None else warmup):
        fn()
    settle(fn)
    if number is None:
        number = 1
        if min_run_s > 0:
            while True:
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
                dt = time.perf_counter() - t0
                if dt >= min_run_s / 5 or number >= 10**7:
                    number = max(1, int(number * min_run_s / max(dt, 1e-9)) + 1)
                    break
                number *= 10
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t0) / number)
    return Timing(statistics.median(runs), min(runs), max(runs), number, runs)


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


# ---------------------------------------------------------------------------------------------
# correctness


def _leaves(tree: Any) -> list[np.ndarray]:
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [np.asarray(tree)]


def check_close(what: str, got: Any, want: Any, rtol: float = 1e-7, atol: float = 0.0) -> None:
    """Assert that two (pytrees of) arrays agree; print one line saying they do. A bench must
    never time a wrong answer, so every script calls this at startup for every row it times."""
    g, w = _leaves(got), _leaves(want)
    assert len(g) == len(w), f"{what}: {len(g)} leaves, expected {len(w)}"
    worst = 0.0
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.shape == b.shape, f"{what}: leaf {i} has shape {a.shape}, expected {b.shape}"
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        ok = np.allclose(a64, b64, rtol=rtol, atol=atol)
        scale = np.max(np.abs(b64)) if b64.size else 0.0
        err = float(np.max(np.abs(a64 - b64))) if a64.size else 0.0
        worst = max(worst, err / scale if scale else err)
        assert ok, (f"{what}: leaf {i} differs from the reference: max abs err {err:.3g} "
                    f"(max |ref| {scale:.3g}, rtol {rtol}, atol {atol})")
    print(f"   check {what}: ok (max err / max |ref| = {worst:.1e})")


# ---------------------------------------------------------------------------------------------
# output


@dataclasses.dataclass
class Row:
    label: str
    seconds: float | None = None
    ratio: float | None = None          # set for rows given only as a ratio (reference constants)
    note: str = ""
    goal: str = ""
    timing: Timing | None = None


class Table:
    """Rows of timings with a ratio column against the row labelled `ref`."""

    def __init__(self, title: str, ref: str, ratio_name: str | None = None) -> None:
        self.title, self.ref = title, ref
        self.ratio_name = ratio_name or f"x {ref}"
        self.rows: list[Row] = []

    def add(self, label: str, timing: Timing | float | None, note: str = "", goal: str = "") -> Row:
        if isinstance(timing, Timing):
            row = Row(label, timing.median, note=note, goal=goal, timing=timing)
        else:
            row = Row(label, timing, note=note, goal=goal)
        self.rows.append(row)
        return row

    def add_missing(self, label: str, why: str = "not installed") -> Row:
        return self.add(label, None, note=why)

    def add_constant(self, label: str, seconds: float | None = None, ratio: float | None = None,
                     note: str = "reference constant, not run here") -> Row:
        row = Row(label, seconds, ratio=ratio, note=note)
        self.rows.append(row)
        return row

    def seconds(self, label: str) -> float | None:
        for row in self.rows:
            if row.label == label:
                return row.seconds
        return None

    def print(self) -> None:
        ref = self.seconds(self.ref)
        lines = []
        for row in self.rows:
            ratio = row.ratio
            if ratio is None and row.seconds is not None and ref:
                ratio = row.seconds / ref
            seconds = row.seconds
            note = row.note
            if seconds is None and row.ratio is not None and ref:
                seconds = row.ratio * ref            # a ratio constant, shown at this run's scale
                note = f"{note} (time = {row.ratio:g}x this run's {self.ref})".strip()
            spread = row.timing.spread if row.timing is not None else ""
            lines.append((row.label, fmt_time(seconds) if seconds is not None else "-",
                          f"{ratio:.2f}x" if ratio is not None else "-", spread,
                          row.goal, note))
        heads = ("row", "median", self.ratio_name, "min..max", "goal", "note")
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(heads)]
        print()
        print(self.title)
        fmt = "  ".join(f"{{:{'>' if i in (1, 2) else '<'}{w}}}" for i, w in enumerate(widths))
        print("  " + fmt.format(*heads).rstrip())
        print("  " + "  ".join("-" * w for w in widths))
        for line in lines:
            print("  " + fmt.format(*line).rstrip())
        print()


RESULTS_ENV = "TAPEJIT_BENCH_RESULTS"   # bench/run_all.py points this at a JSON-lines file


def ratio_line(what: str, numerator: float | None, denominator: float | None,
               goal: float | None = None, lower_is_better: bool = True,
               record: dict | None = None, collect: list[str] | None = None) -> bool | None:
    """Print `ratio <what> = 1.23x  goal <= 0.95x  [met]`; return whether the goal is met.
    With `record` (workload, row, reference, ... for bench/run_all.py) and $TAPEJIT_BENCH_RESULTS
    set, also append one JSON line with the numbers to that file; with `collect`, also append
    the line printed to that list."""
    met = None
    if numerator is None or denominator is None or denominator == 0:
        line = f"ratio {what} = n/a"
        r = None
    else:
        r = numerator / denominator
        line = f"ratio {what} = {r:.2f}x"
        if goal is not None:
            met = r <= goal if lower_is_better else r >= goal
            line += (f"   goal {'<=' if lower_is_better else '>='} {goal:.2f}x   "
                     f"[{'met' if met else 'NOT met'}]")
    print(line)
    if collect is not None:
        collect.append(line)
    path = os.environ.get(RESULTS_ENV)
    if record is not None and path:
        import json
        entry = {"what": what, "seconds": numerator, "ref_seconds": denominator, "ratio": r,
                 "goal": goal, "lower_is_better": lower_is_better, "met": met, **record}
        with open(path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")
    return met


def try_row(table: Table, label: str, module: str, build: Callable[[], Callable[[], Any]],
            repeats: int, **measure_kw: Any) -> Timing | None:
    """Add an optional third-party row (JAX, PyTorch): "not installed" when `module` is not
    importable; "failed: ..." (and no crash) when building, checking or running it raises.
    `build()` returns the zero-argument callable to time, after checking its answer."""
    if not have(module):
        table.add_missing(label, "not installed")
        return None
    try:
        fn = build()
        t = measure(fn, repeats, **measure_kw)
    except Exception as err:  # noqa: BLE001 - a broken optional framework must not stop the bench
        msg = f"{type(err).__name__}: {err}".splitlines()[0][:90]
        table.add_missing(label, f"failed: {msg}")
        return None
    table.add(label, t)
    return t


def framework_rows(table: Table, args: Sequence[np.ndarray], wrt: Sequence[int], want: Any,
                   repeats: int, make_jax: Callable[[Any], Callable[..., Any]] | None = None,
                   make_torch: Callable[[Any], Callable[..., Any]] | None = None,
                   rtol: float = 1e-6, atol: float = 0.0,
                   **measure_kw: Any) -> dict[str, Timing | None]:
    """Rows "jax jit(grad)", "torch eager autograd" and "torch.compile" for a scalar function of
    the flat positional arrays `args`, differentiated w.r.t. the positions `wrt`.
    `make_jax(jnp)` / `make_torch(torch)` return the function written against that module; each
    row is checked against `want` (the flat list of reference gradients) before it is timed, and
    runs on one thread where the process is pinned (`ONE_THREAD`), else on torch's default
    threads. Rows whose framework is missing say "not installed"."""
    out: dict[str, Timing | None] = {}
    wrt = tuple(wrt)

    def build_jax() -> Callable[[], Any]:
        import jax
        if any(np.asarray(a).dtype == np.float64 for a in args):
            jax.config.update("jax_enable_x64", True)
        jargs = [jax.numpy.asarray(a) for a in args]
        g = jax.jit(jax.grad(make_jax(jax.numpy), argnums=wrt))
        check_close("jax jit(grad) vs reference", [np.asarray(v) for v in g(*jargs)], want,
                    rtol=rtol, atol=atol)
        return lambda: jax.block_until_ready(g(*jargs))

    def build_torch(compiled: bool) -> Callable[[], Any]:
        import torch
        if ONE_THREAD:
            torch.set_num_threads(1)
        f = make_torch(torch)
        if compiled:
            f = torch.compile(f)
        targs = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
        for i in wrt:
            targs[i].requires_grad_(True)
        inputs = [targs[i] for i in wrt]

        def run() -> Any:
            return torch.autograd.grad(f(*targs), inputs)

        check_close(f"{'torch.compile' if compiled else 'torch eager'} vs reference",
                    [t.detach().numpy() for t in run()], want, rtol=rtol, atol=atol)
        return run

    if make_jax is not None:
        out["jax"] = try_row(table, "jax jit(grad)", "jax", build_jax, repeats, **measure_kw)
    if make_torch is not None:
        out["torch"] = try_row(table, "torch eager autograd", "torch",
                               lambda: build_torch(False), repeats, **measure_kw)
        out["torch.compile"] = try_row(table, "torch.compile (fwd+bwd)", "torch",
                                       lambda: build_torch(True), repeats, **measure_kw)
    return out


def flush() -> None:
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# the two configurations, each in a child process

THREADS = {"all": "default threading", "one": "one thread"}   # --threads: their titles


def threads_text(n: int) -> str:
    """The text "1 thread" or "<n> threads"."""
    return f"{n} thread{'s' * (n != 1)}"


def threads_wanted(choice: str) -> list[str]:
    """The configurations `--threads all|one|both` asks for, default threading first."""
    return list(THREADS) if choice == "both" else [choice]


def run_child(script: str, argv: Sequence[str], threads: str,
              drop_env: Sequence[str] = ()) -> Any:
    """Run `script argv --config <threads> --results <file>` in a child process set up for
    that configuration ("all": not pinned, every library's defaults; "one": pinned, one-thread
    settings), without the variables `drop_env`, its output going to ours. Returns the JSON
    the child wrote to <file>, or None (and says so) when it failed."""
    import json
    import subprocess
    import tempfile
    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    want = env.get(CPUS_ENV, "one").strip().lower()
    env[CPUS_ENV] = "all" if threads == "all" else (want if want not in ("", "all") else "one")
    with tempfile.TemporaryDirectory(prefix="tapejit-bench-") as tmp:
        path = os.path.join(tmp, "results.json")
        flush()
        proc = subprocess.run([sys.executable, script, *argv, "--config", threads,
                               "--results", path], env=env)
        if proc.returncode != 0 or not os.path.exists(path):
            print(f"{os.path.basename(script)} ({THREADS[threads]}) failed: exit "
                  f"{proc.returncode}", flush=True)
            return None
        with open(path) as fh:
            return json.load(fh)


def add_child_flags(parser: argparse.ArgumentParser) -> None:
    """`--threads all|one|both`, and the flags `run_child` passes to a child."""
    parser.add_argument("--threads", choices=("all", "one", "both"), default="both",
                        help="all: default threading (no pin, every library's default "
                             "threads); one: pinned to one CPU, one thread; both (default): "
                             "all, then one, each in its own process")
    parser.add_argument("--config", choices=tuple(THREADS), help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
