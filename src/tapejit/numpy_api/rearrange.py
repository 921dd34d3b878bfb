"""numpy functions that rearrange elements: np.tile, np.flip (fliplr, flipud), np.roll,
np.rot90, as layout primitives."""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..errors import ShapeError, at_source, user_source
from ..ops import layout as L
from . import asarray, implements, normalize_axes, normalize_axis
from .shape import concatenate, ravel, reshape, slice_axis, transpose


@implements(np.tile)
def tile(x: Any, reps: Any) -> Any:
    x = asarray(x)
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    ndim = builtins.max(x.ndim, len(reps))
    reps = (1,) * (ndim - len(reps)) + reps
    x = reshape(x, (1,) * (ndim - x.ndim) + x.shape)
    # broadcast to (r0, n0, r1, n1, ...) and merge each pair
    grid = tuple(v for r, n in zip(reps, x.shape) for v in (r, n))
    out = L.broadcast_in_dim(x, shape=grid, dims=tuple(range(1, 2 * ndim, 2)))
    return reshape(out, tuple(r * n for r, n in zip(reps, x.shape)))


@implements(np.flip)
def flip(x: Any, axis: Any = None) -> Any:
    x = asarray(x)
    return L.rev(x, axes=normalize_axes(axis, x.ndim, "numpy.flip"))


implements(np.fliplr)(lambda x: flip(x, 1))
implements(np.flipud)(lambda x: flip(x, 0))


@implements(np.roll)
def roll(x: Any, shift: Any, axis: Any = None) -> Any:
    x = asarray(x)
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), x.shape)
    shifts = np.broadcast_to(shift, np.shape(axis)).tolist()
    axes = np.atleast_1d(axis).tolist()
    for s, a in zip(np.atleast_1d(shifts), axes):
        ax = normalize_axis(a, x.ndim, "numpy.roll")
        n = x.shape[ax]
        k = int(s) % n if n else 0
        if k:
            x = concatenate([slice_axis(x, ax, n - k, n), slice_axis(x, ax, 0, n - k)], axis=ax)
    return x


@implements(np.rot90)
def rot90(m: Any, k: int = 1, axes: Any = (0, 1)) -> Any:
    """numpy's: `k` quarter turns from the first axis towards the second."""
    m = asarray(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ShapeError(at_source(f"numpy.rot90: axes={axes!r} must be two axes",
                                   user_source()))
    first, second = (normalize_axis(a, m.ndim, "numpy.rot90") for a in axes)
    if first == second:
        raise ShapeError(at_source(f"numpy.rot90: axes={axes!r} must be two different axes",
                                   user_source()))
    k = int(k) % 4
    if k == 0:
        return m
    if k == 2:
        return flip(m, (first, second))
    order = list(range(m.ndim))
    order[first], order[second] = second, first
    return transpose(flip(m, second), order) if k == 1 else flip(transpose(m, order), second)

