"""Compile time (issue 34): first compiled calls in fresh processes, against JAX's first call.

Every measurement is a fresh `python bench/compile.py --child` process with TAPEJIT_FIRST_CALL=
compile (the first call compiles) and an empty program cache: a new TAPEJIT_CACHE_DIR holding
only a copy of the per-machine caches (the cache key; the llvm generator's kernel library
`llvm/lib` and trampoline `llvm/runtime`; numba's copies of tapejit's own numba modules,
`lib`), which a warm-up child per workload makes once at the start. Default threading (the
script unpins itself unless TAPEJIT_BENCH_CPUS is set). Rounds take turns (each round runs every
workload once in every column), medians over the rounds.

First call (trace + differentiate + compile + run; the interpreter start and imports are timed
apart, the whole process too; tapejit's imports include its compiler, `tapejit.compile`, which
`import tapejit` itself leaves to the first compile) of: the six workloads of bench/peers.py (elementwise, dispatch,
mlp, lennard_jones, gmm's gradient and gmm's objective under `tj.jit`), per-example gradients
(`vmap(grad(loss), in_axes=(None, ..., 0, 0))` of bench/vmap.py's MLP, batch 1,024), a Gaussian
process's negative log likelihood (`cholesky`, `solve`; 200 points) and 200 explicit Euler
steps of Lotka-Volterra written as a Python loop (re-rolled into a scan). Columns: tapejit with
the llvm generator (the default), with TAPEJIT_CODEGEN=numba (`--numba-repeats` rounds: numba
compiles for seconds), JAX `jit(grad)` (x64; `jit(vmap(grad))`, `jit` for the objective), and
which generator made the llvm child's programs (`cache_info()["codegen"]`; the reason of a
numba fallback is its TAPEJIT_LOG=debug line). Every child's result is checked against the
tapejit interpreter's in this process. JAX runs the ODE as `lax.fori_loop` (see `euler`).
Goal: llvm first call <= 1.0x JAX's.

Then: warm start (mlp and gmm: the cold llvm child's cache dir again, once that child's
programs run their full tier, which is then on disk, as after any session longer than a
moment: time from after `import tapejit` to the first compiled result, goal <= 50 ms);
compile time against program size (a chain `x = np.sin(x) * 1.0001 + k` unrolled to
100..5,000 ops, TAPEJIT_REROLL=0, the op count read from `tj.explain`; the slope beyond the
fixed cost fitted by least squares, goal <= 0.5 ms/op; numba up to 1,000 ops); memory (RSS after compiling and dropping 100 distinct
small gradient programs, goal within 20 MB of the RSS after the first; numba: fewer programs).

    .venv/bin/python bench/compile.py [--repeats 3] [--numba-repeats 1] [--quick] [--no-numba]
"""
from __future__ import annotations

import time

_T0 = time.perf_counter()

import os  # noqa: E402

os.environ.setdefault("TAPEJIT_BENCH_CPUS", "all")     # the harness reads it: default threading

import _harness as H  # noqa: E402  first: sets the threading before numpy is imported

import gc  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import peers  # noqa: E402  the workloads (it imports numpy and the harness only)

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "RESULT "
WARM_GOAL_S, SLOPE_GOAL_S, RSS_GOAL_MB = 0.050, 0.5e-3, 20.0
SIZES, QUICK_SIZES, NUMBA_MAX_OPS = (100, 300, 1000, 3000, 5000), (100, 300), 1000
DT, STEPS, GP_POINTS = 0.01, 200, 200
WARM_WORKLOADS = ("mlp", "gmm")
SWEEP_CAP_S = 120.0         # a size that compiled for longer ends the sweep of its generator


# ---------------------------------------------------------------------------------------------
# the workloads beyond peers.py's, each written once against an array module `xp`

