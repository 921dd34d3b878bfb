"""Sorting along one axis: `sort`, the gathers and scatters through its permutation
(`take_along`, `scatter_add_along`), and `searchsorted`.

- `sort[axis](x) -> (values, indices)`: each line of x along `axis` sorted ascending and stably
  (equal elements keep their order), NaN last, as numpy sorts; `indices` (int64) is the
  permutation, values = take_along(x, indices). The permutation is computed once, in the
  forward pass: the VJP scatters the values' cotangent back through it (JAX's rule: each
  sorted position's gradient goes to the element sorted there, so a tie is not split).
- `take_along[axis](x, idx)`: y[.., j, ..] = x[.., idx[.., j, ..], ..], np.take_along_axis
  with idx of x's shape except along `axis` (any length there; indices non-negative);
  `scatter_add_along[axis, size](idx, updates)` adds `updates` (idx's shape) at those places
  into zeros with `size` elements along `axis`, accumulating repeats: take_along's adjoint
  (and the other way round). It has no operand to add into: zeros made in a VJP would be
  evaluated into a constant array.
- `searchsorted[right](a, v)`: for a sorted 1-D `a`, where each element of v would be inserted
  (int64, v's shape; numpy's order, NaN last); not differentiable.

An index out of range raises IndexOutOfBoundsError on every backend: `in_bounds` in the numpy
code, the kit's `index_check` before each read in the CPU code (which then skips it).

CPU code: sort and searchsorted call codegen/sorting.py (numba's stable argsort per line,
compiled once per dtype into the cache), the gathers are loop nests over the (before, axis,
after) view of their operands. The CUDA backend runs them on the host.
"""
from __future__ import annotations

import numpy as np

from ..avals import Aval, dtype_name
from ..errors import DtypeError, IndexOutOfBoundsError, ShapeError
from . import HOST, Kind, defop, zero_vjp
from . import axes as _axes
from .elementwise import and_, convert, eq, le, lt, ne, or_
from .layout import batch_axis, reduce_sum, reshape, with_batch

INDEX = np.dtype(np.int64)


def _check_axis(name: str, x: Aval, axis: int) -> None:
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"{name}: axis {axis} out of range for {x}")


def _sortable(name: str, x: Aval) -> None:
    if x.dtype.kind not in "iuf":
        raise DtypeError(f"{name}: needs numbers (ints or floats), got {x}")


# ---- shape rules -------------------------------------------------------------------------------
def _sort_shape(x: Aval, *, axis: int) -> tuple[Aval, Aval]:
    _check_axis("sort", x, axis)
    _sortable("sort", x)
    return x, Aval(x.shape, INDEX)


def _lines(name: str, x: Aval, idx: Aval, axis: int) -> None:
    """idx indexes x along `axis`: integers, x's shape on the other axes."""
    _check_axis(name, x, axis)
    if idx.dtype.kind not in "iu":
        raise DtypeError(f"{name}: indices must be integers, got {idx}")
    if idx.ndim != x.ndim or any(a != b for d, (a, b) in enumerate(zip(idx.shape, x.shape))
                                 if d != axis):
        raise ShapeError(f"{name}: indices {idx} do not fit {x} along axis {axis} (the "
                         f"other axes must be equal)")


def _take_along_shape(x: Aval, idx: Aval, *, axis: int) -> Aval:
    _lines("take_along", x, idx, axis)
    return Aval(idx.shape, x.dtype)


def _scatter_along_shape(idx: Aval, updates: Aval, *, axis: int, size: int) -> Aval:
    out = Aval(idx.shape[:axis] + (size,) + idx.shape[axis + 1:], updates.dtype)
    _lines("scatter_add_along", out, idx, axis)
    if updates.shape != idx.shape:
        raise ShapeError(f"scatter_add_along: updates {updates} do not fit indices {idx}")
    return out


def _searchsorted_shape(a: Aval, v: Aval, *, right: bool) -> Aval:
    if a.ndim != 1 or a.dtype != v.dtype:
        raise ShapeError(f"searchsorted: needs a 1-D sorted array and values of its dtype, "
                         f"got {a} and {v}")
    _sortable("searchsorted", a)
    return Aval(v.shape, INDEX)


