"""Smoke tests of the examples: each runs end to end in a subprocess with --quick."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str) -> str:
    """Run an example as a user would: on the default (numba) backend."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.pop("TAPEJIT_BACKEND", None)
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_mlp_digits_quick() -> None:
    pytest.importorskip("sklearn", reason="examples need scikit-learn: pip install -e '.[test]'")
    out = run_example("mlp_digits.py", "--quick")
    assert "epoch   1" in out
    assert "test accuracy:" in out
    assert "first call (trace + differentiate + compile or cache load):" in out
