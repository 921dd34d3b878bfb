"""scipy.stats' univariate distributions on traced arrays, as compositions of primitives.

A `Family` holds one distribution's formulas on the standardized variable z = (x - loc) /
scale (continuous) or k - loc (discrete), mostly scipy's own `_logpdf`, `_cdf`, ...: the
methods (`rules`) wrap them in scipy's rules. Parameters that fail the family's check (its
`_argcheck`, and scale > 0) and NaN quantiles give NaN; quantiles outside the support give
the method's value there (-inf logpdf, 0 pdf, 0 or 1 cdf, ...); everything broadcasts, and
what depends on the parameters alone is computed at their own shape (a scalar df's
gammaln once, not per entry). Where an entry is not inside the support, the formula is
computed at a point inside it instead (`inner`, and for a discrete family the shapes `safe`)
and its result discarded: its gradient is 0, never 0 * inf = NaN.
Results are in the arguments' float dtype (scipy's are float64 for float32 arguments).
numpy_api/stats.py puts these rules into scipy.stats' classes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..ops import custom as C
from ..ops import special as S
from . import asarray, cast
from .math import compute_dtype

sc = S.sc
LOG_PI = math.log(math.pi)
LOG_HALF = math.log(0.5)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
INF = math.inf
NAN = math.nan


def _positive(*shapes: Any) -> Any:
    """scipy's default check of shape parameters: all > 0."""
    ok = True
    for s in shapes:
        ok = ok & (s > 0)
    return ok


def _unit(p: Any) -> Any:
    return (p >= 0) & (p <= 1)


@dataclass(frozen=True)
class Family:
    """One distribution: `formulas` (method name -> function of z and the shape parameters;
    a discrete one's pmf methods are named logpdf/pdf here), `valid` (scipy's _argcheck),
    `support` (its ends given the shapes), `inner` (a z inside it) and `safe` (valid shapes).
    `open_density`: the density's support leaves out its ends (lognorm at 0)."""
    formulas: dict[str, Callable[..., Any]]
    valid: Callable[..., Any] = _positive
    support: Callable[..., tuple[Any, Any]] = lambda *shapes: (-INF, INF)
    inner: float = 0.0
    safe: tuple[float, ...] = ()
    discrete: bool = False
    open_density: bool = False


# ---- formulas on z (scipy's _logpdf, _cdf, ... of each family) ------------------------------
def _log_gamma_ratio_half(a: Any) -> Any:
    """log(Gamma(a + 1/2) / Gamma(a)) (scipy's log(poch(a, 1/2))): gammaln's difference, and
    for a > 50, where it cancels, its asymptotic series (error < 1e-18)."""
    big = np.where(a > 50, a, 50.0)
    series = (0.5 * np.log(big) - 1 / (8 * big) + 1 / (192 * big ** 3) - 1 / (640 * big ** 5)
              + 17 / (14336 * big ** 7))
    small = np.where(a > 50, 1.0, a)
    return np.where(a > 50, series, sc.gammaln(small + 0.5) - sc.gammaln(small))


def _t_logpdf(z: Any, df: Any) -> Any:
    """Student's t; the normal's where df is infinite (scipy's)."""
    finite = np.where(df == INF, 1.0, df)
    t = (_log_gamma_ratio_half(0.5 * finite) - 0.5 * (np.log(finite) + LOG_PI)
         - (finite + 1) / 2 * np.log1p(z * z / finite))
    return np.where(df == INF, -z * z / 2 - HALF_LOG_2PI, t)


def _betaln(a: Any, b: Any) -> Any:
    return sc.gammaln(a) + sc.gammaln(b) - sc.gammaln(a + b)


def _cauchy_logpdf(z: Any) -> Any:
    """-log(pi (1 + z^2)), written for |z| >= 1 as -log(pi) - 2 log|z| - log1p(1/z^2) (no
    overflow; scipy's)."""
    a = np.abs(z)
    near = np.where(a < 1, a, 0.0)
    far = np.where(a < 1, 1.0, a)
    return np.where(a < 1, -LOG_PI - np.log1p(near * near),
                    -LOG_PI - (2 * np.log(far) + np.log1p((1 / far) ** 2)))


def _log_expit(z: Any) -> Any:
    """log(1 / (1 + exp(-z))) without overflow (scipy.special.log_expit)."""
    return np.minimum(z, 0) - np.log1p(np.exp(-np.abs(z)))


def _laplace_cdf(z: Any) -> Any:
    half_tail = 0.5 * np.exp(-np.abs(z))
    return np.where(z > 0, 1 - half_tail, half_tail)


def _laplace_logcdf(z: Any) -> Any:
    return np.where(z > 0, np.log1p(-0.5 * np.exp(-np.abs(z))), LOG_HALF - np.abs(z))


def _binom_logpmf(k: Any, n: Any, p: Any) -> Any:
    k = np.floor(k)
    combinations = sc.gammaln(n + 1) - (sc.gammaln(k + 1) + sc.gammaln(n - k + 1))
    return combinations + sc.xlogy(k, p) + sc.xlog1py(n - k, -p)


