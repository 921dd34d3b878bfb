"""Dispatch: `tj.jit`, the per-signature cache (fast path, LRU bound, re-trace warning, miss
reasons, `tj.clear_cache`), concurrent first calls, and `tj.vjp(backend=)`.

Everything is checked by counting events (`cache_info()`), never by timing. Numba programs
are few and small (each compile costs a second or two); the rest runs on the interpreter.
"""
import threading
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.disk import store
from tapejit.transforms import arguments


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "tjcache"))
    config.reload()
    yield
    config.reload()


def _mlp(params, x):
    h = np.tanh(x @ params["w"] + params["b"])
    return {"h": h, "norm": np.sum(h * h)}, np.max(h)


def _mlp_args(rng, n=5):
    return {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}, \
        rng.standard_normal((n, 3))


def _assert_tree_close(got, want):
    got_leaves, got_td = tj.pytree.flatten(got)
    want_leaves, want_td = tj.pytree.flatten(want)
    assert got_td == want_td
    for a, b in zip(got_leaves, want_leaves):
        assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
        tol = 1e-5 if np.asarray(b).dtype == np.float32 else 1e-12
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# --- jit ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_jit_forward_matches_numpy(backend):
    rng = np.random.default_rng(0)
    params, x = _mlp_args(rng)
    f = tj.jit(_mlp, backend=backend)
    for _ in range(2):
        _assert_tree_close(f(params, x), _mlp(params, x))
    info = f.cache_info()
    assert (info["traces"], info["hits"], info["programs"]) == (1, 1, 1)
    if backend == "numba":
        assert info["compiles"] + info["disk_loads"] == 1


def _sines(x, s):
    return np.sum(np.sin(x) * s) * 1.25


def test_fast_path_converts_like_the_first_call(monkeypatch):
    """Arrays and scalars take the fast path from the second call on; a non-contiguous array,
    a 0-d array, a Python float and a float32 array each get what the first call gave."""
    vg = tj.value_and_grad(_sines, argnums=(0, 1), backend="numba")
    ref = tj.value_and_grad(_sines, argnums=(0, 1))

    def ref_values(x, s):
        return np.sum(np.sin(x) * s) * 1.25, (np.cos(x) * s * 1.25,
                                               np.asarray(s).dtype.type(np.sum(np.sin(x)) * 1.25))

    base = np.arange(12.0).reshape(3, 4)
    for x, s in [(base, 2.0), (base, 3.0), (base.T, 2.0), (base.T, 0.5), (base[:, ::2], 2.0),
                 (base[:, ::2], 2.0), (base, np.array(1.5)), (base, np.array(2.5)),
                 (base.astype(np.float32), np.float32(2.0)),
                 (base.astype(np.float32), np.float32(4.0))]:
        got, want = vg(x, s), ref(x, s)
        _assert_tree_close(got, want)
        assert [type(a) for a in tj.pytree.flatten(got)[0]] == \
            [type(a) for a in tj.pytree.flatten(want)[0]]
    info = vg.cache_info()
    assert info["traces"] == 5 and info["hits"] == 5

    def unused(*args, **kwargs):
        raise AssertionError("the fast path does not flatten arguments")

    monkeypatch.setattr(arguments, "split_args", unused)
    for x, s in [(base, 7.0), (base.T, 7.0), (base, np.array(7.0))]:
        _assert_tree_close(vg(x, s), ref_values(x, s))


def _step(w, g, lr):
    return w - lr * g


def test_python_scalar_learning_rate_never_retraces():
    step = tj.jit(_step)
    w, g = np.ones(3), np.arange(3.0)
    for lr in [0.1, 0.05, 0.01, 1e-3, 2.0]:
        np.testing.assert_allclose(step(w, g, lr), w - lr * g)
    info = step.cache_info()
    assert info["traces"] == 1 and info["hits"] == 4


def _loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def test_jit_of_grad():
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    step = tj.jit(tj.grad(_loss), backend="numba")
    for _ in range(2):
        np.testing.assert_allclose(step(w, x), tj.grad(_loss)(w, x), rtol=1e-12)
    info = step.cache_info()
    assert (info["traces"], info["compiles"] + info["disk_loads"]) == (1, 1)


def test_grad_of_jit_and_jit_inside_jit():
    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    inner = tj.jit(_loss)
    np.testing.assert_allclose(tj.grad(inner)(w, x), tj.grad(_loss)(w, x), rtol=1e-12)
    np.testing.assert_allclose(tj.jit(lambda w, x: inner(w, x) * 2)(w, x), 2 * _loss(w, x))
    np.testing.assert_allclose(tj.grad(tj.grad(lambda a: tj.jit(np.sin)(a)))(0.3), -np.sin(0.3))
    assert inner.cache_info()["traces"] == 0     # inlined into the outer traces, never cached


def test_nested_transform_has_its_own_cache_info():
    inner = tj.grad(lambda a: np.sin(a))
    outer = tj.grad(inner)
    outer(0.5)
    assert outer.cache_info()["traces"] == 1 and inner.cache_info()["traces"] == 0


def test_jit_static_argnums_and_keywords():
    f = tj.jit(lambda x, n, scale=1.0: np.sum(x ** n) * scale, static_argnums=1)
    x = np.arange(4.0)
    assert f(x, 2) == np.sum(x ** 2) and f(x, 3) == np.sum(x ** 3)
    assert f(x, 2, scale=2.0) == 2 * np.sum(x ** 2)
    info = f.cache_info()
    assert info["traces"] == 3


