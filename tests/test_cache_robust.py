"""Issue 17 repro 12: a cache directory that cannot hold programs, and damaged machine code.

A directory that is not one, or whose numba folder is not, or a full disk: every call still
gives the right answer, programs compile in memory only, exactly one TapejitWarning names the
directory, and nothing is written outside TAPEJIT_CACHE_DIR (numba's own fallback is
~/.cache/numba). A flipped bit in a cached object file is caught by its checksum in a new
process: the function is recompiled, not loaded. Tests count events, not time.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pytest

numba = pytest.importorskip("numba")

import tapejit as tj  # noqa: E402
from tapejit.disk import numba_files, store  # noqa: E402
from tapejit.config import reload as reload_config  # noqa: E402
from hang import HANG_S

CALLS = 3


@pytest.fixture
def env(tmp_path, monkeypatch):
    """TAPEJIT_CACHE_DIR at tmp/cache (not created), numba's user-wide fallback at tmp/xdg."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(store, "_warned", set())
    reload_config()
    yield tmp_path
    monkeypatch.undo()
    reload_config()


def source(c: float) -> str:
    return f"import numba\n\n\n@numba.njit(cache=True)\ndef entry(x):\n    return x * {c!r}\n"


def calls_warn_once(c: float, path_part: str) -> store.CachedModule:
    """Load and call a program CALLS times: right answers, one warning naming `path_part`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(CALLS):
            program = store.load_module(source(c), "entry")
            assert program(float(i)) == c * i
    tapejit_warnings = [w for w in caught if issubclass(w.category, tj.TapejitWarning)]
    assert len(tapejit_warnings) == 1, [str(w.message) for w in caught]
    message = str(tapejit_warnings[0].message)
    assert path_part in message and "TAPEJIT_CACHE_DIR" in message
    return program


def nothing_outside(tmp_path) -> bool:
    return not (tmp_path / "xdg").exists()


def test_cache_dir_that_is_a_file(env):
    (env / "cache").write_text("not a directory")
    f = tj.jit(lambda x: np.sum(np.sin(x) * x), backend="numba")
    x = np.linspace(0.0, 1.0, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(CALLS):
            assert f(x) == pytest.approx(np.sum(np.sin(x) * x), rel=1e-14)
        assert tj.clear_cache() == 0
    assert [str(w.message).count(str(env / "cache")) > 0 for w in caught
            if issubclass(w.category, tj.TapejitWarning)] == [True]
    assert f.cache_info()["compiles"] == 1 and nothing_outside(env)


def test_numba_folder_that_is_a_file(env):
    root = store.cache_root()
    (root / "__pycache__").write_text("not a directory")
    program = calls_warn_once(1.25, "__pycache__")
    assert program.path.exists() and program.compiles == 1 and nothing_outside(env)


def test_numba_folder_made_read_only_is_made_writable(env):
    root = store.cache_root()
    (root / "__pycache__").mkdir(mode=0o500)
    program = store.load_module(source(1.75), "entry")
    assert program(2.0) == 3.5
    assert len(list((root / "__pycache__").glob(program.modname + ".*.nbc"))) == 1
    assert nothing_outside(env)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_cache_dir(env):
    (env / "cache").mkdir(mode=0o500)
    calls_warn_once(1.5, str(env / "cache"))
    assert nothing_outside(env)


def test_full_disk_when_publishing(env, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)      # (store imports it when it writes)
    program = calls_warn_once(2.5, "No space left")
    assert program.compiles == 1 and nothing_outside(env)


def test_full_disk_when_numba_saves(env, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(numba_files, "write_atomic", full)
    program = calls_warn_once(2.75, "No space left")
    assert program.compiles == 1 and nothing_outside(env)


RUN = """
import numpy as np, tapejit as tj
f = tj.jit(lambda x: np.sum(np.sin(x) * x), backend="numba")
x = np.linspace(0.0, 1.0, 5)
errors = [abs(f(x) - np.sum(np.sin(x) * x)) for _ in range(3)]
info = f.cache_info()
print(max(errors), info["compiles"], info["disk_loads"])
"""


@pytest.mark.parametrize("codegen", ["numba", "llvm"])
def test_flipped_bit_in_machine_code_recompiles_in_a_new_process(tmp_path, codegen):
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path), TAPEJIT_FIRST_CALL="compile",
               TAPEJIT_BACKEND="numba", TAPEJIT_CODEGEN=codegen)

    def run() -> tuple[float, int, int]:
        done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True,
                              text=True, timeout=HANG_S)
        assert done.returncode == 0, done.stderr       # a crash is a negative return code
        error, compiles, loads = done.stdout.split()
        return float(error), int(compiles), int(loads)

    assert run()[1:] == (1, 0)
    objects = list(tmp_path.glob("*/__pycache__/tj_*.nbc" if codegen == "numba" else
                                 "*/llvm/obj/*"))
    assert objects
    for path in objects:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    error, compiles, loads = run()
    assert error < 1e-12 and (compiles, loads) == (1, 0)
    assert run()[1:] == (0, 1)                          # the rewritten files are sound


def test_tapejits_own_kernels_keep_their_machine_code_under_the_cache_dir(tmp_path):
    """codegen/vmath.py and blas.py cache in <root>/lib, not beside the package or in
    ~/.cache/numba, in a fresh process."""
    script = ("import numpy as np, tapejit as tj\n"
              "g = tj.grad(lambda x: np.sum(np.sin(x) @ np.ones((3, 3))))\n"
              "g(np.ones((4, 3)))\n")
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "cache"),
               XDG_CACHE_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "home"),
               TAPEJIT_FIRST_CALL="compile", TAPEJIT_CODEGEN="numba")   # numba's kernels
    env.pop("NUMBA_CACHE_DIR", None)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=HANG_S)
    kept = {p.parent.name for p in (tmp_path / "cache").rglob("lib/*/*.nbi")}
    assert "vmath" in kept
    assert not (tmp_path / "xdg" / "numba").exists()
    assert not (tmp_path / "home" / ".cache" / "numba").exists()
