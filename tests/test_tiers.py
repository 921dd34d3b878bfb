"""The LLVM generator's two tiers (codegen/llvm/program.py): a program whose full tier inlines
library kernels runs its first calls on the quick tier, which calls them, while the full tier
compiles on a thread; the calls after it is in run the full tier. Both agree with the numpy
interpreter (TAPEJIT_VERIFY checks every compiled call) and with each other, bit for bit;
the disk keeps the quick tier until the full one replaces it, and a new process that finds
the quick one compiles the full one too.

The tier thread is held (`held`) where a test must see the quick tier: it runs one job at a
time, in order, so the full tier waits behind the held job."""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tapejit as tj
from tapejit import threads
from tapejit.transforms import sharing
from tapejit.codegen.llvm import jit
from tapejit.codegen.llvm import program as programs
from tapejit.config import reload as reload_config

from hang import HANG_S


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A program cache of the test's own (the kernels: the run's library directory), on a
    machine with a CPU to spare for the full tier (one CPU: `test_on_one_cpu...`)."""
    monkeypatch.setattr(programs, "_spare_cpu", lambda: True)
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    reload_config()
    yield tmp_path / "cache"
    monkeypatch.undo()
    reload_config()


class held:
    """Hold the tier thread for the `with` block; `settle()` waits for what it has queued."""

    def __enter__(self) -> "held":
        self.release = threading.Event()
        with programs._lock:
            programs._tier_thread().submit(self.release.wait)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        settle()


def new_code(run):
    """(key, loaded code) of the one program `run()` loads."""
    before = set(programs._loaded)
    run()
    [key] = set(programs._loaded) - before
    return key, programs._loaded[key]


def settle() -> None:
    with programs._lock:
        done = programs._tier_thread().submit(lambda: None)
    done.result(timeout=HANG_S)


def waves(x):
    return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * np.cos(x))


X = np.linspace(-3.0, 3.0, 1001)        # odd: vectorised body and scalar remainder both run


def test_first_calls_run_the_quick_tier_then_the_full_one_bit_for_bit():
    g = tj.grad(waves)
    with held():
        quick = g(X)
        assert g.cache_info()["quick_tier"] == 1
        assert np.array_equal(g(X), quick)          # still quick: the thread is held
    assert g.cache_info()["quick_tier"] == 0
    full = g(X)
    assert np.array_equal(full, quick)
    np.testing.assert_allclose(full, tj.grad(waves, backend="interpret")(X), rtol=1e-13)
    info = g.cache_info()
    assert (info["compiles"], info["traces"], info["codegen"]["llvm"]) == (1, 1, 1)


def test_the_disk_keeps_the_quick_tier_until_the_full_one_replaces_it():
    g = tj.jit(waves)
    with held():
        key, program = new_code(lambda: g(X))
        want = g(X)
        _, entry = programs._unpack(jit.read_cached(programs._FOLDER, key))
        assert entry.again and len(entry.objects) >= 1      # the quick tier, and what to redo
    _, entry = programs._unpack(jit.read_cached(programs._FOLDER, key))
    assert entry.again == {}
    del g, program
    sharing.forget()                        # waves's transforms share their programs
    gc.collect()
    assert key not in programs._loaded      # as in a new process: the disk has it
    again = tj.jit(waves)
    assert again(X) == want
    info = again.cache_info()
    assert (info["disk_loads"], info["compiles"], info["quick_tier"]) == (1, 0, 0)


def test_a_quick_tier_found_on_disk_compiles_its_full_tier_too():
    """As in a process that ended before its full tier was in."""
    with held():
        f = tj.jit(waves)
        key, _ = new_code(lambda: f(X))
        del f, _
        sharing.forget()
        gc.collect()                     # the transform is dropped: its full tier is not made
        assert key not in programs._loaded
    want = tj.jit(waves, backend="interpret")(X)
    found = tj.jit(waves)
    with held():
        assert found(X) == pytest.approx(want, rel=1e-14)
        info = found.cache_info()
        assert (info["disk_loads"], info["quick_tier"]) == (1, 1)
    assert found.cache_info()["quick_tier"] == 0
    assert found(X) == pytest.approx(want, rel=1e-14)


PROCESS = textwrap.dedent("""
    import os, sys, threading, numpy as np, tapejit as tj
    from tapejit.codegen.llvm import program
    program._spare_cpu = lambda: True
    def f(x, y):     # kernels called by address (sin, tanh), linked into both tiers (atan2),
        a = np.outer(x, y)      # and the product kernel (library.matmul)
        return np.sum(np.sin(x) * np.tanh(y) + np.arctan2(x, y) + np.maximum(abs(x), y)) + \
            np.sum(np.tanh(a @ a.T))
    x, y = np.linspace(-3.0, 3.0, 101), np.linspace(1.0, 2.0, 101)
    g = tj.jit(f)
    if sys.argv[1] == "first":          # ends before its full tier compiles
        with program._lock:
            program._tier_thread().submit(threading.Event().wait)
        print(g(x, y), g.cache_info()["quick_tier"], flush=True)
        os._exit(0)
    print(g(x, y), g.cache_info()["quick_tier"], flush=True)
    with program._lock:
        done = program._tier_thread().submit(lambda: None)
    done.result()                       # (the parent's time-out is the hang guard)
    print(g.cache_info()["quick_tier"], g.cache_info()["disk_loads"])
