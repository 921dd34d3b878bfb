"""Plain Python loops re-rolled (issue 20): compile cost independent of the step count.

tapejit finds the repeated step of a plain Python `for` loop in a traced tape and rewrites it as
one `scan` (src/tapejit/control/reroll.py). This script times three such programs (those of
tests/test_reroll.py), each next to the same program written with `tj.fori_loop` and, where
installed, JAX (`jit(value_and_grad)` of the unrolled loop, and of `lax.fori_loop`):

  N-body          8 bodies, softened gravity, velocity Verlet, `tj.value_and_grad` w.r.t. the
                  initial velocities, 100 and 1,000 unrolled steps (`nbody`)
  Lotka-Volterra  1,000 unrolled explicit Euler steps on scalars (`lotka_volterra`)
  MLP training    10 optimizer steps of a 3-8-8-1 tanh MLP unrolled inside one `tj.jit` (`train`)

and what a loop that does not re-roll costs: Lotka-Volterra with TAPEJIT_REROLL=0 at 30, 60
and 120 steps (10, 20, 40 with --quick), its first compiled gradient against the ops of its
traced gradient tape. Generated functions have a bounded size (src/tapejit/codegen/segments.py),
so this grows linearly: the slope (seconds per 1,000 ops) and the growth from the shortest to
the longest loop over the growth of its ops (goal <= 1.2x: linear) are printed.

First compiled gradient: every such row runs in fresh child processes (`--children` of them,
median), each timing from just before its first call to after it returns (library imports
done before: jax, and numba, which tapejit imports only when it first compiles), reporting its
peak resident memory, imports included (VmHWM; see `peak_rss_mb`). A new program's first call
run on the interpreter, and so may the next (src/tapejit/transforms/first_call.py: as many
as the compile would about pay for): a tapejit child calls again until `cache_info()` says a
call compiled or loaded from disk, and that call is timed. Its cache dir (TAPEJIT_CACHE_DIR, NUMBA_CACHE_DIR inside) is
  cold            a new empty one: the program and the math kernels of codegen/vmath.py compile
  kernels cached  a copy of one in which a warm-up child (a 10-step N-body plus sum(x ** 3))
                  ran: the math kernels load from disk, the program compiles (N-body rows)
JAX children use no persistent cache (JAX's default). JAX's unrolled N-body runs in one child
and for the shorter loop only (its compile grows faster than the step count), and JAX's
unrolled Lotka-Volterra not at all. The MLP's first call is made in this process. Steady
state: medians of repeated calls in this process (JAX's unrolled N-body: in its first-call
child). Every gradient is checked against `tj.fori_loop` on the numpy interpreter, and the
unrolled one against JAX's.

Goals (issue 20), one `ratio` line each: N-body 100 steps, first compiled gradient <= 3 s (cold)
and peak RSS <= 500 MB; 1,000 steps within 1.2x of 100; Lotka-Volterra: first compiled gradient
<= 1.5x the fori_loop version's, steady state <= 1.2x; the MLP training loop re-rolled
(`cache_info()["rerolled"]` >= 1); unrolled compile time linear in the tape's ops.

Default threading, as users run tapejit: unless TAPEJIT_BENCH_CPUS is set, this script sets it
to "all" before importing the harness (no CPU pin, every library at its default threads).

    .venv/bin/python bench/unrolled.py [--children 2] [--repeats 7] [--quick]
                                       [--with-unrolled-mlp]
"""
from __future__ import annotations

import os

os.environ.setdefault("TAPEJIT_BENCH_CPUS", "all")   # the harness reads it on import

import _harness as H  # noqa: E402  first: before numpy is imported

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "RESULT "
LV_PARAMS = np.array([1.1, 0.4, 0.1, 0.4])
LV_DT = 0.01
MLP_STEPS = 10
GOAL_NBODY_SECONDS = 3.0
GOAL_NBODY_RSS_MB = 500.0
GOAL_STEPS_GROWTH = 1.2
GOAL_LV_COMPILE = 1.5
GOAL_LV_STEADY = 1.2
GOAL_LINEAR = 1.2
JAX_LV_NOTE = "not run (JAX's compile of 1,000 unrolled steps took 172 s when measured)"
RTOL = 1e-9          # different summation orders, amplified over the steps
CHAOS_TOL = 0.02     # the 1,000-step N-body, against another implementation (see check_long)