# --- concurrency -------------------------------------------------------------------------------
def test_threads_share_one_first_call():
    f = tj.value_and_grad(lambda x: np.sum(np.cos(x) * 0.75), backend="numba")
    x = np.linspace(0.0, 1.0, 7)
    barrier, results, errors = threading.Barrier(8), [None] * 8, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = f(x)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    info = f.cache_info()
    assert (info["traces"], info["compiles"], info["disk_loads"]) == (1, 1, 0)
    for value, grad in results:
        np.testing.assert_allclose(value, np.sum(np.cos(x) * 0.75), rtol=1e-12)
        np.testing.assert_allclose(grad, -np.sin(x) * 0.75, rtol=1e-12)


# --- bounds, warnings, reasons -----------------------------------------------------------------
def test_lru_bound_keeps_the_most_recently_used():
    f = tj.jit(lambda x: x * 2.0)
    f.max_programs = 3
    a, b, c, d = (np.ones(n) for n in (1, 2, 3, 4))
    f(a), f(b), f(c), f(a)          # a is now the most recently used, b the least
    f(d)                            # evicts b
    info = f.cache_info()
    assert (info["traces"], info["programs"]) == (4, 3)
    f(a), f(c), f(d)
    assert f.cache_info()["traces"] == 4
    f(b)
    assert f.cache_info()["traces"] == 5 and f.cache_info()["programs"] == 3


def test_default_bound():
    f = tj.jit(lambda x: x + 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.TapejitWarning)
        for n in range(1, 71):
            f(np.ones(n))
    assert f.cache_info()["programs"] == 64


def test_retrace_warning_says_why():
    f = tj.jit(lambda x: np.sum(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tj.TapejitWarning)
        for n in range(1, 10):                  # a first trace and 8 re-traces: quiet
            f(np.ones(n))
    with pytest.warns(tj.TapejitWarning, match=r"traced 10 times .*x: f64\[9\] -> f64\[10\]") \
            as record:
        f(np.ones(10))
    assert record[0].filename == __file__        # points at the user's call
    with warnings.catch_warnings():
        warnings.simplefilter("error", tj.TapejitWarning)
        f(np.ones(11))                          # warned once per transform


def test_last_miss_names_the_leaf():
    vg = tj.value_and_grad(_loss)
    w = np.ones((4, 2))
    vg(w, np.ones((8, 4)))
    assert vg.cache_info()["last_miss"] == "first call"
    vg(w, np.ones((32, 4)))
    assert vg.cache_info()["last_miss"] == "shapes/dtypes changed: x: f64[8,4] -> f64[32,4]"
    vg(w.astype(np.float32), np.ones((32, 4)))
    assert "w: f64[4,2] -> f32[4,2]" in vg.cache_info()["last_miss"]

    g = tj.grad(lambda p, lr: np.sum(p["w"] ** 2) * lr)
    g({"w": np.ones(2)}, 0.1)
    g({"w": np.ones(2)}, np.float64(0.1))
    assert g.cache_info()["last_miss"] == \
        "weak types changed: lr: f64[] (Python scalar) -> f64[]"
    g({"w": np.ones(3)}, np.float64(0.1))
    assert g.cache_info()["last_miss"] == "shapes/dtypes changed: p_w: f64[2] -> f64[3]"
    g({"w": np.ones(3), "b": 1.0}, np.float64(0.1))
    assert g.cache_info()["last_miss"].startswith("structure changed: ({'w': *}, *) -> ")

    s = tj.jit(lambda x, mode: x * (2.0 if mode == "double" else 1.0), static_argnums=1)
    s(np.ones(2), "double")
    s(np.ones(2), "single")
    assert s.cache_info()["last_miss"] == \
        "static arguments changed: argument 1: 'double' -> 'single'"


def test_clear_cache_empties_every_transform_and_the_disk():
    f = tj.jit(lambda x: x * 3.0, backend="interpret")
    g = tj.grad(lambda x: np.sum(x * x), backend="interpret")
    x = np.ones(3)
    f(x), g(x), f(x), g(x)
    store.load_module("def entry(x):\n    return x\n", "entry")    # one file on disk
    assert len(store.cache_entries()) == 1
    assert tj.clear_cache() == 1
    assert store.cache_entries() == []
    assert f.cache_info()["programs"] == 0 and g.cache_info()["programs"] == 0
    np.testing.assert_allclose(f(x), 3 * x)
    np.testing.assert_allclose(g(x), 2 * x)
    assert f.cache_info()["traces"] == 2 and f.cache_info()["last_miss"] == "cache cleared"
    assert g.cache_info()["traces"] == 2


# --- vjp ---------------------------------------------------------------------------------------
def test_vjp_runs_on_the_chosen_backend():
    def f(x, y):
        return {"a": np.sin(x) * y, "b": np.sum(x * y)}

    x, y = np.linspace(0, 1, 5), np.linspace(1, 2, 5)
    out, vjp_fn = tj.vjp(f, x, y, backend="numba")
    ref_out, ref_vjp = tj.vjp(f, x, y)
    _assert_tree_close(out, ref_out)
    ct = {"a": np.linspace(-1, 1, 5), "b": 2.0}
    _assert_tree_close(vjp_fn(ct), ref_vjp(ct))
    assert len(store.cache_entries()) == 2          # the forward and the joint program
    with pytest.raises(tj.ArgumentError, match="unknown backend"):
        tj.vjp(f, x, y, backend="gpu")
