"""numpy random generators drawn from inside a traced function (draws.py): each call makes the
function's draws on the generator itself, so its numbers are numpy's for that seed and the
generator advances as numpy's code would; gradients flow through `mu + sigma * eps`. Every
compiled call is checked against the interpreter by conftest (TAPEJIT_VERIFY) with the same
draws."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tapejit as tj
from tapejit import config

rs = np.random.RandomState(0)       # a module generator, as HIPS autograd's examples hold one


def monte_carlo(mu, log_sigma):
    eps = rs.randn(1000, 3)
    return np.mean((mu + np.exp(log_sigma) * eps) ** 2)


def _closure_objective(seed):
    gen = np.random.default_rng(seed)

    def objective(mu, log_sigma):
        eps = gen.standard_normal((1000, 3))
        return np.mean((mu + np.exp(log_sigma) * eps) ** 2)
    return objective, gen


def _copy(gen):
    """A generator in `gen`'s state: it draws the numbers `gen` will."""
    if isinstance(gen, np.random.RandomState):
        copy = np.random.RandomState()
        copy.set_state(gen.get_state())
        return copy
    copy = np.random.default_rng()
    copy.bit_generator.state = gen.bit_generator.state
    return copy


def _state(gen):
    if isinstance(gen, np.random.RandomState):
        return gen.get_state()[1]
    return gen.bit_generator.state["state"]["state"]


