"""numpy's sorting and order statistics -> ops/sort.py: sort, argsort, partition, argpartition,
median, quantile, percentile, searchsorted and unique, the Tracer methods sort and partition
(in place), argsort, argpartition and searchsorted, and `tj.unique(x, size=n)`.

Every sort is stable, whatever `kind` asks (numpy's default quicksort is not: argsort of tied
values may order them differently from numpy's, never from kind="stable"), and puts NaN last.
partition and argpartition return the whole sorted line, which is a valid partition. median,
quantile and percentile sort the reduced axes (moved last and flattened, as numpy does) and
interpolate between taken positions with ordinary ops, numpy's formulas line by line, so
dtypes follow numpy's and the gradient comes through sort's: it goes to the elements taken (a
median of an even count splits it between the two middle ones). A line holding NaN gives NaN.

np.unique's result size depends on the values: under jit and grad a traced array has none, so it
raises and points to `tj.unique(x, size=n)` (jax.numpy.unique's `size=`: n values, padded with
`fill_value`); where the value is known while recording (GradientTape) its size is taken from it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..avals import Aval, dtype_name
from ..errors import ShapeError, UnsupportedOperationError, at_source, user_error, user_source
from ..ops import index as I
from ..ops import layout as L
from ..ops import random as RB
from ..ops import sort as S
from ..trace import Tracer, bind_recorded, rebind
from . import asarray, cast, dtype_of, implements, lift, normalize_axes, normalize_axis, reject
from .shape import concatenate, in_common_dtype, ravel, reshape

KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")
INDEX = np.dtype(np.int64)


def _error(message: str) -> Exception:
    return ShapeError(at_source(message, user_source()))


def _aval(x: Any) -> Aval:
    """x's shape and dtype, for error messages (f64[3,4])."""
    return Aval(tuple(x.shape), np.dtype(dtype_of(x)))


def _line_axis(a: Any, axis: Any, what: str) -> tuple[Any, int]:
    """The operand and the axis its lines run along (axis=None: the flattened array)."""
    x = asarray(a)
    if axis is None:
        return ravel(x), 0
    return x, normalize_axis(axis, x.ndim, what)


def _sort(x: Any, axis: int, what: str, kind: Any = None) -> tuple[Any, Any]:
    """(values, indices) of x's lines along `axis`, sorted stably with NaN last."""
    if kind not in KINDS:
        raise user_error(f"{what}: sort kind must be one of {KINDS[1:]}, got {kind!r}")
    if x.ndim == 0:
        raise _error(f"{what}: axis {axis} is out of bounds for an array of dimension 0")
    if x.dtype == np.bool_:                       # sorted as 0/1
        values, indices = S.sort(cast(x, np.dtype(np.uint8)), axis=axis)
        return cast(values, x.dtype), indices
    return S.sort(x, axis=axis)


@implements(np.sort)
def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *,
         stable: Any = None) -> Any:
    reject("numpy.sort", order=order)
    x, ax = _line_axis(a, axis, "numpy.sort")
    return _sort(x, ax, "numpy.sort", kind)[0]


@implements(np.argsort)
def argsort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *,
            stable: Any = None) -> Any:
    reject("numpy.argsort", order=order)
    x, ax = _line_axis(a, axis, "numpy.argsort")
    return _sort(x, ax, "numpy.argsort", kind)[1]


def _checked_kth(x: Any, kth: Any, axis: int, what: str) -> None:
    n = x.shape[axis]
    if isinstance(kth, Tracer):
        raise UnsupportedOperationError(at_source(f"{what}: kth must be a constant",
                                                  user_source()))
    for k in np.atleast_1d(np.asarray(kth)).tolist():
        if not -n <= k < n:
            raise _error(f"{what}: kth {k} is out of bounds for an axis of length {n} "
                         f"({_aval(x)}, axis {axis})")


@implements(np.partition)
def partition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect",
              order: Any = None) -> Any:
    """The sorted line: every element before position kth is <= it, every one after >= it."""
    reject("numpy.partition", order=order)
    x, ax = _line_axis(a, axis, "numpy.partition")
    _checked_kth(x, kth, ax, "numpy.partition")
    return _sort(x, ax, "numpy.partition")[0]


