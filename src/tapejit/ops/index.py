"""Gather and scatter along one axis with an integer index array: `take` and `scatter_add`.

`take[axis](x, idx)` has shape `x.shape[:axis] + idx.shape + x.shape[axis+1:]`; indices are
non-negative (tracing normalises negative constants). `scatter_add[axis](x, idx, updates)` adds
`updates` (of take's output shape) into a copy of `x`, accumulating repeated indices. They are
each other's adjoint. Advanced numpy indexing over several axes lowers to these on a reshape.
"""
from __future__ import annotations

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError
from . import UNROLLED, Kind, defop
from . import axes as _axes


def _take_shape(x: Aval, idx: Aval, *, axis: int) -> Aval:
    if idx.dtype.kind not in "iu":
        raise DtypeError(f"take: indices must be integers, got {idx}")
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"take: axis {axis} out of range for {x}")
    return Aval(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _scatter_shape(x: Aval, idx: Aval, updates: Aval, *, axis: int) -> Aval:
    expected = _take_shape(x, idx, axis=axis)
    if updates.shape != expected.shape or updates.dtype != x.dtype:
        raise ShapeError(f"scatter_add: updates {updates} do not fit {expected} "
                         f"(operand {x}, indices {idx}, axis {axis})")
    return x


def _scatter_impl(x, idx, updates, *, axis):
    out = np.array(x, copy=True)
    np.add.at(out, (slice(None),) * axis + (idx,), updates)
    return out


def _zeros_like(x):
    from .layout import broadcast_in_dim
    return broadcast_in_dim(np.zeros((), x.dtype), shape=x.shape, dims=())


take = defop("take", Kind.INDEX, lambda x, idx, *, axis: np.take(x, idx, axis=axis),
             shape=_take_shape, axes=_axes.gathered,
             vjp=lambda ct, y, x, idx, *, axis: (
                 scatter_add(_zeros_like(x), idx, ct, axis=axis), None),
             batch=lambda bind, xs, flags, *, axis:    # batched indices: no rule
             NotImplemented if flags[1] else bind(*xs, axis=axis + 1))
scatter_add = defop("scatter_add", Kind.INDEX, _scatter_impl, shape=_scatter_shape,
                    axes=_axes.scattered,
                    vjp=lambda ct, y, x, idx, updates, *, axis: (
                        ct, None, take(ct, idx, axis=axis)), batch=UNROLLED)
