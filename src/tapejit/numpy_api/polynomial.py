"""numpy's polynomial functions on traced coefficients, as numpy defines them: polyval polyder
polyint polyadd polysub polymul vander polyfit. Coefficients run from the highest power down;
each function is differentiable in every traced operand (polyval in the coefficients and x,
polyfit in x, y and w)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import user_error
from . import asarray, cast, implements, reject
from .rearrange import flip
from .shape import concatenate, reshape


@implements(np.polyval)
def polyval(p: Any, x: Any) -> Any:
    """Horner's rule, as numpy writes it: y = y * x + p[i] from y = zeros_like(x)."""
    p, x = asarray(p), asarray(x)
    y = np.zeros_like(x)
    for i in range(p.shape[0] if p.ndim else 0):
        y = y * x + p[i]
    return y


@implements(np.polyder)
def polyder(p: Any, m: int = 1) -> Any:
    """The m-th derivative's coefficients: p[i] times its power, m times (numpy's recursion)."""
    m = int(m)
    if m < 0:
        raise user_error("Order of derivative must be positive (see polyint)")
    p = asarray(p)
    n = p.shape[0] - 1
    return p if m == 0 else polyder(p[:-1] * np.arange(n, 0, -1), m - 1)


def _poly_combine(name: str, combine: Any):
    """polyadd / polysub: the shorter coefficient vector padded with leading zeros."""
    def rule(a1: Any, a2: Any) -> Any:
        a1, a2 = np.atleast_1d(a1), np.atleast_1d(a2)
        diff = a2.shape[0] - a1.shape[0]
        if diff > 0:
            a1 = concatenate([np.zeros(diff, a1.dtype), a1])
        elif diff < 0:
            a2 = concatenate([np.zeros(-diff, a2.dtype), a2])
        return combine(a1, a2)
    return rule


implements(np.polyadd)(_poly_combine("polyadd", lambda a, b: a + b))
implements(np.polysub)(_poly_combine("polysub", lambda a, b: a - b))
implements(np.polymul)(lambda a1, a2: np.convolve(np.atleast_1d(a1), np.atleast_1d(a2)))


@implements(np.vander)
def vander(x: Any, N: Any = None, increasing: bool = False) -> Any:
    """Columns x**0, x**1, ... (numpy's running products), highest power first by default."""
    x = asarray(x)
    if x.ndim != 1:
        raise user_error("x must be a one-dimensional array or sequence.")
    n = x.shape[0] if N is None else int(N)
    x = cast(x, np.promote_types(x.dtype, np.int64))
    columns = [np.ones_like(x)][:n]
    while len(columns) < n:
        columns.append(x if len(columns) == 1 else columns[-1] * x)
    if not columns:
        return reshape(x[:0], (x.shape[0], 0))
    v = np.stack(columns, axis=1)
    return v if increasing else flip(v, 1)


@implements(np.polyint)
def polyint(p: Any, m: int = 1, k: Any = None) -> Any:
    """The m-th antiderivative's coefficients: p over its powers + 1, then the constant k[i]
    (numpy's recursion; k a scalar or one constant per integration, 0 by default)."""
    m = int(m)
    if m < 0:
        raise user_error("Order of integral must be positive (see polyder)")
    k = np.zeros(m) if k is None else np.atleast_1d(k)
    if k.shape[0] == 1 and m > 1:
        k = k[0] * np.ones(m)
    if k.shape[0] < m:
        raise user_error("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = asarray(p)
    if m == 0:
        return p
    y = concatenate([p / np.arange(p.shape[0], 0, -1), reshape(k[0], (1,))])
    return polyint(y, m - 1, k=k[1:])


@implements(np.polyfit)
def polyfit(x: Any, y: Any, deg: int, rcond: Any = None, full: bool = False, w: Any = None,
            cov: bool = False) -> Any:
    """The least-squares coefficients of degree `deg`, as numpy finds them: the Vandermonde
    matrix (rows weighted by w) with its columns scaled to unit norm, solved by lstsq with
    rcond = len(x) eps. numpy's RankWarning for a rank-deficient fit depends on the values, so
    traced code does not give it."""
    reject("numpy.polyfit", full=full or None, cov=cov or None)
    order = int(deg) + 1
    x, y = asarray(x) + 0.0, asarray(y) + 0.0
    if deg < 0:
        raise user_error("expected deg >= 0")
    if x.ndim != 1 or x.shape[0] == 0:
        raise user_error("expected non-empty 1D vector for x")
    if y.ndim not in (1, 2) or x.shape[0] != y.shape[0]:
        raise user_error(f"expected y of 1 or 2 axes and as long as x: x has shape {x.shape}, "
                         f"y {y.shape}")
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = asarray(w) + 0.0
        if w.ndim != 1 or w.shape[0] != y.shape[0]:
            raise user_error(f"expected a 1D vector w as long as y: w has shape {w.shape}")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if rhs.ndim == 2 else w)
    if rcond is None:
        rcond = x.shape[0] * np.finfo(x.dtype).eps
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))
    c = np.linalg.lstsq(lhs / scale, rhs, rcond)[0]
    return (c.T / scale).T
