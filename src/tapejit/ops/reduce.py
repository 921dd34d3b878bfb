"""Reductions over axes (max, min, prod, argmax, argmin) and cumulative ops along one axis;
reduce_sum, broadcast's adjoint, is defined with the layout ops (layout.py).

Reductions drop the reduced axes (`keepdims` is a reshape added by tracing); the output keeps
the input dtype (tracing converts bools and small ints first, as numpy does). `axes` is a sorted
tuple of distinct non-negative axes.
"""
from __future__ import annotations

import math

import numpy as np

from ..avals import DTYPES_BY_NAME, Aval
from ..errors import ShapeError
from . import HOST, Kind, Reduction, defop, zero_vjp
from .elementwise import _like, eq, select
from .layout import (SQUEEZE, batch_axes, batch_axis, broadcast_in_dim, expand, kept_dims,
                     no_operands, pad, reduce_sum, reduced_shape, reshape, rev, slice_,
                     transpose)


def _extremum_vjp(ct, y, x, *, axes):
    # the gradient goes to the extremal elements, shared evenly between ties
    mask = _like(eq(x, expand(y, x, axes)), ct)
    count = reduce_sum(mask, axes=axes)
    return (expand(ct / count, x, axes) * mask,)


def _extremum(fn, bools, lowest: bool):
    """np.max/np.min, whose empty axes give the reduction's identity (as compiled code does:
    -inf for max, the dtype's least int; numpy's refusal is tracing's), and for bools
    np.any/np.all."""
    def impl(x, *, axes):
        if x.dtype == np.bool_:
            return bools(x, axis=axes)
        if x.dtype.kind == "f":
            return fn(x, axis=axes, initial=-np.inf if lowest else np.inf)
        limits = np.iinfo(x.dtype)
        return fn(x, axis=axes, initial=limits.min if lowest else limits.max)
    return impl


reduce_max = defop("reduce_max", Kind.REDUCE, _extremum(np.max, np.any, True),
                   shape=reduced_shape("reduce_max"), vjp=_extremum_vjp, view=SQUEEZE,
                   reduction=Reduction(-np.inf, "np.maximum({0}, {1})", "({0} or {1})"),
                   batch=batch_axes)
