"""scipy.special's incomplete gamma and beta functions on traced arrays (gammainc, gammaincc,
betainc, stdtr; ops/special_incomplete.py, codegen/special_incomplete.py): values against
scipy over wide grids in float64 (compiled, and checked against the interpreter by conftest's
TAPEJIT_VERIFY) and float32, scipy's edge values, derivatives in x against central
differences and the exact densities, and the error a derivative in a shape parameter raises.
Few programs: each test traces one function over broadcast grids."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.errors import UnsupportedOperationError

from gradcheck import check_grads

sc = pytest.importorskip("scipy.special")
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]
INF, NAN = np.inf, np.nan


def _all(a, b, x, t):
    """Every function on broadcast grids: a (rows) against x (columns) for the gamma
    functions, (a, b, x) for betainc, (df, t) for stdtr."""
    return (sc.gammainc(a[:, None], x), sc.gammaincc(a[:, None], x),
            sc.betainc(a[:, None, None], b[None, :, None], t[None, None, :]),
            sc.stdtr(a[:, None], t * 20 - 10))


def _rel(got, want):
    """|got - want| / |want|, 0 where both are equal (infinities, zeros) or NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(all="ignore"):
        err = np.abs(got - want) / np.abs(want)
    return np.where((got == want) | (np.isnan(got) & np.isnan(want)), 0.0, err)


A = np.concatenate([np.logspace(-3, 3, 37), [0.5, 1.0, 2.0, 10.0, 15.0, 99.5]])
X = np.concatenate([[0.0], np.logspace(-3, 3, 61), [999.5]])
U = np.concatenate([[0.0, 1.0], np.linspace(0.01, 0.99, 25), [1e-9, 1 - 1e-9]])


def _exact(k, point):
    """The exact value of function k of _all at a grid point (mpmath, 40 digits)."""
    import mpmath
    a = float(A[point[0]])
    with mpmath.workdps(40):
        if k == 0:
            return float(mpmath.gammainc(a, 0, X[point[1]], regularized=True))
        if k == 1:
            return float(mpmath.gammainc(a, X[point[1]], mpmath.inf, regularized=True))
        if k == 2:
            return float(mpmath.betainc(a, A[point[1]], 0, U[point[2]], regularized=True))
    raise AssertionError(f"stdtr differs from scipy at {point}")


def _exact_where_scipy_differs(k, got, differs, tol):
    """Where `got` is farther than `tol` from scipy (a few points), it is within tol of the
    exact value (scipy is off there)."""
    points = np.argwhere(differs)
    assert len(points) <= 20, (k, len(points), points[:5])
    if len(points):
        pytest.importorskip("mpmath")
    for point in points:
        exact = _exact(k, tuple(point))
        assert abs(got[tuple(point)] - exact) <= np.broadcast_to(tol, got.shape)[tuple(point)] * \
            abs(exact), (k, point, got[tuple(point)], exact)


def test_float64_values_match_scipy_on_wide_grids():
    """a, b in 1e-3..1e3, x in 0..1e3 (unit interval for betainc), within 1e-13 of scipy
    (betainc 3e-13), or of the exact value at the few points where scipy is farther (near
    underflow; betainc(0.5, 0.5, 1 - 1e-9)): but where scipy itself is off (gammainc's a > 20,
    1e-12 there: test_large_a_against_mpmath), betainc's hard corner (b < 0.01 and x > 0.95
    with a < 15, where I_x is 1 - a sum near 1: 1e-11), and values e^-L, whose exponent's
    rounding costs L eps. Values under 1e-280 are left out (scipy rounds some of them to 0)."""
    got = tj.jit(_all)(A, A, X, U)
    want = _all(A, A, X, U)
    for g, w in zip(got, want):
        assert g.dtype == np.float64 and g.shape == w.shape
    tiny = [np.abs(w) < 1e-280 for w in want]
    gamma_tol = np.where(A[:, None] > 20, 3e-12, 1e-13)
    hard = (A[None, :, None] < 0.01) & (U > 0.95) & (A[:, None, None] < 15)
    beta_tol = np.where(hard, 1e-11, 3e-13)
    for k, tol in enumerate((gamma_tol, gamma_tol, beta_tol, 1e-13)):
        err = np.where(tiny[k], 0.0, _rel(got[k], want[k]))
        with np.errstate(divide="ignore"):       # values e^-L carry L times eps (inherent)
            tol = np.maximum(tol, 4e-16 * np.abs(np.log(np.abs(want[k]))))
        _exact_where_scipy_differs(k, got[k], err > tol, tol)
    bulk = np.where(tiny[2] | hard, 0.0, _rel(got[2], want[2]))
    assert np.mean(bulk <= 1e-13) > 0.99            # (most of the beta grid: 1e-13)


def test_large_a_against_mpmath():
    """Where scipy's gammainc is off by 1e-12 (a > 20), against exact values: 1e-13."""
    mpmath = pytest.importorskip("mpmath")
    a = np.array([68.13, 120.0, 865.96, 1000.0, 649.38])
    x = np.array([55.0, 140.0, 398.1, 990.0, 1000.0])
    with mpmath.workdps(40):
        p = np.array([float(mpmath.gammainc(s, 0, t, regularized=True)) for s, t in zip(a, x)])
        q = np.array([float(mpmath.gammainc(s, t, mpmath.inf, regularized=True))
                      for s, t in zip(a, x)])
    got = tj.jit(lambda a, x: (sc.gammainc(a, x), sc.gammaincc(a, x)))(a, x)
    np.testing.assert_allclose(got[0], p, rtol=1e-13)
    np.testing.assert_allclose(got[1], q, rtol=1e-13)