def per_example(xp, w1, b1, w2, b2, x, y):
    """bench/vmap.py's loss: squared error of a tanh MLP on one example."""
    return xp.sum((xp.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)


def gp_nll(xp, log_theta, x, y):
    """Negative log likelihood of a Gaussian process with a squared-exponential kernel."""
    n = x.shape[0]
    ell2, sf2, sn2 = (xp.exp(2.0 * log_theta[i]) for i in range(3))
    d = x[:, None] - x[None, :]
    k = sf2 * xp.exp(-0.5 * d * d / ell2) + (sn2 + 1e-6) * xp.eye(n)
    chol = xp.linalg.cholesky(k)
    alpha = xp.linalg.solve(chol.T, xp.linalg.solve(chol, y))
    return (0.5 * xp.dot(y, alpha) + xp.sum(xp.log(xp.diagonal(chol)))
            + 0.5 * n * math.log(2.0 * math.pi))


def euler_step(p, state):
    x, y = state
    return x + DT * (p[0] * x - p[1] * x * y), y + DT * (p[2] * x * y - p[3] * y)


def euler(xp, p, start):
    """Lotka-Volterra, STEPS explicit Euler steps; loss on the last state. tapejit: a Python
    loop (re-rolled into a scan); JAX: `lax.fori_loop` (its unrolled loop compiles for minutes:
    measured 2.3 s for 10 steps, 10 s for 20, 22 s for 30)."""
    state = (start[0], start[1])
    if xp is np:
        for _ in range(STEPS):
            state = euler_step(p, state)
    else:
        import jax
        state = jax.lax.fori_loop(0, STEPS, lambda i, s: euler_step(p, s), state)
    return (state[0] - 1.0) ** 2 + (state[1] - 0.5) ** 2


FUNCTIONS = {"elementwise": peers.elementwise, "dispatch": peers.sum_squares, "mlp": peers.mlp,
             "lennard_jones": peers.lennard_jones, "gmm": peers.gmm, "gmm_objective": peers.gmm,
             "vmap_grad": per_example, "gp": gp_nll, "ode": euler}
TITLES = {"gmm_objective": "gmm objective (jit)", "vmap_grad": "per-example grads (vmap)",
          "gp": f"GP likelihood, {GP_POINTS} points", "ode": f"ODE, {STEPS} Euler steps"}


def make_workloads(quick: bool) -> dict[str, dict]:
    """name -> {"args", "wrt", "kind": grad | jit | vmap_grad, "axes"}, made in the parent."""
    import vmap as bench_vmap
    out = {}
    makers = peers.workloads(quick)
    for name in ("elementwise", "dispatch", "mlp", "lennard_jones", "gmm"):
        w = makers[name]()
        out[name] = {"args": w.args, "wrt": w.wrt, "kind": "grad"}
    out["gmm_objective"] = dict(out["gmm"], kind="jit")
    rng = np.random.default_rng(0)
    d_in, hidden, d_out = bench_vmap.SIZES
    batch = bench_vmap.QUICK_BATCH if quick else bench_vmap.BATCH
    params = [rng.normal(size=s) * 0.3 for s in ((d_in, hidden), (hidden,), (hidden, d_out),
                                                  (d_out,))]
    out["vmap_grad"] = {"args": params + [rng.normal(size=(batch, d_in)),
                                          rng.normal(size=(batch, d_out))],
                        "wrt": (0, 1, 2, 3), "kind": "vmap_grad", "axes": (None,) * 4 + (0, 0)}
    x = np.sort(rng.uniform(-3.0, 3.0, GP_POINTS))
    out["gp"] = {"args": [np.array([0.0, 0.0, -1.0]), x, np.sin(x) + 0.1 * rng.normal(size=x.size)],
                 "wrt": (0,), "kind": "grad"}
    out["ode"] = {"args": [np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, 2.0])], "wrt": (0,),
                  "kind": "grad"}
    return out


def transform(lib: Any, name: str, w: dict, **kw: Any) -> Callable[..., Any]:
    """The workload's transform in tapejit (`lib` = tapejit; `kw`: backend) or JAX."""
    xp = lib.numpy if lib.__name__ == "jax" else np
    fn = FUNCTIONS[name]

    def f(*args: Any) -> Any:
        return fn(xp, *args)
    if w["kind"] == "jit":
        return lib.jit(f, **kw)
    made = lib.grad(f, argnums=w["wrt"], **kw)
    if w["kind"] == "vmap_grad":
        made = lib.vmap(made, in_axes=w["axes"], **kw)
    return lib.jit(made) if lib.__name__ == "jax" else made