def _t_cdf(z: Any, df: Any) -> Any:
    """Student's t distribution function; the normal's where df is infinite."""
    return np.where(df == INF, sc.ndtr(z), sc.stdtr(np.where(df == INF, 1.0, df), z))


def _count(k: Any) -> Any:
    """floor(k), a constant to differentiation (the distribution functions are steps in k)."""
    return C.stop_gradient(np.floor(k))


def _log_of(fn: Callable[..., Any], other: Callable[..., Any]) -> Callable[..., Any]:
    """log fn, as log1p(-other) where fn > 1/2 (other = 1 - fn: scipy's log(fn) loses the
    digits of values near 1 there)."""
    def log_fn(*args: Any) -> Any:
        value = fn(*args)
        return np.where(value > 0.5, np.log1p(-other(*args)), np.log(value))
    return log_fn


def _cdf_methods(cdf: Callable[..., Any], sf: Callable[..., Any]) -> dict:
    """cdf, sf and their logarithms."""
    return {"cdf": cdf, "sf": sf, "logcdf": _log_of(cdf, sf), "logsf": _log_of(sf, cdf)}


_T_CDF = _cdf_methods(_t_cdf, lambda z, df: _t_cdf(-z, df))
_GAMMA_CDF = _cdf_methods(lambda z, a: sc.gammainc(a, z), lambda z, a: sc.gammaincc(a, z))
_BETA_CDF = _cdf_methods(lambda z, a, b: sc.betainc(a, b, z),
                         lambda z, a, b: sc.betainc(b, a, 1 - z))
_POISSON_CDF = _cdf_methods(lambda k, mu: sc.gammaincc(_count(k) + 1, mu),
                            lambda k, mu: sc.gammainc(_count(k) + 1, mu))
_BINOM_CDF = _cdf_methods(lambda k, n, p: sc.betainc(n - _count(k), _count(k) + 1, 1 - p),
                          lambda k, n, p: sc.betainc(_count(k) + 1, n - _count(k), p))


def _log_z(fn: Callable[[Any], Any], sign: int) -> Callable[[Any, Any], Any]:
    """fn(sign * log(z) / s): lognorm's cdf-like methods, through the normal's."""
    return lambda z, s: fn(sign * np.log(z) / s)


FAMILIES: dict[str, Family] = {
    "norm": Family({"logpdf": lambda z: -z * z / 2 - HALF_LOG_2PI,
                    "cdf": sc.ndtr, "logcdf": sc.log_ndtr,
                    "sf": lambda z: sc.ndtr(-z), "logsf": lambda z: sc.log_ndtr(-z)}),
    "t": Family({"logpdf": _t_logpdf, **_T_CDF}, safe=(1.0,)),
    "gamma": Family({"logpdf": lambda z, a: sc.xlogy(a - 1, z) - z - sc.gammaln(a),
                     **_GAMMA_CDF},
                    support=lambda a: (0.0, INF), inner=1.0, safe=(1.0,)),
    "beta": Family({"logpdf": lambda z, a, b: (sc.xlog1py(b - 1, -z) + sc.xlogy(a - 1, z)
                                              - _betaln(a, b)), **_BETA_CDF},
                   support=lambda a, b: (0.0, 1.0), inner=0.5, safe=(1.0, 1.0)),
    "laplace": Family({"logpdf": lambda z: LOG_HALF - np.abs(z), "cdf": _laplace_cdf,
                       "logcdf": _laplace_logcdf, "sf": lambda z: _laplace_cdf(-z),
                       "logsf": lambda z: _laplace_logcdf(-z)}),
    "logistic": Family({"logpdf": lambda z: -np.abs(z) - 2 * np.log1p(np.exp(-np.abs(z))),
                        "cdf": sc.expit, "logcdf": _log_expit,
                        "sf": lambda z: sc.expit(-z), "logsf": lambda z: _log_expit(-z)}),
    "expon": Family({"logpdf": lambda z: -z, "cdf": lambda z: -np.expm1(-z),
                     "logcdf": lambda z: np.log(-np.expm1(-z)),
                     "sf": lambda z: np.exp(-z), "logsf": lambda z: -z},
                    support=lambda: (0.0, INF), inner=1.0),
    "uniform": Family({"logpdf": lambda z: 0 * z, "cdf": lambda z: z, "logcdf": np.log,
                       "sf": lambda z: 1 - z, "logsf": lambda z: np.log1p(-z)},
                      support=lambda: (0.0, 1.0), inner=0.5),
    "cauchy": Family({"logpdf": _cauchy_logpdf,
                      "cdf": lambda z: np.arctan2(1, -z) / math.pi,
                      "logcdf": lambda z: np.log(np.arctan2(1, -z) / math.pi),
                      "sf": lambda z: np.arctan2(1, z) / math.pi,
                      "logsf": lambda z: np.log(np.arctan2(1, z) / math.pi)}),
    "lognorm": Family({"logpdf": lambda z, s: (-np.log(z) ** 2 / (2 * s ** 2)
                                               - np.log(s * z) - HALF_LOG_2PI),
                       "cdf": _log_z(sc.ndtr, 1), "logcdf": _log_z(sc.log_ndtr, 1),
                       "sf": _log_z(sc.ndtr, -1), "logsf": _log_z(sc.log_ndtr, -1)},
                      support=lambda s: (0.0, INF), inner=1.0, safe=(1.0,), open_density=True),
    "poisson": Family({"logpdf": lambda k, mu: sc.xlogy(k, mu) - sc.gammaln(k + 1) - mu,
                       **_POISSON_CDF},
                      valid=lambda mu: mu >= 0, support=lambda mu: (0.0, INF), safe=(1.0,),
                      discrete=True),
    "binom": Family({"logpdf": _binom_logpmf, **_BINOM_CDF},
                    valid=lambda n, p: (n >= 0) & (np.floor(n) == n) & _unit(p),
                    support=lambda n, p: (0.0, n), safe=(1.0, 0.5), discrete=True),
    "bernoulli": Family({"logpdf": lambda k, p: _binom_logpmf(k, 1, p),
                         "cdf": lambda k, p: 1 - p, "logcdf": lambda k, p: np.log1p(-p),
                         "sf": lambda k, p: p, "logsf": lambda k, p: np.log(p)},
                        valid=_unit, support=lambda p: (0.0, 1.0), safe=(0.5,), discrete=True),
} if sc is not None else {}