# ---- numpy implementations --------------------------------------------------------------------
def in_bounds(idx, size: int, axis: int, negative: bool = False):
    """`idx` if its entries lie in [0, size) ([-size, size) with `negative`: numpy's rule for
    a user's index), else IndexOutOfBoundsError (numpy's own gathers would wrap negative
    entries)."""
    idx = np.asarray(idx)
    bad = (idx < (-size if negative else 0)) | (idx >= size)
    if bad.any():
        raise IndexOutOfBoundsError(idx[bad].flat[0], axis, size)
    return idx


def _sort_impl(x, *, axis):
    indices = np.argsort(x, axis=axis, kind="stable").astype(INDEX)
    return np.take_along_axis(x, indices, axis), indices


def _grid(idx, axis: int) -> tuple:
    """np.add.at's index of the places idx names along `axis` (the other axes: every place)."""
    return tuple(idx if d == axis else np.arange(n).reshape([-1 if e == d else 1
                                                             for e in range(idx.ndim)])
                 for d, n in enumerate(idx.shape))


def _take_along_impl(x, idx, *, axis):
    return np.take_along_axis(x, in_bounds(idx, x.shape[axis], axis), axis)


def _scatter_along_impl(idx, updates, *, axis, size):
    out = np.zeros(idx.shape[:axis] + (size,) + idx.shape[axis + 1:], updates.dtype)
    np.add.at(out, _grid(in_bounds(idx, size, axis), axis), updates)
    return out


def _searchsorted_impl(a, v, *, right):
    return np.asarray(np.searchsorted(a, v, side="right" if right else "left"), INDEX)


# ---- VJPs and batching ------------------------------------------------------------------------
def _sort_vjp(cts, outs, x, *, axis):
    # values = x[indices] along the axis: the cotangent goes back to where each value came from
    ct = cts[0]
    return (None,) if ct is None else (
        scatter_add_along(outs[1], ct, axis=axis, size=x.shape[axis]),)


def _batch_lines(bind, xs, flags, **params):
    """Every operand gets the batch axis (broadcast where it has none); the axis moves by one."""
    return bind(*with_batch(bind, xs, flags), **{**params, "axis": params["axis"] + 1})


def _batch_search(bind, xs, flags, *, right):
    """Batched values search one array as they are. A sorted array per example: each value's
    place is the number of that example's elements before it (numpy's order: NaN last)."""
    a, v = xs
    if not flags[0]:
        return bind(a, v, right=right)
    size, n = np.shape(a)
    values = np.shape(v)[1:] if flags[1] else np.shape(v)
    a = reshape(a, shape=(size,) + (1,) * len(values) + (n,))
    v = reshape(v, shape=np.shape(v) + (1,))
    before = le(a, v) if right else lt(a, v)
    if a.dtype.kind == "f":   # NaN is after every number, and equal to NaN
        nan_v = ne(v, v)
        before = or_(before, nan_v if right else and_(nan_v, eq(a, a)))
    return reduce_sum(convert(before, dtype=dtype_name(INDEX)), axes=(len(values) + 1,))


def _take_along_axes(ins, out, *, axis):
    """The output is idx's shape; x's other axes are idx's."""
    return [[(_axes.OUT, d), (1, d)] + ([] if d == axis else [(0, d)]) for d in range(len(out))]


def _scatter_along_axes(ins, out, *, axis, size):
    """idx and updates share their axes; the output has their axes but `axis`."""
    return [[(0, d), (1, d)] + ([] if d == axis else [(_axes.OUT, d)]) for d in range(len(out))]


# ---- CPU code -----------------------------------------------------------------------------------
def _three(k, name: str, atom, axis: int) -> str:
    return f"{name}.reshape({k.three(k.sizes.of(atom), axis)})"


def _sort_cpu(k, eqn, ins, out):
    values, indices = out
    x, axis = eqn.ins[0], eqn.kw["axis"]
    shape = k.sizes.shape(k.sizes.of(x))
    k.line(f"{values} = np.empty({shape}, {k.dtype(x.aval.dtype)})")
    k.line(f"{indices} = np.empty({shape}, np.int64)")
    k.sorting("sort", [_three(k, ins[0], x, axis), _three(k, values, x, axis),
                       _three(k, indices, x, axis)])


