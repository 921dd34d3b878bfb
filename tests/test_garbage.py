"""Python's cyclic garbage collector is paused while a program is built and its code generated
(garbage.py) and put back as it was: nested, across threads, after an error, and where the
user disabled it."""
import gc
import threading

import numpy as np
import pytest

import tapejit as tj
from tapejit.garbage import collection_paused


@pytest.fixture(autouse=True)
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_while_a_program_is_built():
    seen = []

    def f(x):
        seen.append(gc.isenabled())         # runs once, traced
        return np.sum(np.sin(x) * x)
    g = tj.grad(f)
    x = np.linspace(-1.0, 1.0, 7)
    np.testing.assert_allclose(g(x), np.cos(x) * x + np.sin(x), rtol=1e-12)
    assert seen == [False] and gc.isenabled()
    g(x)
    assert seen == [False] and gc.isenabled()


def test_an_error_in_a_build_puts_the_collector_back():
    def bad(x):
        raise KeyError("inside the trace")
    with pytest.raises(KeyError):
        tj.grad(bad)(np.ones(3))
    assert gc.isenabled()


def test_nested_and_in_threads_the_last_to_leave_enables_it():
    inner_entered, release = threading.Event(), threading.Event()

    def other():
        with collection_paused():
            inner_entered.set()
            release.wait()
    with collection_paused():
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        thread = threading.Thread(target=other)
        thread.start()
        inner_entered.wait()
    assert not gc.isenabled()               # the thread is still inside
    release.set()
    thread.join()
    assert gc.isenabled()


def test_a_collector_the_user_disabled_stays_disabled():
    gc.disable()
    with collection_paused():
        pass
    tj.jit(lambda x: x * 2.0)(np.ones(2))
    assert not gc.isenabled()



def test_code_generation_and_lowering_pause_it(monkeypatch, tmp_path):
    from tapejit.codegen import cpu
    from tapejit.codegen.llvm import lower
    from tapejit.config import reload
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))     # nothing from disk: compiled
    reload()
    seen = []

    def probing(inner):
        def probe(*args, **kwargs):
            seen.append(gc.isenabled())
            return inner(*args, **kwargs)
        return probe
    for module, name in ((cpu, "plan"), (lower, "_finish")):      # called inside each
        monkeypatch.setattr(module, name, probing(getattr(module, name)))
    f = tj.jit(lambda x: np.sin(x) * 2.0 + x)
    x = np.linspace(0.0, 1.0, 5)
    try:
        for _ in range(3):                   # past any calls on the interpreter: compiled
            np.testing.assert_allclose(f(x), np.sin(x) * 2.0 + x, rtol=1e-12)
    finally:
        monkeypatch.undo()
        reload()
    assert f.cache_info()["compiles"] == 1
    assert len(seen) >= 2 and not any(seen) and gc.isenabled()
