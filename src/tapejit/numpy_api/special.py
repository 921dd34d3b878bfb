"""scipy.special on traced arrays, where scipy is importable.

Its ufuncs reach `Tracer.__array_ufunc__` as numpy's do: erf, erfc, erfinv, gammaln, expit,
ndtr, log_ndtr, xlogy and xlog1py lower to the primitives of ops/special.py that name them
(numpy_api/math.py), digamma (psi) to polygamma[n=0]; logit, entr, rel_entr, kl_div, huber,
pseudo_huber and betaln to compositions (scipy's own formulas). logsumexp, softmax, log_softmax and polygamma are Python functions that convert
their arguments with np.asarray, which a tracer cannot pass: tapejit replaces them in the
`scipy.special` namespace by wrappers that lower a call with a traced argument here (and call
scipy's function otherwise). `import tapejit` does not import scipy.special: all this is
installed once it is imported, before or after tapejit (on_import.py). A name taken from
scipy.special before tapejit was imported is scipy's own function: docs/api.md says so.
"""
from __future__ import annotations

import functools
import math
import sys
from types import ModuleType
from typing import Any, Callable

import numpy as np

from ..errors import UnsupportedOperationError, at_source, user_source
from ..ops import custom as C
from ..ops import elementwise as E
from ..ops import special as S
from ..trace import FUNCTION_RULES, Tracer
from . import asarray, cast, normalize_axes
from .math import compute_dtype, ufunc_rule
from .on_import import on_import
from .shape import reshape



def _logit(x: Any) -> Any:
    """log(x / (1 - x)), and log1p(2 s / (1 - s)), s = 2 (x - 1/2), on [0.3, 0.65] (scipy's)."""
    s = E.mul(E.sub(x, 0.5), 2)
    near_half = E.and_(E.ge(x, 0.3), E.le(x, 0.65))
    return E.select(near_half, E.log1p(E.div(E.mul(s, 2), E.sub(1, s))),
                    E.log(E.div(x, E.sub(1, x))))


def _entr(x: Any) -> Any:
    """-x log x; 0 at 0, -inf below 0 (scipy's)."""
    return np.where(x < 0, -math.inf, -S.xlogy(x, x))


def _relative(x: Any, y: Any, careful: bool) -> Any:
    """rel_entr (`careful`) and kl_div as scipy computes them: x log(x / y) (+ y - x) where
    x > 0 and y > 0; (y) where x = 0 and y >= 0; inf elsewhere; NaN for a NaN operand.
    rel_entr takes log1p((x - y) / y) for a ratio near 1 and log x - log y where the ratio
    overflows or underflows. Unused logarithms see 1, so that no NaN reaches the gradient."""
    inside = (x > 0) & (y > 0)
    xs, ys = np.where(inside, x, 1), np.where(inside, y, 1)
    ratio = xs / ys
    if careful:
        near = (ratio > 0.5) & (ratio < 2)
        normal = (ratio > np.finfo(ratio.dtype).tiny) & (ratio < math.inf)
        log = np.where(near, np.log1p((xs - ys) / ys), np.where(
            normal, np.log(np.where(near | ~normal, 1, ratio)), np.log(xs) - np.log(ys)))
        out, edge = xs * log, 0 * x
    else:
        out, edge = xs * np.log(ratio) - xs + ys, y
    out = np.where(inside, out, np.where((x == 0) & (y >= 0), edge, math.inf))
    return np.where(np.isnan(x) | np.isnan(y), math.nan, out)


def _huber(delta: Any, r: Any) -> Any:
    """r^2 / 2 where |r| <= delta, delta (|r| - delta / 2) beyond; inf for delta < 0."""
    a = np.abs(r)
    out = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return np.where(delta < 0, math.inf, out)


def _pseudo_huber(delta: Any, r: Any) -> Any:
    """delta^2 (sqrt(1 + (r / delta)^2) - 1); 0 where delta or r is 0, inf for delta < 0."""
    zero = (delta == 0) | (r == 0)
    d = np.where(zero, 1, delta)
    out = np.where(zero, 0 * d, d * d * (np.sqrt(1 + (r / d) ** 2) - 1))
    return np.where(delta < 0, math.inf, out)


_MAXGAM = 171.624376956302725       # Gamma overflows float64 beyond it


