"""Reductions over axes (max, min, prod, argmax, argmin) and cumulative ops along one axis;
reduce_sum, broadcast's adjoint, is defined with the layout ops (layout.py).

Reductions drop the reduced axes (`keepdims` is a reshape added by tracing); the output keeps
the input dtype (tracing converts bools and small ints first, as numpy does). `axes` is a sorted
tuple of distinct non-negative axes.
"""
from __future__ import annotations

import numpy as np

from ..avals import DTYPES_BY_NAME, Aval
from ..errors import ShapeError
from . import UNROLLED, Kind, Reduction, defop, zero_vjp
from .elementwise import _like, eq, select
from .layout import (SQUEEZE, batch_axes, batch_axis, broadcast_in_dim, expand, kept_dims, pad,
                     reduce_sum, reduced_shape, reshape, rev, slice_, transpose)


def _extremum_vjp(ct, y, x, *, axes):
    # the gradient goes to the extremal elements, shared evenly between ties
    mask = _like(eq(x, expand(y, x, axes)), ct)
    count = reduce_sum(mask, axes=axes)
    return (expand(ct / count, x, axes) * mask,)


reduce_max = defop("reduce_max", Kind.REDUCE, lambda x, *, axes: np.max(x, axis=axes),
                   shape=reduced_shape("reduce_max"), vjp=_extremum_vjp, view=SQUEEZE,
                   reduction=Reduction(-np.inf, "np.maximum({0}, {1})", "({0} or {1})"),
                   batch=batch_axes)
reduce_min = defop("reduce_min", Kind.REDUCE, lambda x, *, axes: np.min(x, axis=axes),
                   shape=reduced_shape("reduce_min"), vjp=_extremum_vjp, view=SQUEEZE,
                   reduction=Reduction(np.inf, "np.minimum({0}, {1})", "({0} and {1})"),
                   batch=batch_axes)


def _move_to_last(x, axes):
    """Transpose `axes` of x to the end and flatten them into one axis."""
    kept = kept_dims(x.ndim, axes)
    perm = kept + tuple(axes)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    moved = transpose(x, perm=perm)
    return reshape(moved, shape=tuple(x.shape[a] for a in kept) + (n,)), perm, moved.shape


def _exclusive(cp, n):
    """Shift a cumulative product by one along the last axis, filling with 1."""
    head = slice_(cp, start=(0,) * cp.ndim, limit=cp.shape[:-1] + (n - 1,),
                  step=(1,) * cp.ndim)
    lo = (0,) * (cp.ndim - 1) + (1,)
    return pad(head, 1, lo=lo, hi=(0,) * cp.ndim, interior=(0,) * cp.ndim)


def _prod_vjp(ct, y, x, *, axes):
    # d prod x / dx_i = product of all the other elements: exclusive prefix times exclusive
    # suffix products, which stays exact when some x_j are zero (unlike prod / x_i)
    if not axes or x.size == 0:
        return (expand(ct, x, axes),)
    flat, perm, moved_shape = _move_to_last(x, axes)
    last = flat.ndim - 1
    n = flat.shape[-1]
    before = _exclusive(cumprod(flat, axis=last, reverse=False), n)
    after = rev_one(_exclusive(cumprod(rev_one(flat, last), axis=last, reverse=False), n), last)
    ct_flat = before * after * broadcast_in_dim(ct, shape=flat.shape, dims=tuple(range(last)))
    inverse = tuple(int(i) for i in np.argsort(perm))
    return (transpose(reshape(ct_flat, shape=moved_shape), perm=inverse),)


def rev_one(x, axis: int):
    return rev(x, axes=(axis,))


reduce_prod = defop("reduce_prod", Kind.REDUCE, lambda x, *, axes: np.prod(x, axis=axes),
                    shape=reduced_shape("reduce_prod"), vjp=_prod_vjp, batch=batch_axes)


def _arg_shape(name: str):
    def rule(x: Aval, *, axis: int) -> Aval:
        if not 0 <= axis < x.ndim:
            raise ShapeError(f"{name}: axis {axis} out of range for {x}")
        if x.shape[axis] == 0:
            raise ShapeError(f"{name}: attempt to get {name} of an empty axis ({x})")
        return Aval(x.shape[:axis] + x.shape[axis + 1:], np.dtype(np.int64))
    return rule


argmax = defop("argmax", Kind.REDUCE, lambda x, *, axis: np.argmax(x, axis=axis),
               shape=_arg_shape("argmax"), vjp=zero_vjp, batch=batch_axis)
argmin = defop("argmin", Kind.REDUCE, lambda x, *, axis: np.argmin(x, axis=axis),
               shape=_arg_shape("argmin"), vjp=zero_vjp, batch=batch_axis)


# the number of elements of an axis selection, as a scalar of `dtype` (np.mean's divisor). It is
# an op with the sizes as params, not a literal, so that a compiled program reads it from its
# run-time size table and serves every batch size; it reads no array, so nothing is kept alive.
dim_size = defop("dim_size", Kind.REDUCE,
                 lambda *, sizes, dtype: np.asarray(np.prod(sizes, dtype=np.int64),
                                                    DTYPES_BY_NAME[dtype]),
                 shape=lambda *, sizes, dtype: Aval((), DTYPES_BY_NAME[dtype]), vjp=zero_vjp,
                 batch=UNROLLED)      # it reads no array: never batched


# ---- cumulative ops along one axis ------------------------------------------------------------
def _cumulative(fn):
    def impl(x, *, axis: int, reverse: bool):
        if reverse:
            return np.flip(fn(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
        return fn(x, axis=axis, dtype=x.dtype)
    return impl


def _scan_shape(x: Aval, *, axis: int, reverse: bool) -> Aval:
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"cumulative op: axis {axis} out of range for {x}")
    return x


def _cumprod_vjp(ct, y, x, *, axis, reverse):
    # exact even with zeros: P[i, k] = prod_{j <= k, j != i} x_j (cumprod of x with x_i := 1),
    # then ct_x[i] = sum_{k >= i} ct[k] P[i, k]. O(n^2) in the length of the axis.
    if reverse:
        return (rev_one(_cumprod_vjp(rev_one(ct, axis), None, rev_one(x, axis),
                                     axis=axis, reverse=False)[0], axis),)
    perm = tuple(d for d in range(x.ndim) if d != axis) + (axis,)
    xt = transpose(x, perm=perm)
    n = xt.shape[-1]
    grid = xt.shape[:-1] + (n, n)
    rows = broadcast_in_dim(xt, shape=grid, dims=tuple(range(xt.ndim - 1)) + (xt.ndim,))
    eye = np.eye(n, dtype=bool)
    later = np.triu(np.ones((n, n), dtype=bool))        # k >= i
    p = cumprod(select(eye, 1, rows), axis=len(grid) - 1, reverse=False)
    ctt = broadcast_in_dim(transpose(ct, perm=perm), shape=grid,
                           dims=tuple(range(xt.ndim - 1)) + (xt.ndim,))
    ct_x = reduce_sum(select(later, ctt * p, 0), axes=(len(grid) - 1,))
    return (transpose(ct_x, perm=tuple(int(i) for i in np.argsort(perm))),)


cumsum = defop("cumsum", Kind.SCAN, _cumulative(np.cumsum), shape=_scan_shape,
               vjp=lambda ct, y, x, *, axis, reverse: (cumsum(ct, axis=axis, reverse=not reverse),),
               batch=batch_axis)
cumprod = defop("cumprod", Kind.SCAN, _cumulative(np.cumprod), shape=_scan_shape,
                vjp=_cumprod_vjp, batch=batch_axis)
