"""tj.odeint (tapejit/integrate.py): solutions against scipy.integrate.odeint and exact ones,
gradients (adjoint method) against central finite differences of scipy's solution in float64
(y0, args, both ends of t, a value the dynamics capture), a pytree state, scipy.integrate.odeint
and solve_ivp routed to it inside traced code, and the errors for bad input. Few programs: each is called
twice with different inputs (conftest checks every compiled call against the interpreter), and
one test runs on the interpreter alone.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate

import tapejit as tj

pytestmark = pytest.mark.usefixtures("shared_cache")

T = np.linspace(0.0, 4.0, 9)
Y0 = np.array([1.0, 0.5])


def lotka_volterra(y, t, a, b):
    """Predator and prey, the prey's growth varying in time (so t[0]'s gradient has a term
    from the adjoint system)."""
    growth = a * (1.0 + 0.3 * np.sin(t))
    return np.stack([growth * y[0] - b * y[0] * y[1], -y[1] + b * y[0] * y[1]])


def reference(y0, t, a, b):
    return scipy.integrate.odeint(lotka_volterra, y0, t, args=(a, b), rtol=1e-12, atol=1e-12)


def lv_loss(y0, t, a, b):
    """Through scipy.integrate.odeint as users call it: routed to tj.odeint when traced."""
    ys = scipy.integrate.odeint(lotka_volterra, y0, t, args=(a, b))
    return np.sum(ys[1:] ** 2 * np.arange(1, len(t))[:, None]), ys


lv_grad = tj.value_and_grad(lv_loss, argnums=(0, 1, 2, 3), has_aux=True)


def central(f, x, eps=1e-5):
    x = np.array(x, float)
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        out[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return out


def ref_loss(y0, t, a, b):
    return np.sum(reference(y0, t, a, b)[1:] ** 2 * np.arange(1, len(t))[:, None])


@pytest.mark.parametrize("a, b", [(1.1, 0.4), (0.9, 0.6)])
def test_lotka_volterra_and_its_gradients_match_scipy(a, b):
    (value, ys), (g_y0, g_t, g_a, g_b) = lv_grad(Y0, T, a, b)
    np.testing.assert_allclose(ys, reference(Y0, T, a, b), rtol=1e-6)
    assert value == pytest.approx(ref_loss(Y0, T, a, b), rel=1e-6)
    np.testing.assert_allclose(g_y0, central(lambda v: ref_loss(v, T, a, b), Y0), rtol=1e-5)
    fd_t = central(lambda v: ref_loss(Y0, v, a, b), T)
    np.testing.assert_allclose(g_t[[0, -1]], fd_t[[0, -1]], rtol=1e-5)   # the ends of t
    np.testing.assert_allclose(g_t, fd_t, rtol=1e-5, atol=1e-5 * np.abs(fd_t).max())
    assert g_a == pytest.approx(central(lambda v: ref_loss(Y0, T, v, b), a), rel=1e-5)
    assert g_b == pytest.approx(central(lambda v: ref_loss(Y0, T, a, v), b), rel=1e-5)


def decay_loss(k, state):
    """A pytree state; the rate `k` is captured by the dynamics, not passed as an argument."""
    out = tj.odeint(lambda y, t: {"x": -k * y["x"], "s": k * y["s"] * 0.5 + 0 * t}, state, T)
    return np.sum(out["x"]) + np.sum(out["s"]), out


decay_grad = tj.value_and_grad(decay_loss, has_aux=True)


@pytest.mark.parametrize("k", [0.3, 1.7])
def test_exponential_decay_of_a_pytree_is_exact_and_so_is_its_gradient(k):
    state = {"x": np.array([1.0, -2.0, 3.0]), "s": np.float64(0.25)}
    (value, out), g = decay_grad(k, state)
    x = np.exp(-k * T)[:, None] * state["x"]
    s = 0.25 * np.exp(0.5 * k * T)
    np.testing.assert_allclose(out["x"], x, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(out["s"], s, rtol=1e-6)
    assert out["x"].shape == (len(T), 3) and out["s"].shape == (len(T),)
    assert value == pytest.approx(x.sum() + s.sum(), rel=1e-6)
    exact = np.sum(-T[:, None] * x) + np.sum(0.5 * T * s)
    assert g == pytest.approx(exact, rel=1e-6)


def test_the_interpreter_agrees_with_the_compiled_program(interpreter):
    (value, ys), grads = lv_grad(Y0, T, 1.1, 0.4)
    np.testing.assert_allclose(ys, reference(Y0, T, 1.1, 0.4), rtol=1e-6)
    np.testing.assert_allclose(grads[0], central(lambda v: ref_loss(v, T, 1.1, 0.4), Y0),
                               rtol=1e-5)


def test_outside_traces_odeint_runs_on_numpy_and_scipy_stays_scipy():
    ys = tj.odeint(lotka_volterra, Y0, T, 1.1, 0.4)
    np.testing.assert_allclose(ys, reference(Y0, T, 1.1, 0.4), rtol=1e-6)
    got = scipy.integrate.odeint(lotka_volterra, Y0, T, args=(1.1, 0.4))
    assert np.array_equal(got, scipy.integrate.odeint.__wrapped__(lotka_volterra, Y0, T,
                                                                   args=(1.1, 0.4)))


def test_too_few_steps_give_nan_rows_and_the_rest_agrees():
    solve = tj.jit(lambda y0: tj.odeint(lotka_volterra, y0, T, 1.1, 0.4, mxstep=3))
    for y0 in (Y0, Y0 * 1.5):
        ys = solve(y0)
        assert np.isnan(ys[-1]).all() and not np.isnan(ys[0]).any()
        assert np.array_equal(ys, tj.odeint(lotka_volterra, y0, T, 1.1, 0.4, mxstep=3),
                              equal_nan=True)


# ---- bad input -------------------------------------------------------------------------------
def _traced(call):
    return tj.grad(lambda a: np.sum(call(a)))(1.1)


@pytest.mark.parametrize("t, error, builtin, words", [
    (np.ones((2, 3)), tj.ShapeError, ValueError, ["t of shape (2, 3)", "1-D"]),
    (np.array([0.0, 2.0, 1.0]), tj.ArgumentError, ValueError, ["is not increasing"]),
])
def test_bad_times_are_refused(t, error, builtin, words):
    with pytest.raises(error) as info:
        _traced(lambda a: tj.odeint(lotka_volterra, Y0, t, a, 0.4))
    assert isinstance(info.value, builtin)
    assert all(w in str(info.value) for w in words) and "test_integrate.py" in str(info.value)


@pytest.mark.parametrize("func, error, builtin, words", [
    (lambda y, t, a: y[:1] * a, tj.ShapeError, ValueError, ["f64[1] where y0 is f64[2]"]),
    (lambda y, t, a: (y * a).astype(np.float32), tj.DtypeError, TypeError, ["f32[2] where y0 is f64[2]"]),
    (lambda y, t, a: (y * a, y), tj.ShapeError, ValueError, ["structure"]),
])
def test_dynamics_of_another_shape_or_dtype_are_refused(func, error, builtin, words):
    with pytest.raises(error) as info:
        _traced(lambda a: tj.odeint(func, Y0, T, a))
    assert isinstance(info.value, builtin) and "odeint: func returns" in str(info.value)
    assert all(w in str(info.value) for w in words) and "test_integrate.py" in str(info.value)


def test_bad_options_are_refused():
    with pytest.raises(tj.ArgumentError, match="rtol=-1.0 must be a positive"):
        tj.odeint(lotka_volterra, Y0, T, 1.1, 0.4, rtol=-1.0)
    with pytest.raises(tj.UnsupportedOperationError, match=r"the options \['tfirst'\]"):
        _traced(lambda a: scipy.integrate.odeint(lotka_volterra, Y0, T, (a, 0.4), tfirst=True))


def test_traced_times_out_of_order_give_nan_rows_and_repeated_ones_repeat():
    """A time before the one before it is a NaN row; a repeated time (also the first) repeats
    the solution, as scipy allows, and its gradient is finite."""
    solve = tj.jit(lambda t: tj.odeint(lambda y, t: -y, np.array([1.0]), t)[:, 0])
    for t, bad in ((np.array([0.0, 1.0, 0.5, 2.0]), [2]), (np.array([0.0, 1.0, 1.0, 2.0]), []),
                   (np.array([0.0, 0.0, 1.0, 2.0]), []), (np.array([0.0, 0.5, 1.0, 2.0]), [])):
        ys = solve(t)
        assert list(np.flatnonzero(np.isnan(ys))) == bad
        good = ~np.isnan(ys)
        np.testing.assert_allclose(ys[good], np.exp(-t[good]), rtol=1e-6)
    t = np.array([0.0, 0.0, 0.5, 0.5, 1.0])
    decay = lambda k: np.sum(tj.odeint(lambda y, t, k: -k * y, np.array([1.0]), t, k,
                                       rtol=1e-10, atol=1e-10))
    np.testing.assert_allclose(tj.grad(decay)(0.7), -np.sum(t * np.exp(-0.7 * t)), rtol=1e-8)


def test_the_gradient_stores_no_steps():
    """The adjoint: the gradient's tape has one forward and one backward scan over the times,
    and no loop that keeps its carries for a reverse sweep (loop_grad, a saving scan)."""
    def eqns(tape):
        for eqn in tape.eqns:
            yield eqn
            for sub in eqn.kw.values():
                if isinstance(sub, tj.Tape):
                    yield from eqns(sub)

    tape = tj.make_tape(tj.grad(lambda a: lv_loss(Y0, T, a, 0.4)[0]))(1.1)
    assert [e.op for e in tape.eqns if e.op == "scan"] == ["scan", "scan"]
    assert not [e for e in eqns(tape) if e.op == "loop_grad" or e.kw.get("save")]


def decay_sum(k):
    return np.sum(tj.odeint(lambda y, t: -k * y, np.array([1.0, 3.0]), T))


curvature = tj.grad(tj.grad(decay_sum))


@pytest.mark.parametrize("k", [0.5, 1.5])
def test_grad_of_grad_differentiates_the_adjoint(k):
    assert curvature(k) == pytest.approx(4.0 * np.sum(T ** 2 * np.exp(-k * T)), rel=1e-6)


def test_a_second_derivative_through_the_adjoints_loops_is_refused():
    with pytest.raises(tj.UnsupportedOperationError, match="second derivative through a loop"):
        tj.hessian(lambda y0: np.sum(tj.odeint(lambda y, t: -y * y, y0, T)[-1]))(np.ones(1))


# ---- scipy.integrate.solve_ivp -----------------------------------------------------------------
def lv_ivp(t, y, a, b):
    return lotka_volterra(y, t, a, b)


def ivp_reference(y0, a, t_eval, tol=1e-11):
    return scipy.integrate.solve_ivp(lv_ivp, (0.0, 4.0), y0, t_eval=t_eval, args=(a, 0.4),
                                     rtol=tol, atol=tol)


def ivp_loss(y0, a):
    """As users call it after `import tapejit` (`from scipy.integrate import solve_ivp`):
    `fun(t, y, *args)`, the states by row, t_eval after t_span[0]."""
    from scipy.integrate import solve_ivp
    sol = solve_ivp(lv_ivp, (0.0, 4.0), y0, t_eval=T[2:], args=(a, 0.4), rtol=1e-10,
                    atol=1e-10, method="LSODA")
    return np.sum(sol.y ** 2), (sol.y, sol.t, sol.success)


ivp_grad = tj.value_and_grad(ivp_loss, argnums=(0, 1), has_aux=True)


@pytest.mark.parametrize("a", [1.1, 0.9])
def test_solve_ivp_matches_scipy_and_finite_differences(a):
    (value, (y, t, success)), (g_y0, g_a) = ivp_grad(Y0, a)
    want = ivp_reference(Y0, a, T[2:])
    np.testing.assert_allclose(y, want.y, rtol=1e-7)
    assert y.shape == (2, len(T) - 2) and np.array_equal(t, T[2:]) and success
    ref = lambda y0, a: np.sum(ivp_reference(y0, a, T[2:]).y ** 2)    # noqa: E731
    np.testing.assert_allclose(g_y0, central(lambda v: ref(v, a), Y0), rtol=1e-5)
    assert g_a == pytest.approx(central(lambda v: ref(Y0, v), a), rel=1e-5)


def test_solve_ivp_from_t_span_start_on_the_interpreter_and_its_errors():
    solve = tj.jit(lambda y0: scipy.integrate.solve_ivp(lv_ivp, (0.0, 4.0), y0, t_eval=T,
                                                        args=(1.1, 0.4), rtol=1e-10,
                                                        atol=1e-10).y, backend="interpret")
    np.testing.assert_allclose(solve(Y0), ivp_reference(Y0, 1.1, T).y, rtol=1e-7)
    for kwargs, error, words in [
            ({}, tj.UnsupportedOperationError, "t_eval=None"),
            ({"t_eval": T, "events": lambda t, y: y[0]}, tj.UnsupportedOperationError, "events"),
            ({"t_eval": T, "dense_output": True}, tj.UnsupportedOperationError, "dense_output"),
            ({"t_eval": T + 5.0}, tj.ArgumentError, "t_eval inside t_span")]:
        with pytest.raises(error, match=words) as info:
            _traced(lambda a: scipy.integrate.solve_ivp(lv_ivp, (0.0, 4.0), Y0,
                                                        args=(a, 0.4), **kwargs).y)
        assert "test_integrate.py" in str(info.value)
    outside = scipy.integrate.solve_ivp(lv_ivp, (0.0, 4.0), Y0, args=(1.1, 0.4))
    assert outside.success and outside.y.shape[0] == 2         # scipy's own, its own times


def _fit(k, times):
    """scipy's usual form: t_eval from t_span[0], both traced (an argument)."""
    sol = scipy.integrate.solve_ivp(lambda t, y: -k * y, (times[0], times[-1]),
                                    np.array([1.0, 2.0]), t_eval=times, rtol=1e-10, atol=1e-10)
    return np.sum(sol.y)


