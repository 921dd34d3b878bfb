"""Layout primitives: broadcast_in_dim, reshape, transpose, slice, pad, concatenate, rev.

They move or copy elements without arithmetic; each VJP is the adjoint data movement
(broadcast <-> reduce_sum, slice <-> pad, concatenate <-> slices, transpose <-> inverse).
"""
from __future__ import annotations

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError
from . import Kind, defop
from . import axes as _axes


def kept_dims(ndim: int, axes: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of an ndim array that are not in `axes`."""
    return tuple(d for d in range(ndim) if d not in axes)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


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
    from .reduce import reduce_sum
    return (reshape(reduce_sum(ct, axes=summed), shape=x.shape),)


broadcast_in_dim = defop("broadcast_in_dim", Kind.LAYOUT, _broadcast_impl,
                         shape=_broadcast_shape, vjp=_broadcast_vjp, axes=_axes.placed)


# ---- reshape / transpose / rev ----------------------------------------------------------------
def _reshape_shape(x: Aval, *, shape: tuple[int, ...]) -> Aval:
    _check(int(np.prod(shape, dtype=np.int64)) == x.size and all(d >= 0 for d in shape),
           f"reshape: cannot reshape {x} into shape {shape}")
    return Aval(tuple(shape), x.dtype)


reshape = defop("reshape", Kind.LAYOUT, lambda x, *, shape: np.reshape(x, shape),
                shape=_reshape_shape, axes=_axes.regrouped,
                vjp=lambda ct, y, x, *, shape: (reshape(ct, shape=x.shape),))


def _transpose_shape(x: Aval, *, perm: tuple[int, ...]) -> Aval:
    _check(sorted(perm) == list(range(x.ndim)),
           f"transpose: {perm} is not a permutation of the axes of {x}")
    return Aval(tuple(x.shape[p] for p in perm), x.dtype)


transpose = defop("transpose", Kind.LAYOUT, lambda x, *, perm: np.transpose(x, perm),
                  shape=_transpose_shape, axes=_axes.permuted,
                  vjp=lambda ct, y, x, *, perm: (
                      transpose(ct, perm=tuple(int(i) for i in np.argsort(perm))),))


def _rev_shape(x: Aval, *, axes: tuple[int, ...]) -> Aval:
    _check(all(0 <= a < x.ndim for a in axes), f"rev: axes {axes} out of range for {x}")
    return x


rev = defop("rev", Kind.LAYOUT, lambda x, *, axes: np.flip(x, axes), shape=_rev_shape,
            vjp=lambda ct, y, x, *, axes: (rev(ct, axes=axes),), axes=_axes.same)


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


slice_ = defop("slice", Kind.LAYOUT,
               lambda x, *, start, limit, step: x[tuple(map(slice, start, limit, step))],
               shape=_slice_shape, vjp=_slice_vjp, axes=_axes.whole_axes)


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
    from .reduce import reduce_sum
    ct_x = slice_(ct, start=lo, limit=tuple(n - h for n, h in zip(y.shape, hi)),
                  step=tuple(i + 1 for i in interior))
    everything = tuple(range(y.ndim))
    # the pad value's gradient is the cotangent summed over the padded positions
    return ct_x, reduce_sum(ct, axes=everything) - reduce_sum(ct_x, axes=everything)


pad = defop("pad", Kind.LAYOUT, _pad_impl, shape=_pad_shape, vjp=_pad_vjp,
            axes=_axes.unpadded)


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


concatenate = defop("concatenate", Kind.LAYOUT,
                    lambda *xs, axis: np.concatenate(xs, axis=axis),
                    shape=_concat_shape, vjp=_concat_vjp, axes=_axes.joined)
