"""Array creation from traced values: np.array / np.asarray / np.asanyarray of (nested lists
of) tracers, np.full with a traced fill value, np.linspace / np.logspace with traced
endpoints, np.meshgrid, np.block.

numpy does not dispatch its constructors on their arguments, so the first four reach these
rules through guards.py's wrappers (`guards.TRACED`); linspace, logspace and meshgrid are
dispatched like any numpy function. A traced size is an error (guards.size_error): shapes
are fixed when a function is recorded.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..errors import ShapeError, at_source, user_error, user_source
from ..guards import TRACED, size_error, traced_in
from ..trace import Tracer, holds_tracer
from . import asarray, cast, implements
from .math import compute_dtype
from .shape import (broadcast_arrays, broadcast_to_shape, concatenate, copy_of, moveaxis, ravel,
                    reshape, stack)


def _dummy(x: Any) -> Any:
    """`x` with each tracer replaced by a value numpy promotes alike (weak ones by a Python
    scalar): numpy itself then finds the result's dtype and shape (or raises, if ragged)."""
    if isinstance(x, Tracer):
        return x.dtype.type(0).item() if x.weak else np.zeros(x.shape, x.dtype)
    if isinstance(x, (list, tuple)):
        return [_dummy(e) for e in x]
    return x


def _build(x: Any, dtype: np.dtype) -> Any:
    if isinstance(x, Tracer):
        return cast(x, dtype)
    if isinstance(x, (list, tuple)) and holds_tracer(x):
        return stack([_build(e, dtype) for e in x])
    return np.asarray(x, dtype)


def array(obj: Any, dtype: Any = None, *args: Any, copy: Any = True, ndmin: int = 0,
          **kwargs: Any) -> Any:
    """np.array / np.asarray / np.asanyarray of a tracer or of nested lists holding tracers:
    numpy's dtype and shape, the elements stacked."""
    if isinstance(obj, Tracer):
        out = obj if dtype is None else cast(obj, np.dtype(dtype))
        copies = copy is True or getattr(copy, "name", None) == "ALWAYS"   # (np._CopyMode)
        out = copy_of(out) if out is obj and copies else out
    else:
        like = np.asarray(_dummy(obj), dtype)
        out = _build(obj, like.dtype)
        if out.shape != like.shape:
            raise ShapeError(at_source(f"numpy.array: elements of shapes that do not fit "
                                       f"together (numpy makes {like.shape})", user_source()))
    if out.ndim < ndmin:
        out = reshape(out, (1,) * (ndmin - out.ndim) + out.shape)
    return out


def _holds_object(obj: Any = None, *args: Any, **kwargs: Any) -> bool:
    return holds_tracer(kwargs.get("object", kwargs.get("a")) if obj is None else obj)


TRACED["array"] = (_holds_object, array)
TRACED["asarray"] = TRACED["asanyarray"] = (
    _holds_object, lambda a, dtype=None, *args, copy=None, **kwargs: array(a, dtype,
                                                                           copy=bool(copy)))


def full(shape: Any, fill_value: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
    """np.full with a traced fill value (an array broadcasts, as in numpy)."""
    traced = traced_in(shape)
    if traced is not None:
        raise size_error("numpy.full", traced, user_source())
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    fill = array(fill_value, copy=False)
    return broadcast_to_shape(fill if dtype is None else cast(fill, np.dtype(dtype)), shape,
                              "numpy.full")


TRACED["full"] = (lambda shape=None, fill_value=None, *args, **kwargs: holds_tracer(
    kwargs.get("fill_value") if fill_value is None else fill_value), full)


@implements(np.linspace)
def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: Any = None, axis: int = 0, **kwargs: Any) -> Any:
    """start + i * step, and exactly stop at the end point, as numpy computes them:
    differentiable in start and stop."""
    num = operator.index(num)
    if num < 0:
        raise user_error(f"Number of samples, {num}, must be non-negative.")
    div = num - 1 if endpoint else num
    dt = compute_dtype(np.add, (start, stop), common=True)
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    start, stop = cast(asarray(start), dt), cast(asarray(stop), dt)
    delta = stop - start
    y = reshape(np.arange(num, dtype=dt), (num,) + (1,) * np.ndim(delta))
    step = delta / div if div > 0 else np.nan
    y = (y * step if div > 0 else y * delta) + start
    if endpoint and num > 1:
        y[-1, ...] = stop
    y = moveaxis(y, 0, axis)
    if dtype is not None:
        dtype = np.dtype(dtype)
        y = cast(np.floor(y) if dtype.kind in "iu" else y, dtype)
    return (y, step) if retstep else y


@implements(np.logspace)
def logspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, base: Any = 10.0,
             dtype: Any = None, axis: int = 0) -> Any:
    """base ** linspace(start, stop) (a scalar base; an array base as numpy broadcasts it)."""
    if not isinstance(base, (float, int)) and np.ndim(base):
        ndmax = len(np.broadcast_shapes(np.shape(start), np.shape(stop), np.shape(base)))
        start, stop, base = (array(a, copy=False, ndmin=ndmax) if isinstance(a, Tracer)
                             else np.array(a, ndmin=ndmax) for a in (start, stop, base))
        base = np.expand_dims(base, axis)
    y = np.power(base, linspace(start, stop, num=num, endpoint=endpoint, axis=axis))
    return y if dtype is None else cast(y, np.dtype(dtype))


@implements(np.meshgrid)
def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> Any:
    """Coordinate arrays: the i-th input along axis i ('ij'), or with the first two axes
    swapped ('xy'), broadcast to the full grid unless `sparse`."""
    if indexing not in ("xy", "ij"):
        raise user_error("Valid values for `indexing` are 'xy' and 'ij'.")
    n = len(xi)
    axes = list(range(n))
    if indexing == "xy" and n > 1:
        axes[0], axes[1] = 1, 0
    out = [reshape(ravel(x), tuple(-1 if d == a else 1 for d in range(n)))
           for x, a in zip(map(asarray, xi), axes)]
    return tuple(out if sparse else broadcast_arrays(*out))


@implements(np.block)
def block(arrays: Any) -> Any:
    """numpy's: the innermost lists join along the last axis, the lists of them along the one
    before, and so on; each block first gets leading axes of length 1 up to the result's."""
    depth, ndim = _nesting(arrays, "arrays")
    ndim = max(depth, ndim)

    def assemble(x: Any, level: int) -> Any:
        if level == depth:
            x = asarray(x)
            return reshape(x, (1,) * (ndim - x.ndim) + x.shape)
        return concatenate([assemble(e, level + 1) for e in x], axis=level - depth)
    return assemble(arrays, 0)


def _nesting(x: Any, where: str) -> tuple[int, int]:
    """(how deep x's lists go, the most axes of a block), checked as numpy checks them."""
    if type(x) is tuple:
        raise user_error(f"numpy.block: {where} is a tuple. Only lists can be used to arrange "
                         f"blocks, and np.block does not allow implicit conversion from tuple "
                         f"to ndarray.")
    if type(x) is not list:
        return 0, np.ndim(x)
    if not x:
        raise user_error(f"numpy.block: {where} is an empty list: lists cannot be empty")
    found = [_nesting(e, f"{where}[{i}]") for i, e in enumerate(x)]
    if len({d for d, _ in found}) > 1:
        raise user_error(f"numpy.block: List depths are mismatched: the elements of {where} "
                         f"are lists nested {sorted({d for d, _ in found})} deep")
    return found[0][0] + 1, max(n for _, n in found)
