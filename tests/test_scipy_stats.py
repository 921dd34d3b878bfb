"""scipy.stats on traced arrays (numpy_api/stats.py, stats_univariate.py, stats_multivariate.py):
every supported distribution and method against scipy.stats, compiled from the first call (and
checked against the interpreter by conftest) on first and later calls, at support edges,
infinities, NaNs and invalid parameters; gradients in every float argument against central
differences of scipy's own functions; broadcasting of colliding shapes (scalar against
vector, size-1 and size-0 axes, multivariate_normal's batch equal to its dimension); frozen
distributions; the errors for what is not supported; scipy's behaviour on plain arrays; and
the wrapping done lazily, once scipy.stats is imported. One program per distribution computes
all its methods, so the suite compiles few programs."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit.errors import (ArgumentError, ShapeError, UnsupportedAttributeError,
                            UnsupportedOperationError)

from gradcheck import check_grads

st = pytest.importorskip("scipy.stats")
from tapejit.numpy_api import stats as tj_stats  # noqa: E402
from hang import HANG_S

tj_stats.install()          # (a trace opening does this too: test_wrapped_once_imported)
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]
INF, NAN = np.inf, np.nan
ALL = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
PMF = ("logpmf", "pmf")


def _agree(got, want, rtol=1e-12):
    """Same shapes, float64, values within rtol (infinities and NaNs where scipy has them)."""
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        ok = np.isclose(g, w, rtol=rtol, atol=0, equal_nan=True)
        assert ok.all(), (g[~ok], w[~ok])


# ---- the univariate distributions: values ----------------------------------------------------
X = np.array([-INF, -3, -1, -0.0, 0.0, 0.25, 0.5, 1, 2.5, 3, 5, INF, NAN])
K = np.array([-INF, -1, -0.5, 0, 0.5, 1, 2, 3, 5, 10, INF, NAN])
LOC_SCALE = [(0.0, 1.0), (0.5, 2.0), (0.0, 0.0), (0.0, -1.0), (NAN, 1.0), (0.0, INF)]
# name: (methods, shape parameters: valid, at edges, invalid)
CONTINUOUS = {
    "norm": (ALL, [()]),
    "t": (ALL, [(3.0,), (150.0,), (1e8,), (INF,), (0.0,), (-1.0,), (NAN,)]),
    "gamma": (ALL, [(2.5,), (1.0,), (0.5,), (0.0,)]),
    "beta": (ALL, [(2.0, 3.0), (1.0, 1.0), (0.5, 0.5), (0.0, 1.0)]),
    "laplace": (ALL, [()]), "logistic": (ALL, [()]), "expon": (ALL, [()]),
    "uniform": (ALL, [()]), "cauchy": (ALL, [()]),
    "lognorm": (ALL, [(0.8,), (0.0,), (-1.0,)]),
}
DISCRETE = {
    "poisson": (PMF + ALL[2:], [(2.5,), (0.0,), (-1.0,), (NAN,)]),
    "binom": (PMF + ALL[2:], [(5.0, 0.3), (5.0, 0.0), (5.0, 1.0), (5.5, 0.3), (-1.0, 0.3), (5.0, 1.2)]),
    "bernoulli": (PMF + ALL[2:], [(0.3,), (0.0,), (1.0,), (1.5,), (NAN,)]),
}


def _program(dist, methods):
    return lambda x, *params: tuple(getattr(dist, m)(x, *params) for m in methods)


def _reference(dist, methods):
    """scipy's methods, but logcdf (logsf) as log1p(-sf) (log1p(-cdf)) where the value is above
    1/2: scipy's log of a value near 1 loses its digits (t, gamma, beta, poisson, binom)."""
    def run(x, *params):
        out = []
        for m in methods:
            want = getattr(dist, m)(x, *params)
            if m in ("logcdf", "logsf"):
                value, other = (dist.cdf, dist.sf) if m == "logcdf" else (dist.sf, dist.cdf)
                want = np.where(value(x, *params) > 0.5, np.log1p(-other(x, *params)), want)
            out.append(want)
        return tuple(out)
    return run


