"""numpy reductions -> reduce_* primitives: sum mean average prod max min var std any all
count_nonzero argmax argmin cumsum cumprod, with numpy's `axis`, `keepdims` and
result dtypes, `initial=` and `where=` (sum, prod, mean, max, min); the NaN-ignoring
reductions (nansum nanmean nanmax nanmin) and nan_to_num; the ufunc methods that reduce
(`np.add.reduce`, `np.multiply.accumulate`, ...).

`where=` masks elements out by replacing them with the reduction's identity (0 for sums, 1 for
products, `initial` for max/min, which numpy requires there), so a masked-out element gets
zero gradient; so does a NaN a nan-reduction skips."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..avals import dtype_name
from ..errors import ArgumentError, ShapeError, UnsupportedOperationError, at_source, user_source
from ..ops import elementwise as E
from ..ops import layout as L
from ..ops import reduce as R
from ..trace import METHOD_RULES, Tracer, current_trace
from . import asarray, cast, implements, normalize_axes, normalize_axis, reject
from .shape import reshape

_SUM_DTYPES: dict[tuple, np.dtype] = {}


def _numpy_dtype(fn: Any, dtype: np.dtype) -> np.dtype:
    """The result dtype numpy gives `fn` (sum, prod, mean) on an array of `dtype`."""
    key = (fn, dtype)
    if key not in _SUM_DTYPES:
        _SUM_DTYPES[key] = np.asarray(fn(np.ones(1, dtype))).dtype
    return _SUM_DTYPES[key]


def _keep(out: Any, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    if not keepdims:
        return out
    return L.reshape(out, shape=tuple(1 if d in axes else n for d, n in enumerate(x.shape)))


def _reduction(prim: Any, name: str, x: Any, axis: Any, keepdims: bool, dtype: Any,
               result_dtype: np.dtype | None = None) -> Any:
    x = asarray(x)
    axes = normalize_axes(axis, x.ndim, f"numpy.{name}")
    target = np.dtype(dtype) if dtype is not None else result_dtype or x.dtype
    out = prim(cast(x, target), axes=axes)
    return _keep(out, x, axes, keepdims)


def _masked(x: Any, where: Any, fill: Any) -> Any:
    """x, with `fill` where the mask `where` (broadcast to x) is False."""
    return x if where is None or where is True else np.where(where, x, fill)


@implements(np.sum)
def sum(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
        initial: Any = None, where: Any = None) -> Any:
    reject("numpy.sum", out=out)
    x = asarray(x)
    total = _reduction(R.reduce_sum, "sum", _masked(x, where, 0), axis, keepdims, dtype,
                       _numpy_dtype(np.sum, x.dtype))
    return total if initial is None else total + initial


@implements(np.prod)
def prod(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         initial: Any = None, where: Any = None) -> Any:
    reject("numpy.prod", out=out)
    x = asarray(x)
    total = _reduction(R.reduce_prod, "prod", _masked(x, where, 1), axis, keepdims, dtype,
                       _numpy_dtype(np.prod, x.dtype))
    return total if initial is None else total * initial


def _extremum(prim: Any, name: str, x: Any, axis: Any, keepdims: bool, initial: Any,
              where: Any) -> Any:
    """max/min over `axis`, with `initial` taking part, masked-out elements replaced by it."""
    if where is not None and where is not True and initial is None:
        raise ArgumentError(at_source(
            f"numpy.{name}: a where= mask needs initial= (the {name}imum has no identity)",
            user_source()))
    x = asarray(x)
    if initial is None:
        empty = [a for a in normalize_axes(axis, x.ndim, f"numpy.{name}") if x.shape[a] == 0]
        if empty:       # (numpy's ValueError; compiled code gave the identity, -inf for max)
            raise ShapeError(at_source(
                f"numpy.{name}: zero-size array to reduction operation {name}imum which has no "
                f"identity (axis {empty[0]} of shape {x.shape}): pass initial= to reduce an "
                f"empty axis", user_source()))
        return _reduction(prim, name, x, axis, keepdims, None)
    initial = cast(initial, x.dtype)
    out = _reduction(prim, name, _masked(x, where, initial), axis, keepdims, None)
    return (np.maximum if name == "max" else np.minimum)(out, initial)


@implements(np.max, np.amax)
def max(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False, initial: Any = None,
        where: Any = None) -> Any:
    reject("numpy.max", out=out)
    return _extremum(R.reduce_max, "max", x, axis, keepdims, initial, where)


@implements(np.min, np.amin)
def min(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False, initial: Any = None,
        where: Any = None) -> Any:
    reject("numpy.min", out=out)
    return _extremum(R.reduce_min, "min", x, axis, keepdims, initial, where)


@implements(np.any)
def any(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *,
        where: Any = None) -> Any:
    reject("numpy.any", out=out, where=where)
    return _reduction(R.reduce_max, "any", _truth(x), axis, keepdims, None)


@implements(np.all)
def all(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *,
        where: Any = None) -> Any:
    reject("numpy.all", out=out, where=where)
    return _reduction(R.reduce_min, "all", _truth(x), axis, keepdims, None)


def _truth(x: Any) -> Any:
    x = asarray(x)
    return x if x.dtype == np.bool_ else E.ne(x, 0)


def _count(x: Any, axes: tuple[int, ...], dtype: np.dtype) -> Any:
    """How many elements `axes` of x hold, as a traced scalar of `dtype`: a value computed
    from the run-time sizes, so one compiled program serves every batch size."""
    sizes = tuple(x.shape[a] for a in axes)
    trace = current_trace()
    if trace is None:
        return dtype.type(np.prod(sizes, dtype=np.int64))
    return trace.record(R.dim_size, (), {"sizes": sizes, "dtype": dtype_name(dtype)})


@implements(np.mean)
def mean(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         *, where: Any = None) -> Any:
    """sum / count; with `where=`, of the elements the mask keeps (NaN where it keeps none)."""
    reject("numpy.mean", out=out)
    x = asarray(x)
    target = np.dtype(dtype) if dtype is not None else _numpy_dtype(np.mean, x.dtype)
    axes = normalize_axes(axis, x.ndim, "numpy.mean")
    total = sum(cast(x, target), axis=axes, keepdims=keepdims, where=where)
    if where is None or where is True:
        return total / _count(x, axes, target)
    kept = np.broadcast_to(cast(asarray(where), target), x.shape)
    return total / sum(kept, axis=axes, keepdims=keepdims)


_mean = mean


@implements(np.var)
def var(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, *, where: Any = None, mean: Any = None,
        correction: Any = None) -> Any:
    reject("numpy.var", out=out, where=where, mean=mean)
    x = asarray(x)
    ddof = correction if correction is not None else ddof
    axes = normalize_axes(axis, x.ndim, "numpy.var")
    centred = x - _mean(x, axis=axes, dtype=dtype, keepdims=True)
    n = _count(x, axes, centred.dtype)          # no fewer than 0 degrees of freedom, as numpy
    return sum(centred * centred, axis=axes, keepdims=keepdims) / np.maximum(n - ddof, 0)


@implements(np.std)
def std(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, *, where: Any = None, mean: Any = None,
        correction: Any = None) -> Any:
    return np.sqrt(var(x, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                       correction=correction))


def _arg(prim: Any, name: str, x: Any, axis: Any, out: Any, keepdims: bool) -> Any:
    reject(f"numpy.{name}", out=out)
    x = asarray(x)
    if axis is None:
        flat = L.reshape(x, shape=(x.size,))
        result = prim(flat, axis=0)
        return L.reshape(result, shape=(1,) * x.ndim) if keepdims else result
    ax = normalize_axis(axis, x.ndim, f"numpy.{name}")
    return _keep(prim(x, axis=ax), x, (ax,), keepdims)


@implements(np.argmax)
def argmax(x: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
    return _arg(R.argmax, "argmax", x, axis, out, keepdims)


@implements(np.argmin)
def argmin(x: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
    return _arg(R.argmin, "argmin", x, axis, out, keepdims)


def _cumulative(prim: Any, fn: Any, x: Any, axis: Any, dtype: Any, out: Any) -> Any:
    reject(f"numpy.{fn.__name__}", out=out)
    x = asarray(x)
    if axis is None:
        x, axis = L.reshape(x, shape=(x.size,)), 0
    target = np.dtype(dtype) if dtype is not None else _numpy_dtype(fn, x.dtype)
    return prim(cast(x, target), axis=normalize_axis(axis, x.ndim, f"numpy.{fn.__name__}"),
                reverse=False)


@implements(np.cumsum)
def cumsum(x: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    return _cumulative(R.cumsum, np.cumsum, x, axis, dtype, out)


@implements(np.cumprod)
def cumprod(x: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    return _cumulative(R.cumprod, np.cumprod, x, axis, dtype, out)


@implements(np.count_nonzero)
def count_nonzero(x: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    return sum(_truth(x), axis=axis, keepdims=keepdims, dtype=np.int64)


@implements(np.average)
def average(x: Any, axis: Any = None, weights: Any = None, returned: bool = False, *,
            keepdims: bool = False) -> Any:
    """mean, or sum(x w) / sum(w) over `axis` (weights of x's shape, or 1-d along one axis)."""
    reject("numpy.average", returned=returned or None)
    x = asarray(x)
    if weights is None:
        return _mean(x, axis=axis, keepdims=keepdims)
    w = asarray(weights)
    if w.ndim == 1 and x.ndim > 1:
        ax = normalize_axis(axis, x.ndim, "numpy.average")
        w = reshape(w, tuple(w.shape[0] if d == ax else 1 for d in range(x.ndim)))
    total = sum(w * np.ones_like(x), axis=axis, keepdims=keepdims)
    return sum(x * w, axis=axis, keepdims=keepdims) / total


# ---- NaN-ignoring reductions ------------------------------------------------------------------
def _nans(x: Any) -> Any:
    return np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)