# ---- the programs, written once against an array module `xp` and its `fori_loop` -----------
def accelerations(xp: Any, x: Any) -> Any:
    """Softened gravity between unit masses at positions x (bodies, 3)."""
    d = x[None, :, :] - x[:, None, :]
    r2 = xp.sum(d * d, axis=-1) + 0.01         # softened
    return xp.sum(d * (r2 ** -1.5)[:, :, None], axis=1)


def nbody(xp: Any, v: Any, x: Any, steps: int, dt: float = 0.01) -> Any:
    """Velocity Verlet in a plain Python loop, then a scalar of the final state."""
    a = accelerations(xp, x)
    for _ in range(steps):
        v = v + 0.5 * dt * a
        x = x + dt * v
        a = accelerations(xp, x)
        v = v + 0.5 * dt * a
    return xp.sum(v * v) + xp.sum(x[:, 0])


def nbody_looped(xp: Any, fori_loop: Callable, v: Any, x: Any, steps: int,
                 dt: float = 0.01) -> Any:
    def step(i: Any, carry: Any) -> Any:
        v, x, a = carry
        v = v + 0.5 * dt * a
        x = x + dt * v
        a = accelerations(xp, x)
        return v + 0.5 * dt * a, x, a

    v, x, _ = fori_loop(0, steps, step, (v, x, accelerations(xp, x)))
    return xp.sum(v * v) + xp.sum(x[:, 0])


def lotka_volterra(p: Any, steps: int) -> Any:
    """Explicit Euler on two scalars in a plain Python loop, then a scalar of the end state."""
    x, y = 1.0, 2.0
    for _ in range(steps):
        x, y = x + LV_DT * (p[0] * x - p[1] * x * y), y + LV_DT * (p[2] * x * y - p[3] * y)
    return (x - 1.5) ** 2 + y


def lotka_volterra_looped(fori_loop: Callable, p: Any, steps: int) -> Any:
    def step(i: Any, carry: Any) -> Any:
        x, y = carry
        return x + LV_DT * (p[0] * x - p[1] * x * y), y + LV_DT * (p[2] * x * y - p[3] * y)

    x, y = fori_loop(0, steps, step, (1.0, 2.0))
    return (x - 1.5) ** 2 + y


def mlp_loss(params: list, x: np.ndarray, y: np.ndarray) -> Any:
    for w, b in params[:-1]:
        x = np.tanh(x @ w + b)
    w, b = params[-1]
    return np.mean((x @ w + b - y) ** 2)


def train(params: list, x: np.ndarray, y: np.ndarray, lr: float) -> Any:
    """MLP_STEPS steps of gradient descent in a plain Python loop: (params, final loss)."""
    import tapejit as tj
    for _ in range(MLP_STEPS):
        grads = tj.grad(mlp_loss)(params, x, y)
        params = [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, grads)]
    return params, mlp_loss(params, x, y)


def function(library: str, program: str, style: str, steps: int) -> Callable[..., Any]:
    """The scalar function of `program` ("nbody", "lotka_volterra", or "warmup": the kernels'
    warm-up) written `style` ("unrolled" or "fori_loop") for `library` ("tapejit", "jax")."""
    if library == "jax":
        import jax
        xp, fori_loop = jax.numpy, jax.lax.fori_loop
    else:
        import tapejit as tj
        xp, fori_loop = np, tj.fori_loop
    if program == "warmup":
        return lambda v, x: nbody(np, v, x, steps) + np.sum(x ** 3)
    if program == "nbody":
        if style == "unrolled":
            return lambda v, x: nbody(xp, v, x, steps)
        return lambda v, x: nbody_looped(xp, fori_loop, v, x, steps)
    if style == "unrolled":
        return lambda p: lotka_volterra(p, steps)
    return lambda p: lotka_volterra_looped(fori_loop, p, steps)


def arguments(program: str) -> tuple[np.ndarray, ...]:
    if program == "lotka_volterra":
        return (LV_PARAMS,)
    rng = np.random.default_rng(0)
    x, v = rng.normal(size=(8, 3)), 0.1 * rng.normal(size=(8, 3))
    return v, x


def value_and_grad(spec: dict) -> Callable[..., Any]:
    """The transform a row times: tapejit's `tj.value_and_grad` (default settings), or JAX's
    `jit(value_and_grad)` (float64) waiting for its result."""
    f = function(spec["library"], spec["program"], spec["style"], spec["steps"])
    if spec["library"] == "tapejit":
        import tapejit as tj
        return tj.value_and_grad(f)
    import jax
    jax.config.update("jax_enable_x64", True)
    vg = jax.jit(jax.value_and_grad(f))
    return lambda *args: jax.block_until_ready(vg(*args))