# ---------------------------------------------------------------------------------------------
# the child processes

def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def alive() -> dict[str, int]:
    """The programs alive in this process, by generator (`Compiled` objects, counted by their
    `codegen`)."""
    from tapejit.compile import Compiled
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        if type(obj) is Compiled:       # (isinstance fails on dead weak proxies)
            counts[obj.codegen] = counts.get(obj.codegen, 0) + 1
    return counts


class Fallbacks(logging.Handler):
    """Collects tapejit's debug lines saying why numba compiles a program."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "numba compiles this program" in text:
            self.reasons.append(text.split("does not cover", 1)[-1].strip())


def child_first(spec: dict) -> dict:
    """The first two calls of one workload; its result pickled to spec["out"]."""
    with open(spec["data"], "rb") as fh:
        w = pickle.load(fh)
    t_data = time.perf_counter()
    if spec["lib"] == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        args = [jax.numpy.asarray(a) if isinstance(a, np.ndarray) else a for a in w["args"]]
        lib, block = jax, jax.block_until_ready
    else:
        import tapejit as lib
        import tapejit.compile  # noqa: F401  the compiler, which `import tapejit` leaves to the
        #                        first compile (code generation, llvmlite): a library import,
        #                        as `import jax` is; the whole process is timed too
        log = logging.getLogger("tapejit")
        log.setLevel(logging.DEBUG)         # tapejit sets its own level when it first logs
        log.addHandler(fallbacks := Fallbacks())
        args, block = w["args"], (lambda r: r)
    t_lib = time.perf_counter()
    fn = transform(lib, spec["name"], w)
    result = block(fn(*args))
    t_first = time.perf_counter()
    block(fn(*args))
    out = {"import": t_data - _T0, "import_lib": t_lib - t_data, "first": t_first - t_lib,
           "second": time.perf_counter() - t_first}
    if spec.get("settle"):
        settle(fn)
    if spec["lib"] != "jax":
        out |= {"cache_info": {k: v for k, v in fn.cache_info().items() if k != "last_miss"},
                "fallbacks": fallbacks.reasons}
    with open(spec["out"], "wb") as fh:
        pickle.dump([np.asarray(r) for r in (result if isinstance(result, (tuple, list))
                                              else [result])], fh)
    return out


def settle(fn: Any, limit_s: float = 120.0) -> None:
    """Wait (untimed) until `fn`'s programs run their full tier, which is then on disk: the
    cache a session that ran for more than a moment leaves to the next process."""
    end = time.monotonic() + limit_s
    while fn.cache_info()["quick_tier"] and time.monotonic() < end:
        time.sleep(0.01)


def chain(steps: int) -> Callable[[np.ndarray], np.ndarray]:
    def f(x):
        for k in range(steps):
            x = np.sin(x) * 1.0001 + 0.001 * k
        return x
    return f


def census(tape: Any) -> int:
    """The ops of `tape`, those inside fused loops (a `body` parameter) counted one by one."""
    return sum(census(dict(e.params)["body"]) if "body" in dict(e.params) else 1
               for e in tape.eqns)


def child_chain(spec: dict) -> dict:
    """The first compiled call of `tj.jit(chain)` with about spec["ops"] ops (re-rolling off)."""
    import tapejit as tj
    x = np.linspace(-1.0, 1.0, 1000)
    per_step = census(tj.explain(chain(10), grad=False)(x).tape) / 10
    steps = max(1, round(spec["ops"] / per_step))
    ex = tj.explain(chain(steps), grad=False)(x)
    assert "rerolled" not in ex.tapes, "the chain was re-rolled: set TAPEJIT_REROLL=0"
    fn = tj.jit(chain(steps))
    t0 = time.perf_counter()
    got = fn(x)
    seconds = time.perf_counter() - t0
    np.testing.assert_allclose(got, chain(steps)(x), rtol=1e-9)
    return {"ops": census(ex.tape), "first": seconds, "codegen": fn.cache_info()["codegen"]}


def small_program(i: int) -> Callable[[np.ndarray], Any]:
    """Program `i` of the memory test: sin, then 8 ops chosen by the bits of i (distinct for
    i < 256: every program calls the same kernels)."""
    def f(x):
        x = np.sin(x)
        for bit in range(8):
            x = np.sin(x) if (i >> bit) & 1 else np.cos(x) * 1.5
        return np.sum(x * x)
    return f


def child_memory(spec: dict) -> dict:
    """RSS before and after compiling and dropping spec["programs"] distinct gradients."""
    import tapejit as tj
    x = np.linspace(-1.0, 1.0, 100)
    rss = {"import": rss_mb()}
    made: dict[str, int] = {}
    for i in range(spec["programs"] + 1):
        fn = tj.grad(small_program(i))
        fn(x)
        for codegen, count in fn.cache_info()["codegen"].items():
            made[codegen] = made.get(codegen, 0) + count
        del fn
        gc.collect()
        if i == 0:
            rss["first"] = rss_mb()
    rss["last"] = rss_mb()
    return {"rss": rss, "codegen": made, "alive": alive()}


def child(spec: dict) -> None:
    run = {"first": child_first, "chain": child_chain, "memory": child_memory}[spec["mode"]]
    print(MARK + json.dumps(run(spec)), flush=True)


# ---------------------------------------------------------------------------------------------
# the parent: spawning children in fresh cache dirs

class Runner:
    """Spawns children; each tapejit child gets a new cache dir holding a copy of `machine`
    (the per-machine caches)."""

    def __init__(self, tmp: str, quick: bool) -> None:
        self.tmp, self.quick, self.machine = tmp, quick, os.path.join(tmp, "machine")
        self.count = 0
        self.data: dict[str, str] = {}                  # workload -> its pickled arguments
        self.want: dict[str, list[np.ndarray]] = {}     # workload -> the interpreter's result

    def fresh_dir(self) -> str:
        self.count += 1
        path = os.path.join(self.tmp, f"cache{self.count}")
        if os.path.isdir(self.machine):
            shutil.copytree(self.machine, path)
        else:
            os.mkdir(path, 0o700)
        return path

    def spawn(self, spec: dict, codegen: str | None = None, cache: str | None = None,
              **env: str) -> dict:
        """Run one child (`codegen` None: no tapejit settings) and return its RESULT."""
        env = dict(os.environ, **env)
        if codegen is not None:
            cache = cache or self.fresh_dir()
            env.update(TAPEJIT_FIRST_CALL="compile", TAPEJIT_CODEGEN=codegen,
                       TAPEJIT_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.join(HERE, "compile.py"), "--child",
                               json.dumps(spec)], env=env, cwd=HERE, capture_output=True,
                              text=True, timeout=1800)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr[-5000:])
            raise SystemExit(f"child {spec} ({codegen or 'jax'}) failed: exit {proc.returncode}")
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)][-1]
        return dict(json.loads(line[len(MARK):]), process=wall, cache=cache)

    def keep_machine_caches(self, warm: str) -> None:
        """Copy the per-machine parts of the cache dir `warm` into `machine`."""
        os.makedirs(self.machine, 0o700)
        shutil.copy2(os.path.join(warm, "key"), os.path.join(self.machine, "key"))
        for tag in (d for d in os.listdir(warm) if os.path.isdir(os.path.join(warm, d))):
            for part in ("llvm/lib", "llvm/runtime", "lib"):
                src = os.path.join(warm, tag, part)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(self.machine, tag, part))


def med(runs: list[dict], key: str = "first") -> float | None:
    return H.Timing.of(r[key] for r in runs).median if runs else None


def check(what: str, path: str, want: list[np.ndarray], rtol: float) -> None:
    """The child's pickled result against the interpreter's (quietly: one line per run)."""
    import contextlib
    import io
    with open(path, "rb") as fh:
        got = pickle.load(fh)
    with contextlib.redirect_stdout(io.StringIO()):
        H.check_close(what, got, want, rtol=rtol, atol=1e-9)


def columns(args: Any, round_: int) -> list[tuple[str, str | None]]:
    """(column, codegen) of the children of one workload in round `round_`."""
    cols: list[tuple[str, str | None]] = [("llvm", "llvm")]
    if H.numba_row_wanted(args) and round_ < args.numba_repeats:
        cols.append(("numba", "numba"))
    if H.have("jax"):
        cols.append(("jax", None))
    return cols


def one_workload(run: Runner, name: str, runs: dict, args: Any, round_: int) -> None:
    """One child per column (and after the llvm child of mlp and gmm, a warm one in its dir),
    each checked; one line each."""
    for col, codegen in columns(args, round_):
        out = os.path.join(run.tmp, f"{name}-{col}.pkl")
        spec = {"mode": "first", "name": name, "data": run.data[name], "out": out,
                "lib": "tapejit" if codegen else "jax",
                "settle": col == "llvm" and name in WARM_WORKLOADS}
        res = run.spawn(spec, codegen)
        check(f"{name} {col}", out, run.want[name], 1e-7 if codegen else 1e-6)
        runs[name][col].append(res)
        child_line(round_, name, col, res)
        if col == "llvm" and name in WARM_WORKLOADS:
            warm = run.spawn({**spec, "settle": False}, "llvm", cache=res["cache"])
            check(f"{name} warm", out, run.want[name], 1e-7)
            runs[name]["warm"].append(warm)
            child_line(round_, name, "warm", warm)
        if res["cache"]:
            shutil.rmtree(res["cache"], ignore_errors=True)


def child_line(round_: int, name: str, col: str, r: dict) -> None:
    more = f"; cache_info {r['cache_info']}" if "cache_info" in r else ""
    print(f"   round {round_ + 1} {name} [{col}]: first call {H.fmt_time(r['first'])}, import "
          f"{H.fmt_time(r['import'] + r['import_lib'])}, process {H.fmt_time(r['process'])}"
          f"{more}", flush=True)


def report_first(runs: dict, names: list[str]) -> None:
    """The table of first calls, the generators that ran, the goal lines."""
    heads = ("workload", "llvm first", "numba first", "JAX first", "llvm/JAX", "llvm process",
             "JAX process", "generator (llvm child)")
    rows = []
    for name in names:
        r = runs[name]
        llvm, jax = med(r["llvm"]), med(r["jax"])
        gens = r["llvm"][-1]["cache_info"]["codegen"]
        rows.append((TITLES.get(name, name), H.fmt_time(llvm), H.fmt_time(med(r["numba"])),
                     H.fmt_time(jax), f"{llvm / jax:.2f}x" if jax else "-",
                     H.fmt_time(med(r["llvm"], "process")), H.fmt_time(med(r["jax"], "process")),
                     ", ".join(f"{k} {v}" for k, v in sorted(gens.items()) if v)))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    print("\nfirst call in a fresh process, empty program cache (medians; llvm and JAX: "
          f"{len(runs[names[0]]['llvm'])} rounds, numba: {len(runs[names[0]]['numba'])})")
    for row in (heads, tuple("-" * n for n in widths), *rows):
        print("  " + "  ".join(c.rjust(n) if 0 < i < 7 else c.ljust(n)
                               for i, (c, n) in enumerate(zip(row, widths))).rstrip())
    for name in names:
        for reason in sorted(set(runs[name]["llvm"][-1]["fallbacks"])):
            print(f"   {name}: numba compiled a program: the LLVM lowering does not cover {reason}")
    print()
    for name in names:
        r = runs[name]
        H.ratio_line(f"first call, {TITLES.get(name, name)}: tapejit [llvm] / JAX",
                     med(r["llvm"]), med(r["jax"]), 1.0,
                     record={"workload": f"compile: first call, {TITLES.get(name, name)}, "
                                         "fresh process, default threading",
                             "row": "tapejit [llvm] first call", "reference": "JAX first call",
                             "first_call": f"numba generator {H.fmt_time(med(r['numba']))}; "
                                           f"programs {r['llvm'][-1]['cache_info']['codegen']}"})


def report_warm(runs: dict) -> None:
    for name in (n for n in WARM_WORKLOADS if runs.get(n, {}).get("warm")):
        warm = runs[name]["warm"]
        info = warm[-1]["cache_info"]
        print(f"   warm start {name}: import tapejit {H.fmt_time(med(warm, 'import_lib'))}, then "
              f"first compiled result {H.fmt_time(med(warm))} (compiles {info['compiles']}, "
              f"disk loads {info['disk_loads']}); whole process {H.fmt_time(med(warm, 'process'))}")
        H.ratio_line(f"warm start, {name}: after import tapejit -> first compiled result / 50 ms",
                     med(warm), WARM_GOAL_S, 1.0,
                     record={"workload": f"compile: warm disk cache, {name}, fresh process",
                             "row": "after import tapejit -> first compiled result",
                             "reference": "50 ms"})


def sweep(run: Runner, args: Any) -> None:
    """First compiled call of chains of growing size; the fitted ms per op."""
    print("\ncompile time against program size: tj.jit of an unrolled chain (TAPEJIT_REROLL=0), "
          "one child per size")
    fits: dict[str, list[tuple[int, float]]] = {"llvm": [], "numba": []}
    for ops in QUICK_SIZES if args.quick else SIZES:
        for codegen in ("llvm", "numba"):
            if codegen == "numba" and (ops > NUMBA_MAX_OPS or not H.numba_row_wanted(args)):
                continue
            if fits[codegen] and fits[codegen][-1][1] > SWEEP_CAP_S:
                print(f"   {ops:>5} ops [{codegen}]: not run (the last size took over "
                      f"{SWEEP_CAP_S:.0f} s)")
                continue
            r = run.spawn({"mode": "chain", "ops": ops}, codegen, TAPEJIT_REROLL="0")
            fits[codegen].append((r["ops"], r["first"]))
            print(f"   {ops:>5} ops [{codegen}]: {r['ops']} ops in the tape, first call "
                  f"{H.fmt_time(r['first'])}; codegen {r['codegen']}", flush=True)
            shutil.rmtree(r["cache"], ignore_errors=True)
    for codegen, points in fits.items():
        if len(points) < 2:
            continue
        slope, fixed = (float(v) for v in np.polyfit(*zip(*points), 1))
        print(f"   fit [{codegen}]: {fixed * 1e3:.0f} ms + {slope * 1e3:.3f} ms per op "
              f"({points[0][0]}..{points[-1][0]} ops)")
        if codegen == "llvm":
            H.ratio_line("compile time per op beyond the fixed cost [llvm] / 0.5 ms", slope,
                         SLOPE_GOAL_S, 1.0,
                         record={"workload": "compile: ms per op, unrolled elementwise chain",
                                 "row": f"tapejit [llvm] slope {slope * 1e3:.3f} ms/op",
                                 "reference": "0.5 ms per op"})


def memory(run: Runner, args: Any) -> None:
    """RSS growth over many small programs compiled and dropped."""
    print("\nmemory: distinct small gradient programs compiled, each dropped (del + gc) "
          "before the next; RSS after the first against after the last")
    counts = [("llvm", 10 if args.quick else 100)]
    if H.numba_row_wanted(args):
        counts.append(("numba", 5 if args.quick else 20))
    growth = {}
    for codegen, n in counts:
        r = run.spawn({"mode": "memory", "programs": n}, codegen)
        rss = r["rss"]
        growth[codegen] = (rss["last"] - rss["first"]) * 100 / n
        print(f"   [{codegen}] {n} programs: RSS {rss['import']:.0f} MB after import, "
              f"{rss['first']:.0f} MB after the first program, {rss['last']:.0f} MB after {n} "
              f"more: {(rss['last'] - rss['first']) / n:.2f} MB per program, "
              f"{growth[codegen]:+.0f} MB per 100{' (scaled)' * (n != 100)}; codegen "
              f"{r['codegen']}, programs alive at the end {r['alive']}", flush=True)
        shutil.rmtree(r["cache"], ignore_errors=True)
    H.ratio_line("RSS growth over 100 programs compiled and dropped [llvm] / 20 MB",
                 max(growth["llvm"], 0.0), RSS_GOAL_MB, 1.0)   # MB: no RESULTS.md row


def prepare(run: Runner, names: list[str], quick: bool) -> None:
    """Pickle each workload's arguments, compute its result on the interpreter, and make the
    per-machine caches with a warm-up child per workload (llvm generator)."""
    import tapejit as tj
    for name, w in make_workloads(quick).items():
        if name not in names:
            continue
        run.data[name] = os.path.join(run.tmp, f"{name}.pkl")
        with open(run.data[name], "wb") as fh:
            pickle.dump(w, fh)
        result = transform(tj, name, w, backend="interpret")(*w["args"])
        run.want[name] = [np.asarray(r) for r in (result if isinstance(result, (tuple, list))
                                                  else [result])]
    warm = os.path.join(run.tmp, "warm-up")
    os.mkdir(warm, 0o700)
    t0 = time.perf_counter()
    for name in names:
        run.spawn({"mode": "first", "name": name, "data": run.data[name], "lib": "tapejit",
                   "out": os.path.join(run.tmp, "warm-up.pkl")}, "llvm", cache=warm)
    run.spawn({"mode": "chain", "ops": 30}, "llvm", cache=warm, TAPEJIT_REROLL="0")
    run.spawn({"mode": "memory", "programs": 1}, "llvm", cache=warm)
    run.keep_machine_caches(warm)
    print(f"   per-machine caches: a warm-up child per workload (and one chain, one memory "
          f"child), llvm generator, in {time.perf_counter() - t0:.1f} s; every tapejit child "
          f"below starts from a copy of the cache key, llvm/lib (kernel library), llvm/runtime "
          f"(trampoline) and lib (tapejit's own numba modules), no program", flush=True)


def main() -> None:
    if "--child" in sys.argv:
        child(json.loads(sys.argv[sys.argv.index("--child") + 1]))
        return
    parser = H.make_parser(__doc__, repeats=3)
    parser.add_argument("--numba-repeats", type=int, default=1,
                        help="rounds with a TAPEJIT_CODEGEN=numba child (default 1)")
    parser.add_argument("--workloads", default=",".join(FUNCTIONS))
    parser.add_argument("--parts", default="first,sweep,memory",
                        help="comma-separated: first (and warm start), sweep, memory")
    parser.add_argument("--child", help=argparse_hidden())
    args = H.parse_args(parser)
    if args.quick and not any(a.startswith("--repeats") for a in sys.argv):
        args.repeats = 1
    names, parts = args.workloads.split(","), args.parts.split(",")
    H.print_header("bench/compile.py: first compiled call in a fresh process, llvm and numba "
                   "generators against JAX", args, rows="tapejit [llvm], tapejit [numba] "
                   "(TAPEJIT_CODEGEN=numba), JAX jit, each child a fresh process",
                   extra="default threading")
    run = Runner(tempfile.mkdtemp(prefix="tapejit-bench-compile-"), args.quick)
    try:
        prepare(run, names, args.quick)
        if "first" in parts:
            runs = {n: {"llvm": [], "numba": [], "jax": [], "warm": []} for n in names}
            for round_ in range(args.repeats):
                for name in names:
                    one_workload(run, name, runs, args, round_)
            print(f"   check: every child's result matched the tapejit interpreter's "
                  f"(rtol 1e-7 tapejit, 1e-6 JAX)")
            report_first(runs, names)
            report_warm(runs)
        if "sweep" in parts:
            sweep(run, args)
        if "memory" in parts:
            memory(run, args)
    finally:
        shutil.rmtree(run.tmp, ignore_errors=True)


def argparse_hidden() -> str:
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
