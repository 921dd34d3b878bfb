"""Smoke tests of the control-flow example and benchmarks: examples/ode_fit.py recovers the
Lotka-Volterra parameters (--quick); bench/ode.py and bench/checkpoint.py run with
--quick, pass their correctness checks and print their ratio lines. Nothing looks at a time."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from hang import HANG_S

ROOT = Path(__file__).resolve().parent.parent


def run(path: Path, *args: str) -> str:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          timeout=HANG_S, env=env, cwd=path.parent)
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_ode_fit_recovers_the_parameters():
    out = run(ROOT / "examples" / "ode_fit.py", "--quick")
    recovered = re.findall(r"(\w): true ([\d.]+)\s+recovered ([\d.]+)", out)
    assert len(recovered) == 4, out
    for _, true, got in recovered:
        assert abs(float(got) - float(true)) < 0.1 * float(true), out


def test_ode_bench_quick():
    out = run(ROOT / "bench" / "ode.py", "--quick")
    assert re.search(r"check .+ gradient vs numba adjoint: ok", out), out
    assert re.search(r"^ratio .+ = \d+(\.\d+)?x", out, re.MULTILINE), out


def test_checkpoint_bench_quick():
    out = run(ROOT / "bench" / "checkpoint.py", "--quick")
    assert "checkpoints='binomial' gradient vs stored: ok" in out, out
    assert re.search(r"^ratio peak memory .+ = \d+(\.\d+)?x", out, re.MULTILINE), out
