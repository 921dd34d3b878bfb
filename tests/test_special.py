"""scipy.special on traced arrays and numpy's nan-reductions and reductions with where=, beyond
the op table: the accuracy of codegen/special.py's scalar functions (through compiled
programs) on dense grids in float64 and float32, compiled against the interpreter on first and
later calls, logsumexp's weights and infinities, gradients against finite differences and
JAX, the wrappers' behaviour on plain arrays; nan-reductions on all-NaN slices (numpy's
results and warnings) and where= reductions.

The scipy parts skip where scipy is not installed; the accuracy against exact values needs
mpmath."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tapejit as tj

from gradcheck import check_grads

try:
    import scipy.special as sc
except ImportError:          # scipy is optional: its tests skip
    sc = None

needs_scipy = pytest.mark.skipif(sc is None, reason="scipy is not installed")
# a program numba cannot compile would run on the interpreter with a warning: here, a failure
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]


def ulps(got, want) -> np.ndarray:
    """|got - want| in units of the spacing of `want`'s dtype at want (at least its smallest
    normal number's spacing); 0 where both are equal or NaN."""
    want = np.asarray(want)
    got = np.asarray(got).astype(want.dtype)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    spacing = np.spacing(np.maximum(np.abs(want), np.finfo(want.dtype).tiny))
    with np.errstate(all="ignore"):
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))


# ---- accuracy of the compiled scalar functions ----------------------------------------------
def _grids():
    """(name, scipy function, float64 grid, max ulp vs scipy in float64 and in float32), on
    the ranges where scipy is accurate (its erfc, ndtr and gammaln are not everywhere: the
    test against exact values below covers the rest)."""
    positive = np.concatenate([np.geomspace(1e-300, 1e-3, 2001), np.linspace(1e-3, 30, 100001),
                               np.geomspace(30, 1e20, 10001)])
    inner = np.linspace(-1, 1, 200001)[1:-1]
    tails = 1 - np.geomspace(1e-16, 0.5, 10001)
    return [
        ("digamma", sc.digamma, positive, 2, 1),
        ("polygamma1", lambda x: sc.polygamma(1, x), positive[2001:], 2, 1),
        ("polygamma3", lambda x: sc.polygamma(3, x), np.linspace(0.05, 40, 20001), 2, 1),
        ("erfinv", sc.erfinv, np.concatenate([inner, tails, -tails]), 3, 4),
        ("ndtr", sc.ndtr, np.linspace(-0.7, 38, 200001), 2, 1),
        ("log_ndtr", sc.log_ndtr, np.linspace(-1e3, -1, 100001), 4, 1),
        ("erf", sc.erf, np.linspace(-6, 6, 100001), 3, 1),
        ("erfc", sc.erfc, np.linspace(-6, 0.5, 100001), 4, 1),
        ("gammaln", sc.gammaln, np.concatenate([np.geomspace(1e-300, 0.5, 2001),
                                                np.linspace(2.5, 1e4, 100001),
                                                np.geomspace(1e4, 1e300, 2001)]), 3, 2),
        ("expit", sc.expit, np.linspace(-700, 700, 100001), 2, 1),
        ("logit", sc.logit, np.linspace(0, 1, 100001)[1:-1], 3, 3),
    ] if sc is not None else []


@needs_scipy
@pytest.mark.parametrize("name, fn, grid, max64, max32", _grids(),
                         ids=[g[0] for g in _grids()])
def test_compiled_special_functions_are_within_a_few_ulp_of_scipy(name, fn, grid, max64, max32):
    """Each function compiled (codegen/special.py's scalar code, libm's erf/lgamma) against
    scipy on a dense grid, float64 and float32 (computed in float64, rounded once)."""
    compiled = tj.jit(fn, backend="numba")
    for dtype, most in ((np.float64, max64), (np.float32, max32)):
        x = grid.astype(dtype)
        want = fn(x).astype(dtype)
        got = compiled(x)
        assert got.dtype == dtype
        err = ulps(got, want)
        worst = int(np.argmax(err))
        assert err.max() <= most, (f"{name} {np.dtype(dtype).name}: {err.max():.3g} ulp at "
                                   f"x={x[worst]!r}: {got[worst]!r}, scipy {want[worst]!r}")


