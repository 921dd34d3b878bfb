"""Gather and scatter along one axis with an integer index array: `take` and `scatter_add`,
and `check_index`, which makes a user's traced index fit for them.

`take[axis](x, idx)` has shape `x.shape[:axis] + idx.shape + x.shape[axis+1:]`; indices are
non-negative (tracing normalises negative constants). `scatter_add[axis](x, idx, updates)` adds
`updates` (of take's output shape) into a copy of `x`, accumulating repeated indices. They are
each other's adjoint. Advanced numpy indexing over several axes lowers to these on a reshape.
`check_index[size, axis](idx)` is a traced index of the user's axis `axis` (of length `size`)
as int64 with negative entries counted from the end: numpy's rule, checked where the user
wrote the index, so the error names their value and axis (a flattened index of several axes
could be in range when one of its parts is not).

An index out of range raises IndexOutOfBoundsError on every backend: `in_bounds` in the numpy
code, the kit's `index_check` before each read in the CPU code, which then skips the read
(`TAPEJIT_BOUNDSCHECK=0` leaves the checks out of generated code).
"""
from __future__ import annotations

import math

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError
from . import HOST, Kind, defop, zero_vjp
from . import axes as _axes
from .elementwise import add
from .layout import broadcast_in_dim, reshape, transpose, with_batch
from .sort import in_bounds, scatter_add_along, take_along


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
    np.add.at(out, (slice(None),) * axis + (in_bounds(idx, x.shape[axis], axis),), updates)
    return out


def _check_shape(idx: Aval, *, size: int, axis: int) -> Aval:
    if idx.dtype.kind not in "iu":
        raise DtypeError(f"check_index: indices must be integers, got {idx}")
    return Aval(idx.shape, np.dtype(np.int64))


def _check_impl(idx, *, size, axis):
    idx = in_bounds(np.asarray(idx, np.int64), size, axis, negative=True)
    return np.where(idx < 0, idx + size, idx)


def _zeros_like(x):
    return broadcast_in_dim(np.zeros((), x.dtype), shape=x.shape, dims=())


def _take_cpu(k, eqn, ins, out):
    sizes = k.sizes
    k.line(f"{out}_x = {ins[0]}.reshape({k.three(sizes.of(eqn.ins[0]), eqn.kw['axis'])})")
    k.line(f"{out}_i = {ins[1]}.reshape(({sizes.product(sizes.of(eqn.ins[1]))},))")
    k.line(f"{out}_o = np.empty(({out}_x.shape[0], {out}_i.shape[0], {out}_x.shape[2]), "
           f"{k.dtype(eqn.ins[0].aval.dtype)})")
    depth = k.loops([f"{out}_x.shape[0]", f"{out}_i.shape[0]"], f"{out}_j")
    k.line(f"{out}_k = {out}_i[{out}_j1]")       # checked once per row it copies
    k.index_check(eqn, f"{out}_k", f"{out}_x.shape[1]", eqn.kw["axis"])
    depth += k.loops([f"{out}_x.shape[2]"], f"{out}_l")
    k.line(f"{out}_o[{out}_j0, {out}_j1, {out}_l0] = {out}_x[{out}_j0, {out}_k, {out}_l0]")
    k.close(depth)
    k.line(f"{out} = {out}_o.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")


def _scatter_cpu(k, eqn, ins, out):
    sizes = k.sizes
    x = sizes.of(eqn.ins[0])
    m = sizes.product(sizes.of(eqn.ins[1]))
    k.line(f"{out}_o = {ins[0]}.reshape({k.three(x, eqn.kw['axis'])}).copy()")
    k.line(f"{out}_i = {ins[1]}.reshape(({m},))")
    k.line(f"{out}_u = {ins[2]}.reshape(({out}_o.shape[0], {m}, {out}_o.shape[2]))")
    depth = k.loops([f"{out}_o.shape[0]", m], f"{out}_j")
    k.line(f"{out}_k = {out}_i[{out}_j1]")
    k.index_check(eqn, f"{out}_k", f"{out}_o.shape[1]", eqn.kw["axis"])
    depth += k.loops([f"{out}_o.shape[2]"], f"{out}_l")
    k.line(f"{out}_o[{out}_j0, {out}_k, {out}_l0] += {out}_u[{out}_j0, {out}_j1, {out}_l0]")
    k.close(depth)
    k.line(f"{out} = {out}_o.reshape({sizes.shape(x)})")