# ---- a fresh child process: the first compiled call ------------------------------------------
def child(spec: dict) -> None:
    """Time the first compiled call of one program and print one RESULT json line. Library
    imports are not timed, for either library: `import jax` happens in `value_and_grad`, and
    numba, which `import tapejit` leaves to the first compile, is imported here."""
    vg, args = value_and_grad(spec), arguments(spec["program"])
    if spec["library"] == "tapejit":
        import numba  # noqa: F401
    calls, (value, grad) = first_compiled(vg, args, spec["library"])
    counts = getattr(vg, "cache_info", dict)()
    out = {"calls": calls, "seconds": calls[-1][0], "value": float(value),
           "grad": np.asarray(grad).tolist(), "rss_mb": peak_rss_mb(),
           "cache_info": {k: counts[k] for k in ("interpreted", "compiles", "disk_loads",
                                                 "rerolled") if k in counts}}
    if spec.get("steady_repeats"):
        out["steady"] = H.measure(lambda: vg(*args), spec["steady_repeats"], min_run_s=0.05).runs
    print(MARK + json.dumps(out), flush=True)


def first_compiled(vg: Callable[..., Any], args: tuple, library: str) -> tuple[list, Any]:
    """Call `vg` until a call ran compiled (JAX: the first; tapejit: the first that compiled or
    loaded from disk, after those its first-call tier runs on the interpreter): ([seconds,
    what ran] of the first call and of that one; the result)."""
    if library == "jax":
        t0 = time.perf_counter()
        out = vg(*args)
        return [[time.perf_counter() - t0, "jit compile"]], out
    from tapejit.transforms.cached import what_ran
    from tapejit.transforms.first_call import MAX_INTERPRETED_CALLS
    calls = []
    for call in range(1, MAX_INTERPRETED_CALLS + 2):
        before = dict(vg.cache_info())
        t0 = time.perf_counter()
        out = vg(*args)
        seconds = time.perf_counter() - t0
        after = dict(vg.cache_info())
        compiled = (after["compiles"] + after["disk_loads"]
                    > before["compiles"] + before["disk_loads"])
        if call == 1 or compiled:
            calls.append([seconds, what_ran(before, after) + (f", call {call}" if call > 2
                                                              and compiled else "")])
        if compiled:
            break
    return calls, out


def peak_rss_mb() -> float:
    """This process's peak resident memory, in MB: VmHWM, the peak of its memory since it
    started (exec). Linux's ru_maxrss keeps the peak across fork and exec, so in a child of a
    large process it says the parent's size; it is the answer only where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024 / 1e6


def spawn(spec: dict, cache_dir: str | None) -> dict:
    """Run `child(spec)` in a fresh process (with `cache_dir` as its tapejit and numba cache
    dirs, unless None) and return its RESULT."""
    env = dict(os.environ)
    if spec.get("reroll") is False:
        env["TAPEJIT_REROLL"] = "0"
    if cache_dir is not None:
        env["TAPEJIT_CACHE_DIR"] = cache_dir
        env["NUMBA_CACHE_DIR"] = os.path.join(cache_dir, "numba")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "unrolled.py"), "--child",
                           json.dumps(spec)], env=env, cwd=HERE, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"child process {spec} failed with exit code {proc.returncode}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)][-1]
    return json.loads(line[len(MARK):])


# ---- this process: rows of first calls in children, steady state here ------------------------
@dataclasses.dataclass
class FirstCalls:
    """A row of fresh-process first calls: what runs, in which cache dir ("cold", "kernels
    cached", or "" for JAX: no tapejit cache), in how many children, and their results."""

    label: str
    spec: dict
    cache: str
    children: int
    runs: list[dict] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.label}, {self.cache}" if self.cache else self.label

    def timing(self) -> H.Timing:
        return H.Timing.of(r["seconds"] for r in self.runs)

    def rss(self) -> float:
        return H.Timing.of(r["rss_mb"] for r in self.runs).median

    def note(self) -> str:
        counts = self.runs[-1]["cache_info"]
        return (f"peak RSS {self.rss():.0f} MB; {len(self.runs)} child"
                f"{'ren' * (len(self.runs) > 1)}" + (f"; cache_info {counts}" if counts else ""))


