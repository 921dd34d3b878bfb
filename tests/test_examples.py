"""Smoke tests of the examples and the demo: each runs end to end in a subprocess, small sizes.

They run as a user would, on the default (numba) backend and default settings (a new
program's first calls run on the numpy interpreter: a quick run never compiles), sharing one
temporary TAPEJIT_CACHE_DIR; those that check what compiled code does compile from the first
call (TAPEJIT_FIRST_CALL=compile, as the rest of the suite).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hang import HANG_S

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "examples-cache"


def run(args: list[str], cache_dir: Path, cwd: Path | None = None,
        compiled: bool = False) -> str:
    """Run `python *args` on the default backend (`compiled`: compiling each program on its
    first call); return its output (it must succeed)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", TAPEJIT_CACHE_DIR=str(cache_dir))
    env.pop("TAPEJIT_BACKEND", None)
    env.pop("TAPEJIT_FIRST_CALL", None)
    if compiled:
        env["TAPEJIT_FIRST_CALL"] = "compile"
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=HANG_S,
                          env=env, cwd=cwd)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_mlp_digits_quick(cache_dir: Path) -> None:
    pytest.importorskip("sklearn", reason="examples need scikit-learn: pip install -e '.[test]'")
    out = run([str(EXAMPLES / "mlp_digits.py"), "--quick"], cache_dir)
    assert "epoch   1/1 [####################] loss" in out
    assert "test accuracy:" in out
    # its 7 calls run on the interpreter, unless the demo (test_cli.py) compiled the program
    assert ("call 1 (trace + differentiate + run on the numpy interpreter): " in out
            and "call 2 (run on the numpy interpreter): " in out
            and "traces 1, interpreted 7, compiles 0, disk loads 0, hits 6" in out
            or "call 1 (trace + differentiate + loaded from the disk cache): " in out
            and "traces 1, interpreted 0, compiles 0, disk loads 1, hits 6" in out), out
    assert "steady-state step (forward + reverse + Adam update in one call" in out


def test_lennard_jones_quick(cache_dir: Path, tmp_path: Path) -> None:
    out = run([str(EXAMPLES / "lennard_jones.py"), "--quick", "--plot",
               str(tmp_path / "lj.png")], cache_dir)
    assert "8 atoms" in out and "relaxed in" in out
    assert "MD: 50 velocity-Verlet steps" in out and "1 trace" in out
    assert "max relative drift" in out


def test_scipy_minimize_quick(cache_dir: Path) -> None:
    pytest.importorskip("scipy")
    pytest.importorskip("sklearn")
    out = run([str(EXAMPLES / "scipy_minimize.py"), "--quick"], cache_dir)
    assert "Rosenbrock, n = 5" in out and "tapejit value_and_grad" in out
    assert "max |w - sklearn LogisticRegression's w|" in out


def test_gradient_tape_quick(cache_dir: Path) -> None:
    pytest.importorskip("sklearn")
    out = run([str(EXAMPLES / "gradient_tape.py"), "--quick"], cache_dir, compiled=True)
    assert "epoch  1  last batch loss" in out
    assert "tape cache: {'traces': 1, 'interpreted': 0, 'compiles': " in out
    assert "'codegen': {'llvm': 1, 'numba': 0}" in out
    assert "'hits': 4" in out


def test_custom_loss_quick(cache_dir: Path) -> None:
    out = run([str(EXAMPLES / "custom_loss.py"), "--quick"], cache_dir)
    assert "agrees with finite differences" in out
    for name in ("squared error", "Huber", "log-cosh"):
        assert f"  {name}" in out


def test_dropout_vae_quick(cache_dir: Path) -> None:
    out = run([str(EXAMPLES / "dropout_vae.py"), "--quick"], cache_dir)
    error = float(out.split("finite differences: relative error ")[1].split()[0])
    assert error < 1e-6, out
    before = float(out.split("test loss before training: ")[1].split()[0])
    after = float(out.split("test loss after training: ")[1].split()[0])
    assert after < 0.6 * before, out
    assert "step cache: traces 1, " in out and "hits 59" in out