def _take_along_cpu(k, eqn, ins, out):
    (x, idx), axis = eqn.ins, eqn.kw["axis"]
    k.line(f"{out}_x = {_three(k, ins[0], x, axis)}")
    k.line(f"{out}_i = {_three(k, ins[1], idx, axis)}")
    k.line(f"{out}_o = np.empty({k.three(k.sizes.of(idx), axis)}, {k.dtype(x.aval.dtype)})")
    depth = k.loops(k.extents(k.sizes.of(idx), axis), f"{out}_j")
    j0, j1, j2 = (f"{out}_j{d}" for d in range(3))
    k.line(f"{out}_k = {out}_i[{j0}, {j1}, {j2}]")
    k.index_check(eqn, f"{out}_k", k.sizes(k.sizes.of(x)[axis]), axis)
    k.line(f"{out}_o[{j0}, {j1}, {j2}] = {out}_x[{j0}, {out}_k, {j2}]")
    k.close(depth)
    k.line(f"{out} = {out}_o.reshape({k.sizes.shape(k.sizes.of(eqn.outs[0]))})")


def _scatter_along_cpu(k, eqn, ins, out):
    (idx, updates), axis, result = eqn.ins, eqn.kw["axis"], eqn.outs[0]
    k.line(f"{out} = np.zeros({k.sizes.shape(k.sizes.of(result))}, "
           f"{k.dtype(result.aval.dtype)})")
    k.line(f"{out}_o = {_three(k, out, result, axis)}")
    k.line(f"{out}_i = {_three(k, ins[0], idx, axis)}")
    k.line(f"{out}_u = {_three(k, ins[1], updates, axis)}")
    depth = k.loops(k.extents(k.sizes.of(idx), axis), f"{out}_j")
    j0, j1, j2 = (f"{out}_j{d}" for d in range(3))
    k.line(f"{out}_k = {out}_i[{j0}, {j1}, {j2}]")
    k.index_check(eqn, f"{out}_k", k.sizes(k.sizes.of(result)[axis]), axis)
    k.line(f"{out}_o[{j0}, {out}_k, {j2}] += {out}_u[{j0}, {j1}, {j2}]")
    k.close(depth)


def _searchsorted_cpu(k, eqn, ins, out):
    v = eqn.ins[1]
    count = k.sizes.product(k.sizes.of(v))
    k.line(f"{out} = np.empty({k.sizes.shape(k.sizes.of(v))}, np.int64)")
    k.sorting("searchsorted", [ins[0], f"{ins[1]}.reshape(({count},))",
                               f"{out}.reshape(({count},))", str(eqn.kw["right"])])


# ---- the ops -------------------------------------------------------------------------------------
sort = defop("sort", Kind.SORT, _sort_impl, shape=_sort_shape, vjp=_sort_vjp,
             multiple_results=True, batch=batch_axis, cpu=_sort_cpu, cuda=HOST, fresh=True)
take_along = defop("take_along", Kind.INDEX, _take_along_impl, shape=_take_along_shape,
                   axes=_take_along_axes,
                   vjp=lambda ct, y, x, idx, *, axis: (
                       scatter_add_along(idx, ct, axis=axis, size=x.shape[axis]), None),
                   batch=_batch_lines, cpu=_take_along_cpu, cuda=HOST, fresh=True)
scatter_add_along = defop("scatter_add_along", Kind.INDEX, _scatter_along_impl,
                          shape=_scatter_along_shape, axes=_scatter_along_axes,
                          vjp=lambda ct, y, idx, updates, *, axis, size: (
                              None, take_along(ct, idx, axis=axis)),
                          batch=_batch_lines, cpu=_scatter_along_cpu, cuda=HOST, fresh=True)
searchsorted = defop("searchsorted", Kind.SORT, _searchsorted_impl, shape=_searchsorted_shape,
                     vjp=zero_vjp, axes=lambda ins, out, *, right: [
                         [(_axes.OUT, d), (1, d)] for d in range(len(out))],
                     batch=_batch_search, cpu=_searchsorted_cpu, cuda=HOST, fresh=True)