# ---- scipy's rules around the formulas -------------------------------------------------------
# method: (the formula it uses, its fill below and above the support); logpdf and pdf (logpmf
# and pmf) also take the scale: log f(z) - log(scale), f(z) / scale
FILLS = {"logpdf": (-INF, -INF), "pdf": (0.0, 0.0), "cdf": (0.0, 1.0), "logcdf": (-INF, 0.0),
         "sf": (1.0, 0.0), "logsf": (0.0, -INF)}


def _common(*xs: Any) -> list[Any]:
    """The arguments in their common float dtype (numpy's promotion, Python scalars weak;
    float64 for integers), each of its own shape."""
    dtype = compute_dtype(np.add, xs, common=True)
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    return [cast(asarray(x), dtype) for x in xs]


def _inside(family: Family, method: str, z: Any, lo: Any, hi: Any) -> Any:
    """Where `method` computes its formula: the support, closed for densities (open for
    lognorm's), open for a continuous cdf-like method, [lo, hi) for a discrete one."""
    if method in ("logpdf", "pdf"):
        if family.discrete:
            return (lo <= z) & (z <= hi) & (np.floor(z) == z)
        if not family.open_density:
            return (lo <= z) & (z <= hi)
    elif family.discrete:
        return (lo <= z) & (z < hi)
    return (lo < z) & (z < hi)


def _apply(family: Family, method: str, x: Any, shapes: tuple, loc: Any, scale: Any) -> Any:
    """`method` at x, with scipy's values outside the support and for invalid parameters."""
    x, loc, scale, *shapes = _common(x, loc, scale, *shapes)
    valid = family.valid(*shapes)
    ok = valid & (scale > 0)
    scale = np.where(scale > 0, scale, 1)
    z = (x - loc) / scale
    lo, hi = family.support(*shapes)
    inside = ok & _inside(family, method, z, lo, hi)
    # the shapes where they are valid, kept at their own shape, but for a discrete family:
    # there a valid p of 1 would give the discarded entries an infinite derivative
    keep = inside if family.discrete else valid
    shapes = [np.where(keep, v, s) for v, s in zip(shapes, family.safe)]
    formula = family.formulas["logpdf" if method == "pdf" else method]
    value = formula(np.where(inside, z, family.inner), *shapes)
    if method == "logpdf":
        value = value - np.log(scale)
    elif method == "pdf":
        value = np.exp(value) / scale
    below, above = FILLS[method]
    upper = z >= hi
    out = np.where(inside, value, cast(asarray(np.where(upper, above, below)), x.dtype))
    out = np.where(ok & ~np.isnan(z), out, NAN)
    if family.discrete and method == "logcdf":
        out = np.where(upper, 0.0, out)       # (scipy's, also for invalid parameters)
    return out


def _rule(family: Family, method: str) -> Callable[..., Any]:
    """The method as scipy's signature has it: (x, *shapes, loc=0, scale=1), discrete ones
    (k, *shapes, loc=0)."""
    def rule(dist: Any, x: Any, *args: Any, **kwds: Any) -> Any:
        shapes, loc, scale = dist._parse_args(*args, **kwds)
        return _apply(family, method, x, shapes, loc, scale)
    return rule


def rules(family: Family) -> dict[str, Callable[..., Any]]:
    """scipy's method name -> rule(dist, x, *args, **kwds), for the methods `family` has."""
    names = {"logpdf": "logpmf", "pdf": "pmf"} if family.discrete else {}
    methods = [m for m in FILLS if m in family.formulas or m == "pdf"]
    return {names.get(m, m): _rule(family, m) for m in methods}