def _betaln(a: Any, b: Any) -> Any:
    """scipy's (cephes' lbeta), in float64: log|Gamma(a) Gamma(b) / Gamma(a + b)| from the
    Gamma functions while they are finite, from gammaln beyond, and by cephes' asymptotic
    series where one argument exceeds 1e6 times the other; a non-positive integer argument
    as cephes takes it (1 - a - b in its place, or inf). Each branch sees placeholder
    arguments where it is not chosen, so that its infinities reach no gradient."""
    dtype = asarray(a).dtype
    a, b = np.broadcast_arrays(cast(asarray(a), np.dtype(np.float64)),
                               cast(asarray(b), np.dtype(np.float64)))
    a_int, b_int = (a <= 0) & (a == np.floor(a)), (b <= 0) & (b == np.floor(b))
    pole = (a_int & ((b != np.floor(b)) | (a + b >= 1))) | \
        (b_int & ((a != np.floor(a)) | (a + b >= 1))) | (a_int & b_int)
    a, b = np.where(a_int & ~pole, 1 - a - b, a), np.where(b_int & ~pole, 1 - a - b, b)
    swap = np.abs(a) < np.abs(b)
    big, small = np.where(swap, b, a), np.where(swap, a, b)
    series = (np.abs(big) > 1e6 * np.abs(small)) & (big > 1e6)
    large = ~series & ((np.abs(big + small) > _MAXGAM) | (np.abs(big) > _MAXGAM) |
                       (np.abs(small) > _MAXGAM))
    gammas = ~series & ~large & ~pole
    x, y = np.where(series, big, 2e6), np.where(series, small, 1.0)
    asymptotic = (S.lgamma(y) - y * np.log(x) + y * (1 - y) / (2 * x)
                  + y * (1 - y) * (1 - 2 * y) / (12 * x * x)
                  - y * y * (1 - y) * (1 - y) / (12 * x * x * x))
    x, y = np.where(large, big, 1.0), np.where(large, small, 1.0)
    logs = S.lgamma(x) + S.lgamma(y) - S.lgamma(x + y)
    x, y = np.where(gammas, big, 1.0), np.where(gammas, small, 1.0)
    gx, gy, gxy = S.gamma(x), S.gamma(y), S.gamma(x + y)
    ratio = np.where(np.abs(np.abs(gx) - np.abs(gxy)) > np.abs(np.abs(gy) - np.abs(gxy)),
                     gy / gxy * gx, gx / gxy * gy)
    ratio = np.where((x + y <= 0) & (x + y == np.floor(x + y)), 0, ratio)  # Gamma(a + b) = inf
    out = np.where(series, asymptotic, np.where(large, logs, np.log(np.abs(ratio))))
    return cast(np.where(pole, math.inf, out), dtype)


def _floating(*xs: Any) -> np.dtype:
    """The dtype scipy computes these functions in: the operands' float dtype, float64 for
    integers."""
    expit = sys.modules["scipy.special"].expit
    dtype = compute_dtype(expit, (xs[0],), common=False)
    for x in xs[1:]:
        if x is not None:
            dtype = np.promote_types(dtype, compute_dtype(expit, (x,), common=False))
    return dtype


def _max_shift(x: Any, axes: tuple[int, ...]) -> tuple[Any, Any]:
    """(max, shift): x's max over `axes` (kept, a constant to differentiation) and the same
    with its infinities and NaNs replaced by 0 (as scipy shifts by)."""
    top = C.stop_gradient(np.max(x, axis=axes, keepdims=True))
    return top, np.where(np.isfinite(top), top, 0)


