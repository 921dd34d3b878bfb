import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The suite runs what users run: compiled programs, from their first call on (by default a new
# program's first call runs on the interpreter; tests/test_first_call.py checks that), and
# every compiled call is checked against the numpy interpreter (TAPEJIT_VERIFY, compile.py):
# a program whose compiled result differs fails the test that ran it.
os.environ.setdefault("TAPEJIT_BACKEND", "numba")
os.environ.setdefault("TAPEJIT_FIRST_CALL", "compile")
os.environ.setdefault("TAPEJIT_VERIFY", "1")
# The LLVM lowering's kernels are compiled by numba once per machine: one library for the whole
# run (both xdist workers, their child processes), whatever cache directory a test uses
os.environ.setdefault("TAPEJIT_LIBRARY_DIR", os.path.join(
    __import__("tempfile").gettempdir(), f"tapejit-test-library-{os.getuid()}"))


@pytest.fixture
def jax_x64():
    """JAX with 64-bit types for this test only (a global `jax_enable_x64` would change what
    later tests in the same process get from JAX)."""
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


@pytest.fixture
def shared_cache(tmp_path_factory, monkeypatch):
    """One program cache for the whole run, for the modules that ask for it
    (`pytest.mark.usefixtures("shared_cache")`): their programs compile once for all their
    tests."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tjcache"))
    from tapejit import config
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


@pytest.fixture
def interpreter(monkeypatch):
    """Semantics only: run on the numpy interpreter (each compiled program costs a compile)."""
    monkeypatch.setenv("TAPEJIT_BACKEND", "interpret")
    from tapejit import config
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


@pytest.fixture(autouse=True)
def _no_shared_programs():
    """Each test starts without the programs of another test's transforms of the same
    function (tapejit/transforms/sharing.py): counts of traces and compiles stay each test's own."""
    from tapejit.transforms import sharing
    sharing.forget()