def run_once(row: FirstCalls, kernels_dir: str | None) -> dict:
    """One child of `row`: in a new empty cache dir, a copy of `kernels_dir`, or (JAX) none."""
    if not row.cache:
        return spawn(row.spec, None)
    with tempfile.TemporaryDirectory(prefix="tapejit-unrolled-") as cache_dir:
        if row.cache == "kernels cached":
            shutil.copytree(kernels_dir, cache_dir, dirs_exist_ok=True)
        return spawn(row.spec, cache_dir)


def run_rows(rows: list[FirstCalls], kernels_dir: str | None) -> None:
    """Every row's children, in rounds (one child of each row per round: load from other jobs
    falls on all alike), one line per child."""
    for round_ in range(max(row.children for row in rows)):
        for row in (r for r in rows if r.children > round_):
            run = run_once(row, kernels_dir)
            row.runs.append(run)
            before = "".join(f"after {H.fmt_time(s)} ({what}), " for s, what in run["calls"][:-1])
            print(f"   {row.name}, child {round_ + 1}: {before}{H.fmt_time(run['seconds'])} "
                  f"({run['calls'][-1][1]}); peak RSS {run['rss_mb']:.0f} MB", flush=True)


def warm_kernels() -> str:
    """A cache dir in which the warm-up program (other than every measured one, the same math
    kernels) compiled: copies of it are the "kernels cached" rows' dirs."""
    kernels_dir = tempfile.mkdtemp(prefix="tapejit-unrolled-kernels-")
    run = spawn(spec("tapejit", "warmup", "unrolled", 10), kernels_dir)
    print(f"   warm-up child (10-step N-body + sum(x ** 3)) for the kernels cached rows: "
          f"{H.fmt_time(run['seconds'])} ({run['calls'][-1][1]})", flush=True)
    return kernels_dir


def spec(library: str, program: str, style: str, steps: int, **more: Any) -> dict:
    return {"library": library, "program": program, "style": style, "steps": steps, **more}


def reference(program: str, steps: int) -> tuple[Any, Any]:
    """(value, gradient) of the `tj.fori_loop` version on the numpy interpreter."""
    import tapejit as tj
    f = function("tapejit", program, "fori_loop", steps)
    return tj.value_and_grad(f, backend="interpret")(*arguments(program))


def check_rows(rows: list[FirstCalls], want: Any, what: str) -> None:
    for row in rows:
        H.check_close(f"{row.name} vs {what}", [result(r) for r in row.runs],
                      [want] * len(row.runs), rtol=RTOL)


def check_long(rows: list[FirstCalls], steps: int) -> None:
    """The N-body loop of `steps` steps against `tj.fori_loop`. Over 1,000 steps the trajectory
    is chaotic: a rounding difference (vmath's pow against numpy's) grows to 0.3% of the value
    and of the gradient (|gradient| ~ 5e12). So tapejit's rows are checked against the
    fori_loop program compiled in this process (the same kernels: equal to the last bit), and
    the rest, on a scale of the largest gradient element, to CHAOS_TOL against the interpreter."""
    compiled = first_compiled(value_and_grad(spec("tapejit", "nbody", "fori_loop", steps)),
                              arguments("nbody"), "tapejit")[1]   # (its first call: interpreted)
    check_rows([r for r in rows if r.spec["library"] == "tapejit"], compiled,
               f"tj.fori_loop [numba] ({steps} steps, compiled in this process)")
    interpreted = reference("nbody", steps)
    scale = np.max(np.abs(interpreted[1]))
    others = [("tj.fori_loop [numba]", [compiled])]
    others += [(row.name, [result(r) for r in row.runs]) for row in rows
               if row.spec["library"] != "tapejit"]
    for name, results in others:
        H.check_close(f"{name} vs tj.fori_loop [interpret] ({steps} steps, chaotic: gradient "
                      f"/ its largest element)", [(v, g / scale) for v, g in results],
                      [(interpreted[0], interpreted[1] / scale)] * len(results), rtol=CHAOS_TOL,
                      atol=CHAOS_TOL)


def result(run: dict) -> tuple[float, np.ndarray]:
    """A child's (value, gradient)."""
    return run["value"], np.asarray(run["grad"])


def checked(label: str, row_spec: dict, want: Any) -> Callable[[], Any]:
    """`row_spec`'s transform, compiled in this process and checked: a call to time."""
    vg, args = value_and_grad(row_spec), arguments(row_spec["program"])
    H.check_close(f"{label} (this process) vs tj.fori_loop [interpret]", vg(*args), want,
                  rtol=RTOL)
    return lambda: vg(*args)


