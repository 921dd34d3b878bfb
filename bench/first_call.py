"""Whole-process time to the first MLP gradient, imports included: tapejit cold and warm, JAX,
PyTorch eager.

Issue goal: "the whole-process time to the first MLP gradient, imports included: with a warm
disk cache, below JAX's; cold, within 1.5x of JAX's."

Every measurement spawns a fresh `python -c <program>`: a self-contained user script that
imports its library (and numpy), builds bench/mlp.py's 64-256-256-10 tanh MLP parameters and
1,797 random samples (the same arrays as `mlp.init_params()` and `mlp.make_data(digits=False)`),
computes the gradient of the softmax cross-entropy w.r.t. the parameter dict once, prints its
timings and a few checksums of the gradient (one JSON line), and exits normally. The parent
times the child from spawn to exit ("whole process": interpreter start, imports, data, first
gradient, interpreter teardown), and the child reports the time from spawn to its first
gradient result and, in-process, its imports and the first gradient call. Programs:

  tapejit cold   `tj.grad(loss, backend="numba")(params, x, y)` with a new empty
                 TAPEJIT_CACHE_DIR (and NUMBA_CACHE_DIR inside it), default settings: trace,
                 differentiate, optimize, and, the kernels this program calls (tanh, exp, log)
                 not built yet on this "machine", run the first call on the numpy interpreter
                 (cache_info must say interpreted=1, compiles=0)
  tapejit cold, compiled first call
                 the same with TAPEJIT_FIRST_CALL=compile: numba builds the kernels (what a
                 machine pays once), then the LLVM lowering compiles the program (compiles=1)
  tapejit warm   the default script again with the cache dir those rows filled: the kernels and
                 the program's object code load from disk, and the first call runs compiled
                 (interpreted=0, disk_loads=1)
  tapejit [TAPEJIT_CODEGEN=numba] cold, compiled first call / warm, compiled first call
                 the same script with numba compiling the program (TAPEJIT_FIRST_CALL=compile),
                 the generator before the LLVM lowering: numba compiles (compiles=1), then,
                 with the cache that filled, loads the program from disk (disk_loads=1)
  JAX            `jax.jit(jax.grad(loss))(params, x, y)`, jax_enable_x64, float64; JAX's
                 persistent compilation cache off (its default)
  JAX warm cache (informative) the same with jax_compilation_cache_dir set to a dir a previous
                 child filled (jax_persistent_cache_min_compile_time_secs=0)
  PyTorch eager  `torch.autograd.grad(loss(params), params)`

The runs take turns (one of each per round, --repeats rounds, default 5) and the table shows
medians. Every child's gradient checksums are compared with bench/mlp.py's hand-written numpy
backward (rtol 1e-9). Like every bench the process is pinned to one CPU (the children inherit
the pin, and the single-thread settings); --all-cores runs the children on every allowed CPU.
Ratios: tapejit warm / JAX (goal < 1, printed as <= 1.00x) and tapejit cold / JAX (goal <=
1.5x), whole process; the same for the compiled-first-call rows, and spawn-to-first-gradient,
follow without goals.

    .venv/bin/python bench/first_call.py [--repeats 5] [--quick] [--all-cores] [--no-torch]
"""
from __future__ import annotations

import _harness as H  # first: pins the process (and so its children) to one CPU

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "RESULT "
GOAL_WARM = 1.0      # the issue: "below JAX's"
GOAL_COLD = 1.5
SPAWN_ENV = "TAPEJIT_BENCH_SPAWN_TIME"
# the same script with numba compiling the program, on the first call
COMPILED_FIRST = ("tapejit [TAPEJIT_CODEGEN=numba] cold, compiled first call",
                  "tapejit [TAPEJIT_CODEGEN=numba] warm, compiled first call")
LLVM_COLD = "tapejit cold, compiled first call"
# what each tapejit row's cache_info must say
EXPECTED = {"tapejit cold": {"interpreted": 1, "compiles": 0, "disk_loads": 0},
            LLVM_COLD: {"interpreted": 0, "compiles": 1, "disk_loads": 0},
            "tapejit warm": {"interpreted": 0, "compiles": 0, "disk_loads": 1},
            COMPILED_FIRST[0]: {"interpreted": 0, "compiles": 1, "disk_loads": 0},
            COMPILED_FIRST[1]: {"interpreted": 0, "compiles": 0, "disk_loads": 1}}

