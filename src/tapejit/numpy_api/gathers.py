"""numpy functions that gather by index arrays: np.take (modes raise, wrap, clip),
np.take_along_axis, np.repeat with uneven counts, np.pad's edge, wrap, reflect and symmetric
modes and sliding_window_view (source indices numpy itself computes), and the matching Tracer
methods."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DtypeError, ShapeError, UnsupportedOperationError, at_source, user_source
from ..ops import index as I
from ..ops import layout as L
from ..trace import Tracer
from . import asarray, cast, implements, lift, normalize_axis, reject
from .indexing import getitem, normalized_index
from .shape import ravel, reshape


@implements(np.take)
def take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
    reject("numpy.take", out=out)
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, a.ndim, "numpy.take")
    dtype = indices.dtype if isinstance(indices, Tracer) else np.asarray(indices).dtype
    if dtype.kind not in "iu":    # numpy: a TypeError (cannot cast the indices safely to int64)
        raise DtypeError(at_source(f"numpy.take: indices must be integers, not {dtype}: convert "
                                   f"them with .astype(np.int64)", user_source()))
    if mode not in ("raise", "wrap", "clip"):
        raise UnsupportedOperationError(at_source(
            f"numpy.take: mode={mode!r}, not 'raise', 'wrap' or 'clip'", user_source()))
    n = a.shape[ax]         # (it ignored mode: 'wrap' and 'clip' raised for indices past n)
    if mode != "raise" and n:
        indices = np.mod(indices, n) if mode == "wrap" else np.clip(indices, 0, n - 1)
    return I.take(lift(a), normalized_index(indices, n, ax), axis=ax)


@implements(np.take_along_axis)
def take_along_axis(arr: Any, indices: Any, axis: int) -> Any:
    arr = asarray(arr)
    ax = normalize_axis(axis, arr.ndim, "numpy.take_along_axis")
    key = [np.arange(n).reshape([-1 if i == d else 1 for i in range(arr.ndim)])
           for d, n in enumerate(arr.shape)]
    key[ax] = indices
    return getitem(arr, tuple(key))


@implements(np.repeat)
def repeat(x: Any, repeats: Any, axis: Any = None) -> Any:
    x = asarray(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = normalize_axis(axis, x.ndim, "numpy.repeat")
    if isinstance(repeats, Tracer):
        raise UnsupportedOperationError("numpy.repeat: traced repeat counts give a "
                                        "data-dependent shape")
    reps = np.broadcast_to(np.asarray(repeats), (x.shape[ax],))
    if np.all(reps == reps[0]) and x.shape[ax]:
        r = int(reps[0])
        grid = x.shape[:ax + 1] + (r,) + x.shape[ax + 1:]
        dims = tuple(d if d <= ax else d + 1 for d in range(x.ndim))
        out = L.broadcast_in_dim(x, shape=grid, dims=dims)
        return reshape(out, x.shape[:ax] + (x.shape[ax] * r,) + x.shape[ax + 1:])
    return take(x, np.repeat(np.arange(x.shape[ax]), reps), axis=ax)


@implements(np.pad)
def pad(x: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> Any:
    x = asarray(x)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2)).tolist()
    if mode == "constant":
        value = np.asarray(kwargs.get("constant_values", 0))
        if value.ndim:
            raise UnsupportedOperationError("numpy.pad: only a scalar constant_values is "
                                            "supported on traced arrays")
        lo, hi = (tuple(w[i] for w in widths) for i in (0, 1))
        return L.pad(lift(x), cast(value, x.dtype)[()], lo=lo, hi=hi, interior=(0,) * x.ndim)
    if mode not in ("edge", "wrap", "reflect", "symmetric"):
        raise UnsupportedOperationError(f"numpy.pad: mode={mode!r} is not supported on traced "
                                        f"arrays (supported: constant, edge, wrap, reflect, "
                                        f"symmetric)")
    for ax, (lo, hi) in enumerate(widths):
        if lo or hi:   # the padded positions' source indices, computed by numpy itself
            x = take(x, np.pad(np.arange(x.shape[ax]), (lo, hi), mode=mode), axis=ax)
    return x


@implements(np.lib.stride_tricks.sliding_window_view)
def sliding_window_view(x: Any, window_shape: Any, axis: Any = None, *, subok: bool = False,
                        writeable: bool = False) -> Any:
    """numpy's windows (a view there), as one gather of x's elements at the flat positions
    numpy's own function gives on np.arange: overlapping windows sum their gradients."""
    x = asarray(x)
    if writeable:
        raise UnsupportedOperationError(at_source(
            "numpy.lib.stride_tricks.sliding_window_view: writeable=True writes through to x, "
            "which a traced gather cannot: assign into x instead", user_source()))
    try:
        where = np.lib.stride_tricks.sliding_window_view(np.arange(x.size).reshape(x.shape),
                                                         window_shape, axis)
    except ValueError as err:
        raise ShapeError(at_source(f"numpy.lib.stride_tricks.sliding_window_view: {err} "
                                   f"({x.shape}, window {window_shape})", user_source())) from None
    return I.take(lift(ravel(x)), np.ascontiguousarray(where), axis=0)


Tracer.take = take
Tracer.repeat = repeat