""")


def test_a_quick_tier_left_by_another_process_compiles_its_full_tier(cache_dir):
    """Every kernel the full tier inlines is on the disk entry's list, not only those the
    quick tier calls, the product's too: a new process has none of them registered."""
    env = {**os.environ, "TAPEJIT_CACHE_DIR": str(cache_dir), "TAPEJIT_FIRST_CALL": "compile"}
    runs = [subprocess.run([sys.executable, "-c", PROCESS, step], env=env, capture_output=True,
                           text=True, timeout=HANG_S) for step in ("first", "second")]
    assert all(r.returncode == 0 for r in runs), runs[1].stderr[-2000:]
    first, second = runs[0].stdout.split(), runs[1].stdout.split()
    assert first[1] == "1" and second[:2] == [first[0], "1"]       # the quick tier, from disk
    assert second[2:] == ["0", "1"], runs[1].stderr[-2000:]        # then the full one
    assert "full tier" not in runs[1].stderr


def test_a_program_with_no_kernel_to_inline_has_one_tier():
    f = tj.jit(lambda x: np.sum(x * x + 2.0 * x))
    with held():
        assert f(X) == pytest.approx(np.sum(X * X + 2.0 * X), rel=1e-14)
        assert f.cache_info()["quick_tier"] == 0


def test_a_large_program_runs_a_cheap_quick_tier_then_the_full_one_bit_for_bit(monkeypatch):
    """Past PART_LINES (here: 10 lines) the quick tier is LLVM's cheap code (O1, fast code
    generation), whether or not the full tier inlines a kernel; same bits as the full tier and
    as the interpreter's own within rounding."""
    monkeypatch.setattr(programs, "PART_LINES", 10)
    cheap, compile_object = [], jit.compile_object

    def spied(ir, inline=True, cheap_code=False):
        cheap.append(cheap_code)
        return compile_object(ir, inline, cheap_code)
    monkeypatch.setattr(jit, "compile_object",
                        lambda ir, inline=True, cheap=False: spied(ir, inline, cheap))

    def plain(x):                   # no kernel to inline: one tier below PART_LINES
        return np.sum(x * x + 2.0 * x) * np.max(x)
    for fn in (waves, plain):
        g = tj.grad(fn)
        cheap.clear()
        with held():
            quick = g(X)
            assert g.cache_info()["quick_tier"] == 1 and cheap and all(cheap), cheap
        assert g.cache_info()["quick_tier"] == 0 and not cheap[-1]
        assert np.array_equal(g(X), quick)
        np.testing.assert_allclose(quick, tj.grad(fn, backend="interpret")(X), rtol=1e-13)


def test_inlines_names_the_modules_whose_kernels_the_full_tier_inlines():
    g = tj.grad(waves)
    with held():
        _, code = new_code(lambda: g(X))
        parts = code.lowered.parts or (code.lowered.ir,)
        assert any(map(jit.inlines, parts))
    assert not jit.inlines("define void @tj_entry(ptr %a, ptr %S) {\n  ret void\n}\n")


def test_clearing_the_cache_while_the_full_tier_compiles_keeps_nothing():
    g = tj.jit(waves)
    with held():
        want = g(X)
        assert tj.clear_cache() == 1
    assert tj.clear_cache() == 0        # the full tier was not written back
    assert g(X) == want and g.cache_info()["compiles"] == 2


def test_on_one_cpu_the_full_tier_compiles_at_once(monkeypatch):
    monkeypatch.setattr(programs, "_spare_cpu", lambda: False)
    g = tj.grad(waves)
    with held():
        key, _ = new_code(lambda: g(X))
        assert g.cache_info()["quick_tier"] == 0
        _, entry = programs._unpack(jit.read_cached(programs._FOLDER, key))
        assert entry.again == {}


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_full_tier_compiles_on_an_idle_cpu_only():
    """The tier thread is named for the busy rule (threads.py) and runs only where a CPU is
    idle: calls beside it keep every core."""
    settle()
    tids = [t for t in os.listdir("/proc/self/task")
            if _comm(t) == threads.TIER_NAME]
    assert len(tids) == 1
    assert os.sched_getscheduler(int(tids[0])) == os.SCHED_IDLE


def _comm(task):
    try:
        with open(f"/proc/self/task/{task}/comm") as fh:
            return fh.read().strip()
    except FileNotFoundError:          # a thread that has ended
        return None