reduce_min = defop("reduce_min", Kind.REDUCE, _extremum(np.min, np.all, False),
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


def _prod_cpu(k, eqn, ins, out):
    x, dtype = eqn.ins[0].aval, eqn.outs[0].aval.dtype
    axes = eqn.kw["axes"]
    kept = tuple(d for d in range(x.ndim) if d not in axes)
    sizes = k.sizes
    xd = sizes.of(eqn.ins[0])
    n, r = sizes.product(xd[d] for d in kept), sizes.product(xd[d] for d in axes)
    src = k.permuted(ins[0], eqn.ins[0], kept + tuple(axes), f"{out}_t")
    k.line(f"{out}_x = {src}.reshape(({n}, {r}))")
    k.line(f"{out}_o = np.empty(({n},), {k.dtype(dtype)})")
    j0, j1, acc = f"{out}_j0", f"{out}_j1", f"{out}_acc"
    k.line(f"for {j0} in range({n}):")
    k.line(f"    {acc} = {k.scalar(1, dtype)}")
    k.line(f"    for {j1} in range({r}):")
    k.line(f"        {acc} = {acc} * {out}_x[{j0}, {j1}]")
    k.line(f"    {out}_o[{j0}] = {acc}")
    k.line(f"{out} = {out}_o.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")


reduce_prod = defop("reduce_prod", Kind.REDUCE, lambda x, *, axes: np.prod(x, axis=axes),
                    shape=reduced_shape("reduce_prod"), vjp=_prod_vjp, batch=batch_axes,
                    cpu=_prod_cpu, cuda=HOST, fresh=True)


def _arg_shape(name: str):
    def rule(x: Aval, *, axis: int) -> Aval:
        if not 0 <= axis < x.ndim:
            raise ShapeError(f"{name}: axis {axis} out of range for {x}")
        if x.shape[axis] == 0:
            raise ShapeError(f"{name}: attempt to get {name} of an empty axis ({x})")
        return Aval(x.shape[:axis] + x.shape[axis + 1:], np.dtype(np.int64))
    return rule


def _along_axis(k, eqn, ins, out, init: str, step: list[str], reverse: bool,
                running: bool) -> None:
    """CPU code of a scan (`running`) or a reduction along one axis of the (before, axis,
    after) view. `step` is a template updating `{acc}` from `{v}`, the element at position
    `{k}`."""
    j0, j1, kk, acc, v = (f"{out}_{t}" for t in ("j0", "j1", "k", "acc", "v"))
    sizes = k.sizes
    k.line(f"{out}_x = {ins[0]}.reshape({k.three(sizes.of(eqn.ins[0]), eqn.kw['axis'])})")
    kept = f"{out}_x.shape[0], {out}_x.shape[1], {out}_x.shape[2]" if running else \
        f"{out}_x.shape[0], {out}_x.shape[2]"
    k.line(f"{out}_o = np.empty(({kept}), {k.dtype(eqn.outs[0].aval.dtype)})")
    depth = k.loops([f"{out}_x.shape[0]", f"{out}_x.shape[2]"], f"{out}_j")
    k.line(f"{acc} = {init}")
    order = f"range({out}_x.shape[1] - 1, -1, -1)" if reverse else f"range({out}_x.shape[1])"
    k.line(f"for {kk} in {order}:")
    k.indent()
    k.line(f"{v} = {out}_x[{j0}, {kk}, {j1}]")
    for line in step:
        k.line(line.format(acc=acc, v=v, k=kk, best=f"{out}_best"))
    if running:
        k.line(f"{out}_o[{j0}, {kk}, {j1}] = {acc}")
    k.dedent()
    if not running:
        k.line(f"{out}_o[{j0}, {j1}] = {acc}")
    k.close(depth)
    k.line(f"{out} = {out}_o.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")


def _arg_cpu(better: str):
    def code(k, eqn, ins, out):
        # the first extremal index; the first NaN wins, as in numpy
        k.line(f"{out}_best = {k.scalar(0, eqn.ins[0].aval.dtype)}")
        _along_axis(k, eqn, ins, out, "-1", [
            "if {acc} < 0 or ({best} == {best} and ({v} != {v} or {v} %s {best})):" % better,
            "    {acc} = {k}",
            "    {best} = {v}"], False, False)
    return code


argmax = defop("argmax", Kind.REDUCE, lambda x, *, axis: np.argmax(x, axis=axis),
               shape=_arg_shape("argmax"), vjp=zero_vjp, batch=batch_axis,
               cpu=_arg_cpu(">"), cuda=HOST, fresh=True)
argmin = defop("argmin", Kind.REDUCE, lambda x, *, axis: np.argmin(x, axis=axis),
               shape=_arg_shape("argmin"), vjp=zero_vjp, batch=batch_axis,
               cpu=_arg_cpu("<"), cuda=HOST, fresh=True)


def _dim_size_cpu(k, eqn, ins, out):
    dtype = eqn.outs[0].aval.dtype
    k.line(f"{out} = np.empty((), {k.dtype(dtype)})")
    k.line(f"{out}[()] = {k.sizes(math.prod(eqn.kw['sizes']))}")


def _dim_size_cuda(g, number, eqn):
    out = eqn.outs[0]
    g.driver.line(f"{g.name(out)} = tjrt.full((), {g.dtype(out.aval.dtype)}, "
                  f"{g.sizes(math.prod(eqn.kw['sizes']))})")


# the number of elements of an axis selection, as a scalar of `dtype` (np.mean's divisor). It is
# an op with the sizes as params, not a literal, so that a compiled program reads it from its
# run-time size table and serves every batch size; it reads no array, so nothing is kept alive.
dim_size = defop("dim_size", Kind.REDUCE,
                 lambda *, sizes, dtype: np.asarray(np.prod(sizes, dtype=np.int64),
                                                    DTYPES_BY_NAME[dtype]),
                 shape=lambda *, sizes, dtype: Aval((), DTYPES_BY_NAME[dtype]), vjp=zero_vjp,
                 batch=no_operands,
                 cpu=_dim_size_cpu, cuda=_dim_size_cuda, fresh=True)


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


def _cumulative_cpu(identity: int, combine: str):
    def code(k, eqn, ins, out):
        _along_axis(k, eqn, ins, out, k.scalar(identity, eqn.outs[0].aval.dtype),
                    ["{acc} = {acc} %s {v}" % combine], eqn.kw["reverse"], True)
    return code


cumsum = defop("cumsum", Kind.SCAN, _cumulative(np.cumsum), shape=_scan_shape,
               vjp=lambda ct, y, x, *, axis, reverse: (cumsum(ct, axis=axis, reverse=not reverse),),
               batch=batch_axis, cpu=_cumulative_cpu(0, "+"), cuda=HOST, fresh=True)
cumprod = defop("cumprod", Kind.SCAN, _cumulative(np.cumprod), shape=_scan_shape,
                vjp=_cumprod_vjp, batch=batch_axis, cpu=_cumulative_cpu(1, "*"), cuda=HOST,
                fresh=True)