def _check_cpu(k, eqn, ins, out):
    dims = k.sizes.of(eqn.ins[0])
    m, size = k.sizes.product(dims), k.sizes(eqn.kw["size"])
    k.line(f"{out} = np.empty({k.sizes.shape(dims)}, np.int64)")
    k.line(f"{out}_f = {out}.reshape(({m},))")
    k.line(f"{out}_i = {ins[0]}.reshape(({m},))")
    depth = k.loops([m], f"{out}_j")
    k.line(f"{out}_v = np.int64({out}_i[{out}_j0])")
    k.line(f"{out}_k = {out}_v + {size} if {out}_v < 0 else {out}_v")
    k.index_check(eqn, f"{out}_k", size, eqn.kw["axis"], reported=f"{out}_v")
    k.line(f"{out}_f[{out}_j0] = {out}_k")
    k.close(depth)


def _picks(idx, before: int, after: int):
    """Batched indices (batch, *I) broadcast over (batch, before, prod(I), after) lines: what
    take_along/scatter_add_along read, so example b's indices pick among its own lines."""
    size, m = np.shape(idx)[0], math.prod(np.shape(idx)[1:])
    return broadcast_in_dim(reshape(idx, shape=(size, m)), shape=(size, before, m, after),
                            dims=(0, 2))


def _take_batch(bind, xs, flags, *, axis):
    x, idx = xs
    if not flags[1]:
        return bind(x, idx, axis=axis + 1)
    if not flags[0]:          # shared operand: the batch axis lands at `axis`, moved first
        out = bind(x, idx, axis=axis)
        rank = len(np.shape(out))
        return transpose(out, perm=(axis,) + tuple(d for d in range(rank) if d != axis))
    size, shape = np.shape(x)[0], np.shape(x)[1:]
    before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    lines = reshape(x, shape=(size, before, shape[axis], after))
    out = take_along(lines, _picks(idx, before, after), axis=2)
    return reshape(out, shape=(size,) + shape[:axis] + np.shape(idx)[1:] + shape[axis + 1:])


def _scatter_batch(bind, xs, flags, *, axis):
    x, idx, updates = xs
    if not flags[1]:          # shared indices: operand and updates get the batch axis
        x, updates = with_batch(bind, [x, updates], [flags[0], flags[2]])
        return bind(x, idx, updates, axis=axis + 1)
    # indices per example: each example's updates go into zeros of its own lines, then x
    _, updates = with_batch(bind, [idx, updates], [True, flags[2]])
    size, shape = np.shape(idx)[0], np.shape(x)[1:] if flags[0] else np.shape(x)
    before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    m = math.prod(np.shape(idx)[1:])
    lines = scatter_add_along(_picks(idx, before, after),
                              reshape(updates, shape=(size, before, m, after)), axis=2,
                              size=shape[axis])
    return add(x, reshape(lines, shape=(size,) + shape))


take = defop("take", Kind.INDEX, lambda x, idx, *, axis: np.take(
                 x, in_bounds(idx, x.shape[axis], axis), axis=axis),
             shape=_take_shape, axes=_axes.gathered,
             vjp=lambda ct, y, x, idx, *, axis: (
                 scatter_add(_zeros_like(x), idx, ct, axis=axis), None),
             batch=_take_batch,
             cpu=_take_cpu, cuda=HOST, fresh=True)
scatter_add = defop("scatter_add", Kind.INDEX, _scatter_impl, shape=_scatter_shape,
                    axes=_axes.scattered,
                    vjp=lambda ct, y, x, idx, updates, *, axis: (
                        ct, None, take(ct, idx, axis=axis)), batch=_scatter_batch,
                    cpu=_scatter_cpu, cuda=HOST, fresh=True)
check_index = defop("check_index", Kind.INDEX, _check_impl, shape=_check_shape, vjp=zero_vjp,
                    axes=lambda ins, out, **params: [[(_axes.OUT, d), (0, d)]
                                                     for d in range(len(out))],
                    batch=lambda bind, xs, flags, **params: bind(*xs, **params),
                    cpu=_check_cpu, cuda=HOST, fresh=True)