def logsumexp(a: Any, axis: Any = None, b: Any = None, keepdims: bool = False,
              return_sign: bool = False) -> Any:
    """log(sum(b exp(a))) over `axis`, as scipy computes it: the largest terms (m, b's sum at
    the maximum) apart from the others (s), log1p(s / m) + log(m) + max; NaN where the sum is
    negative, -inf where it is 0. The gradient is b exp(a) / sum(b exp(a))."""
    if return_sign:
        raise UnsupportedOperationError(at_source(
            "scipy.special.logsumexp: return_sign=True is not supported on traced arrays "
            "(with weights b of one sign, the result is the log of the absolute value)",
            user_source()))
    dtype = _floating(a, b)
    a = cast(asarray(a), dtype)
    if b is not None:
        b = cast(asarray(b), dtype)
        a, b = np.broadcast_arrays(a, b)
        a = np.where(b == 0, -math.inf, a)     # a term of weight 0 is no term, even inf/NaN
    if a.ndim == 0:
        a = reshape(a, (1,))
        b = b if b is None else reshape(b, (1,))
    axes = normalize_axes(axis, a.ndim, "scipy.special.logsumexp")
    top, shift = _max_shift(a, axes)
    terms = np.exp(a - shift) if b is None else b * np.exp(a - shift)
    at_max = a == top
    m = np.sum(np.where(at_max, terms, 0), axis=axes, keepdims=True)   # = b's sum at the max
    s = np.sum(np.where(at_max, 0, terms), axis=axes, keepdims=True)
    s = s / np.where(s == 0, 1, m)
    if b is None:              # every term positive: m >= 1 where the max is finite, s >= 0
        out = np.log1p(s) + np.log(m) + shift
    else:
        negative = np.sign(s + 1) * np.sign(m) < 0
        s = np.where(s < -1, -s - 2, s)
        out = np.where(negative, math.nan, np.log1p(s) + np.log(np.abs(m)) + shift)
    out = np.where(np.isfinite(top), out, top)         # all -inf: -inf; inf or NaN: itself
    return out if keepdims else np.squeeze(out, axis=axes)


def softmax(x: Any, axis: Any = None) -> Any:
    """exp(x - max) / sum(exp(x - max)) over `axis` (scipy's)."""
    x = cast(asarray(x), _floating(x))
    axes = normalize_axes(axis, x.ndim, "scipy.special.softmax")
    e = np.exp(x - C.stop_gradient(np.max(x, axis=axes, keepdims=True)))
    return e / np.sum(e, axis=axes, keepdims=True)


def log_softmax(x: Any, axis: Any = None) -> Any:
    """x - max - log(sum(exp(x - max))) over `axis`, the max's infinities replaced by 0
    (scipy's)."""
    x = cast(asarray(x), _floating(x))
    axes = normalize_axes(axis, x.ndim, "scipy.special.log_softmax")
    shifted = x - _max_shift(x, axes)[1]
    return shifted - np.log(np.sum(np.exp(shifted), axis=axes, keepdims=True))


def polygamma(n: Any, x: Any) -> Any:
    """The n-th derivative of digamma, for a Python int n >= 0, in x's float dtype (scipy's
    is float64 for float32 x)."""
    if isinstance(n, Tracer) or np.ndim(n) != 0 or int(n) != n or n < 0:
        raise UnsupportedOperationError(at_source(
            f"scipy.special.polygamma: on traced arrays the order n must be a Python int >= 0, "
            f"got {n!r}", user_source()))
    x = asarray(x)
    return S.polygamma(cast(x, _floating(x)), n=int(n))


def route(special: ModuleType, name: str, rule: Callable[..., Any]) -> None:
    """Register `rule` for a scipy module's function `name`, and put in the module's
    namespace a wrapper that calls it when an argument is traced (scipy's function
    otherwise)."""
    original = getattr(special, name)
    if getattr(original, "_tapejit", False):      # (tapejit imported again: wrap scipy's own)
        original = original.__wrapped__

    @functools.wraps(original)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(v, Tracer) for v in (*args, *kwargs.values())):
            return rule(*args, **kwargs)
        return original(*args, **kwargs)

    routed._tapejit = True      # type: ignore[attr-defined]
    setattr(special, name, routed)
    FUNCTION_RULES[routed] = rule


def install(special: ModuleType) -> None:
    """scipy.special's ufuncs and functions on traced arrays, once it is imported."""
    ufunc_rule(special.digamma, lambda x: S.polygamma(x, n=0))
    ufunc_rule(special.logit, _logit)
    ufunc_rule(special.entr, _entr)
    ufunc_rule(special.rel_entr, lambda x, y: _relative(x, y, careful=True))
    ufunc_rule(special.kl_div, lambda x, y: _relative(x, y, careful=False))
    ufunc_rule(special.huber, _huber)
    ufunc_rule(special.pseudo_huber, _pseudo_huber)
    ufunc_rule(special.betaln, _betaln)
    for name, rule in {"logsumexp": logsumexp, "softmax": softmax,
                       "log_softmax": log_softmax, "polygamma": polygamma}.items():
        route(special, name, rule)


if S.sc is not None:
    on_import("scipy.special", install)