@implements(np.argpartition)
def argpartition(a: Any, kth: Any, axis: Any = -1, kind: str = "introselect",
                 order: Any = None) -> Any:
    reject("numpy.argpartition", order=order)
    x, ax = _line_axis(a, axis, "numpy.argpartition")
    _checked_kth(x, kth, ax, "numpy.argpartition")
    return _sort(x, ax, "numpy.argpartition")[1]


# ---- order statistics: the reduced axes sorted as one last axis ------------------------------
def _sorted_last(x: Any, axes: tuple[int, ...], what: str) -> Any:
    """x with `axes` moved last and flattened into one, each line sorted."""
    kept = tuple(d for d in range(x.ndim) if d not in axes)
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    if kept + axes != tuple(range(x.ndim)):
        x = L.transpose(lift(x), perm=kept + axes)
    flat = reshape(x, tuple(x.shape[:len(kept)]) + (n,))
    return _sort(flat, flat.ndim - 1, what)[0]


def _last(s: Any, position: Any) -> Any:
    """s at `position` (a number or an integer array) along its last axis."""
    if np.ndim(position) == 0 and not isinstance(position, Tracer):
        return s[..., int(position)]
    return I.take(lift(s), position, axis=s.ndim - 1)


def _nan_lines(s: Any, result: Any, extra: int) -> Any:
    """NaN where a sorted line holds a NaN (it sorts last), numpy's rule; `extra` trailing
    axes of `result` belong to q."""
    if dtype_of(s).kind != "f":
        return result
    last = s[..., -1]
    has_nan = np.isnan(reshape(last, tuple(last.shape) + (1,) * extra))
    return np.where(has_nan, np.asarray(np.nan, dtype_of(result)), result)


def _kept_shape(x: Any, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if d in axes else n for d, n in enumerate(x.shape)
                 if keepdims or d not in axes)