def take_turns(calls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, H.Timing]:
    """Time each call `repeats` times (after `H.measure`'s warm-up), taking turns: one timed
    run of each per round, so load from other jobs falls on all alike."""
    numbers = {label: H.measure(fn, 1, min_run_s=0.05).number for label, fn in calls.items()}
    runs: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(repeats):
        for label, fn in calls.items():
            runs[label] += H.measure(fn, 1, warmup=0, number=numbers[label]).runs
    return {label: H.Timing.of(r) for label, r in runs.items()}


def nbody_first_calls(args: Any, steps: tuple[int, int], kernels_dir: str) -> dict:
    """The N-body rows of first calls, run: {name: FirstCalls}. --quick: the goals' rows only."""
    short, long_ = steps
    both = ("cold", "kernels cached")
    plan = [("unrolled", short, both), ("unrolled", long_, ("cold",) if args.quick else both),
            ("fori_loop", short, () if args.quick else both)]
    rows = [FirstCalls(f"tapejit {style}, {n} steps", spec("tapejit", "nbody", style, n), cache,
                       args.children) for style, n, caches in plan for cache in caches]
    if H.have("jax"):
        rows.append(FirstCalls(f"JAX unrolled, {short} steps",
                               spec("jax", "nbody", "unrolled", short,
                                    steady_repeats=args.repeats), "", 1))
        rows += [FirstCalls(f"JAX lax.fori_loop, {n} steps", spec("jax", "nbody", "fori_loop", n),
                            "", args.children) for n in steps if not args.quick]
    run_rows(rows, kernels_dir)
    return {row.name: row for row in rows}


def nbody_section(args: Any, steps: tuple[int, int], kernels_dir: str) -> None:
    short, long_ = steps
    print("\nN-body, 8 bodies, velocity Verlet: value_and_grad w.r.t. the initial velocities")
    rows = nbody_first_calls(args, steps, kernels_dir)
    want = reference("nbody", short)
    check_rows([r for r in rows.values() if r.spec["steps"] == short], want,
               f"tj.fori_loop [interpret] ({short} steps)")
    check_long([r for r in rows.values() if r.spec["steps"] == long_], long_)
    ref = rows[f"tapejit unrolled, {short} steps, cold"]
    jax_unrolled = rows.get(f"JAX unrolled, {short} steps")
    if jax_unrolled:
        H.check_close(f"{ref.label} vs {jax_unrolled.label}", result(ref.runs[0]),
                      result(jax_unrolled.runs[0]), rtol=RTOL)
    nbody_first_call_table(rows, steps)
    nbody_steady_table(args, short, want, jax_unrolled)
    longer = rows[f"tapejit unrolled, {long_} steps, cold"]
    cold = ref.timing().median
    first = f"cold {H.fmt_time(cold)} ({ref.runs[-1]['calls'][-1][1]})"
    H.ratio_line(f"N-body {short} steps: tapejit first compiled gradient, cold / "
                 f"{GOAL_NBODY_SECONDS:g} s", cold, GOAL_NBODY_SECONDS, 1.0,
                 record={"workload": f"unrolled: N-body {short} steps, first compiled gradient "
                                     f"(fresh process, default threading)",
                         "row": "tapejit [numba] unrolled", "reference": "the goal's 3 s",
                         "first_call": first})
    H.ratio_line(f"N-body {short} steps: tapejit peak RSS / {GOAL_NBODY_RSS_MB:.0f} MB",
                 ref.rss(), GOAL_NBODY_RSS_MB, 1.0)
    H.ratio_line(f"N-body: tapejit first compiled gradient, cold, {long_} / {short} steps",
                 longer.timing().median, cold, GOAL_STEPS_GROWTH,
                 record={"workload": f"unrolled: N-body first compiled gradient, {long_} / "
                                     f"{short} steps (fresh process, default threading)",
                         "row": f"tapejit [numba] unrolled, {long_} steps",
                         "reference": f"{short} steps",
                         "first_call": f"cold: {short} steps {H.fmt_time(cold)}, {long_} steps "
                                       f"{H.fmt_time(longer.timing().median)}"})
    if jax_unrolled:
        H.ratio_line(f"N-body {short} steps: tapejit first compiled gradient, cold / JAX "
                     f"unrolled", cold, jax_unrolled.timing().median)


