"""Layout primitives: broadcast_in_dim, reshape, transpose, slice, pad, concatenate, rev, and
reduce_sum, broadcast_in_dim's adjoint (so the pair needs no import cycle).

They move or copy elements without arithmetic; each VJP is the adjoint data movement
(broadcast <-> reduce_sum, slice <-> pad, concatenate <-> slices, transpose <-> inverse).
Inside loop nests they are index maps (`View`): the expression reading the operand at output
position `idx` (index expressions, one per output axis; operands read by `read(k, parts)`,
sizes spelled by `sizes`, codegen/writer.py). Batching rules get a leading batch axis.
"""
from __future__ import annotations

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError
from ..ir import Var
from . import Kind, Reduction, View, defop
from . import axes as _axes
from .elementwise import select


def kept_dims(ndim: int, axes: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of an ndim array that are not in `axes`."""
    return tuple(d for d in range(ndim) if d not in axes)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def shifted(axes) -> tuple[int, ...]:
    """Axis numbers once a batch axis is put in front."""
    return tuple(a + 1 for a in axes)


def batch_axes(bind, xs, flags, **p):
    """The batching rule of an op of one operand whose param `axes` names its axes."""
    return bind(xs[0], **{**p, "axes": shifted(p["axes"])})


def batch_axis(bind, xs, flags, **p):
    """The batching rule of an op of one operand whose param `axis` names its axis."""
    return bind(xs[0], **{**p, "axis": p["axis"] + 1})


def no_operands(bind, xs, flags, **p):
    """The batching rule of an op that reads no array (never batched): the op itself."""
    return bind(*xs, **p)


def with_batch(bind, xs, flags):
    """Every operand with the batch axis: those without it broadcast (recorded by a batching
    rule's `bind`, so a constant operand is not made a constant array of the batch's size)."""
    size = next(np.shape(x)[0] for x, f in zip(xs, flags) if f)
    return [x if f else bind.record(broadcast_in_dim, x, shape=(size,) + np.shape(x),
                                    dims=shifted(range(np.ndim(x))))
            for x, f in zip(xs, flags)]


# ---- squeezes: reshapes and reductions that only add or remove unit axes --------------------
def _squeezes(eqn) -> bool:
    """A reshape that only adds or removes unit axes, or a reduction over unit axes only:
    the same elements in the same order."""
    a, b = eqn.ins[0].aval.shape, eqn.outs[0].aval.shape
    return [n for n in a if n != 1] == [n for n in b if n != 1]


def _squeeze(eqn, read, sizes, idx):
    free = iter(d for d, n in enumerate(eqn.outs[0].aval.shape) if n != 1)
    return read(0, ["0" if n == 1 else idx[next(free)] for n in eqn.ins[0].aval.shape])


def _squeeze_placed(eqn) -> list[int]:
    return [d for d, n in enumerate(eqn.outs[0].aval.shape) if n != 1]


SQUEEZE = View(_squeeze, applies=_squeezes, placed=_squeeze_placed)


# ---- broadcast_in_dim: operand axis i becomes output axis dims[i] ---------------------------
def _broadcast_shape(x: Aval, *, shape: tuple[int, ...], dims: tuple[int, ...]) -> Aval:
    _check(len(dims) == x.ndim and all(0 <= d < len(shape) for d in dims)
           and list(dims) == sorted(set(dims))
           and all(x.shape[i] in (1, shape[d]) for i, d in enumerate(dims)),
           f"broadcast_in_dim: cannot broadcast {x} to {shape} along dims {dims}")
    return Aval(tuple(shape), x.dtype)


def _broadcast_impl(x, *, shape, dims):
    expanded = np.reshape(x, [x.shape[dims.index(d)] if d in dims else 1
                              for d in range(len(shape))])
    return np.broadcast_to(expanded, shape)


def _broadcast_vjp(ct, y, x, *, shape, dims):
    # sum over the new axes and over the axes that were stretched from size 1
    summed = tuple(d for d in range(len(shape)) if d not in dims
                   or (x.shape[dims.index(d)] == 1 and shape[d] != 1))
    return (reshape(reduce_sum(ct, axes=summed), shape=x.shape),)


def _broadcast_view(eqn, read, sizes, idx):
    shape = eqn.ins[0].aval.shape
    return read(0, ["0" if n == 1 else idx[d] for n, d in zip(shape, eqn.kw["dims"])])


def _broadcast_placed(eqn) -> list[int]:
    return [d for n, d in zip(eqn.ins[0].aval.shape, eqn.kw["dims"]) if n != 1]


broadcast_in_dim = defop(
    "broadcast_in_dim", Kind.LAYOUT, _broadcast_impl, shape=_broadcast_shape,
    vjp=_broadcast_vjp, axes=_axes.placed, view=View(_broadcast_view, placed=_broadcast_placed),
    batch=lambda bind, xs, flags, *, shape, dims: bind(
        xs[0], shape=(np.shape(xs[0])[0],) + tuple(shape),
        dims=(0,) + shifted(dims)))


# ---- reduce_sum ---------------------------------------------------------------------------
def reduced_shape(name: str):
    """The shape rule of reduction `name` over `axes`."""
    def rule(x: Aval, *, axes: tuple[int, ...]) -> Aval:
        if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
            raise ShapeError(f"{name}: axes {axes} out of range for {x}")
        return Aval(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)
    return rule


def expand(ct, x, axes):
    """Broadcast a reduced value back over the reduced axes of `x`."""
    return broadcast_in_dim(ct, shape=x.shape, dims=kept_dims(x.ndim, axes))


reduce_sum = defop(
    "reduce_sum", Kind.REDUCE,
    lambda x, *, axes: np.sum(x, axis=axes, dtype=x.dtype),
    shape=reduced_shape("reduce_sum"), view=SQUEEZE,
    reduction=Reduction(0, "{0} + {1}", is_sum=True),
    batch=batch_axes,
    vjp=lambda ct, y, x, *, axes: (expand(ct, x, axes),))           # d sum x = sum dx


# ---- reshape / transpose / rev ----------------------------------------------------------------
def _reshape_shape(x: Aval, *, shape: tuple[int, ...]) -> Aval:
    _check(int(np.prod(shape, dtype=np.int64)) == x.size and all(d >= 0 for d in shape),
           f"reshape: cannot reshape {x} into shape {shape}")
    return Aval(tuple(shape), x.dtype)


def _reshape_cpu(k, eqn, ins, out):
    k.line(f"{out} = {ins[0]}.reshape({k.sizes.shape(k.sizes.of(eqn.outs[0]))})")


def _reshape_cuda(g, number, eqn):
    if not isinstance(eqn.ins[0], Var):     # a literal: made on the host
        return g.host_call(eqn)
    g.driver.line(f"{g.name(eqn.outs[0])} = tjrt.reshape({g.name(eqn.ins[0])}, "
                  f"{g.sizes.shape(g.sizes.of(eqn.outs[0]))})")


reshape = defop("reshape", Kind.LAYOUT, lambda x, *, shape: np.reshape(x, shape),
                shape=_reshape_shape, axes=_axes.regrouped, view=SQUEEZE,
                vjp=lambda ct, y, x, *, shape: (reshape(ct, shape=x.shape),),
                batch=lambda bind, xs, flags, *, shape: bind(
                    xs[0], shape=(np.shape(xs[0])[0],) + tuple(shape)),
                cpu=_reshape_cpu, cuda=_reshape_cuda)


def _transpose_shape(x: Aval, *, perm: tuple[int, ...]) -> Aval:
    _check(sorted(perm) == list(range(x.ndim)),
           f"transpose: {perm} is not a permutation of the axes of {x}")
    return Aval(tuple(x.shape[p] for p in perm), x.dtype)


def _transpose_view(eqn, read, sizes, idx):
    perm = eqn.kw["perm"]
    return read(0, [idx[perm.index(k)] for k in range(len(perm))])


transpose = defop("transpose", Kind.LAYOUT, lambda x, *, perm: np.transpose(x, perm),
                  shape=_transpose_shape, axes=_axes.permuted, view=View(_transpose_view),
                  vjp=lambda ct, y, x, *, perm: (
                      transpose(ct, perm=tuple(int(i) for i in np.argsort(perm))),),
                  batch=lambda bind, xs, flags, *, perm: bind(
                      xs[0], perm=(0,) + shifted(perm)))


def _rev_shape(x: Aval, *, axes: tuple[int, ...]) -> Aval:
    _check(all(0 <= a < x.ndim for a in axes), f"rev: axes {axes} out of range for {x}")
    return x


def _rev_view(eqn, read, sizes, idx):
    return read(0, [f"{sizes(n)} - 1 - {idx[d]}" if d in eqn.kw["axes"] else idx[d]
                    for d, n in enumerate(sizes.of(eqn.ins[0]))])


rev = defop("rev", Kind.LAYOUT, lambda x, *, axes: np.flip(x, axes), shape=_rev_shape,
            vjp=lambda ct, y, x, *, axes: (rev(ct, axes=axes),), axes=_axes.same,
            view=View(_rev_view), batch=batch_axes)


# ---- slice and pad: adjoint pair ----------------------------------------------------------------
def _slice_shape(x: Aval, *, start, limit, step) -> Aval:
    _check(len(start) == len(limit) == len(step) == x.ndim
           and all(0 <= s <= l <= n and k >= 1
                   for s, l, k, n in zip(start, limit, step, x.shape)),
           f"slice: start={start} limit={limit} step={step} do not fit {x}")
    return Aval(tuple(-(-(l - s) // k) for s, l, k in zip(start, limit, step)), x.dtype)


def _slice_vjp(ct, y, x, *, start, limit, step):
    # scatter the cotangent back into zeros: pad with the elements the slice skipped
    hi = tuple(n - (s + (m - 1) * k + 1) if m else n - s
               for n, s, k, m in zip(x.shape, start, step, y.shape))
    interior = tuple(k - 1 if m else 0 for k, m in zip(step, y.shape))
    return (pad(ct, 0, lo=start, hi=hi, interior=interior),)


def _slice_view(eqn, read, sizes, idx):
    parts = []
    for d, (start, step) in enumerate(zip(eqn.kw["start"], eqn.kw["step"])):
        index = idx[d] if step == 1 else f"{idx[d]} * {sizes(step)}"
        parts.append(index if start == 0 else f"{sizes(start)} + {index}")
    return read(0, parts)


def _slice_batch(bind, xs, flags, *, start, limit, step):
    return bind(xs[0], start=(0,) + tuple(start),
                limit=(np.shape(xs[0])[0],) + tuple(limit), step=(1,) + tuple(step))


slice_ = defop("slice", Kind.LAYOUT,
               lambda x, *, start, limit, step: x[tuple(map(slice, start, limit, step))],
               shape=_slice_shape, vjp=_slice_vjp, axes=_axes.whole_axes,
               view=View(_slice_view), batch=_slice_batch)


def _pad_shape(x: Aval, value: Aval, *, lo, hi, interior) -> Aval:
    _check(value.shape == () and len(lo) == len(hi) == len(interior) == x.ndim
           and all(v >= 0 for v in lo + hi + interior),
           f"pad: lo={lo} hi={hi} interior={interior} do not fit {x} (pad value {value})")
    if value.dtype != x.dtype:
        raise DtypeError(f"pad: pad value {value} does not match operand {x}")
    return Aval(tuple(l + n + max(n - 1, 0) * i + h
                      for n, l, h, i in zip(x.shape, lo, hi, interior)), x.dtype)


def _pad_impl(x, value, *, lo, hi, interior):
    shape = _pad_shape(Aval(x.shape, x.dtype), Aval((), x.dtype), lo=lo, hi=hi,
                       interior=interior).shape
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(l, l + (n - 1) * (i + 1) + 1 if n else l, i + 1)
              for l, n, i in zip(lo, x.shape, interior))] = x
    return out


def _pad_vjp(ct, y, x, value, *, lo, hi, interior):
    ct_x = slice_(ct, start=lo, limit=tuple(n - h for n, h in zip(y.shape, hi)),
                  step=tuple(i + 1 for i in interior))
    everything = tuple(range(y.ndim))
    # the pad value's gradient is the cotangent summed over the padded positions
    return ct_x, reduce_sum(ct, axes=everything) - reduce_sum(ct_x, axes=everything)


def _pad_view(eqn, read, sizes, idx):
    # out position p maps to operand position (p - lo) / (interior + 1) when that is a whole
    # number inside the operand; every other position holds the pad value
    conditions, parts = [], []
    for d, (lo, n, interior) in enumerate(zip(eqn.kw["lo"], sizes.of(eqn.ins[0]),
                                             eqn.kw["interior"])):
        shifted_ = f"({idx[d]} - {sizes(lo)})" if lo else idx[d]
        stride = interior + 1
        if lo:
            conditions.append(f"{idx[d]} >= {sizes(lo)}")
        if stride != 1:
            conditions.append(f"{shifted_} % {sizes(stride)} == 0")
            shifted_ = f"{shifted_} // {sizes(stride)}"
        conditions.append(f"{shifted_} < {sizes(n)}")
        parts.append(shifted_)
    inside = read(0, parts)
    value = read(1, [])
    return f"({inside} if {' and '.join(conditions)} else {value})" if conditions else inside


def _pad_batch(bind, xs, flags, *, lo, hi, interior):
    x, value = xs
    shifted_pad = dict(lo=(0,) + tuple(lo), hi=(0,) + tuple(hi), interior=(0,) + tuple(interior))
    if not flags[1]:
        return bind(x, value, **shifted_pad)
    # a padding value per example: pad with zeros, then select each example's value where a
    # mask (the padding of trues with false) is false
    shape = np.shape(x)[1:] if flags[0] else np.shape(x)
    zero = np.zeros((), x.dtype)
    padded = bind(x, zero, **shifted_pad) if flags[0] else bind(x, zero, lo=lo, hi=hi,
                                                                interior=interior)
    trues = bind.record(broadcast_in_dim, np.True_, shape=shape, dims=())
    mask = bind(trues, np.False_, lo=lo, hi=hi, interior=interior)
    size = np.shape(value)[0]
    return select(mask, padded, reshape(value, shape=(size,) + (1,) * len(shape)))


pad = defop("pad", Kind.LAYOUT, _pad_impl, shape=_pad_shape, vjp=_pad_vjp,
            axes=_axes.unpadded, view=View(_pad_view), batch=_pad_batch)


# ---- concatenate ------------------------------------------------------------------------------
def _concat_shape(*xs: Aval, axis: int) -> Aval:
    first = xs[0]
    _check(0 <= axis < first.ndim and all(
        x.ndim == first.ndim and all(a == b for d, (a, b) in enumerate(zip(x.shape, first.shape))
                                     if d != axis) for x in xs),
           f"concatenate: shapes {', '.join(str(x) for x in xs)} do not fit along axis {axis}")
    if len({x.dtype for x in xs}) != 1:
        raise DtypeError(f"concatenate: operands have different dtypes "
                         f"{', '.join(str(x) for x in xs)}")
    size = sum(x.shape[axis] for x in xs)
    return Aval(first.shape[:axis] + (size,) + first.shape[axis + 1:], first.dtype)


def _concat_vjp(ct, y, *xs, axis):
    cts, offset = [], 0
    for x in xs:
        start = tuple(offset if d == axis else 0 for d in range(y.ndim))
        limit = tuple(offset + x.shape[d] if d == axis else n for d, n in enumerate(y.shape))
        cts.append(slice_(ct, start=start, limit=limit, step=(1,) * y.ndim))
        offset += x.shape[axis]
    return tuple(cts)


def _concat_view(eqn, read, sizes, idx):
    axis, rank = eqn.kw["axis"], eqn.outs[0].aval.ndim
    pieces, offset = [], 0
    for k, atom in enumerate(eqn.ins):
        at = f"{idx[axis]} - {sizes(offset)}" if offset else idx[axis]
        offset += atom.aval.shape[axis]
        pieces.append((offset, read(k, [at if d == axis else idx[d] for d in range(rank)])))
    expr = pieces[-1][1]
    for end, piece in reversed(pieces[:-1]):
        expr = f"({piece} if {idx[axis]} < {sizes(end)} else {expr})"
    return expr


def _concat_batch(bind, xs, flags, *, axis):
    return bind(*with_batch(bind, xs, flags), axis=axis + 1)


concatenate = defop("concatenate", Kind.LAYOUT,
                    lambda *xs, axis: np.concatenate(xs, axis=axis),
                    shape=_concat_shape, vjp=_concat_vjp, axes=_axes.joined,
                    view=View(_concat_view), batch=_concat_batch)