@implements(np.median)
def median(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """The mean of the one or two middle elements, as numpy computes it."""
    reject("numpy.median", out=out)
    x = asarray(a)
    axes = normalize_axes(axis, x.ndim, "numpy.median")
    dtype = dtype_of(x) if dtype_of(x).kind == "f" else np.dtype(np.float64)   # mean's
    shape = _kept_shape(x, axes, keepdims)
    if any(x.shape[d] == 0 for d in axes):            # numpy: NaN (mean of an empty slice)
        return np.full(shape, np.nan, dtype)
    s = _sorted_last(x, axes, "numpy.median")
    n = s.shape[-1]
    middle = (cast(_last(s, (n - 1) // 2), dtype) + cast(_last(s, n // 2), dtype)) / 2
    return reshape(_nan_lines(s, middle, 0), shape)


# numpy's continuous methods: virtual index n q + alpha + q (1 - alpha - beta) - 1
_ALPHA_BETA = {"linear": (1.0, 1.0), "median_unbiased": (1 / 3.0, 1 / 3.0),
               "normal_unbiased": (3 / 8.0, 3 / 8.0), "weibull": (0.0, 0.0),
               "hazen": (0.5, 0.5), "interpolated_inverted_cdf": (0.0, 1.0)}
_DISCRETE = {"lower": np.floor, "higher": np.ceil, "nearest": np.around}
METHODS = (*_ALPHA_BETA, "midpoint", *_DISCRETE)


def _virtual_index(method: str, n: int, q: Any) -> Any:
    """numpy's virtual index of quantile q among n sorted values (numbers or traced)."""
    if method == "linear":
        return (n - 1) * q
    if method in _ALPHA_BETA:
        alpha, beta = _ALPHA_BETA[method]
        return n * q + (alpha + q * (1 - alpha - beta)) - 1
    if method == "midpoint":
        return 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q))
    return _DISCRETE[method]((n - 1) * q)


def _lerp(a: Any, b: Any, t: Any) -> Any:
    """numpy's _lerp: a + (b - a) t, or b - (b - a) (1 - t) where t >= 0.5."""
    diff = b - a
    if isinstance(t, Tracer) or np.ndim(t):
        return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _quantile(a: Any, q: Any, axis: Any, method: str, keepdims: bool, what: str,
              weak: bool) -> Any:
    x = asarray(a)
    if method not in METHODS:
        raise UnsupportedOperationError(at_source(
            f"{what}: method={method!r} is not supported on traced arrays (supported: "
            f"{', '.join(METHODS)})", user_source()))
    axes = normalize_axes(axis, x.ndim, what)
    if any(x.shape[d] == 0 for d in axes):
        raise _error(f"{what}: no quantile of an empty axis ({_aval(x)}, "
                     f"axis {axis})")
    s = _sorted_last(x, axes, what)
    n, qdim = s.shape[-1], np.ndim(q)
    virtual = _virtual_index(method, n, q)
    if method in _DISCRETE or (method == "linear" and dtype_of(q).kind in "iu"):
        result = _last(s, cast(virtual, INDEX))
    else:
        below = np.floor(virtual)
        lo = cast(np.clip(below, 0, n - 1), INDEX)
        hi = cast(np.clip(below + 1, 0, n - 1), INDEX)
        gamma = virtual - below
        if method == "midpoint":
            gamma = np.where(virtual % 1 == 0, np.zeros((), dtype_of(gamma)), 0.5)
        result = _lerp(_last(s, lo), _last(s, hi), float(gamma) if weak else gamma)
    result = _nan_lines(s, result, qdim)
    if qdim:      # q's axes go first
        k = np.ndim(result) - qdim
        result = L.transpose(lift(result), perm=tuple(range(k, k + qdim)) + tuple(range(k)))
    return reshape(result, np.shape(q) + _kept_shape(x, axes, keepdims))


def _fraction(q: Any, scale: float, what: str) -> Any:
    """q / scale, checked to lie in [0, 1] where it is a constant."""
    if isinstance(q, Tracer):
        return q / scale if scale != 1 else q
    q = np.asarray(q)
    if q.ndim > 2:
        raise _error(f"{what}: q must be a scalar or 1d, got shape {q.shape}")
    fraction = np.true_divide(q, scale) if scale != 1 else q
    if not (np.all(fraction >= 0) and np.all(fraction <= 1)):
        raise user_error(f"{what}: quantiles must be in the range [0, {int(scale)}], got {q}")
    return fraction


@implements(np.quantile)
def quantile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False, *, weights: Any = None,
             interpolation: Any = None) -> Any:
    reject("numpy.quantile", out=out, weights=weights, interpolation=interpolation)
    weak = type(q) in (int, float)
    return _quantile(a, _fraction(q, 1, "numpy.quantile"), axis, method, keepdims,
                     "numpy.quantile", weak)


@implements(np.percentile)
def percentile(a: Any, q: Any, axis: Any = None, out: Any = None,
               overwrite_input: bool = False, method: str = "linear", keepdims: bool = False,
               *, weights: Any = None, interpolation: Any = None) -> Any:
    reject("numpy.percentile", out=out, weights=weights, interpolation=interpolation)
    weak = type(q) in (int, float)
    return _quantile(a, _fraction(q, 100, "numpy.percentile"), axis, method, keepdims,
                     "numpy.percentile", weak)


@implements(np.searchsorted)
def searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> Any:
    """Insertion indices of v into the sorted 1-D a (int64; not differentiated)."""
    if side not in ("left", "right"):
        raise user_error(f"numpy.searchsorted: side must be 'left' or 'right', got {side!r}")
    a = asarray(a)
    if a.ndim != 1:
        raise _error(f"numpy.searchsorted: needs a 1-D sorted array, got shape {a.shape}")
    if sorter is not None:
        a = I.take(lift(a), sorter, axis=0)
    a, v = in_common_dtype([a, v], "numpy.searchsorted")
    if a.dtype == np.bool_:
        a, v = cast(a, np.dtype(np.uint8)), cast(v, np.dtype(np.uint8))
    return S.searchsorted(a, v, right=side == "right")


# ---- unique: only with a static size ---------------------------------------------------------
def _traced_unique(x: Any) -> UnsupportedOperationError:
    return UnsupportedOperationError(at_source(
        f"numpy.unique: how many distinct values a traced array ({_aval(x)}) "
        f"holds is known only when the program runs, so the result has no static shape.\n"
        f"  - pass an upper bound: tj.unique(x, size=n) gives n values (as "
        f"jax.numpy.unique(x, size=n)), the ones past the count set to fill_value (default: "
        f"the smallest value); return_index/return_inverse/return_counts work as in numpy;\n"
        f"  - or call np.unique on concrete values outside the traced function.",
        user_source()))


def unique(ar: Any, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: Any = None, *, equal_nan: bool = True,
           sorted: bool = True, size: int | None = None, fill_value: Any = None) -> Any:
    """np.unique over the flattened array; `size` fixes the result's length (jax.numpy's
    `size=`): the distinct values in order, then `fill_value` (default: the smallest value);
    indices 0 and counts 0 past the distinct ones. The values are differentiable (through the
    first occurrence of each), counts and indices are not."""
    reject("numpy.unique", axis=axis)
    x = asarray(ar)
    if size is None:
        if not isinstance(x, Tracer):
            return np.unique(x, return_index, return_inverse, return_counts, equal_nan=equal_nan)
        known = getattr(x, "numpy", None)       # the value, while GradientTape records
        if known is None:
            raise _traced_unique(x)
        size = len(np.unique(known(), equal_nan=equal_nan))   # (only the count is read)
    parts = _unique_sized(x, int(size), fill_value, equal_nan)
    chosen = [True, return_index, return_inverse, return_counts]
    results = [p for p, keep in zip(parts, chosen) if keep]
    return results[0] if len(results) == 1 else tuple(results)


def _unique_sized(x: Any, size: int, fill_value: Any, equal_nan: bool) -> tuple:
    """(values, first indices, inverse, counts) of the flattened x, `size` distinct values."""
    flat = ravel(x)
    n = flat.shape[0]
    if n == 0:
        fill = 0 if fill_value is None else fill_value
        zeros = np.zeros(size, INDEX)
        return np.full(size, fill, x.dtype), zeros, np.zeros(x.shape, INDEX), zeros
    s, perm = _sort(flat, 0, "numpy.unique")
    new = _filled(1, True)
    if n > 1:
        ahead, behind = s[1:], s[:-1]
        differs = ahead != behind
        if equal_nan and x.dtype.kind == "f":
            differs = differs & ~(np.isnan(ahead) & np.isnan(behind))
        new = concatenate([new, differs])
    number = np.cumsum(cast(new, INDEX)) - 1          # each sorted element's distinct value
    kept = np.where(number < size, number, size)      # slot `size` collects the rest
    start = _slots(kept, np.where(new, _iota(n), 0), size)    # where each distinct value starts
    valid = _iota(size) < number[-1] + 1
    fill = s[0] if fill_value is None else cast(fill_value, x.dtype)
    values = np.where(valid, I.take(lift(s), start, axis=0), fill)
    first = np.where(valid, I.take(lift(perm), start, axis=0), 0)
    inverse = reshape(I.scatter_add(_filled(n, 0), perm, number, axis=0), x.shape)
    return values, first, inverse, _slots(kept, _filled(n, 1), size)


def _filled(n: int, value: Any) -> Any:
    """A vector of n `value`s (int64 or bool), as a broadcast rather than a constant array."""
    scalar = np.asarray(value, bool if isinstance(value, bool) else INDEX)
    return bind_recorded(L.broadcast_in_dim, (scalar,), {"shape": (n,), "dims": ()})


def _iota(n: int) -> Any:
    """0, 1, ..., n - 1 (int64), recorded while tracing rather than a constant array."""
    return bind_recorded(RB.iota, (), {"shape": (n,), "dtype": dtype_name(INDEX)})


def _slots(slot: Any, values: Any, size: int) -> Any:
    """The sums of `values` into `size` slots (slot `size` discarded)."""
    return I.scatter_add(_filled(size + 1, 0), slot, values, axis=0)[:size]


implements(np.unique)(unique)


# ---- methods -----------------------------------------------------------------------------------
def _sort_method(x: Tracer, axis: int = -1, kind: Any = None, order: Any = None, *,
                 stable: Any = None) -> None:
    """x.sort(): sorts in place (the tracer is rebound to its sorted value)."""
    rebind(x, sort(x, axis, kind, order, stable=stable))


def _partition_method(x: Tracer, kth: Any, axis: int = -1, kind: str = "introselect",
                      order: Any = None) -> None:
    rebind(x, partition(x, kth, axis, kind, order))


def _searchsorted_method(x: Tracer, v: Any, side: str = "left", sorter: Any = None) -> Any:
    return searchsorted(x, v, side, sorter)


for _name, _fn in {"sort": _sort_method, "argsort": argsort, "partition": _partition_method,
                   "argpartition": argpartition, "searchsorted": _searchsorted_method}.items():
    setattr(Tracer, _name, _fn)