@needs_scipy
def test_digamma_on_negative_values_matches_scipy_on_the_scale_of_its_terms():
    """Below 0 both reflect (psi(x) = psi(1 - x) - pi / tan(pi x)), which cancels near the
    negative roots: the error is measured against the larger of the two terms."""
    x = np.linspace(-30, -1e-3, 100001)
    x = x[x != np.round(x)]
    got = tj.jit(sc.digamma, backend="numba")(x)
    scale = np.abs(np.pi / np.tan(np.pi * x)) + np.abs(sc.digamma(1 - x))
    assert np.max(np.abs(got - sc.digamma(x)) / np.spacing(scale)) <= 4
    around_root = np.linspace(-0.8, -0.2, 20001)   # scipy's series about the root -0.504...
    got = tj.jit(sc.digamma, backend="numba")(around_root)
    assert ulps(got, sc.digamma(around_root)).max() <= 4


@needs_scipy
def test_compiled_special_functions_are_within_two_ulp_of_exact_values():
    """Against mpmath (40 digits), where scipy is not accurate: ndtr's tails (the rounding of
    x / sqrt(2) is corrected; scipy's lose up to 2 x^2 ulp), log_ndtr above 0 (log1p of the
    upper tail), erfc's far tail and gammaln about its roots 1 and 2 (libm's), erfinv."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-37, 8, 300), rng.uniform(-3, 3, 100)])
    y = np.concatenate([rng.uniform(-1, 1, 300), 1 - np.geomspace(1e-16, 1e-3, 100)])
    near_roots = np.concatenate([rng.uniform(0.9, 1.1, 100), rng.uniform(1.9, 2.1, 100)])
    cases = [
        (sc.ndtr, x, mpmath.ncdf),
        (sc.log_ndtr, x, lambda v: mpmath.log(mpmath.ncdf(v)) if v < 0
         else mpmath.log1p(-mpmath.ncdf(-v))),
        (sc.erfc, rng.uniform(0.5, 26, 300), mpmath.erfc),
        (sc.gammaln, near_roots, lambda v: mpmath.log(mpmath.gamma(v))),
        (sc.erfinv, y, mpmath.erfinv),
    ]
    for fn, points, exact in cases:
        got = tj.jit(fn, backend="numba")(points)
        want = np.array([float(exact(mpmath.mpf(float(v)))) for v in points])
        err = ulps(got, want)
        assert err.max() <= 2, (fn.__name__, err.max(), points[np.argmax(err)])


@needs_scipy
def test_special_values_match_scipy_compiled():
    """Poles, infinities, NaN, the ends of erfinv's and logit's domains, x = 0 for xlogy."""
    x = np.array([0.0, -0.0, -1.0, -2.0, 1.0, 2.0, 10.0, np.inf, -np.inf, np.nan, 0.5, -0.5,
                  1e300, -1e300, 38.5, -38.5])
    for fn in (sc.digamma, sc.gammaln, sc.gamma, sc.erf, sc.erfc, sc.erfinv, sc.expit, sc.logit,
               sc.ndtr, sc.log_ndtr, lambda v: sc.polygamma(1, v), lambda v: sc.xlogy(v, x),
               lambda v: sc.xlogy(x, v), lambda v: sc.xlog1py(v, x)):
        with np.errstate(all="ignore"):
            want = fn(x)
        for backend in ("numba", "interpret"):
            got = tj.jit(fn, backend=backend)(x)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)


@needs_scipy
def test_entropies_and_huber_losses_at_their_edges_match_scipy():
    """0, negatives, subnormals, 1e300, inf and NaN in every pairing: the branches of scipy's
    entr, rel_entr (log1p near a ratio of 1, log x - log y where the ratio underflows),
    kl_div, huber and pseudo_huber, compiled and interpreted, first and later calls."""
    v = np.array([0.0, -0.0, 5e-324, 1e-300, 0.3, 1.0, 1.2, 2.5, 1e300, np.inf, -1.0, np.nan])
    x, y = (a.ravel() for a in np.meshgrid(v, v, indexing="ij"))
    for fn in (sc.entr, sc.rel_entr, sc.kl_div, sc.huber, sc.pseudo_huber):
        args = (x,) if fn is sc.entr else (x, y)
        with np.errstate(all="ignore"):
            want = fn(*args)
        for backend in ("numba", "interpret"):
            jitted = tj.jit(fn, backend=backend)
            for _ in range(2):
                got = jitted(*args)
                np.testing.assert_array_equal(np.isnan(got), np.isnan(want), fn.__name__)
                np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, err_msg=fn.__name__)


@needs_scipy
def test_betaln_matches_scipy_in_each_of_its_branches():
    """cephes' branches: Gamma ratios, gammaln beyond Gamma's overflow (171.6), the series for
    one argument 1e6 times the other, non-positive integers (1 - a - b in their place, or
    inf), poles of Gamma(a + b); compiled and interpreted, first and later calls. Its
    gradient is digamma(a) - digamma(a + b), also through the series."""
    v = np.array([-3.0, -2.5, -2.0, -1.0, -0.5, 0.0, 1e-300, 1e-3, 0.5, 1.0, 2.0, 3.7, 50.0,
                  170.0, 171.7, 200.0, 1e3, 1e7, 1e10, 1e300, np.inf, np.nan])
    a, b = (m.ravel() for m in np.meshgrid(v, v, indexing="ij"))
    with np.errstate(all="ignore"):
        want = sc.betaln(a, b)
        terms = np.nan_to_num(np.abs(sc.gammaln(a)) + np.abs(sc.gammaln(b))
                              + np.abs(sc.gammaln(a + b)), posinf=0.0)
    for backend in ("numba", "interpret"):
        jitted = tj.jit(sc.betaln, backend=backend)
        for _ in range(2):
            got = jitted(a, b)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
            finite = np.isfinite(want)      # (an ulp of libm's gammaln of the larger terms)
            assert np.all(np.abs(got - want)[finite] <= 1e-14 * np.abs(want[finite])
                          + 4e-16 * terms[finite])
    x = np.array([0.3, 2.0, 300.0, 1e7, -2.3])
    got = tj.grad(lambda x: np.sum(sc.betaln(x, 2.5)))(x)
    np.testing.assert_allclose(got, sc.digamma(x) - sc.digamma(x + 2.5), rtol=1e-7)


# ---- compiled and interpreted programs --------------------------------------------------------
REDUCTION_ROWS = {"nansum", "nansum_all_where", "nanmean", "nanmax", "nanmin",
                  "nanmax_initial", "nan_to_num", "nan_to_num_values", "sum_where",
                  "prod_where", "mean_where", "max_where", "min_where"}


def _special_rows():
    from op_db import ROWS
    return [r for r in ROWS if r.name.startswith("scipy_") or r.name in
            {"prim_erf", "prim_erfc", "prim_erfinv", "prim_lgamma", "prim_polygamma",
             "prim_expit", "prim_ndtr", "prim_log_ndtr", "prim_xlogy", "prim_xlog1py"}]


def _reduction_rows():
    from op_db import ROWS
    return [r for r in ROWS if r.name in REDUCTION_ROWS]


@pytest.mark.parametrize("kind, dtype", [(k, d) for k in ("special", "reductions")
                                         for d in ("float64", "float32")])
def test_rows_compiled_match_interpreter_first_and_later_calls(kind, dtype):
    """Values and gradients of all the special-function rows (and, apart, of the
    nan-/where= reduction rows) in one program, compiled, on a first and a later call,
    against the interpreter (scipy)."""
    from op_db import combined
    if kind == "special" and sc is None:
        pytest.skip("scipy is not installed")
    rows = _special_rows() if kind == "special" else _reduction_rows()
    assert rows
    fn, args = combined(rows, dtype, (0, -1))
    argnums = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
    compiled = tj.value_and_grad(fn, argnums=argnums, backend="numba")
    want = tj.value_and_grad(fn, argnums=argnums, backend="interpret")(*args)
    tol = 1e-10 if dtype == "float64" else 2e-4
    for _ in range(2):
        got = compiled(*args)
        for g, w in zip(tj.pytree.flatten(got)[0], tj.pytree.flatten(want)[0]):
            assert np.asarray(g).dtype == np.asarray(w).dtype
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    assert compiled.cache_info()["traces"] == 1


@needs_scipy
def test_second_and_third_derivatives_of_gammaln_are_polygammas():
    """d gammaln = digamma, d digamma = polygamma(1), d polygamma(1) = polygamma(2), compiled."""
    x = np.array([0.3, 1.0, 2.5, 7.0])
    d1 = tj.grad(lambda x: np.sum(sc.gammaln(x)))
    d2 = tj.grad(lambda x: np.sum(d1(x)))
    d3 = tj.grad(lambda x: np.sum(d2(x)))
    for fn, want in ((d1, sc.digamma(x)), (d2, sc.polygamma(1, x)), (d3, sc.polygamma(2, x))):
        np.testing.assert_allclose(tj.jit(fn, backend="numba")(x), want, rtol=1e-13)


# ---- logsumexp, softmax, log_softmax -----------------------------------------------------------
@needs_scipy
def test_logsumexp_with_weights_and_infinities_matches_scipy():
    a = np.array([[0.5, -np.inf, 2.0, 1.0], [-np.inf] * 4, [1.0, np.inf, 0.0, 3.0],
                  [800.0, 799.0, -800.0, 0.1], [1e-3, 2e-3, 3e-3, 1.0]])
    b = np.array([[1.0, 2.0, 0.0, 0.5], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 2.0, 1.0],
                  [1.0, -0.5, 3.0, 1.0], [-1.0, 1.0, 1.0, -2.0]])   # last row: a negative sum
    cases = [lambda a, b: sc.logsumexp(a, axis=1), lambda a, b: sc.logsumexp(a, axis=1, b=b),
             lambda a, b: sc.logsumexp(a, axis=0, b=b, keepdims=True),
             lambda a, b: sc.logsumexp(a[3], b=b[3, 0]), lambda a, b: sc.logsumexp(a[0])]
    for case in cases:
        with np.errstate(all="ignore"):
            want = case(a, b)
        for backend in ("numba", "interpret"):
            got = tj.jit(case, backend=backend)(a, b)
            assert np.shape(got) == np.shape(want)
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)


@needs_scipy
def test_logsumexp_gradient_is_the_weighted_softmax():
    """Where some entries are -inf (masked terms): zero gradient there, softmax elsewhere."""
    a = np.array([[0.3, -np.inf, 1.2], [0.5, 0.5, -np.inf]])
    b = np.array([2.0, 1.0, 0.5])
    ga, gb = tj.grad(lambda a, b: np.sum(sc.logsumexp(a, axis=1, b=b)), argnums=(0, 1))(a, b)
    w = b * np.exp(a)
    np.testing.assert_allclose(ga, w / w.sum(axis=1, keepdims=True), rtol=1e-14)
    np.testing.assert_allclose(gb, np.sum(np.exp(a) / w.sum(axis=1, keepdims=True), axis=0),
                               rtol=1e-14)
    x = np.random.default_rng(1).standard_normal((3, 4))
    check_grads(lambda x: np.sum(sc.logsumexp(x, axis=0, b=x * x)), [x])
    check_grads(lambda x: np.sum(sc.log_softmax(x, axis=1) * sc.softmax(x)), [x])


@needs_scipy
def test_return_sign_is_not_supported_on_traced_arrays():
    with pytest.raises(tj.UnsupportedOperationError, match="return_sign"):
        tj.jit(lambda a: sc.logsumexp(a, return_sign=True))(np.ones(3))


@needs_scipy
def test_wrappers_leave_plain_arrays_to_scipy():
    """Outside a trace scipy.special's functions are scipy's, results and signature alike."""
    import inspect
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    assert sc.logsumexp(x, axis=1, b=x, return_sign=True)[1].tolist() == [1.0, 1.0]
    assert "return_sign" in str(inspect.signature(sc.logsumexp))
    np.testing.assert_allclose(sc.softmax(x, axis=0),
                               np.exp(x) / np.exp(x).sum(axis=0, keepdims=True), rtol=1e-15)
    assert sc.polygamma(1, 2.0) == pytest.approx(np.pi ** 2 / 6 - 1)


@needs_scipy
def test_gradients_match_jax():
    jax = pytest.importorskip("jax")
    jsp = pytest.importorskip("jax.scipy.special")
    x = np.linspace(0.2, 0.8, 6).reshape(2, 3)

    def loss(m, x):
        return (m.sum(m.erf(x) * m.erfc(x) + m.gammaln(x + 1) * m.digamma(x + 1))
                + m.sum(m.erfinv(x - 0.5) + m.expit(x) * m.logit(x) + m.ndtr(x) + m.log_ndtr(-x))
                + m.sum(m.xlogy(x, x + 1) + m.xlog1py(x, x)) + m.sum(m.logsumexp(x, axis=1, b=x))
                + m.sum(m.softmax(x, axis=0) * m.log_softmax(x, axis=1)))

    class Scipy:
        sum = staticmethod(np.sum)
        def __getattr__(self, name):
            return getattr(sc, name)

    class Jax:
        sum = staticmethod(jax.numpy.sum)
        def __getattr__(self, name):
            return getattr(jsp, name)

    ours = tj.grad(lambda x: loss(Scipy(), x))(x)
    with jax.enable_x64(True):
        theirs = np.asarray(jax.grad(lambda x: loss(Jax(), x))(x))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


# ---- nan-reductions and where= ----------------------------------------------------------------
NANS = np.array([[1.0, np.nan, 3.0, -2.0], [np.nan] * 4, [0.5, np.inf, -np.inf, 2.0]])


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_nan_reductions_of_all_nan_slices_give_numpys_results(backend):
    """An all-NaN row: nansum 0, nanmean/nanmax/nanmin NaN (numpy also warns, eagerly; a
    compiled program cannot, its values are not known when it is traced)."""
    cases = [lambda x: np.nansum(x, axis=1), lambda x: np.nanmean(x, axis=1),
             lambda x: np.nanmax(x, axis=1), lambda x: np.nanmin(x, axis=1, keepdims=True),
             lambda x: np.nanmean(x, axis=0), lambda x: np.nanmax(x, axis=1, initial=-1.0),
             lambda x: np.nanmax(x[1]), lambda x: np.nan_to_num(x, posinf=9.0)]
    for case in cases:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            want = case(NANS)
        got = tj.jit(case, backend=backend)(NANS)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        if case is cases[1]:
            assert any(issubclass(w.category, RuntimeWarning) for w in seen)   # numpy's


def test_nan_reductions_give_nan_entries_zero_gradient():
    x = np.nan_to_num(NANS, nan=0.25, posinf=4.0, neginf=-4.0)
    nan = np.isnan(NANS)

    def loss(x):
        y = np.where(nan, np.nan, x)
        return (np.sum(np.nansum(y, axis=1) * np.array([1.0, 2.0, 3.0]))
                + np.nanmean(y) + np.nanmax(y) + np.sum(np.nan_to_num(y)))
    for backend in ("numba", "interpret"):
        g = tj.grad(loss, backend=backend)(x)
        assert np.all(g[nan] == 0) and np.all(np.isfinite(g))
        check_grads(loss, [x])


def test_where_reductions_with_a_traced_mask():
    """The mask may be traced; mean over an empty selection is NaN, as numpy's."""
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -3.0]])

    def fn(x):
        keep = x > 0
        return (np.sum(x, axis=1, where=keep), np.mean(x, axis=0, where=keep),
                np.max(x, axis=1, where=keep, initial=0.1), np.prod(x, where=~keep),
                np.min(x, where=keep, initial=10.0))
    with np.errstate(all="ignore"):
        want = fn(x)
    for backend in ("numba", "interpret"):
        got = tj.jit(fn, backend=backend)(x)
        for g, w in zip(got, want):
            assert np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-14)


def test_max_with_where_needs_initial_as_numpy():
    mask = np.array([True, False])
    with pytest.raises(ValueError):
        np.max(np.ones(2), where=mask)
    with pytest.raises(ValueError, match="initial"):
        tj.jit(lambda x: np.max(x, where=mask))(np.ones(2))


IMPORT_LATER = """
import sys
import numpy as np
import tapejit as tj
print("scipy.special" in sys.modules)
from scipy.special import erf, logsumexp
print(getattr(logsumexp, "_tapejit", False))
print(repr(float(tj.grad(lambda x: logsumexp(x) + np.sum(erf(x)))(np.zeros(2))[0])))
"""


def test_scipy_special_imported_after_tapejit_is_traced_all_the_same():
    """`import tapejit` leaves scipy.special to the user (it took a third of the import);
    imported after, its ufuncs lower to their ops and logsumexp is routed (on_import.py)."""
    import subprocess
    import sys

    from hang import HANG_S
    out = subprocess.run([sys.executable, "-c", IMPORT_LATER], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True", repr(0.5 + 2 / math.sqrt(math.pi))]
