"""First-call latency of the MLP gradient in a fresh process, cold and warm compile cache.

Each measurement is a fresh `python bench/compile.py --child` subprocess that imports numpy and
tapejit, builds the 64-256-256-10 tanh MLP of bench/mlp.py on 1,797 random samples, and times
the first `tj.value_and_grad(loss, backend="numba")(params, x, y)` call (trace + differentiate +
numba compile or disk-cache load + run), then a second call (steady state), then checks the
gradient against bench/mlp.py's hand-written backward. Each child prints its `cache_info()`
(compiles vs disk_loads), so the table shows what happened, not just how long it took. The
parent also times the whole process (interpreter start and imports included). Per repeat:
  - cold: a new empty temp dir as TAPEJIT_CACHE_DIR (and NUMBA_CACHE_DIR=<dir>/numba, so no
    compiled code from anywhere else is reused): expect compiles=1;
  - warm: the same dir again, straight after: expect compiles=0, disk_loads=1.
Medians over --repeats (default 3) pairs. Goal: warm first call <= 0.35x the cold first call.
The children set TAPEJIT_FIRST_CALL=compile: this bench measures the compile and the disk
cache (by default a new program's first call runs on the interpreter and its second compiles;
bench/first_call.py measures that). A `backend="interpret"` child (nothing to compile) is a
row too, and JAX's first `jit(value_and_grad)` call in a fresh process where JAX is installed (that child imports
bench/mlp.py, and so tapejit too: its whole-process time is not JAX's alone). The issue's
whole-process goal against JAX (imports included, each library alone in its process) is
measured by bench/first_call.py.

    .venv/bin/python bench/compile.py [--repeats 3] [--quick]
"""
from __future__ import annotations

import time

_T0 = time.perf_counter()

import _harness as H  # noqa: E402  first: pins BLAS threads before numpy is imported

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

GOAL = 0.35
HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "RESULT "


def child(quick: bool, framework: str) -> None:
    """Runs in the fresh subprocess: print one RESULT json line."""
    import numpy as np
    if framework in ("numba", "interpret"):
        import tapejit as tj
    else:
        import jax
        jax.config.update("jax_enable_x64", True)
    import mlp
    t_import = time.perf_counter() - _T0
    sizes, n = (mlp.QUICK_SIZES, mlp.QUICK_SAMPLES) if quick else (mlp.SIZES, mlp.N_SAMPLES)
    x, y, _ = mlp.make_data(n, sizes, digits=False)
    params = mlp.init_params(sizes)
    info = {}
    if framework in ("numba", "interpret"):
        vg = tj.value_and_grad(mlp.loss, backend=framework)
        t0 = time.perf_counter()
        v, g = vg(params, x, y)
        t1 = time.perf_counter()
        vg(params, x, y)
        t2 = time.perf_counter()
        info = {k: v for k, v in vg.cache_info().items() if k != "last_miss"}
    else:
        import jax.numpy as jnp
        jp, jx, jy = ({k: jnp.asarray(a) for k, a in params.items()}, jnp.asarray(x),
                      jnp.asarray(y))
        jit_vg = jax.jit(jax.value_and_grad(lambda p, x, y: mlp._framework_loss(
            jnp, lambda z: jax.nn.logsumexp(z, axis=1, keepdims=True),
            lambda z: jnp.sum(z, axis=1), p, x, y)))
        t0 = time.perf_counter()
        v, g = jax.block_until_ready(jit_vg(jp, jx, jy))
        t1 = time.perf_counter()
        jax.block_until_ready(jit_vg(jp, jx, jy))
        t2 = time.perf_counter()
        g = {k: np.asarray(a) for k, a in g.items()}
    ref_v, ref_g = mlp.numpy_value_and_grad(params, x, y)
    assert np.allclose(v, ref_v, rtol=1e-10), (v, ref_v)
    for k in ref_g:
        assert np.allclose(g[k], ref_g[k], rtol=1e-7, atol=1e-12), k
    print(MARK + json.dumps({"import": t_import, "first": t1 - t0, "second": t2 - t1,
                             "cache_info": info}), flush=True)


def spawn(quick: bool, framework: str, cache_dir: str | None) -> dict:
    env = dict(os.environ, TAPEJIT_FIRST_CALL="compile")   # the first call compiles
    if cache_dir is not None:
        env["TAPEJIT_CACHE_DIR"] = cache_dir
        env["NUMBA_CACHE_DIR"] = os.path.join(cache_dir, "numba")
    cmd = [sys.executable, os.path.join(HERE, "compile.py"), "--child", framework]
    if quick:
        cmd.append("--quick")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"child process ({framework}) failed with exit code {proc.returncode}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)][-1]
    out = json.loads(line[len(MARK):])
    out["process"] = wall
    return out


