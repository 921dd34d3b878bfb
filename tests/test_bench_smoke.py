"""Smoke tests of the compiler-issue benchmarks: each bench/ script runs with --quick (small
sizes, 1-2 repeats) in a subprocess, exits 0, passes its startup correctness checks and prints
at least one "ratio ... = 1.23x" line. Nothing here looks at a time. --quick leaves the
tapejit [numba] rows out (each compiles for seconds) except where --with-numba is passed:
dispatch.py (the smallest program) runs both ways, and compile.py always compiles (a fresh
process per workload, llvm generator; numba's only with --with-numba), and so does unrolled.py
(one child per first-call row, default threading). peers.py and gemm.py run default threading,
then one thread, each in a child process: their tests check that both ran, in that order."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hang import HANG_S

BENCH = Path(__file__).resolve().parent.parent / "bench"
RATIO = re.compile(r"^ratio .+ = \d+(\.\d+)?x", re.MULTILINE)


def run_bench(name: str, *args: str) -> str:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(BENCH / name), "--quick", *args],
                          capture_output=True, text=True, timeout=HANG_S, env=env, cwd=BENCH)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("name,flags", [("elementwise.py", ()), ("dispatch.py", ()),
                                        ("dispatch.py", ("--with-numba",)), ("mlp.py", ()),
                                        ("lennard_jones.py", ())])
def test_bench_quick(name: str, flags: tuple[str, ...]) -> None:
    out = run_bench(name, *flags)
    assert RATIO.search(out), f"{name} printed no ratio line:\n{out}"
    if "--with-numba" in flags:
        assert "tapejit [numba]" in out and "compile" in out, out
    assert "not met" in out.lower() or "[met]" in out, out
    assert re.search(r"check .+: ok", out), f"{name} ran no correctness check:\n{out}"
    # the table always names its reference-framework rows, installed or not
    assert "jax jit(grad)" in out and "torch eager autograd" in out, out


def test_compile_quick() -> None:
    out = run_bench("compile.py")
    assert "not pinned (TAPEJIT_BENCH_CPUS=all)" in out, out
    assert "check: every child's result matched the tapejit interpreter's" in out, out
    # JAX's first calls are n/a where JAX is not installed (the test extra lacks it)
    for name in ("mlp", "per-example grads (vmap)", "GP likelihood, 200 points",
                 "ODE, 200 Euler steps"):
        assert re.search(rf"^ratio first call, {re.escape(name)}: tapejit \[llvm\] / JAX = "
                         r"(\d+\.\d+x   goal .+\[(met|NOT met)\]|n/a)$", out, re.MULTILINE), out
    for goal in ("warm start, mlp: after import tapejit -> first compiled result / 50 ms",
                 "compile time per op beyond the fixed cost [llvm] / 0.5 ms",
                 "RSS growth over 100 programs compiled and dropped [llvm] / 20 MB"):
        assert re.search(rf"^ratio {re.escape(goal)} = \d+\.\d+x   goal .+\[(met|NOT met)\]",
                         out, re.MULTILINE), f"no goal line {goal!r}:\n{out}"
    # each llvm child says which generator made its program (numba where lowering falls back)
    assert re.search(r"round 1 gmm \[llvm\]: .*'compiles': 1.*'codegen': \{'llvm': \d+, 'numba'",
                     out), out
    assert re.search(r"round 1 mlp \[warm\]: .*'compiles': 0, 'disk_loads': 1", out), out


def test_first_call_quick() -> None:
    out = run_bench("first_call.py")
    assert RATIO.search(out) and "tapejit warm / JAX" in out, out
    assert "check: every child's gradient checksums matched" in out, out
    assert "check: every default cold child ran its first call on the interpreter" in out, out
    assert "pinned to CPU" in out, out


def test_unrolled_quick() -> None:
    out = run_bench("unrolled.py")
    assert "not pinned (TAPEJIT_BENCH_CPUS=all)" in out, out
    for goal in ("N-body 10 steps: tapejit first compiled gradient, cold / 3 s",
                 "N-body 10 steps: tapejit peak RSS / 500 MB",
                 "N-body: tapejit first compiled gradient, cold, 100 / 10 steps",
                 "Lotka-Volterra 1000 steps: tapejit first compiled gradient, unrolled / fori_loop",
                 "Lotka-Volterra 1000 steps: tapejit steady state, unrolled / fori_loop",
                 "MLP training, 10 steps in one tj.jit: loops re-rolled"):
        assert re.search(rf"^ratio {re.escape(goal)}.* = \d+\.\d+x   goal .+\[(met|NOT met)\]",
                         out, re.MULTILINE), f"no goal line {goal!r}:\n{out}"
    assert "tapejit unrolled, 10 steps, kernels cached, child 1" in out, out
    assert "'rerolled': 1" in out, out
    assert re.search(r"check tapejit unrolled, 10 steps, cold vs tj.fori_loop .+: ok", out), out
    assert "JAX unrolled" in out and "JAX lax.fori_loop" in out, out


def test_vmap_quick() -> None:
    out = run_bench("vmap.py")
    for goal in ("tapejit vmap(grad) / jax jit(vmap(grad))",
                 "tapejit vmap(grad) / tapejit batch gradient",
                 "tapejit vmap(simulate) / jax jit(vmap(simulate))"):
        assert f"ratio {goal}" in out, out
    for check in ("tapejit vmap(grad) vs loop", "tapejit batch gradient vs summed loop",
                  "tapejit vmap(simulate) vs loop"):
        assert re.search(rf"check {re.escape(check)}: ok", out), out
    assert "jax jit(vmap(grad))" in out and "jax jit(vmap(simulate))" in out, out


def test_gemm_quick() -> None:
    out = run_bench("gemm.py")
    for dtype in ("float64", "float32"):
        for threads in ("default threading", "one thread"):
            assert f"ratio tapejit blas.matmul / numpy @ ({dtype}, {threads})" in out, out
    assert out.index("not pinned (TAPEJIT_BENCH_CPUS=all)") < out.index("pinned to CPU"), out
    assert "1 thread -> all cores" in out, out
    assert len(re.findall(r"check tapejit blas.matmul .+: ok", out)) == 8, out


def test_peers_quick_both_configurations() -> None:
    out = run_bench("peers.py", "--workloads", "elementwise", "--peers", "tapejit,hand-written")
    default, one = out.index("### Default threading"), out.index("### One thread")
    assert default < one, out
    assert "1 thread → all cores" in out[default:one], out
    assert re.search(r"check elementwise: tapejit \[numba\] .+: ok", out), out
    goals = out[out.index("### Goals (default threading)"):]
    assert re.search(r"^ratio tapejit \[numba\] / the best peer .+\[(met|NOT met)\]", goals,
                     re.MULTILINE), out
    assert "ratio tapejit [numba] all cores / one thread (elementwise)" in goals, out


def test_parallel_quick_is_not_pinned() -> None:
    out = run_bench("parallel.py", "--dtypes", "float64")
    assert "not pinned (TAPEJIT_BENCH_CPUS=all)" in out, out
    assert "ratio tapejit [numba] / JAX jit(grad), all cores (float64)" in out, out
    assert re.search(r"check .+: ok", out), out


def test_contention_quick() -> None:
    out = run_bench("contention.py", "--hogs", "0,1")
    assert "not pinned (TAPEJIT_BENCH_CPUS=all)" in out, out
    for name in ("mlp", "per_example", "lennard_jones"):
        assert re.search(rf"check {name}: tapejit vs .+: ok", out), out
        assert re.search(rf"^  quiet +{name} ", out, re.MULTILINE), out
        for goal in ("tapejit / JAX", "tapejit busy / quiet", "tapejit p90 / median"):
            # the JAX ratio is n/a where JAX is not installed (the test extra lacks it)
            value = r"(\d+\.\d+x   goal .+\[(met|NOT met)\]|n/a)" if "JAX" in goal else \
                r"\d+\.\d+x   goal .+\[(met|NOT met)\]"
            assert re.search(rf"^ratio {name} beside 1 CPU-bound: {re.escape(goal)} = {value}$",
                             out, re.MULTILINE), out
    assert "beside 2 CPU-bound" not in out, out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity")
def test_harness_pins_to_one_cpu_unless_told_not_to() -> None:
    code = "import _harness, os; print(len(os.sched_getaffinity(0)), _harness.PINNED)"
    allowed = len(os.sched_getaffinity(0))

    def affinity(**env: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, cwd=BENCH, env=dict(os.environ, **env)).stdout.split()

    assert affinity(TAPEJIT_BENCH_CPUS="one") == ["1", "True"]
    assert affinity(TAPEJIT_BENCH_CPUS="all") == [str(allowed), "False"]


def test_harness_check_close_rejects_wrong_answers() -> None:
    saved = dict(os.environ)             # importing the harness pins BLAS threads in os.environ
    sys.path.insert(0, str(BENCH))
    try:
        os.environ["TAPEJIT_BENCH_CPUS"] = "all"    # do not pin the test process to one CPU
        import _harness as H
    finally:
        sys.path.remove(str(BENCH))
        os.environ.clear()
        os.environ.update(saved)
    import numpy as np
    H.check_close("same", {"a": np.ones(3)}, {"a": np.ones(3)})
    with pytest.raises(AssertionError):
        H.check_close("off", np.ones(3), np.ones(3) * (1 + 1e-3), rtol=1e-6)
    with pytest.raises(AssertionError):
        H.check_close("shape", np.ones(3), np.ones(4))


def test_autograd_examples_runner_on_programs_written_like_hips_examples() -> None:
    """bench/autograd_examples.py runs two small programs of our own, written as HIPS
    autograd's examples are (tests/autograd_examples/), through its shim in fresh processes:
    both run under tapejit (and, where autograd is installed, equal its final objective)."""
    import importlib.util
    both = importlib.util.find_spec("autograd") is not None
    examples = Path(__file__).resolve().parent / "autograd_examples"
    proc = subprocess.run([sys.executable, str(BENCH / "autograd_examples.py"), "--examples",
                           str(examples), "--only", "fit_line,series_sum", "--mode",
                           "both" if both else "tapejit", "--repeats", "2"],
                          capture_output=True, text=True, timeout=HANG_S, cwd=BENCH)
    out = proc.stdout
    assert proc.returncode == 0, f"{out}\n{proc.stderr}"
    assert re.search(r"^\| fit_line \| .+ \| ran \| ", out, re.MULTILINE), out
    assert re.search(r"^\| series_sum \| .+ \| ran \| ", out, re.MULTILINE), out
    assert "ran under tapejit: 2 of 2" in out, out
    assert out.count("median of 2 runs |") == 2, out      # short: run twice, medians
    if both:
        assert "final objective within 1e-6: 2" in out, out
        assert RATIO.search(out), out
    else:                           # (the CI's environment: autograd is no dependency)
        assert "ratio tapejit / autograd, total wall time of the examples run by both = n/a" \
            in out, out