def _horizon(end):
    """t_eval = np.linspace(0, end) with a traced end."""
    sol = scipy.integrate.solve_ivp(lambda t, y: -0.5 * y, (0.0, end), np.array([1.0]),
                                    t_eval=np.linspace(0.0, end, 5), rtol=1e-10, atol=1e-10)
    return np.sum(sol.y)


def test_solve_ivp_with_traced_times_from_the_start_of_the_span():
    """They gave NaN values and gradients: the start was put before t_eval's equal first time,
    and odeint gave NaN for the repeated time."""
    times, h = np.linspace(0.0, 2.0, 5), 1e-5
    for _ in range(2):
        value, grad = tj.value_and_grad(_fit)(0.5, times)
        np.testing.assert_allclose(value, _fit(0.5, times), rtol=1e-8)
        np.testing.assert_allclose(grad, (_fit(0.5 + h, times) - _fit(0.5 - h, times)) / (2 * h),
                                   rtol=1e-6)
        value, grad = tj.value_and_grad(_horizon)(0.9)
        np.testing.assert_allclose(value, _horizon(0.9), rtol=1e-8)
        np.testing.assert_allclose(grad, (_horizon(0.9 + h) - _horizon(0.9 - h)) / (2 * h),
                                   rtol=1e-6)


def test_scipy_wrappers_take_lists_as_scipy_does():
    """y0 as a list, and dynamics that return a list (scipy's documentation writes them so):
    array_like to scipy, not pytrees."""
    def with_odeint(k):
        return np.sum(scipy.integrate.odeint(lambda y, t, k: [y[1], -k * y[0]], [1.0, 0.0],
                                             np.linspace(0, 2, 3), args=(k,), rtol=1e-10,
                                             atol=1e-10))

    def with_solve_ivp(k):
        return np.sum(scipy.integrate.solve_ivp(lambda t, y: [-k * y[0], k * y[1]], (0, 2),
                                                [1, 2], t_eval=[1.0, 2.0], rtol=1e-10,
                                                atol=1e-10).y)
    for fn in (with_odeint, with_solve_ivp):
        value, grad = tj.value_and_grad(fn)(0.5)
        np.testing.assert_allclose(value, fn(0.5), rtol=1e-7)
        np.testing.assert_allclose(grad, (fn(0.5 + 1e-5) - fn(0.5 - 1e-5)) / 2e-5, rtol=1e-6)

