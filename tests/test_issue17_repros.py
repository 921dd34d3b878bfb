"""Repros 6 and 8-13 of issue 17, each on the interpreter and compiled, on three calls.

Every program is checked against numpy (values) or central differences in float64
(gradients) on calls 1, 2 and 3, since the compiled path and the fast path start on later
calls. Tests count events (traces, compiles), never time. Repro 12 (the disk cache) is in
test_cache_robust.py.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tapejit as tj
from tapejit import config

BACKENDS = ["interpret", "numba"]
CALLS = 3


def ran(info: dict, backend: str) -> bool:
    """Whether `cache_info` says the program ran on `backend` (numba: compiled or loaded)."""
    return backend == "interpret" or info["compiles"] + info["disk_loads"] >= 1


def central(f, x: float, h: float = 1e-5) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


# -- 6: static arguments on the fast path ---------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_static_argument_on_later_calls(backend):
    x = np.array([0.5, 1.5, -2.0])
    f = tj.jit(lambda x, n: np.sum(x ** n), static_argnums=1, backend=backend)
    vg = tj.value_and_grad(lambda x, n, w: np.sum(w * x ** n), static_argnums=1,
                           backend=backend)
    h = tj.hessian(lambda x, n: np.sum(x ** n), static_argnums=1, backend=backend)
    for _ in range(CALLS):
        assert f(x, 2) == pytest.approx(np.sum(x ** 2))
        value, grad = vg(x, 3, 2.0)
        assert value == pytest.approx(np.sum(2.0 * x ** 3))
        np.testing.assert_allclose(grad, 6.0 * x ** 2)
        np.testing.assert_allclose(h(x, 3), np.diag(6.0 * x))
    for transform in (f, vg, h):
        info = transform.cache_info()
        assert info["traces"] == 1 and info["hits"] >= CALLS - 1 and ran(info, backend)


# -- 8: GradientTape through array and mask indexing ---------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_tape_through_array_and_mask_indices(backend):
    before = tj.tape_cache_info(backend)
    for step in range(CALLS):
        x = np.array([1.0, 2.0, 3.0]) + step
        with tj.GradientTape(backend=backend) as tape:
            xw = tape.watch(x)
            y = np.sum(xw[np.array([0, 2])] ** 2) + np.sum(xw[np.array([False, True, True])] ** 3)
        expected = np.array([2 * x[0], 3 * x[1] ** 2, 2 * x[2] + 3 * x[2] ** 2])
        np.testing.assert_allclose(tape.gradient(y, xw), expected)
    after = tj.tape_cache_info(backend)
    new = {k: after[k] - before[k] for k in ("traces", "hits", "compiles", "disk_loads")}
    assert new["traces"] == 1 and new["hits"] == CALLS - 1 and ran(new, backend)


# -- 9: jvp caches and compiles ------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_jvp_is_traced_once_and_compiled(backend):
    def f(x, w):
        return np.sin(x) * w

    x, t = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0])
    for _ in range(CALLS):
        out, tangent = tj.jvp(f, (x, 1.5), (t, 0.25), backend=backend)
        np.testing.assert_allclose(out, f(x, 1.5))
        numeric = (f(x + 1e-6 * t, 1.5 + 1e-6 * 0.25) - f(x - 1e-6 * t, 1.5 - 1e-6 * 0.25)) / 2e-6
        np.testing.assert_allclose(tangent, numeric, rtol=1e-6)
    info = tj.jvp_cache_info(f, 2, backend)
    assert info["traces"] == 1 and info["hits"] == CALLS - 1 and ran(info, backend)


# -- 10: logaddexp's derivatives at ties ---------------------------------------------------------
def _logaddexp_derivatives(x: float, y: float) -> tuple[float, ...]:
    """d/dx logaddexp(x, y) (orders 1-3) and d2/dxdy, from the logistic function."""
    s = 1 / (1 + np.exp(y - x))
    return s, s * (1 - s), s * (1 - s) * (1 - 2 * s), -s * (1 - s)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ufunc, scale", [(np.logaddexp, 1.0), (np.logaddexp2, np.log(2))])
def test_logaddexp_derivatives_of_every_order_at_ties(backend, ufunc, scale):
    d1 = tj.grad(lambda x, y: ufunc(x, y))
    d2, dxy = tj.grad(d1), tj.grad(d1, argnums=1)
    d3 = tj.grad(d2)
    program = tj.jit(lambda x, y: (ufunc(x, y), d1(x, y), d2(x, y), d3(x, y), dxy(x, y)),
                     backend=backend)
    for x, y in [(0.4, 0.4), (-2.0, -2.0), (0.4, -1.0), (3.0, 1.0)]:
        for _ in range(CALLS):
            value, *derivatives = program(x, y)
            assert value == pytest.approx(ufunc(x, y), rel=1e-14)
            # logaddexp2(x, y) = logaddexp(x ln2, y ln2) / ln2
            s1, s2, s3, sxy = _logaddexp_derivatives(x * scale, y * scale)
            expected = [s1, s2 * scale, s3 * scale ** 2, sxy * scale]
            np.testing.assert_allclose(derivatives, expected, rtol=1e-12, atol=1e-15)
        # central differences of numpy's function and of the lower orders
        assert derivatives[0] == pytest.approx(central(lambda v: ufunc(v, y), x), rel=1e-8)
        assert derivatives[1] == pytest.approx(central(lambda v: d1(v, y), x), rel=1e-7)
        assert derivatives[2] == pytest.approx(central(lambda v: d2(v, y), x), abs=1e-8)
        assert derivatives[3] == pytest.approx(central(lambda v: d1(x, v), y), rel=1e-7)
    assert ran(program.cache_info(), backend)
    if ufunc is np.logaddexp:
        assert tj.grad(tj.grad(lambda x, y: ufunc(x, y)))(0.4, 0.4) == pytest.approx(0.25)
    else:
        assert tj.grad(tj.grad(lambda x, y: ufunc(x, y)))(0.4, 0.4) == pytest.approx(0.1733,
                                                                                 abs=1e-4)


def test_logaddexp_keeps_numpys_values_at_the_extremes():
    a = np.array([np.inf, -np.inf, np.inf, -np.inf, 1.0, 0.0, 0.0])
    b = np.array([np.inf, -np.inf, 1.0, 2.0, -np.inf, -40.0, -800.0])
    for ufunc in (np.logaddexp, np.logaddexp2):
        f = tj.jit(lambda a, b: ufunc(a, b), backend="interpret")
        np.testing.assert_allclose(f(a, b), ufunc(a, b), rtol=1e-13)


# -- 11: numpy.random while tracing --------------------------------------------------------------
rng = np.random.default_rng(0)


def _draws_from_module(x):
    return np.random.rand(3) * x


def _draws_from_global_generator(x):
    return rng.normal(size=3) * x


def _make_closure():
    local = np.random.default_rng(1)
    return lambda x: local.random(3) * x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, named, strict", [
    (_draws_from_module, "numpy.random.rand", True),
    (lambda x: np.sum(np.random.normal(0.0, 1.0, size=3) * x), "numpy.random.normal", True),
    (lambda x: np.random.default_rng().random(3) * x, "numpy.random.default_rng", False),
    (_draws_from_global_generator, "generator `rng`", True),
    (_make_closure(), "generator `local`", True),
])
def test_numpy_random_while_tracing_is_an_error(backend, fn, named, strict, monkeypatch):
    """An unseeded generator made while tracing; and, with TAPEJIT_STRICT=1, any draw (without
    it, draws from numpy's global RandomState and generators read by name are recorded with a
    key per call: tests/test_draws.py)."""
    monkeypatch.setenv("TAPEJIT_STRICT", "1" if strict else "0")
    config.reload()
    x = np.ones(3)
    try:
        for transform in (tj.jit(fn, backend=backend),
                          tj.grad(lambda x: np.sum(fn(x)), backend=backend)):
            for _ in range(CALLS):
                with pytest.raises(tj.RandomnessError, match="pass them in as an argument") \
                        as err:
                    transform(x)
                assert named in str(err.value) and __file__ in str(err.value)
    finally:
        monkeypatch.undo()
        config.reload()
    assert np.random.rand(2).shape == (2,) and rng.normal(size=2).shape == (2,)
    assert np.random.rand == np.random.mtrand._rand.rand        # restored


def test_random_numbers_passed_in_and_seeded_generators_work():
    x = np.ones(3)
    f = tj.jit(lambda x, noise: noise * x, backend="interpret")
    draws = [np.random.rand(3) for _ in range(CALLS)]
    for noise in draws:
        np.testing.assert_array_equal(f(x, noise), noise)
    seeded = tj.jit(lambda x: np.random.default_rng(7).random(3) * x, backend="interpret")
    for _ in range(CALLS):     # numpy gives the same numbers on every call too
        np.testing.assert_array_equal(seeded(x), np.random.default_rng(7).random(3))


def test_random_in_another_thread_during_a_trace_and_in_gradient_tape():
    drawn = {}

    def f(x):
        worker = threading.Thread(target=lambda: drawn.setdefault("r", np.random.rand(2)))
        worker.start()
        worker.join()
        return x * 2

    assert tj.jit(f, backend="interpret")(1.0) == 2.0 and drawn["r"].shape == (2,)
    for _ in range(CALLS):     # eager recording runs the code every step: fresh numbers
        noise = np.random.rand(3)
        with tj.GradientTape() as tape:
            x = tape.watch(np.ones(3))
            y = np.sum(np.random.default_rng(3).random(3) * x) + np.sum(noise * x)
        np.testing.assert_allclose(tape.gradient(y, x),
                                   np.random.default_rng(3).random(3) + noise)


# -- 13: array subclasses, keyword axes, traced sizes, empty einsum batches -----------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make, hint", [
    (lambda: np.ma.array([1.0, 2.0, 3.0, 4.0, 4.0], mask=[0, 0, 0, 0, 1]), "x.filled"),
    (lambda: np.matrix([[1.0, 2.0], [3.0, 4.0]]), "np.asarray(x)"),
])
@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_array_subclasses_are_refused(backend, make, hint):
    value = make()
    for transform in (tj.jit(lambda x: np.sum(x * x), backend=backend),
                      tj.grad(lambda x: np.sum(x * x), backend=backend)):
        for _ in range(CALLS):
            with pytest.raises(tj.ArgumentError, match="ndarray subclass") as err:
                transform(value)
            assert hint in str(err.value) and __file__ in str(err.value)
    with tj.GradientTape() as tape:
        with pytest.raises(tj.ArgumentError, match="ndarray subclass"):
            tape.watch(value)


@pytest.mark.parametrize("make", [
    lambda n, x: np.ones(n) * x, lambda n, x: np.zeros((n, 2)) + x,
    lambda n, x: np.full(n, 2.0) * x, lambda n, x: np.empty(n),
    lambda n, x: np.arange(n) * x, lambda n, x: np.eye(n) * x,
    lambda n, x: np.reshape(np.tile(x, 6), (n, -1)),
])
def test_traced_size_says_static_argnums(make):
    f = tj.jit(lambda x, n: make(n, x), backend="interpret")
    for _ in range(CALLS):
        with pytest.raises(tj.ConcretizationError, match="static_argnums") as err:
            f(np.ones(1), 3)
        assert __file__ in str(err.value)
    static = tj.jit(lambda x, n: make(n, x), static_argnums=1, backend="interpret")
    for _ in range(CALLS):
        assert np.shape(static(np.ones(1), 3)) == np.shape(make(3, np.ones(1)))


def _contractions(a, b, x):
    """einsum with '...' over a batch that may be empty, and transpose with axes=."""
    return np.einsum("...ij,...jk->...ik", a, b), np.transpose(x, axes=(1, 0, 2))


def directional(f, args, grads, seed: int = 0, h: float = 1e-6) -> tuple[float, float]:
    """<grads, d> and the central difference of scalar `f` along a random direction d."""
    rng = np.random.default_rng(seed)
    d = [rng.standard_normal(np.shape(a)) for a in args]
    plus = f(*[a + h * v for a, v in zip(args, d)])
    minus = f(*[a - h * v for a, v in zip(args, d)])
    return sum(float(np.sum(g * v)) for g, v in zip(grads, d)), (plus - minus) / (2 * h)


@pytest.mark.parametrize("backend", BACKENDS)
def test_einsum_empty_batch_and_transpose_axes_keyword(backend):
    rng = np.random.default_rng(5)

    def loss(a, b, x):
        return sum(np.sum(np.sin(o)) for o in _contractions(a, b, x))

    f = tj.jit(_contractions, backend=backend)
    grad = tj.grad(loss, argnums=(0, 1, 2), backend=backend)
    for batch in [0, 0, 0, 3]:
        a, b = rng.standard_normal((batch, 2, 3)), rng.standard_normal((batch, 3, 4))
        x = rng.standard_normal((2, 3, 4))
        for got, want in zip(f(a, b, x), _contractions(a, b, x)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12)
        grads = grad(a, b, x)
        assert [g.shape for g in grads] == [a.shape, b.shape, x.shape]
        analytic, numeric = directional(loss, (a, b, x), grads)
        assert analytic == pytest.approx(numeric, rel=1e-6)
    assert ran(f.cache_info(), backend) and ran(grad.cache_info(), backend)