# The child: one program per framework, a prologue and epilogue shared. Nothing from bench/ is
# imported (bench/mlp.py imports tapejit, which the JAX and torch children must not pay for).
PROLOGUE = """\
import time
_t0 = time.perf_counter()
import json, os
{imports}
t_import = time.perf_counter() - _t0
sizes, n = {sizes!r}, {n!r}
rng = np.random.default_rng(0)
x = np.ascontiguousarray(rng.uniform(0.0, 1.0, size=(n, sizes[0])))
y = np.eye(sizes[-1])[rng.integers(0, sizes[-1], size=n)]
rng = np.random.default_rng(0)
params = {{}}
for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
    limit = np.sqrt(6.0 / (n_in + n_out))
    params[f"w{{i}}"] = rng.uniform(-limit, limit, size=(n_in, n_out))
    params[f"b{{i}}"] = rng.normal(scale=0.1, size=n_out)
t_data = time.perf_counter()
"""

EPILOGUE = """\
t_done = time.perf_counter()
since_spawn = time.time() - float(os.environ["{spawn_env}"])
stats = {{}}
for k, a in grads.items():
    a = np.asarray(a, dtype=np.float64).ravel()
    stats[k] = [float(a.sum()), float(a @ a), float(a @ np.linspace(-1.0, 1.0, a.size))]
print("{mark}" + json.dumps({{"import": t_import, "first": t_done - t_data,
                             "script_to_grad": t_done - _t0, "spawn_to_grad": since_spawn,
                             "stats": stats, "cache_info": info}}), flush=True)
"""

PROGRAMS = {
    "tapejit": ("import numpy as np\nimport tapejit as tj", """\
def loss(params, x, y_onehot):
    h = x
    n_layers = len(params) // 2
    for i in range(1, n_layers):
        h = np.tanh(h @ params[f"w{i}"] + params[f"b{i}"])
    logits = h @ params[f"w{n_layers}"] + params[f"b{n_layers}"]
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(y_onehot * log_probs, axis=1))
g = tj.grad(loss, backend="numba")
grads = g(params, x, y)
info = {k: v for k, v in g.cache_info().items()
        if k in ("traces", "interpreted", "compiles", "disk_loads")}
"""),
    "jax": ("import numpy as np\nimport jax\njax.config.update('jax_enable_x64', True)\n"
            "import jax.numpy as jnp", """\
cache = os.environ.get("BENCH_JAX_CACHE")
if cache:
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
def loss(params, x, y_onehot):
    h = x
    n_layers = len(params) // 2
    for i in range(1, n_layers):
        h = jnp.tanh(h @ params[f"w{i}"] + params[f"b{i}"])
    logits = h @ params[f"w{n_layers}"] + params[f"b{n_layers}"]
    log_probs = logits - jax.nn.logsumexp(logits, axis=1, keepdims=True)
    return -jnp.mean(jnp.sum(y_onehot * log_probs, axis=1))
grads = jax.block_until_ready(jax.jit(jax.grad(loss))(params, x, y))
info = {}
"""),
    "torch": ("import numpy as np\nimport torch", """\
def loss(params, x, y_onehot):
    h = x
    n_layers = len(params) // 2
    for i in range(1, n_layers):
        h = torch.tanh(h @ params[f"w{i}"] + params[f"b{i}"])
    logits = h @ params[f"w{n_layers}"] + params[f"b{n_layers}"]
    log_probs = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return -torch.mean(torch.sum(y_onehot * log_probs, dim=1))
tp = {k: torch.from_numpy(a).requires_grad_(True) for k, a in params.items()}
keys = list(tp)
out = torch.autograd.grad(loss(tp, torch.from_numpy(x), torch.from_numpy(y)), [tp[k] for k in keys])
grads = {k: t.numpy() for k, t in zip(keys, out)}
info = {}
"""),
}


def program(framework: str, sizes: tuple, n: int) -> str:
    imports, body = PROGRAMS[framework]
    return (PROLOGUE.format(imports=imports, sizes=tuple(sizes), n=n) + body
            + EPILOGUE.format(spawn_env=SPAWN_ENV, mark=MARK))


def spawn(code: str, env: dict) -> dict:
    """Run `python -c code`; its RESULT line plus "process": seconds from spawn to exit."""
    env = dict(env)
    env[SPAWN_ENV] = repr(time.time())
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=HERE, capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"child process failed with exit code {proc.returncode}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)][-1]
    out = json.loads(line[len(MARK):])
    out["process"] = wall
    return out