def test_supported_methods_are_the_tables():
    """The rules are what the tables above test (a new rule needs a row here)."""
    for name, (methods, _) in {**CONTINUOUS, **DISCRETE}.items():
        cls = type(getattr(st, name))
        assert {m for c, m in tj_stats.RULES if c is cls} == set(methods), name
    assert {m for c, m in tj_stats.RULES if c is type(st.multivariate_normal)} == \
        {m for c, m in tj_stats.RULES if c is type(st.dirichlet)} == {"logpdf", "pdf"}


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_methods_match_scipy(name):
    """Every method, compiled, over a grid with infinities, NaN and the support's ends, for
    valid, edge and invalid shapes, locs and scales: one program, traced once."""
    dist, (methods, shape_sets) = getattr(st, name), CONTINUOUS[name]
    compiled = tj.jit(_program(dist, methods))
    x = X if name not in ("beta", "uniform") else np.concatenate([X, [0.75, 0.999]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for shapes in shape_sets:
            for loc, scale in LOC_SCALE:
                params = (*shapes, loc, scale)
                _agree(compiled(x, *params), _reference(dist, methods)(x, *params))
    assert compiled.cache_info()["traces"] == 1


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_discrete_methods_match_scipy(name):
    dist, (methods, shape_sets) = getattr(st, name), DISCRETE[name]
    compiled = tj.jit(_program(dist, methods))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for shapes in shape_sets:
            for loc in (0.0, 1.0, NAN):
                _agree(compiled(K, *shapes, loc), _reference(dist, methods)(K, *shapes, loc))
    assert compiled.cache_info()["traces"] == 1


# ---- gradients against central differences of scipy ------------------------------------------
INSIDE = {"beta": np.array([0.2, 0.45, 0.7]), "uniform": np.array([-1.2, 0.4, 1.9])}
POSITIVE = np.array([0.4, 1.3, 2.2])
GRAD_SHAPES = {"t": [(3.0,), (150.0,)], "gamma": [(2.5,)], "beta": [(2.0, 3.0)],
               "lognorm": [(0.8,)]}


def _total(dist, methods):
    return lambda x, *params: sum(np.sum(getattr(dist, m)(x, *params)) for m in methods)


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_gradients_in_every_argument(name):
    """d/dx, d/dshape, d/dloc, d/dscale of the sum of every method (t's df above 50 takes
    the asymptotic series); the incomplete beta and gamma functions behind t's, gamma's and
    beta's cdf methods have no derivative in their shapes (test_special_incomplete.py)."""
    dist, methods = getattr(st, name), CONTINUOUS[name][0]
    x = INSIDE.get(name, POSITIVE if dist.a == 0 else np.array([-1.3, 0.45, 2.2]))
    loc, scale = (-1.5, 4.0) if name == "uniform" else (0.1, 0.7)
    for shapes in GRAD_SHAPES.get(name, [()]):
        if name == "beta":
            loc, scale = 0.0, 1.0
        args = (x, *shapes, loc, scale)
        if name in ("t", "gamma", "beta"):
            check_grads(_total(dist, ("logpdf", "pdf")), args, argnums=tuple(range(len(args))))
            check_grads(_total(dist, ALL[2:]), args, argnums=(0, len(args) - 2, len(args) - 1))
        else:
            check_grads(_total(dist, methods), args, argnums=tuple(range(len(args))))


@pytest.mark.parametrize("name, k, shapes, argnum", [
    ("poisson", [0.0, 1, 3, 6], (2.5,), 1), ("binom", [0.0, 1, 3, 4], (5.0, 0.3), 2),
    ("bernoulli", [0.0], (0.3,), 1)])        # (at k = 1, logsf is -inf)
def test_discrete_gradients_in_their_float_parameter(name, k, shapes, argnum):
    dist, methods = getattr(st, name), DISCRETE[name][0]
    check_grads(_total(dist, methods), (np.array(k), *shapes, 0.0), argnums=(argnum,))


def test_second_derivatives():
    """The Hessian in (df, loc, scale) of t.logpdf + norm.logcdf, against central differences
    of the compiled gradient."""
    x, p = np.array([0.3, -1.0, 2.0]), np.array([3.0, 0.2, 1.5])
    f = lambda p: np.sum(st.t.logpdf(x, p[0], p[1], p[2]) + st.norm.logcdf(x, p[1], p[2]))
    grad, h = tj.jit(tj.grad(f)), 1e-5
    numeric = np.array([(grad(p + h * e) - grad(p - h * e)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(tj.hessian(f)(p), numeric, rtol=1e-6, atol=1e-8)


def test_normal_gradients_are_exact():
    """d/dmu log N(x; mu, s) = (x - mu) / s^2, d/ds = ((x - mu)^2 / s^2 - 1) / s."""
    x = np.array([-1.0, 0.5, 3.0])
    g_mu, g_s = tj.grad(lambda m, s: np.sum(st.norm.logpdf(x, m, s)), argnums=(0, 1))(0.2, 1.5)
    np.testing.assert_allclose(g_mu, np.sum(x - 0.2) / 1.5 ** 2, rtol=1e-14)
    np.testing.assert_allclose(g_s, np.sum(((x - 0.2) ** 2 / 1.5 ** 2 - 1) / 1.5), rtol=1e-14)


# ---- arguments: broadcasting, keywords, dtypes, frozen distributions --------------------------
@pytest.mark.parametrize("shapes", [
    ((4, 1), (3,), (), (1, 3)), ((), (2,), (2, 1), ()), ((0,), (), (), ()),
    ((2, 0, 1), (3,), (1,), ()), ((1, 1), (1,), (), (1,)), ((3,), (), (3,), (3,))])
def test_arguments_broadcast_as_scipy_does(shapes):
    """x, a shape parameter, loc and scale of colliding shapes, by keyword and position."""
    rng = np.random.default_rng(0)
    x, a, loc, scale = (rng.uniform(0.5, 2.0, s) for s in shapes)
    loc = loc - 0.5

    def fn(x, a, loc, scale):
        return (st.gamma.logpdf(x, a, loc, scale), st.gamma.pdf(x, a=a, loc=loc, scale=scale),
                st.norm.cdf(x=x, loc=loc, scale=scale), st.poisson.logpmf(np.floor(x), a, loc))
    compiled = tj.jit(fn)
    for shift in (0.0, 0.5):                              # first and later calls
        _agree(compiled(x + shift, a, loc, scale), fn(x + shift, a, loc, scale))
    assert compiled.cache_info()["traces"] == 1


def test_what_depends_on_the_parameters_alone_is_computed_once():
    """A Student-t log density with a scalar df (HIPS ica's) computes its gammaln terms at
    df's shape, not once per entry (the per-entry gammaln made its gradient as slow as
    autograd's); scipy's values and the gradient in every argument stay."""
    rng = np.random.default_rng(3)
    x, loc = rng.normal(size=(6, 5)), rng.normal(size=5)

    def loss(x, df, loc, scale):
        return np.sum(st.t.logpdf(x, df, loc, scale))
    args = (x, 2.4, loc, 0.7)
    tape = tj.explain(tj.value_and_grad(loss, argnums=(0, 1, 2, 3)))(*args).tapes["dce"]
    made = [o.aval.shape for e in tape.eqns for o in e.outs if e.op == "lgamma"]
    assert made and all(shape == () for shape in made), made
    _agree([tj.jit(loss)(*args)], [loss(*args)])
    check_grads(loss, args, argnums=(0, 1, 2, 3))


def test_integer_arguments_become_float64_and_float32_stays_float32():
    k = np.array([0, 2, 5])
    got = tj.jit(lambda k, mu: st.poisson.logpmf(k, mu))(k, 2.0)
    _agree([got], [st.poisson.logpmf(k, 2.0)])
    x32 = np.array([0.5, 1.5, 3.0], np.float32)
    fn = lambda x, a: (st.gamma.logpdf(x, a, scale=2.0), st.norm.logcdf(x, 1, 2))
    got = tj.jit(fn)(x32, np.float32(2.5))
    assert [g.dtype for g in got] == [np.float32, np.float32]
    _agree([g.astype(np.float64) for g in got], fn(x32.astype(np.float64), 2.5), rtol=1e-6)


def test_frozen_distributions_made_inside_and_outside():
    x, k = np.array([-0.5, 0.4, 1.7]), np.array([0.0, 2.0, 3.0])
    prior = st.norm(0.3, 2.0)                        # frozen before tracing, constants

    def fn(x, m, s, a):
        return (st.norm(m, s).logpdf(x), st.norm(loc=m, scale=s).cdf(x), prior.logpdf(x=x),
                st.gamma(a, scale=s).pdf(np.abs(x)), st.poisson(a).logpmf(k),
                st.bernoulli(a / 4).sf(k))
    compiled = tj.jit(fn)
    for args in ((x, 0.1, 1.3, 2.0), (2 * x, -0.4, 0.8, 3.1)):
        _agree(compiled(*args), fn(*args))
    assert compiled.cache_info()["traces"] == 1
    check_grads(lambda *a: sum(np.sum(v) for v in fn(*a)), (x, 0.1, 1.3, 2.0),
                argnums=(0, 1, 2, 3))


# ---- multivariate_normal ---------------------------------------------------------------------
def _spd(d, seed=0):
    a = np.random.default_rng(seed).normal(size=(d, d))
    return a @ a.T + d * np.eye(d)


def _mvn(x, mean, cov, frozen=False):
    if frozen:
        return st.multivariate_normal(mean, cov).logpdf(x), st.multivariate_normal(mean, cov).pdf(x)
    return st.multivariate_normal.logpdf(x, mean, cov), st.multivariate_normal.pdf(x, mean, cov)


MVN_CASES = {                         # x, mean, cov: traced
    "batch": ((5, 3), (3,), _spd(3)), "one point": ((3,), (3,), _spd(3)),
    "a batch of one": ((1, 3), (3,), _spd(3)), "batch == dim": ((3, 3), (3,), _spd(3)),
    "two batch axes": ((2, 4, 3), (3,), _spd(3)), "empty batch": ((0, 3), (3,), _spd(3)),
    "dim 1, a vector of points": ((5,), (1,), np.array(2.0)),
    "scalar cov": ((4, 3), (3,), np.array(1.7)), "vector of variances": ((4, 3), (3,),
                                                                       np.array([1.0, 2.0, 0.5])),
}


@pytest.mark.parametrize("case", MVN_CASES)
def test_multivariate_normal_with_a_traced_cov(case):
    xshape, mshape, cov = MVN_CASES[case]
    compiled = tj.jit(_mvn, static_argnums=3)
    for seed in (1, 2):                                   # first and later calls
        rng = np.random.default_rng(seed)
        x, mean = rng.normal(size=xshape), rng.normal(size=mshape)
        for frozen in (False, True):
            _agree(compiled(x, mean, cov * seed, frozen), _mvn(x, mean, cov * seed, frozen))
    assert compiled.cache_info()["traces"] == 2
    if cov.ndim == 2 or mshape == (1,):          # (no mean: the dimension is cov's)
        _agree([tj.jit(lambda x, c: st.multivariate_normal.logpdf(x, cov=c))(x, cov)],
               [st.multivariate_normal.logpdf(x, cov=cov)])
    if x.size:
        check_grads(lambda x, m, c: np.sum(_mvn(x, m, c)[0]), (x, mean, cov), argnums=(0, 1, 2))


def test_multivariate_normal_with_a_constant_cov():
    """scipy processes a constant cov: arrays, scalars, a Covariance, a singular one with
    allow_singular (-inf off its support); frozen before tracing too."""
    rng = np.random.default_rng(2)
    x, mean = rng.normal(size=(4, 3)), rng.normal(size=3)
    singular = np.diag([1.0, 2.0, 0.0])
    x_on = np.concatenate([x[:2], np.c_[x[2:, :2], np.full(2, mean[2])]])  # two off, two on
    frozen = st.multivariate_normal(mean, _spd(3))
    for cov in (_spd(3), 2.5, st.Covariance.from_diagonal([1.0, 3.0, 0.5])):
        fn = lambda x, m: _mvn(x, m, cov) + (st.multivariate_normal.logpdf(
            x, cov=cov if np.ndim(cov) else np.eye(3)),)
        compiled = tj.jit(fn)
        for shift in (0.0, 1.0):                          # first and later calls
            _agree(compiled(x + shift, mean), fn(x + shift, mean))
        check_grads(lambda x, m: np.sum(fn(x, m)[0]), (x, mean), argnums=(0, 1))
    fn = lambda x, m: (st.multivariate_normal.logpdf(x, m, singular, allow_singular=True),
                       frozen.logpdf(x), frozen.pdf(x))
    got = tj.jit(fn)(x_on, mean)
    _agree(got, fn(x_on, mean))
    assert np.isinf(got[0][:2]).all() and np.isfinite(got[0][2:]).all()


def test_losses_written_as_autograd_examples_write_them():
    """A Gaussian process's log marginal likelihood (a traced cov) and a black-box
    variational objective's log density (norm.logpdf of traced locs and scales), as HIPS
    autograd's examples write them: compiled gradients against central differences."""
    mvn, norm = st.multivariate_normal, st.norm
    x = np.linspace(-2, 2, 6)
    y = np.sin(x) + 0.1 * np.cos(3 * x)

    def gp_log_likelihood(params, x, y):
        mean, log_amp, log_length, log_noise = params
        d = x[:, None] - x[None, :]
        cov = np.exp(log_amp) * np.exp(-0.5 * d ** 2 / np.exp(2 * log_length))
        cov = cov + (np.exp(log_noise) + 1e-6) * np.eye(len(x))
        return mvn.logpdf(y, mean * np.ones(len(x)), cov)

    def log_density(z):
        mu, log_sigma = z[:, 0], z[:, 1]
        return norm.logpdf(log_sigma, 0, 1.35) + norm.logpdf(mu, 0, np.exp(log_sigma))

    params = np.array([0.1, 0.2, -0.3, -2.0])
    value = tj.jit(gp_log_likelihood)(params, x, y)
    assert value == pytest.approx(gp_log_likelihood(params, x, y), rel=1e-12)
    check_grads(gp_log_likelihood, (params, x, y))
    z = np.random.default_rng(3).normal(size=(5, 2))
    check_grads(lambda z: np.sum(log_density(z)), (z,))


# ---- dirichlet -------------------------------------------------------------------------------
def test_dirichlet_matches_scipy_and_is_nan_where_scipy_raises():
    alpha = np.array([1.5, 0.7, 3.0])
    x = np.array([[0.2, 0.3, 0.25], [0.5, 0.1, 0.05], [0.3, 0.6, 0.7]])
    fn = lambda x, a: (st.dirichlet.logpdf(x, a), st.dirichlet.pdf(x, a),
                       st.dirichlet(a).logpdf(x[:, 0]), st.dirichlet.logpdf(x[:2], a))
    compiled = tj.jit(fn)
    for a in (alpha, alpha + 2):                          # first and later calls
        _agree(compiled(x, a), fn(x, a))
    check_grads(lambda x, a: np.sum(st.dirichlet.logpdf(x, a)), (x[:2], alpha),
                argnums=(0, 1))
    bad = x.copy()
    bad[:, 0] = [-0.1, 0.6, 0.5]            # a negative entry (scipy: ValueError)
    bad[:, 1] = [0.0, 0.4, 0.6]             # 0 where alpha > 1: fine; below 1: ValueError
    bad[:, 2] = [0.2, 0.2, 0.2]             # not on the simplex
    got = tj.jit(lambda x, a: st.dirichlet.logpdf(x, a))(bad, alpha)
    assert np.isnan(got[[0, 2]]).all()
    np.testing.assert_allclose(got[1], st.dirichlet.logpdf(bad[:, 1], alpha), rtol=1e-12)
    assert np.isnan(tj.jit(lambda x, a: st.dirichlet.logpdf(x, a))(bad[:, 1], -alpha)).all()
    got = tj.jit(lambda x: st.dirichlet.logpdf(x, [0.5, 1.0, 2.0]))(bad[:, 1])
    assert np.isnan(got)
    with pytest.raises(ArgumentError, match="greater than 0"):
        tj.jit(lambda x: st.dirichlet.logpdf(x, [1.0, 0.0, 2.0]))(x)
    with pytest.raises(ShapeError, match=r"x.shape = \(4,\)"):
        tj.jit(lambda a: st.dirichlet.logpdf(np.full(4, 0.25), a))(alpha)


def test_entropy_matches_scipy_and_is_differentiable_in_both_distributions():
    """Square pk and qk (axis 0 and 1 collide), a zero probability, base, axis=None,
    keepdims; compiled and interpreted, first and later calls."""
    rng = np.random.default_rng(5)
    p, q = rng.uniform(0.1, 1.0, (3, 3)), rng.uniform(0.1, 1.0, (3, 3))
    p0 = p.copy()
    p0[1, 2] = 0.0
    cases = [lambda p, q: st.entropy(p), lambda p, q: st.entropy(p, q, base=2, axis=1),
             lambda p, q: st.entropy(p, axis=None), lambda p, q: st.entropy(p, q[0], axis=-1,
                                                                             keepdims=True)]
    for backend in ("numba", "interpret"):
        for fn in cases:
            jitted = tj.jit(fn, backend=backend)
            for a in (p, p0, p):
                np.testing.assert_allclose(jitted(a, q), fn(a, q), rtol=1e-13)
    check_grads(lambda p, q: st.entropy(p[0], q[0]) + st.entropy(p[:, 1]), (p, q), (0, 1))
    with pytest.raises(ArgumentError, match="`base` must be a positive number"):
        tj.jit(lambda p: st.entropy(p, base=-1.0))(p)
    with pytest.raises(UnsupportedOperationError, match="nan_policy='omit'"):
        tj.jit(lambda p: st.entropy(p, nan_policy="omit"))(p)


# ---- what is not supported, and plain arrays --------------------------------------------------
def test_unsupported_methods_and_distributions_are_named_at_the_users_line():
    x = np.array([0.5, 1.5])
    cases = [(lambda x: st.t.ppf(x, 3), UnsupportedOperationError,
              r"scipy.stats.t.ppf .*inverse distribution function"),
             (lambda x: st.norm.ppf(x), NotImplementedError, r"norm.ppf .*\n  Supported for "
                                                               r"norm: cdf, logcdf, logpdf"),
             (lambda x: st.norm.rvs(loc=x), UnsupportedOperationError, "tj.random"),
             (lambda x: st.gumbel_r.logpdf(x), UnsupportedOperationError,
              r"scipy.stats.gumbel_r is not .*\n  Supported: bernoulli, beta, binom"),
             (lambda x: st.gamma(x).mean(), UnsupportedOperationError, "gamma.mean"),
             (lambda x: st.multivariate_normal(x).cdf(x), AttributeError,
              "multivariate_normal.cdf"),
             (lambda x: st.multivariate_normal.logpdf(x, cov=np.outer(x, x),
                                                      allow_singular=True),
              UnsupportedOperationError, "allow_singular=True"),
             (lambda x: st.multivariate_normal.logpdf(np.ones((4, 3)), x), ShapeError,
              "x has 3 components .* dimension 2"),
             (lambda x: st.multivariate_normal.logpdf(x, x, np.eye(3)), ArgumentError,
              "Dimension mismatch")]
    for fn, error, match in cases:
        with pytest.raises(error, match=match) as info:
            tj.jit(fn)(x)
        assert f"{__file__}:" in str(info.value), str(info.value)
    assert issubclass(UnsupportedAttributeError, AttributeError)


def test_plain_arrays_still_go_to_scipy():
    x = np.array([0.5, 1.5])
    assert st.norm.logpdf.__func__._tapejit
    assert st.norm.logpdf.__doc__ == st.norm.logpdf.__wrapped__.__doc__
    np.testing.assert_array_equal(st.gamma.logpdf(x, 2.0), st.gamma.logpdf.__wrapped__(
        st.gamma, x, 2.0))
    assert st.norm(1.0, 2.0).rvs(size=3, random_state=0).shape == (3,)
    assert st.multivariate_normal(np.zeros(2)).logpdf(np.ones(2)) == pytest.approx(
        -np.log(2 * np.pi) - 1)


def test_gradient_tape_records_scipy_stats():
    x0 = np.array([0.2, 1.4])
    with tj.GradientTape() as tape:
        x = tape.watch(x0)
        y = np.sum(st.norm.logpdf(x, 0.5, 2.0))
    np.testing.assert_allclose(tape.gradient(y, x), -(x0 - 0.5) / 4, rtol=1e-14)


def test_wrapped_once_imported():
    """tapejit does not import scipy.stats (it takes a third of a second); a trace opened
    after scipy.stats is imported wraps it, also when imported after tapejit."""
    code = ("import sys, numpy as np, tapejit as tj\n"
            "assert 'scipy.stats' not in sys.modules\n"
            "from scipy.stats import norm\n"
            "print(tj.grad(lambda m: np.sum(norm.logpdf(np.ones(2), m)))(0.5))\n")
    env = dict(os.environ, TAPEJIT_BACKEND="interpret")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"