@implements(np.nansum)
def nansum(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
    x = asarray(x)
    return sum(np.where(_nans(x), 0, x), axis=axis, dtype=dtype, out=out, keepdims=keepdims,
               initial=initial, where=where)


@implements(np.nanmean)
def nanmean(x: Any, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False, *, where: Any = None) -> Any:
    """The mean of the non-NaN elements: NaN for an all-NaN slice (numpy also warns, which a
    compiled program cannot: the values are not known when it is traced)."""
    x = asarray(x)
    kept = ~_nans(x)
    if where is not None and where is not True:
        kept = kept & where
    return mean(x, axis=axis, dtype=dtype, out=out, keepdims=keepdims, where=kept)


def _nan_extremum(fn: Any, name: str, x: Any, axis: Any, keepdims: bool, initial: Any,
                  where: Any) -> Any:
    """max/min of the non-NaN elements (NaN for an all-NaN slice, as numpy, without its
    warning)."""
    x = asarray(x)
    if x.dtype.kind != "f":
        return fn(x, axis=axis, keepdims=keepdims, initial=initial, where=where)
    nan = np.isnan(x)
    fill = -math.inf if name == "max" else math.inf
    out = fn(np.where(nan, fill, x), axis=axis, keepdims=keepdims, initial=initial,
             where=where)
    everywhere = all(nan, axis=axis, keepdims=keepdims)
    return out if initial is not None else np.where(everywhere, math.nan, out)


@implements(np.nanmax)
def nanmax(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
    reject("numpy.nanmax", out=out)
    return _nan_extremum(max, "max", x, axis, keepdims, initial, where)


@implements(np.nanmin)
def nanmin(x: Any, axis: Any = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
    reject("numpy.nanmin", out=out)
    return _nan_extremum(min, "min", x, axis, keepdims, initial, where)


@implements(np.nan_to_num)
def nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: Any = None,
               neginf: Any = None) -> Any:
    """NaN -> `nan`, +-inf -> `posinf`/`neginf` (the dtype's largest finite values by
    default); the gradient is 1 at finite elements, 0 at replaced ones."""
    x = asarray(x)
    if x.dtype.kind != "f":
        return x
    big = np.finfo(x.dtype).max
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    x = np.where(x == math.inf, cast(posinf, x.dtype), x)
    x = np.where(x == -math.inf, cast(neginf, x.dtype), x)
    return np.where(np.isnan(x), cast(nan, x.dtype), x)


REDUCERS = {np.add: sum, np.multiply: prod, np.maximum: max, np.minimum: min,
            np.logical_or: any, np.logical_and: all}


def _reduce_method(ufunc: np.ufunc, x: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
                   keepdims: bool = False, **kwargs: Any) -> Any:
    if ufunc not in REDUCERS or out is not None or kwargs:
        raise UnsupportedOperationError(at_source(
            f"numpy.{ufunc.__name__}.reduce is not supported on traced arrays "
            f"(supported: {', '.join(u.__name__ for u in REDUCERS)})", user_source()))
    given = {} if dtype is None else {"dtype": dtype}   # max/min/any/all take no dtype
    return REDUCERS[ufunc](x, axis=axis, keepdims=keepdims, **given)


def _accumulate_method(ufunc: np.ufunc, x: Any, axis: int = 0, dtype: Any = None,
                       out: Any = None) -> Any:
    rules = {np.add: cumsum, np.multiply: cumprod, np.maximum: _running, np.minimum: _running}
    if ufunc not in rules or out is not None:
        raise UnsupportedOperationError(at_source(
            f"numpy.{ufunc.__name__}.accumulate is not supported on traced arrays "
            f"(supported: add, multiply, maximum, minimum)", user_source()))
    if rules[ufunc] is _running:
        return _running(ufunc, x, axis, dtype)
    return rules[ufunc](x, axis=axis, dtype=dtype)


def _running(ufunc: np.ufunc, x: Any, axis: int, dtype: Any) -> Any:
    """maximum (minimum).accumulate, by doubling: after the step of shift k each element holds
    the extreme of the 2k elements that end at it (Hillis and Steele's scan). The two halves
    compared never overlap, so ties split the gradient as np.maximum's do; NaN propagates."""
    x = asarray(x) if dtype is None else cast(asarray(x), np.dtype(dtype))
    y = np.moveaxis(x, normalize_axis(axis, x.ndim, f"numpy.{ufunc.__name__}.accumulate"), -1)
    kind, low = y.dtype.kind, ufunc is np.maximum      # (the identity: the lowest for max)
    fill = (-math.inf if low else math.inf) if kind == "f" else (not low) if kind == "b" else \
        (np.iinfo(y.dtype).min if low else np.iinfo(y.dtype).max)
    k = 1
    while k < y.shape[-1]:
        before = np.full(y.shape[:-1] + (k,), fill, y.dtype)
        y = ufunc(y, np.concatenate([before, y[..., :-k]], axis=-1))
        k *= 2
    return np.moveaxis(y, -1, axis)


METHOD_RULES.update(reduce=_reduce_method, accumulate=_accumulate_method)

for _name, _fn in {"sum": sum, "prod": prod, "max": max, "min": min, "mean": mean, "var": var,
                   "std": std, "any": any, "all": all, "argmax": argmax, "argmin": argmin,
                   "cumsum": cumsum, "cumprod": cumprod}.items():
    setattr(Tracer, _name, _fn)
