"""numpy's numerical routines as compositions of primitives: interp convolve correlate kron
trapezoid gradient ediff1d ptp select piecewise cumulative_sum cumulative_prod isclose allclose
(polynomials: polynomial.py; cov, corrcoef, bincount, digitize: statistics.py).

Each follows numpy's own definition (result dtype, modes, edge values) so that it is
differentiable in every traced operand: `interp` in x, fp and xp (as JAX's jnp.interp),
`convolve`/`correlate` in both signals. Sliding windows are one `take` of a constant index
matrix (a gather, so the reverse sweep is a scatter-add).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import (DtypeError, ShapeError, UnsupportedOperationError, at_source, user_error,
                      user_source)
from ..ops import custom as C
from ..ops import index as I
from ..ops import layout as L
from ..trace import Tracer
from . import asarray, cast, implements, lift, normalize_axis
from .reductions import cumprod, cumsum, sum as _sum
from .rearrange import flip
from .shape import (broadcast_to_shape, concatenate, diff, expand_dims, in_common_dtype, reshape,
                    slice_axis, where)


def _vector(x: Any, name: str, what: str) -> Any:
    """A 1-d operand (0-d becomes 1-d, as numpy's ndmin=1); a clear error otherwise."""
    x = np.atleast_1d(x)
    if x.ndim != 1:
        raise ShapeError(at_source(
            f"numpy.{name}: {what} must be 1-d, got shape {x.shape}; for a batch, call it per "
            f"row (a Python loop unrolls) or write the sum with np.einsum", user_source()))
    if x.shape[0] == 0:
        raise user_error(f"{what} cannot be empty")
    return x


def _full_convolution(a: Any, v: Any, mode: str, name: str) -> Any:
    """sum_i a[i] v[k - i] for the k of `mode`, with len(a) >= len(v) (numpy's core)."""
    if mode not in ("full", "same", "valid"):
        raise user_error(f"numpy.{name}: mode must be 'full', 'same' or 'valid', not {mode!r}")
    n, m = a.shape[0], v.shape[0]
    lo, hi = {"full": (0, n + m - 1), "same": ((m - 1) // 2, (m - 1) // 2 + n),
              "valid": (m - 1, n)}[mode]
    padded = L.pad(lift(a), np.zeros((), a.dtype), lo=(m - 1,), hi=(m - 1,), interior=(0,))
    windows = I.take(lift(padded), np.arange(lo, hi)[:, None] + np.arange(m), axis=0)
    return _sum(windows * flip(v), axis=1)                   # windows[k, j] = a[k + j - m + 1]


@implements(np.convolve)
def convolve(a: Any, v: Any, mode: str = "full") -> Any:
    a, v = in_common_dtype([_vector(a, "convolve", "a"), _vector(v, "convolve", "v")],
                           "numpy.convolve")
    if v.shape[0] > a.shape[0]:
        a, v = v, a
    return _full_convolution(a, v, mode, "convolve")


@implements(np.correlate)
def correlate(a: Any, v: Any, mode: str = "valid") -> Any:
    """sum_n a[n + k] v[n]: a convolution with v reversed (numpy swaps the operands when v is
    longer and reverses the result)."""
    a, v = in_common_dtype([_vector(a, "correlate", "a"), _vector(v, "correlate", "v")],
                           "numpy.correlate")
    if v.shape[0] > a.shape[0]:
        return flip(_full_convolution(v, flip(a), mode, "correlate"))
    return _full_convolution(a, flip(v), mode, "correlate")


@implements(np.kron)
def kron(a: Any, b: Any) -> Any:
    """a's and b's axes interleaved (a_0, b_0, a_1, b_1, ...) by broadcasting, then merged."""
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    nd = max(a.ndim, b.ndim)
    a = reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = reshape(b, (1,) * (nd - b.ndim) + b.shape)
    product = (reshape(a, tuple(d for n in a.shape for d in (n, 1)))
               * reshape(b, tuple(d for n in b.shape for d in (1, n))))
    return reshape(product, tuple(p * q for p, q in zip(a.shape, b.shape)))


@implements(np.trapezoid)
def trapezoid(y: Any, x: Any = None, dx: Any = 1.0, axis: int = -1) -> Any:
    """sum of d * (y[1:] + y[:-1]) / 2 along `axis`, d the spacing dx or diff(x)."""
    y = asarray(y)
    ax = normalize_axis(axis, y.ndim, "numpy.trapezoid")
    d = dx
    if x is not None:
        x = asarray(x)
        d = diff(x) if x.ndim == 1 else diff(x, axis=axis)
        if x.ndim == 1:
            d = reshape(d, tuple(d.shape[0] if k == ax else 1 for k in range(y.ndim)))
    n = y.shape[ax]
    pairs = slice_axis(y, ax, min(1, n), n) + slice_axis(y, ax, 0, max(n - 1, 0))
    return _sum(d * pairs / 2.0, axis=ax)


@implements(np.gradient)
def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """numpy's second-order central differences inside, one-sided differences of order
    `edge_order` at the ends; spacing 1, a scalar per axis, or coordinates along an axis.
    Constant coordinates of equal steps are one spacing (numpy's check); traced ones always
    take the formula for uneven steps, which is exact for equal ones too."""
    f = asarray(f)
    axes = tuple(range(f.ndim)) if axis is None else \
        tuple(normalize_axis(a, f.ndim, "numpy.gradient") for a in np.atleast_1d(axis))
    if len(varargs) == 0:
        varargs = (1.0,) * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        varargs = varargs * len(axes)
    elif len(varargs) != len(axes):
        raise user_error(f"numpy.gradient: {len(varargs)} spacings for {len(axes)} axes: give "
                         f"none, one scalar, or one per axis")
    if edge_order not in (1, 2):
        raise user_error(f"numpy.gradient: edge_order={edge_order}; it must be 1 or 2")
    otype = f.dtype if f.dtype.kind == "f" else np.dtype(np.float64)
    f = cast(f, otype)
    out = tuple(cast(_derivative(f, ax, _steps(dx, f.shape[ax]), edge_order), otype)
                for ax, dx in zip(axes, varargs))
    return out[0] if len(out) == 1 else out


def _steps(dx: Any, n: int) -> Any:
    """A scalar spacing as it is; coordinates as their steps (one scalar if constant and even)."""
    if np.ndim(dx) == 0:
        return dx
    if np.ndim(dx) != 1 or np.shape(dx)[0] != n:
        raise user_error(f"numpy.gradient: coordinates of shape {np.shape(dx)} along an axis of "
                         f"length {n}: they must be one value per point, or a scalar spacing")
    dx = asarray(dx)
    steps = diff(cast(dx, np.float64) if dx.dtype.kind in "biu" else dx)
    if not isinstance(steps, Tracer) and steps.shape[0] and np.all(steps == steps[0]):
        return steps[0]
    return steps


def _derivative(f: Any, ax: int, dx: Any, edge_order: int) -> Any:
    """One axis of np.gradient, in numpy's formulas (and its order of operations)."""
    n = f.shape[ax]
    if n < edge_order + 1:
        raise user_error("numpy.gradient: Shape of array too small to calculate a numerical "
                         "gradient, at least (edge_order + 1) elements are required.")
    part = lambda i, j: slice_axis(f, ax, i, j)
    even = np.ndim(dx) == 0
    if even:
        inner = (part(2, n) - part(0, n - 2)) / (2.0 * dx)
    else:
        along = lambda v: reshape(v, tuple(-1 if k == ax else 1 for k in range(f.ndim)))
        dx1, dx2 = along(dx[:-1]), along(dx[1:])
        inner = (-dx2 / (dx1 * (dx1 + dx2)) * part(0, n - 2)
                 + (dx2 - dx1) / (dx1 * dx2) * part(1, n - 1)
                 + dx1 / (dx2 * (dx1 + dx2)) * part(2, n))
    if edge_order == 1:
        first = (part(1, 2) - part(0, 1)) / (dx if even else dx[0])
        last = (part(n - 1, n) - part(n - 2, n - 1)) / (dx if even else dx[-1])
        return concatenate([first, inner, last], axis=ax)
    if even:
        a, b, c = -1.5 / dx, 2.0 / dx, -0.5 / dx
    else:
        d1, d2 = dx[0], dx[1]
        a, b, c = (-(2.0 * d1 + d2) / (d1 * (d1 + d2)), (d1 + d2) / (d1 * d2),
                   -d1 / (d2 * (d1 + d2)))
    first = a * part(0, 1) + b * part(1, 2) + c * part(2, 3)
    if even:
        a, b, c = 0.5 / dx, -2.0 / dx, 1.5 / dx
    else:
        d1, d2 = dx[-2], dx[-1]
        a, b, c = (d2 / (d1 * (d1 + d2)), -(d2 + d1) / (d1 * d2),
                   (2.0 * d2 + d1) / (d2 * (d1 + d2)))
    last = a * part(n - 3, n - 2) + b * part(n - 2, n - 1) + c * part(n - 1, n)
    return concatenate([first, inner, last], axis=ax)


@implements(np.ediff1d)
def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Any:
    """Differences of the flattened array, with to_begin / to_end (flattened) around them."""
    flat = reshape(asarray(ary), (-1,))
    n = flat.shape[0]
    begin, end = ([] if e is None else [cast(reshape(asarray(e), (-1,)), flat.dtype)]
                  for e in (to_begin, to_end))
    parts = begin + [slice_axis(flat, 0, min(1, n), n) - slice_axis(flat, 0, 0, max(n - 1, 0))]
    return concatenate(parts + end) if len(parts + end) > 1 else parts[0]


@implements(np.ptp)
def ptp(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """max - min (each with max's and min's gradient: ties split evenly)."""
    kept = {"keepdims": True} if keepdims else {}
    return np.max(a, axis=axis, out=out, **kept) - np.min(a, axis=axis, out=out, **kept)


@implements(np.select)
def select(condlist: Any, choicelist: Any, default: Any = 0) -> Any:
    """The choice of the first true condition, element by element, else `default`."""
    if len(condlist) != len(choicelist):
        raise user_error("numpy.select: list of cases must be same length as list of conditions")
    if not condlist:
        raise user_error("numpy.select: an empty condition list is not possible")
    for i, cond in enumerate(condlist):
        if asarray(cond).dtype != np.bool_:
            raise DtypeError(at_source(f"numpy.select: invalid entry {i} in condlist: should "
                                       f"be a boolean array", user_source()))
    result = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        result = where(cond, choice, result)
    return result


@implements(np.piecewise)
def piecewise(x: Any, condlist: Any, funclist: Any, *args: Any, **kw: Any) -> Any:
    """numpy's: where a condition holds, its function of x (or its value), in x's dtype; a
    later condition wins; one function more than conditions gives the value where none holds,
    and 0 is left elsewhere. numpy calls a function on x[cond], whose length depends on the
    values: here each is called on all of x, so it must work element by element."""
    x = asarray(x)
    if isinstance(condlist, Tracer) or np.isscalar(condlist) or (
            not isinstance(condlist[0], (list, np.ndarray, Tracer)) and x.ndim != 0):
        condlist = [condlist]
    conds = [asarray(c) for c in condlist]
    for c in conds:
        if c.shape != x.shape:
            raise ShapeError(at_source(f"numpy.piecewise: a condition of shape {c.shape} for "
                                       f"x of shape {x.shape}: they must match", user_source()))
    conds = [c if c.dtype == np.bool_ else c != 0 for c in conds]
    if len(conds) == len(funclist) - 1:
        otherwise = ~conds[0] if len(conds) == 1 else ~np.any(np.stack(conds), axis=0)
        conds.append(otherwise)
    elif len(conds) != len(funclist):
        raise user_error(f"numpy.piecewise: with {len(conds)} condition(s), either "
                         f"{len(conds)} or {len(conds) + 1} functions are expected")
    y = np.zeros_like(x)
    for cond, fn in zip(conds, funclist):
        # x's elements outside cond reach fn without a derivative: no NaN gradient from them
        value = fn(where(cond, x, C.stop_gradient(x)), *args, **kw) if callable(fn) else fn
        y = where(cond, cast(asarray(value), x.dtype), y)
    return y


def _cumulative(fn: Any, initial: float, name: str):
    """numpy 2's cumulative_sum / cumulative_prod: cumsum / cumprod whose axis may be left out
    only for 1-d input, with `include_initial` prepending the identity."""
    def rule(x: Any, /, *, axis: Any = None, dtype: Any = None, out: Any = None,
             include_initial: bool = False) -> Any:
        x = np.atleast_1d(x)
        if axis is None:
            if x.ndim > 1:
                raise user_error(f"numpy.{name}: for arrays which have more than one "
                                 f"dimension ``axis`` argument is required.")
            axis = 0
        result = fn(x, axis=axis, dtype=dtype, out=out)
        if not include_initial:
            return result
        ax = normalize_axis(axis, x.ndim, f"numpy.{name}")
        shape = tuple(1 if k == ax else n for k, n in enumerate(x.shape))
        first = broadcast_to_shape(np.asarray(initial, result.dtype), shape)
        return concatenate([first, result], axis=ax)
    return rule


@implements(np.isclose)
def isclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Any:
    """numpy's rule: |a - b| <= atol + rtol |b| where b is finite, or a == b (infinities of one
    sign), or both NaN with `equal_nan`; b compared as a float, as numpy casts it."""
    a, b = asarray(a), asarray(b)
    b = cast(b, np.result_type(b.dtype, 1.0))
    close = np.logical_or(np.logical_and(np.abs(a - b) <= atol + rtol * np.abs(b),
                                         np.isfinite(b)), np.equal(a, b))
    return np.logical_or(close, np.logical_and(np.isnan(a), np.isnan(b))) if equal_nan \
        else close


@implements(np.allclose)
def allclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Any:
    """np.all of isclose, a traced bool (numpy's is a Python bool: `if np.allclose(...)` guards
    the program on it)."""
    return np.all(isclose(a, b, rtol, atol, equal_nan))


if hasattr(np, "cumulative_sum"):        # numpy >= 2.1
    implements(np.cumulative_sum)(_cumulative(cumsum, 0, "cumulative_sum"))
    implements(np.cumulative_prod)(_cumulative(cumprod, 1, "cumulative_prod"))


@implements(np.interp)
def interp(x: Any, xp: Any, fp: Any, left: Any = None, right: Any = None,
           period: Any = None) -> Any:
    """Piecewise-linear interpolation, in float64 as numpy computes it; xp increasing.
    Below xp[0] the value is `left` (default fp[0]), above xp[-1] `right` (default fp[-1]);
    at a knot, fp there. Differentiable in x, fp and xp (the interval index is not)."""
    x, xp, fp = (cast(asarray(v), np.dtype(np.float64)) for v in (x, xp, fp))
    if xp.ndim != 1 or fp.ndim != 1:
        raise ShapeError(at_source(f"numpy.interp: xp and fp must be 1-d, got shapes "
                                   f"{xp.shape} and {fp.shape}", user_source()))
    if xp.shape[0] == 0:
        raise user_error("array of sample points is empty")
    if xp.shape != fp.shape:
        raise user_error(f"fp and xp are not of the same length ({fp.shape[0]} and "
                         f"{xp.shape[0]}).")
    if period is not None:
        x, xp, fp = _periodic(x, xp, fp, period)
        left = right = None
    first, last = xp[0], xp[-1]
    left = fp[0] if left is None else left
    right = fp[-1] if right is None else right
    m = xp.shape[0]
    if m == 1:
        return where(x < first, left, where(x > first, right, fp[0]))
    # j: the last knot <= x (xp[j] <= x < xp[j + 1]), clipped to an interval
    count = _sum(expand_dims(x, -1) >= xp, axis=-1)
    j = np.clip(count - 1, 0, m - 2)
    x0, x1, f0, f1 = (I.take(lift(v), k, axis=0) for v, k in ((xp, j), (xp, j + 1),
                                                               (fp, j), (fp, j + 1)))
    width = x1 - x0
    slope = (f1 - f0) / where(width == 0, 1.0, width)        # (no 0/0 in any derivative)
    inside = where(x == x0, f0, where(x == x1, f1, slope * (x - x0) + f0))
    return where(x < first, left, where(x > last, right, inside))


def _periodic(x: Any, xp: Any, fp: Any, period: Any) -> tuple[Any, Any, Any]:
    """numpy's periodic interp: x and xp modulo the period, xp sorted, one knot added at each
    end (the order of xp is found at trace time, so xp and period must be constants)."""
    if isinstance(xp, Tracer) or isinstance(period, Tracer):
        raise UnsupportedOperationError(at_source(
            "numpy.interp: period= with a traced xp or period would sort traced values; pass "
            "xp and period as constants (a traced x and fp are fine)", user_source()))
    if period == 0:
        raise user_error("period must be a non-zero value")
    period = abs(float(period))
    xp = np.asarray(xp) % period
    order = np.argsort(xp)
    xp, fp = xp[order], I.take(lift(fp), order, axis=0)
    xp = np.concatenate((xp[-1:] - period, xp, xp[0:1] + period))
    return x % period, xp, concatenate([fp[-1:], fp, fp[0:1]])