@pytest.mark.parametrize("backend", ["numba", "interpret"])
@pytest.mark.parametrize("which", ["global RandomState", "closure Generator"])
def test_monte_carlo_gradient_draws_fresh_numbers_every_call(backend, which):
    fn, gen = (monte_carlo, rs) if which == "global RandomState" else _closure_objective(3)
    grad = tj.grad(fn, argnums=(0, 1), backend=backend)
    mu, log_sigma = np.array([0.5, -0.2, 0.1]), np.array([0.0, 0.3, -0.4])
    copy = _copy(gen)
    grads = [grad(mu, log_sigma) for _ in range(3)]
    for got in grads:                   # numpy's numbers: the gradient numpy's draws give
        eps = copy.randn(1000, 3) if which == "global RandomState" else \
            copy.standard_normal((1000, 3))
        sigma = np.exp(log_sigma)
        residual = 2 * (mu + sigma * eps) / eps.size
        np.testing.assert_allclose(got[0], residual.sum(axis=0), rtol=1e-12)
        np.testing.assert_allclose(got[1], (residual * sigma * eps).sum(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(_state(gen), _state(copy))      # advanced as numpy's
    info = grad.cache_info()
    assert info["traces"] == 1 and info["programs"] == 1 and info["hits"] == 2
    assert isinstance(rs, np.random.RandomState)      # put back after the trace


def test_gradient_matches_finite_differences_with_the_same_draws():
    grad, value = tj.grad(monte_carlo, argnums=(0, 1)), tj.jit(monte_carlo)
    mu, log_sigma, h = np.array([0.3, -0.2, 0.1]), np.array([0.1, -0.3, 0.2]), 1e-6
    state = rs.get_state()
    g_mu, g_sigma = grad(mu, log_sigma)

    def at(m, s):           # the value with the draws the gradient's call made
        rs.set_state(state)
        return value(m, s)
    for k in range(3):
        e = np.eye(3)[k] * h
        assert g_mu[k] == pytest.approx((at(mu + e, log_sigma) - at(mu - e, log_sigma)) / (2 * h),
                                        rel=1e-6, abs=1e-8)
        assert g_sigma[k] == pytest.approx(
            (at(mu, log_sigma + e) - at(mu, log_sigma - e)) / (2 * h), rel=1e-6, abs=1e-8)


def test_mean_gradient_approaches_the_analytic_gradient():
    """E[d/dmu] = 2 mu / 3 and E[d/dlog_sigma] = 2 sigma^2 / 3 (mean over 3 columns); one
    call's standard error is 0.021 and 0.030 (1000 samples): 40 calls, bound 4 standard
    errors of the mean."""
    grad = tj.grad(monte_carlo, argnums=(0, 1))
    mu, log_sigma = np.array([0.5, -1.0, 0.0]), np.zeros(3)
    g = [grad(mu, log_sigma) for _ in range(40)]
    np.testing.assert_allclose(np.mean([a for a, _ in g], axis=0), 2 * mu / 3, atol=0.014)
    np.testing.assert_allclose(np.mean([b for _, b in g], axis=0), np.full(3, 2 / 3), atol=0.02)


def test_value_and_grad_and_jit_trace_once():
    vg, jitted = tj.value_and_grad(monte_carlo), tj.jit(monte_carlo)
    values = [vg(np.zeros(3), np.zeros(3))[0] for _ in range(3)]
    jitted_values = [jitted(np.zeros(3), np.zeros(3)) for _ in range(3)]
    assert len(set(values)) == 3 and len(set(jitted_values)) == 3
    for t in (vg, jitted):
        assert t.cache_info()["traces"] == 1 and t.cache_info()["hits"] == 2
    assert all(0.85 < v < 1.15 for v in values + jitted_values)   # E = 1, std 0.026


def test_each_method_draws_numpys_numbers():
    """Every method offered, interleaved on one generator and across three (the global one
    too), with traced parameters where numpy's numbers allow them: numpy's own numbers, and
    each generator left where numpy leaves it."""
    gen = np.random.default_rng(5)

    def draws(loc, items):
        return (rs.rand(40), rs.randint(2, 5, size=40), rs.normal(loc, 2.0, size=40),
                rs.uniform(-1.0, loc, 40), rs.choice(items, size=40), rs.permutation(6),
                gen.integers(3, size=40), gen.random(40), gen.normal(loc, 0.5),
                rs.choice(3, size=40, p=np.array([0.2, 0.3, 0.5])), rs.permutation(items),
                gen.choice(5, size=5, replace=False), gen.permutation(np.eye(3) * loc, axis=1),
                gen.standard_normal(7, np.float32), gen.uniform(0.0, loc, (2, 2)),
                np.random.randn(40), rs.standard_normal(), np.random.random_sample((2, 3)))
    args = (3.0, np.array([10.0, 20.0, 30.0]))
    jitted = tj.jit(draws)
    for _ in range(2):                  # the first call, then a later one
        states = [_copy(rs), _copy(gen), _copy(np.random.mtrand._rand)]
        got = jitted(*args)
        after = [_state(g) for g in (rs, gen, np.random.mtrand._rand)]
        rs.set_state(states[0].get_state())
        gen.bit_generator.state = states[1].bit_generator.state
        np.random.set_state(states[2].get_state())
        want = draws(*args)
        now = [_state(g) for g in (rs, gen, np.random.mtrand._rand)]
        assert all(np.array_equal(a, b) for a, b in zip(after, now))
        for a, b in zip(got, want):
            assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_allclose(a, b, rtol=1e-15)
    assert jitted.cache_info()["traces"] == 1


@pytest.mark.parametrize("shape", [(0,), (1,), (1, 1), (0, 3), ()])
def test_empty_single_and_scalar_draws(shape):
    f = tj.jit(lambda x: x + rs.randn(*shape))
    a, b = f(1.0), f(1.0)
    assert np.shape(a) == shape and np.shape(b) == shape
    if np.size(a):
        assert not np.array_equal(a, b)


def test_draws_in_a_python_loop_and_a_nested_transform():
    def rows(x):
        return np.stack([x * rs.randn(3) for _ in range(6)])
    out = tj.jit(rows)(1.0)
    assert len({tuple(row) for row in out}) == 6       # six draws, six keys

    inner = tj.grad(monte_carlo)
    outer = tj.jit(lambda mu: np.sum(inner(mu, np.zeros(3))))
    assert outer(np.zeros(3)) != outer(np.zeros(3))


def test_unsupported_method_names_it_and_the_offered_ones():
    def f(x):
        return x * rs.binomial(10, 0.5)
    with pytest.raises(tj.RandomnessError, match=r"`rs.binomial`.*randint, randn") as err:
        tj.jit(f)(1.0)
    assert __file__ in str(err.value) and isinstance(rs, np.random.RandomState)


def test_refused_under_vmap_in_loop_bodies_and_other_transforms():
    def f(x):
        return x * rs.randn()
    with pytest.raises(tj.RandomnessError, match=r"Under vmap\(f\).*draws of its own"):
        tj.vmap(f)(np.ones(3))
    with pytest.raises(tj.RandomnessError, match=r"under vmap\(f\).*draws of its own"):
        tj.grad(lambda x: np.sum(tj.vmap(f)(x)))(np.ones(3))
    with pytest.raises(tj.RandomnessError, match="traces once and runs many times"):
        tj.jit(lambda x: tj.fori_loop(0, 3, lambda i, c: c + rs.randn(), x))(1.0)
    with pytest.raises(tj.RandomnessError, match=r"Under jacobian\(f\).*tj.value_and_grad"):
        tj.jacobian(f)(1.0)
    assert isinstance(rs, np.random.RandomState)


def test_a_branch_on_a_draw_is_a_concretization_error():
    with pytest.raises(tj.ConcretizationError, match="cannot compute it"):
        tj.jit(lambda x: x if rs.rand() < 0.5 else -x)(1.0)


def test_strict_keeps_the_error(monkeypatch):
    monkeypatch.setenv("TAPEJIT_STRICT", "1")
    config.reload()
    try:
        with pytest.raises(tj.RandomnessError, match=r"`rs` was drawn from.*TAPEJIT_STRICT"):
            tj.grad(monte_carlo)(np.zeros(3), np.zeros(3))
        with pytest.raises(tj.RandomnessError, match="numpy.random.randn was called"):
            tj.jit(lambda x: x * np.random.randn())(1.0)
    finally:
        monkeypatch.undo()
        config.reload()


def test_another_thread_draws_from_the_generator_itself():
    drawn = {}

    def f(x):
        worker = threading.Thread(target=lambda: drawn.setdefault("r", rs.randn(2)))
        worker.start()
        worker.join()
        return x * 2
    assert tj.jit(f)(1.0) == 2.0 and type(drawn["r"]) is np.ndarray


def test_explain_shows_the_draws_input():
    traced = tj.explain(monte_carlo)(np.zeros(3), np.zeros(3)).tapes["traced"]
    names = [v.name for v in traced.invars]
    assert names[:2] == ["mu", "log_sigma"] and names[2].startswith("draws_rs")
    assert traced.invars[2].aval.shape == (3000,)


def test_bad_bounds_are_numpys_value_error():
    with pytest.raises(tj.ArgumentError, match="low >= high") as err:
        tj.jit(lambda x: x * rs.randint(5, 5))(1.0)
    assert isinstance(err.value, ValueError) and __file__ in str(err.value)


def test_a_trace_on_another_thread_waits_for_the_swapped_generators():
    """Two threads tracing functions that read the same generator: each records its own
    draws (the second waits until the first has put the generator back)."""
    results, barrier = {}, threading.Barrier(2)

    def run(name):
        f = tj.jit(lambda x: x + rs.randn(3))
        barrier.wait()
        results[name] = [f(0.0) for _ in range(2)]
    workers = [threading.Thread(target=run, args=(n,)) for n in "ab"]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    draws = [tuple(v) for n in "ab" for v in results[n]]
    assert len(set(draws)) == 4 and isinstance(rs, np.random.RandomState)


def test_static_arguments_and_the_fast_path_draw_numpys_numbers_per_call():
    f = tj.jit(lambda x, n: x + rs.randn(n), static_argnums=1)
    copy = _copy(rs)
    out = [f(np.zeros(2), 2) for _ in range(3)] + [f(np.zeros(3), 3)]
    for got, n in zip(out, (2, 2, 2, 3)):
        np.testing.assert_array_equal(got, copy.randn(n))
    np.testing.assert_array_equal(_state(rs), _state(copy))
    assert f.cache_info()["traces"] == 2


def test_a_rerolled_loop_of_draws_matches_the_unrolled_one(monkeypatch):
    def walk(x):
        for _ in range(60):
            x = x * 0.99 + rs.randn(3)
        return x
    state = rs.get_state()
    rolled = tj.jit(walk)
    a = rolled(np.zeros(3))
    assert rolled.cache_info()["rerolled"] == 1
    rs.set_state(state)                 # the same draws
    monkeypatch.setenv("TAPEJIT_REROLL", "0")
    config.reload()
    try:
        unrolled = tj.jit(walk)
        b = unrolled(np.zeros(3))
    finally:
        monkeypatch.undo()
        config.reload()
    info = unrolled.cache_info()
    assert (info["traces"], info["rerolled"]) == (1, 0)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    assert 0.5 < np.abs(a).max() < 40.0         # damped sums of 60 normals, not 0


def test_a_generator_passed_as_a_static_argument():
    """HIPS autograd's GAN passes its RandomState down as an argument: marked static, it is
    recorded as one read by name is (elsewhere its draws are the state-change error)."""
    def noisy(x, gen):
        return np.sum(x + gen.randn(3))
    jitted, gen = tj.jit(noisy, static_argnums=1), np.random.RandomState(4)
    copy = _copy(gen)
    for _ in range(2):
        assert jitted(0.0, gen) == pytest.approx(np.sum(copy.randn(3)), rel=1e-15)
    assert jitted.cache_info()["traces"] == 1
    np.testing.assert_array_equal(_state(gen), _state(copy))
    with pytest.raises(tj.RandomnessError, match=r"`gen` was drawn from.*Under jacobian"):
        tj.jacobian(noisy, static_argnums=1)(0.0, gen)


class _Model:
    def __init__(self):
        self.rng = np.random.default_rng(8)

    def loss(self, mu):
        return np.mean((mu + self.rng.normal(size=500)) ** 2)


def test_a_method_drawing_from_its_objects_generator():
    model = _Model()
    grad = tj.grad(model.loss)
    assert grad(0.5) != grad(0.5) and grad.cache_info()["traces"] == 1
    assert isinstance(model.rng, np.random.Generator)