def test_huge_parameters_sum_enough_terms():
    """Near x = a the series and fractions need about 9 sqrt(a) terms: at a = 1e8 (b = 1e8)
    a fixed bound of 5000 gave 60% errors; the bound grows with sqrt(a)."""
    a = np.array([1e6, 1e8, 1e8, 1e8])
    x = a + np.array([-0.5, -0.5, 0.0, 0.5]) * np.sqrt(a)
    f = lambda a, x: (sc.gammainc(a, x), sc.gammaincc(a, x), sc.betainc(a, a, 0.5 + x / a * 1e-5))
    for g, w in zip(tj.jit(f)(a, x), f(a, x)):
        np.testing.assert_allclose(g, w, rtol=3e-11)


def test_edges_are_scipys():
    """NaN, a <= 0, x < 0, x = 0, x = inf, betainc outside [0, 1], a = 0, b = 0, infinite
    parameters and df."""
    e = np.array([NAN, -1.0, 0.0, 0.5, 2.0, INF])
    u = np.array([NAN, -0.5, 0.0, 0.5, 1.0, 1.5])
    f = lambda a, x, u: (sc.gammainc(a[:, None], x), sc.gammaincc(a[:, None], x),
                         sc.betainc(a[:, None, None], a[None, :, None], u),
                         sc.stdtr(a[:, None], x * 3 - 1))
    got, want = tj.jit(f)(e, e, u), f(e, e, u)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=0)   # (NaN where NaN, inf, 0, 1)


def test_float32_stays_float32():
    a = np.array([0.5, 3.0, 40.0], np.float32)
    x = np.array([0.2, 2.5, 41.0], np.float32)
    u = np.array([0.1, 0.5, 0.93], np.float32)
    f = lambda a, x, u: (sc.gammainc(a, x), sc.gammaincc(a, x), sc.betainc(a, x, u),
                         sc.stdtr(a, x - 1))
    wide = [v.astype(np.float64) for v in (a, x, u)]
    for g, w in zip(tj.jit(f)(a, x, u), f(*wide)):     # (scipy's own float32 betainc: 4e-6)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w.astype(np.float32), rtol=1.2e-7)


def test_integer_arguments_compute_in_float64():
    out = tj.jit(lambda n, x: sc.gammaincc(n + 1, x))(np.arange(4), np.array([0.5, 1.0, 2.0, 9.0]))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, sc.gammaincc(np.arange(4) + 1, [0.5, 1.0, 2.0, 9.0]),
                               rtol=1e-14)


def _sum_all(x, a, b):
    return np.sum(sc.gammainc(a, x) + 2 * sc.gammaincc(a, x) + sc.stdtr(a, 3 * x - 1)
                  + sc.betainc(a, b, x / (1 + x)))


def test_derivatives_in_x():
    """Against central differences, and the exact densities (every order: the second
    derivative of gammainc is the density's derivative)."""
    x, a, b = np.array([0.05, 0.7, 3.0, 25.0]), np.array([0.3, 2.0, 4.5, 30.0]), 1.5
    check_grads(_sum_all, (x, a, b), argnums=(0,))
    grad = tj.jit(tj.grad(lambda x, a: np.sum(sc.gammainc(a, x))))(x, a)
    density = np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))
    np.testing.assert_allclose(grad, density, rtol=1e-13)
    u = np.array([0.0, 0.3, 0.9, 1.0])
    grad = tj.jit(tj.grad(lambda u, a, b: np.sum(sc.betainc(a, b, u))))(u, 2.0, 3.0)
    np.testing.assert_allclose(grad, 12 * u * (1 - u) ** 2, rtol=1e-13, atol=1e-15)
    second = tj.jit(tj.grad(tj.grad(lambda x: sc.gammainc(2.0, x))))(1.5)
    np.testing.assert_allclose(second, (1 - 1.5) * np.exp(-1.5), rtol=1e-13)


@pytest.mark.parametrize("fn, argnum, argument", [
    (lambda a, b, x: sc.gammainc(a, x), 0, "gammainc.* to a"),
    (lambda a, b, x: sc.gammaincc(a, x), 0, "gammaincc.* to a"),
    (lambda a, b, x: sc.betainc(a, b, x), 0, "betainc.* to a"),
    (lambda a, b, x: sc.betainc(a, b, x), 1, "betainc.* to b"),
    (lambda a, b, x: sc.stdtr(a, x), 0, "stdtr.* to df")])
def test_derivatives_in_shapes_raise(fn, argnum, argument):
    """No derivative rule in a, b or df: an error naming the function, the argument and the
    fix at the user's line, never a silent zero (in x it works on the same program)."""
    f = lambda a, b, x: np.sum(fn(a, b, x))
    args = (np.array([2.0, 3.0]), np.array([1.5, 2.5]), np.array([0.3, 0.6]))
    with pytest.raises(UnsupportedOperationError, match=argument) as info:
        tj.grad(f, argnums=argnum)(*args)
    assert isinstance(info.value, NotImplementedError)
    assert "stop_gradient" in str(info.value) and f"{__file__}:" in str(info.value)
    assert np.all(np.isfinite(tj.grad(f, argnums=2)(*args)))


def test_stats_cdf_gradient_in_a_shape_raises():
    import scipy.stats as st
    with pytest.raises(UnsupportedOperationError, match="gammainc.* to a"):
        tj.grad(lambda a: np.sum(st.gamma.cdf(np.array([0.5, 2.0]), a)))(2.5)