def nbody_first_call_table(rows: dict, steps: tuple[int, int]) -> None:
    short, long_ = steps
    ref = f"tapejit unrolled, {short} steps, cold"
    table = H.Table("N-body: first compiled gradient, each in a fresh process (median of the "
                    "children)", ref=ref, ratio_name="x unrolled cold")
    goals = {ref: f"<= {GOAL_NBODY_SECONDS:g} s, <= {GOAL_NBODY_RSS_MB:.0f} MB",
             f"tapejit unrolled, {long_} steps, cold": f"<= {GOAL_STEPS_GROWTH:.2f}x"}
    for name, row in rows.items():
        table.add(name, row.timing(), note=row.note(), goal=goals.get(name, ""))
        if name == f"JAX unrolled, {short} steps":
            table.add_missing(f"JAX unrolled, {long_} steps",
                              f"not run: JAX's compile grows faster than the steps ("
                              f"{short} took {H.fmt_time(row.timing().median)} here)")
    if not H.have("jax"):
        for label in (f"JAX unrolled, {short} steps", f"JAX lax.fori_loop, {short} steps"):
            table.add_missing(label, "not installed")
    table.print()


def nbody_steady_table(args: Any, steps: int, want: Any, jax_unrolled: FirstCalls | None) -> None:
    calls = {f"tapejit {style}": checked(f"tapejit {style}", spec("tapejit", "nbody", style,
                                                                   steps), want)
             for style in ("unrolled", "fori_loop")}
    if H.have("jax"):
        calls["JAX lax.fori_loop"] = checked("JAX lax.fori_loop",
                                             spec("jax", "nbody", "fori_loop", steps), want)
    table = H.Table(f"N-body, {steps} steps: steady-state value_and_grad (median of "
                    f"{args.repeats}, taking turns)", ref="tapejit fori_loop",
                    ratio_name="x fori_loop")
    for label, timing in take_turns(calls, args.repeats).items():
        table.add(label, timing)
    if jax_unrolled:
        table.add("JAX unrolled", H.Timing.of(jax_unrolled.runs[0]["steady"]),
                  note="measured in its first-call child")
    else:
        table.add_missing("JAX unrolled", "not installed")
        table.add_missing("JAX lax.fori_loop", "not installed")
    table.print()


def lotka_volterra_section(args: Any, steps: int) -> None:
    print(f"\nLotka-Volterra, {steps} explicit Euler steps on scalars: value_and_grad w.r.t. the "
          f"4 parameters")
    rows = [FirstCalls(f"tapejit {style}", spec("tapejit", "lotka_volterra", style, steps),
                       "cold", args.children) for style in ("unrolled", "fori_loop")]
    if H.have("jax") and not args.quick:
        rows.append(FirstCalls("JAX lax.fori_loop", spec("jax", "lotka_volterra", "fori_loop",
                                                         steps), "", args.children))
    run_rows(rows, None)
    want = reference("lotka_volterra", steps)
    check_rows(rows, want, "tj.fori_loop [interpret]")
    unrolled, looped = rows[:2]
    table = H.Table("Lotka-Volterra: first compiled gradient, each in a fresh process (median "
                    "of the children)", ref=looped.name, ratio_name="x fori_loop")
    for row in rows:
        table.add(row.name, row.timing(), note=row.note(),
                  goal=f"<= {GOAL_LV_COMPILE:.2f}x" if row is unrolled else "")
    add_missing_jax(table)
    table.print()
    t_unrolled, t_looped = lotka_volterra_steady_table(args, steps, want)
    first = f"cold {H.fmt_time(unrolled.timing().median)} ({unrolled.runs[-1]['calls'][-1][1]})"
    H.ratio_line(f"Lotka-Volterra {steps} steps: tapejit first compiled gradient, unrolled / "
                 f"fori_loop", unrolled.timing().median, looped.timing().median, GOAL_LV_COMPILE,
                 record={"workload": f"unrolled: Lotka-Volterra {steps} steps, first compiled "
                                     f"gradient (fresh process, default threading)",
                         "row": "tapejit [numba] unrolled", "reference": "tj.fori_loop",
                         "first_call": first})
    H.ratio_line(f"Lotka-Volterra {steps} steps: tapejit steady state, unrolled / fori_loop",
                 t_unrolled.median, t_looped.median, GOAL_LV_STEADY,
                 record={"workload": f"unrolled: Lotka-Volterra {steps} steps, steady state "
                                     f"(default threading)",
                         "row": "tapejit [numba] unrolled", "reference": "tj.fori_loop",
                         "first_call": first})


def add_missing_jax(table: H.Table) -> None:
    """The Lotka-Volterra JAX rows not run: the unrolled one, and without JAX both."""
    if not H.have("jax"):
        table.add_missing("JAX lax.fori_loop", "not installed")
    table.add_missing("JAX unrolled", JAX_LV_NOTE if H.have("jax") else "not installed")


