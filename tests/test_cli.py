"""The command line (`python -m tapejit ...`), each command in a subprocess on a temporary
cache directory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_examples import cache_dir, run  # noqa: F401  (cache_dir: the shared fixture)
from hang import HANG_S


def tapejit_python(code: str, cache: Path) -> str:
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True).stdout


def tapejit(*args: str, cache: Path, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", TAPEJIT_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-m", "tapejit", *args], capture_output=True,
                          text=True, timeout=HANG_S, env=env)
    assert (proc.returncode == 0) == ok, f"{args}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc


def test_info(tmp_path: Path) -> None:
    out = tapejit("info", cache=tmp_path).stdout
    assert out.startswith("tapejit ")
    assert "numba " in out and "backends: interpret, numba" in out
    assert "CUDA: " in out
    assert "first call of a new numba program: " in out
    assert "BLAS: " in out and " kernels" in out or not sys.platform.startswith("linux")
    assert "threads: " in out and "multiply-adds" in out
    assert f"cache directory: {tmp_path}" in out and "0 programs" in out


def test_cache_list_and_clear(tmp_path: Path) -> None:
    publish = ("from tapejit.disk import store; "
               "print(store.load_module('def entry(x): return x', 'entry').digest)")
    digest = tapejit_python(publish, tmp_path).strip()
    out = tapejit("cache", "list", cache=tmp_path).stdout
    assert "1 programs" in out and digest in out
    assert "removed 1 programs" in tapejit("cache", "clear", cache=tmp_path).stdout
    assert "0 programs" in tapejit("cache", "list", cache=tmp_path).stdout


def test_usage_errors(tmp_path: Path) -> None:
    assert "unrecognized arguments" in tapejit("info", "--x", cache=tmp_path, ok=False).stderr
    assert "invalid choice" in tapejit("cache", "drop", cache=tmp_path, ok=False).stderr


def test_demo_trains_to_the_accuracy_it_promises(cache_dir: Path) -> None:  # noqa: F811
    """The whole main job (440 steps take well under a second once compiled): the README and
    the issue promise at least 95% test accuracy."""
    pytest.importorskip("sklearn")
    out = run(["-m", "tapejit", "demo"], cache_dir)
    assert "digits: 1437 train / 360 test images" in out and "steady-state step" in out
    assert "compiles 1, disk loads 0" in out or "compiles 0, disk loads 1" in out, out
    accuracy = float(out.split("test accuracy:")[1].split()[0])
    assert accuracy >= 0.95, out


def test_bench_peers_quick(tmp_path: Path) -> None:
    out = tapejit("bench", "peers", "--quick", "--workloads", "dispatch", "--peers",
                  "tapejit,hand-written", cache=tmp_path).stdout
    assert "grad of sum(x*x), n=10" in out
    assert "| dispatch | tapejit [numba] | " in out and " 1.00x |" in out
    assert out.index("### Default threading") < out.index("### One thread")


def test_bench_outside_a_checkout_says_what_it_needs(tmp_path: Path, capsys) -> None:
    from tapejit.tools import cli
    assert cli.main(["bench", "--checkout", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} has none" in err and "source checkout" in err and "--checkout" in err
    root = Path(__file__).parents[1]
    assert cli.checkout(None) == root and cli.checkout(str(root)) == root