def floor_process() -> float:
    """Wall time of a process that only imports numpy and tapejit (and exits)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import numpy, tapejit"], check=True,
                   env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    return time.perf_counter() - t0


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        child("--quick" in sys.argv, sys.argv[i + 1])
        return
    parser = H.make_parser(__doc__, repeats=3)
    parser.add_argument("--child", help=argparse_hidden())
    args = H.parse_args(parser)
    if args.quick and not any(a.startswith("--repeats") for a in sys.argv):
        args.repeats = 1                 # one cold + warm pair
    import mlp
    sizes, n = (mlp.QUICK_SIZES, mlp.QUICK_SAMPLES) if args.quick else (mlp.SIZES, mlp.N_SAMPLES)
    H.print_header("bench/compile.py: first-call latency in a fresh process", args,
                   extra=f"{'-'.join(map(str, sizes))} tanh MLP, {n} samples; each run a new "
                         f"process",
                   rows="tapejit [numba] cold/warm, tapejit [interpret], in child processes")

    cold, warm, interp = [], [], []
    for i in range(args.repeats):
        d = tempfile.mkdtemp(prefix="tapejit-bench-cache-")
        try:
            cold.append(spawn(args.quick, "numba", d))
            warm.append(spawn(args.quick, "numba", d))
            interp.append(spawn(args.quick, "interpret", d))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        for what, r in (("cold", cold[-1]), ("warm", warm[-1]), ("interpret", interp[-1])):
            print(f"   pair {i + 1} {what:9s}: first call {H.fmt_time(r['first'])}, whole process "
                  f"{H.fmt_time(r['process'])}; cache_info {r['cache_info']}")
    print("   check: every child's value and gradient matched the hand-written numpy backward")
    bad = [r["cache_info"] for r in cold if r["cache_info"].get("compiles") != 1]
    bad += [r["cache_info"] for r in warm if r["cache_info"].get("disk_loads") != 1
            or r["cache_info"].get("compiles") != 0]
    if bad:
        print(f"   WARNING: expected compiles=1 cold and disk_loads=1, compiles=0 warm; got {bad}")
    else:
        print("   check: every cold child compiled once (compiles=1), every warm child loaded "
              "from disk (compiles=0, disk_loads=1)")
    floors = [floor_process() for _ in range(args.repeats)]

    def med(runs: list[dict], key: str) -> H.Timing:
        return H.Timing.of(r[key] for r in runs)

    ref_label = "tapejit [numba] first call, cold cache"
    table = H.Table("first call of tj.value_and_grad(loss) in a fresh process "
                    f"(median of {args.repeats})", ref=ref_label, ratio_name="x cold first call")
    table.add(ref_label, med(cold, "first"), note="compiles=1")
    table.add("tapejit [numba] first call, warm cache", med(warm, "first"),
              goal=f"<= {GOAL:.2f}x cold", note="same cache dir again; disk_loads=1")
    table.add("tapejit [numba] second call (steady)", med(warm, "second"))
    table.add("tapejit [interpret] first call", med(interp, "first"), note="nothing to compile")
    table.add("tapejit [interpret] second call", med(interp, "second"))
    table.add("import numpy + tapejit + bench/mlp.py", med(cold, "import"),
              note="inside the child")
    table.add("whole process, numba, cold cache", med(cold, "process"),
              note="interpreter start included")
    table.add("whole process, numba, warm cache", med(warm, "process"))
    table.add("whole process, interpret", med(interp, "process"))
    table.add("process: python -c 'import numpy, tapejit'", H.Timing.of(floors),
              note="floor")
    if H.have("jax"):
        jax_runs = [spawn(args.quick, "jax", None) for _ in range(args.repeats)]
        table.add("jax jit(value_and_grad) first call", med(jax_runs, "first"))
        table.add("jax whole process", med(jax_runs, "process"),
                  note="imports tapejit too (bench/mlp.py); see bench/first_call.py")
    else:
        table.add_missing("jax jit(value_and_grad) first call", "not installed")
    table.print()
    cold_s, warm_s = med(cold, "first").median, med(warm, "first").median
    H.ratio_line("tapejit [numba] first call warm / cold", warm_s, cold_s, GOAL,
                 record={"workload": f"compile: first call, {'-'.join(map(str, sizes))} MLP, "
                                     f"fresh process", "row": "tapejit [numba] warm first call",
                         "reference": "cold first call (empty cache)",
                         "interpret_seconds": med(interp, "first").median,
                         "first_call": f"cold {H.fmt_time(cold_s)} (compiles=1), warm "
                                       f"{H.fmt_time(warm_s)} (disk_loads=1)"})
    H.ratio_line("whole process warm / cold", med(warm, "process").median,
                 med(cold, "process").median)


def argparse_hidden() -> str:
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