def lotka_volterra_steady_table(args: Any, steps: int,
                                want: Any) -> tuple[H.Timing, H.Timing]:
    """The steady-state table; returns tapejit's two timings (unrolled, fori_loop)."""
    programs = {"tapejit unrolled": ("tapejit", "unrolled"),
                "tapejit fori_loop": ("tapejit", "fori_loop")}
    if H.have("jax"):
        programs["JAX lax.fori_loop"] = ("jax", "fori_loop")
    calls = {label: checked(label, spec(library, "lotka_volterra", style, steps), want)
             for label, (library, style) in programs.items()}
    timings = take_turns(calls, args.repeats)
    table = H.Table(f"Lotka-Volterra: steady-state value_and_grad (median of {args.repeats}, "
                    f"taking turns)", ref="tapejit fori_loop", ratio_name="x fori_loop")
    for label, timing in timings.items():
        table.add(label, timing, goal=f"<= {GOAL_LV_STEADY:.2f}x"
                  if label == "tapejit unrolled" else "")
    add_missing_jax(table)
    table.print()
    return timings["tapejit unrolled"], timings["tapejit fori_loop"]


@contextlib.contextmanager
def rerolling_off():
    """TAPEJIT_REROLL=0 within (transforms made and first called within keep loops unrolled)."""
    from tapejit import config
    saved = os.environ.get("TAPEJIT_REROLL")
    os.environ["TAPEJIT_REROLL"] = "0"
    config.reload()
    try:
        yield
    finally:
        os.environ.pop("TAPEJIT_REROLL")
        if saved is not None:
            os.environ["TAPEJIT_REROLL"] = saved
        config.reload()


def mlp_section(args: Any) -> None:
    import tapejit as tj
    print(f"\nMLP training: {MLP_STEPS} SGD steps of a 3-8-8-1 tanh MLP (16 samples) unrolled "
          f"inside one tj.jit; first calls in this process")
    call_args = mlp_arguments()
    with rerolling_off():
        want = tj.jit(train, backend="interpret")(*call_args)
    rerolled = tj.jit(train)
    fc = H.first_call("tapejit re-rolled", rerolled, *call_args)
    n_rerolled = rerolled.cache_info()["rerolled"]
    H.check_close("MLP training re-rolled vs unrolled on the interpreter (TAPEJIT_REROLL=0)",
                  fc.result, want, rtol=RTOL)
    calls = {"tapejit re-rolled": lambda: rerolled(*call_args)}
    notes = {"tapejit re-rolled": f"cache_info()['rerolled'] = {n_rerolled}; {fc.note}"}
    unrolled = "tapejit unrolled (TAPEJIT_REROLL=0)"
    if args.with_unrolled_mlp:
        calls[unrolled], notes[unrolled] = mlp_unrolled(unrolled, call_args, want)
    timings = take_turns(calls, args.repeats)
    table = H.Table(f"MLP training, {MLP_STEPS} steps in one tj.jit: steady state (median of "
                    f"{args.repeats}, taking turns)", ref="tapejit re-rolled")
    for label, timing in timings.items():
        table.add(label, timing, note=notes[label],
                  goal=">= 1 loop re-rolled" if label == "tapejit re-rolled" else "")
    if unrolled not in timings:
        table.add_missing(unrolled, "not run: its unrolled program compiles for tens of seconds "
                                    "(--with-unrolled-mlp runs it)")
    table.print()
    H.ratio_line(f"MLP training, {MLP_STEPS} steps in one tj.jit: loops re-rolled "
                 f"(cache_info()['rerolled']) / 1", n_rerolled, 1, 1.0, lower_is_better=False)
    if unrolled in timings:
        H.ratio_line("MLP training: steady state re-rolled / unrolled",
                     timings["tapejit re-rolled"].median, timings[unrolled].median)


def mlp_arguments() -> tuple:
    """(params, x, y, lr) of tests/test_reroll.py's MLP training test."""
    rng = np.random.default_rng(1)
    sizes = [3, 8, 8, 1]
    params = [(rng.normal(size=(m, n)) / np.sqrt(m), np.zeros(n))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(16, 3))
    return params, x, np.sin(x[:, :1]), 0.1