def reference_stats(sizes: tuple, n: int) -> dict:
    """The checksums of bench/mlp.py's hand-written gradient on the same data."""
    import mlp
    x, y, _ = mlp.make_data(n, sizes, digits=False)
    params = mlp.init_params(sizes)
    grads = mlp.numpy_value_and_grad(params, x, y)[1]
    out = {}
    for k, a in grads.items():
        a = a.ravel()
        out[k] = [float(a.sum()), float(a @ a), float(a @ np.linspace(-1.0, 1.0, a.size))]
    return out


def check(label: str, got: dict, want: dict) -> None:
    assert set(got) == set(want), (label, sorted(got), sorted(want))
    for k in want:
        assert np.allclose(got[k], want[k], rtol=1e-9, atol=1e-12), (label, k, got[k], want[k])


def main() -> None:
    parser = H.make_parser(__doc__, repeats=5)
    parser.add_argument("--all-cores", action="store_true",
                        help="run the children on every allowed CPU, without the harness's "
                             "single-thread settings (default: pinned to one CPU, like every "
                             "other bench)")
    parser.add_argument("--no-torch", action="store_true", help="leave out PyTorch eager")
    parser.add_argument("--no-jax-cache", action="store_true",
                        help="leave out the informative JAX-with-persistent-cache row")
    args = H.parse_args(parser)
    if args.quick and not any(a.startswith("--repeats") for a in sys.argv):
        args.repeats = 1
    import mlp
    sizes, n = (mlp.QUICK_SIZES, mlp.QUICK_SAMPLES) if args.quick else (mlp.SIZES, mlp.N_SAMPLES)
    env = dict(os.environ)
    env.pop(H.RESULTS_ENV, None)
    cpus = ("inherit the pin and " + ", ".join(f"{k}={os.environ[k]}" for k in H._ONE_THREAD
                                               if k in os.environ)
            if H.PINNED else "not pinned")
    if args.all_cores and hasattr(os, "sched_setaffinity"):
        allowed = {int(c) for c in os.environ.get(H.ALLOWED_ENV, "").split(",") if c} or \
            set(os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed)
        for name, value in H._ONE_THREAD.items():
            if env.get(name) == value:
                del env[name]
        cpus = f"--all-cores: children on all {len(allowed)} allowed CPUs, library defaults"
    frameworks = ["tapejit cold", LLVM_COLD, *COMPILED_FIRST, "tapejit warm"]
    if H.have("jax"):
        frameworks.append("JAX")
        if not args.no_jax_cache:
            frameworks.append("JAX warm cache")
    if H.have("torch") and not args.no_torch:
        frameworks.append("PyTorch eager")
    H.print_header("bench/first_call.py: whole-process time to the first MLP gradient", args,
                   rows=", ".join(frameworks),
                   extra=f"{'-'.join(map(str, sizes))} tanh MLP, {n} samples, float64; each run "
                         f"a fresh `python -c`")
    print(f"   children: {cpus}")
    want = reference_stats(sizes, n)
    codes = {"tapejit": program("tapejit", sizes, n), "jax": program("jax", sizes, n),
             "torch": program("torch", sizes, n)}
    runs: dict[str, list[dict]] = {f: [] for f in frameworks}
    jax_cache = tempfile.mkdtemp(prefix="tapejit-bench-jax-cache-")
    try:
        if "JAX warm cache" in frameworks:     # fill JAX's persistent cache once
            spawn(codes["jax"], dict(env, BENCH_JAX_CACHE=jax_cache))
        for i in range(args.repeats):
            d = tempfile.mkdtemp(prefix="tapejit-bench-cache-")
            tj_env = dict(env, TAPEJIT_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
            tj_env.pop("TAPEJIT_LIBRARY_DIR", None)       # the kernel library in `d`, empty
            try:
                for fw in frameworks:
                    if fw in COMPILED_FIRST:
                        r = spawn(codes["tapejit"], dict(tj_env, TAPEJIT_FIRST_CALL="compile",
                                                         TAPEJIT_CODEGEN="numba"))
                    elif fw == LLVM_COLD:
                        r = spawn(codes["tapejit"], dict(tj_env, TAPEJIT_FIRST_CALL="compile"))
                    elif fw.startswith("tapejit"):     # the default first-call tier
                        r = spawn(codes["tapejit"], dict(tj_env, TAPEJIT_FIRST_CALL="interpret"))
                    elif fw == "JAX":
                        r = spawn(codes["jax"], env)
                    elif fw == "JAX warm cache":
                        r = spawn(codes["jax"], dict(env, BENCH_JAX_CACHE=jax_cache))
                    else:
                        r = spawn(codes["torch"], env)
                    check(fw, r["stats"], want)
                    runs[fw].append(r)
                    print(f"   round {i + 1} {fw:15s}: whole process {H.fmt_time(r['process'])}, "
                          f"spawn to gradient {H.fmt_time(r['spawn_to_grad'])}, imports "
                          f"{H.fmt_time(r['import'])}, first gradient call "
                          f"{H.fmt_time(r['first'])}"
                          + (f"; cache_info {r['cache_info']}" if r["cache_info"] else ""),
                          flush=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(jax_cache, ignore_errors=True)
    print("   check: every child's gradient checksums matched bench/mlp.py's hand-written "
          "backward (rtol 1e-9)")
    bad = [(fw, r["cache_info"]) for fw, want_info in EXPECTED.items() for r in runs[fw]
           if any(r["cache_info"].get(k) != v for k, v in want_info.items())]
    print(f"   WARNING: cache_info not as expected ({EXPECTED}): {bad}" if bad else
          "   check: every default cold child ran its first call on the interpreter (its "
          "kernels not built), every compiled cold child compiled once with the LLVM lowering, "
          "every default warm child ran its first call compiled from disk; with "
          "TAPEJIT_CODEGEN=numba every cold child compiled once and every warm child loaded "
          "from disk")

    def med(fw: str, key: str) -> float | None:
        return H.Timing.of(r[key] for r in runs[fw]).median if runs.get(fw) else None

    table = H.Table(f"whole-process time to the first MLP gradient (median of {args.repeats})",
                    ref="JAX", ratio_name="x JAX (process)")
    cols = (("process", "spawn to exit"), ("spawn_to_grad", "spawn to gradient"),
            ("import", "imports"), ("first", "first call"))
    for fw in frameworks:
        goal = {"tapejit warm": f"< {GOAL_WARM:.2f}x JAX", "tapejit cold":
                f"<= {GOAL_COLD:.2f}x JAX"}.get(fw, "")
        note = "; ".join(f"{what} {H.fmt_time(med(fw, key))}" for key, what in cols[1:])
        table.add(fw, H.Timing.of(r["process"] for r in runs[fw]), goal=goal, note=note)
    if "JAX" not in frameworks:
        table.add_missing("JAX", "not installed")
    table.print()
    jax_p, jax_g = med("JAX", "process"), med("JAX", "spawn_to_grad")
    shape = f"{'-'.join(map(str, sizes))} MLP, {n} samples"
    for fw, goal in (("tapejit warm", GOAL_WARM), ("tapejit cold", GOAL_COLD)):
        H.ratio_line(f"{fw} / JAX, whole process (spawn to exit)", med(fw, "process"), jax_p,
                     goal, record={"workload": f"first_call: {fw}, whole process to the first "
                                               f"gradient, {shape}", "row": f"{fw} process",
                                   "reference": "JAX jit(grad), whole fresh process",
                                   "first_call": f"spawn to gradient "
                                                 f"{H.fmt_time(med(fw, 'spawn_to_grad'))} "
                                                 f"(JAX {H.fmt_time(jax_g)})"})
    for fw in (LLVM_COLD, *COMPILED_FIRST):
        H.ratio_line(f"{fw} / JAX, whole process", med(fw, "process"), jax_p)
    for fw in ("tapejit warm", "tapejit cold"):
        H.ratio_line(f"{fw} / JAX, spawn to first gradient", med(fw, "spawn_to_grad"), jax_g)
    H.ratio_line(f"{LLVM_COLD} / tapejit [TAPEJIT_CODEGEN=numba] cold, compiled first call, "
                 "whole process", med(LLVM_COLD, "process"), med(COMPILED_FIRST[0], "process"))
    H.ratio_line("tapejit warm / tapejit [TAPEJIT_CODEGEN=numba] warm, whole process",
                 med("tapejit warm", "process"), med(COMPILED_FIRST[1], "process"))
    if "JAX warm cache" in runs:
        H.ratio_line("tapejit warm / JAX warm cache, whole process", med("tapejit warm", "process"),
                     med("JAX warm cache", "process"))
    if "PyTorch eager" in runs:
        H.ratio_line("tapejit warm / PyTorch eager, whole process", med("tapejit warm", "process"),
                     med("PyTorch eager", "process"))


if __name__ == "__main__":
    main()