def mlp_unrolled(label: str, call_args: tuple, want: Any) -> tuple[Callable[[], Any], str]:
    """The training loop compiled with TAPEJIT_REROLL=0 and checked: (a call to time, a note)."""
    import tapejit as tj
    with rerolling_off():
        unrolled = tj.jit(train)
        fc = H.first_call(label, unrolled, *call_args)
    H.check_close("MLP training, TAPEJIT_REROLL=0 [numba] vs the interpreter", fc.result, want,
                  rtol=RTOL)
    return lambda: unrolled(*call_args), fc.note


def not_rerolled_section(args: Any) -> None:
    """Compile time of a loop left unrolled (TAPEJIT_REROLL=0) against its tape's ops."""
    import tapejit as tj
    steps = (10, 20, 40) if args.quick else (30, 60, 120)
    print(f"\nLoops that do not re-roll: Lotka-Volterra with TAPEJIT_REROLL=0, {steps} steps, "
          f"first compiled gradient against the ops of its gradient tape")
    rows = [FirstCalls(f"tapejit unrolled, {n} steps", spec("tapejit", "lotka_volterra",
                                                             "unrolled", n, reroll=False),
                       "cold", 1) for n in steps]
    run_rows(rows, None)
    with rerolling_off():
        ops = [len(tj.make_tape(tj.value_and_grad(function("tapejit", "lotka_volterra",
                                                                "unrolled", n)))(LV_PARAMS).eqns)
               for n in steps]
    table = H.Table("Unrolled Lotka-Volterra: first compiled gradient against tape size",
                    ref=rows[0].name, ratio_name="x shortest")
    for row, n in zip(rows, ops):
        seconds = row.timing().median
        table.add(row.name, row.timing(), note=f"{n:,} ops; {1000 * seconds / n:.2f} s per "
                                               f"1,000 ops; peak RSS {row.rss():.0f} MB")
    table.print()
    first, last = rows[0].timing().median, rows[-1].timing().median
    print(f"   slope: {1000 * (last - first) / (ops[-1] - ops[0]):.2f} s per 1,000 ops")
    H.ratio_line(f"unrolled Lotka-Volterra {steps[-1]} / {steps[0]} steps: compile growth / ops "
                 f"growth", last / first, ops[-1] / ops[0], GOAL_LINEAR)


def main() -> None:
    if "--child" in sys.argv:
        child(json.loads(sys.argv[sys.argv.index("--child") + 1]))
        return
    parser = H.make_parser(__doc__, repeats=7)
    parser.add_argument("--children", type=int, default=None,
                        help="fresh processes per first-call row (default 2, 1 with --quick)")
    parser.add_argument("--with-unrolled-mlp", action="store_true",
                        help="also time the MLP training loop with TAPEJIT_REROLL=0 (its "
                             "unrolled program compiles for tens of seconds)")
    parser.add_argument("--child", help=argparse_hidden())
    args = H.parse_args(parser)
    args.children = max(1, args.children or (1 if args.quick else 2))
    steps = (10, 100) if args.quick else (100, 1000)
    H.print_header("bench/unrolled.py: plain Python loops re-rolled (issue 20)", args,
                   rows="tapejit [numba] unrolled (default settings), tapejit [numba] "
                        "tj.fori_loop, JAX jit(value_and_grad) unrolled and lax.fori_loop",
                   extra=f"first calls: {args.children} fresh child process"
                         f"{'es' * (args.children > 1)} per row")
    print("   first compiled gradient: the first call that ran compiled, timed in a fresh "
          "process after the imports\n     (jax; numba, which tapejit imports at its first "
          "compile); its cache dir\n"
          "     cold            a new empty TAPEJIT_CACHE_DIR: the program and the math kernels "
          "(codegen/vmath.py) compile\n"
          "     kernels cached  a copy of a dir where a warm-up child ran another program with "
          "the same kernels:\n"
          "                     the kernels load from disk, the program compiles\n"
          "   peak RSS: the child's peak resident memory, imports included (VmHWM: ru_maxrss "
          "would count its parent's)\n"
          "   JAX rows: jit(value_and_grad), float64, no persistent cache (JAX's default)"
          + ("\n   --quick: one child per first-call row, and no such rows for tj.fori_loop's "
             "N-body and JAX's lax.fori_loop" if args.quick else ""), flush=True)
    kernels_dir = warm_kernels()
    try:
        nbody_section(args, steps, kernels_dir)
    finally:
        shutil.rmtree(kernels_dir, ignore_errors=True)
    lotka_volterra_section(args, 1000)
    mlp_section(args)
    not_rerolled_section(args)


def argparse_hidden() -> str:
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
