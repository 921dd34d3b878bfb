"""Indexing: `x[key]`, `x[key] = v` (recorded as a functional update; so is `x.fill(v)`),
and the other writes (np.add.at, x.flat, ...): writes.py; np.take and the functions that
gather: gathers.py.

Basic indexing (ints, slices, None, ...) lowers to slice/rev/reshape; index assignment with a
basic key to pad + select with a constant mask, so both stay fusible elementwise work. Advanced
(integer-array) indexing lowers to one `take` on the indexed axes flattened into one, following
numpy's rule for where the indexed dimensions go; each traced index array is first checked
against its own axis (`check_index`, which also wraps negative entries). Constant boolean masks
become integer arrays at trace time; a traced boolean mask has a data-dependent shape and is an
error.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..avals import broadcast_shapes
from ..errors import (IndexingError, IndexOutOfBoundsError, UnsupportedOperationError,
                      at_source, user_source)
from ..ops import elementwise as E
from ..ops import index as I
from ..ops import layout as L
from ..ops import sort as S
from ..ops.sort import in_bounds
from ..trace import Tracer, View, as_view, rebind
from . import cast, lift
from .shape import broadcast_to_shape, ravel, reshape

_BOOL_MASK_HELP = (
    "Indexing with a traced boolean mask gives an array whose shape depends on the data, which "
    "a compiled program cannot have. Keep the shape fixed instead: `np.where(mask, x, 0)` "
    "(then sum), or `np.sum(x * mask)`. Writes through the mask work: `x[mask] = v`, "
    "`x[mask] += v`, `x[mask] = y[mask]` (one mask, a scalar or a row for v).")


def _index_error(message: str) -> IndexingError:
    return IndexingError(at_source(message, user_source()))


def _not_integer(dtype: Any) -> IndexingError:
    return _index_error(f"arrays used as indices must be of integer type, not {dtype}: convert "
                        f"them, e.g. idx.astype(np.int64) (after np.round or np.floor if they "
                        f"are computed as floats)")


def _is_index_array(e: Any) -> bool:
    return isinstance(e, (Tracer, np.ndarray))


def _expand_key(key: Any, ndim: int) -> list[Any]:
    """The key as a list of ints, slices, None and integer index arrays, one per axis (plus
    Nones), with the Ellipsis expanded and constant bool masks turned into index arrays."""
    key = list(key) if isinstance(key, tuple) else [key]
    entries: list[Any] = []
    for e in key:
        if isinstance(e, Tracer):
            if e.dtype == np.bool_:
                raise UnsupportedOperationError(at_source(_BOOL_MASK_HELP, user_source()))
            if e.dtype.kind not in "iu":
                raise _not_integer(e.dtype)
            entries.append(e)
        elif isinstance(e, (list, np.ndarray)) or (isinstance(e, np.generic)
                                                   and e.dtype == np.bool_):
            arr = np.asarray(e)
            if arr.dtype == np.bool_:
                entries.extend(np.nonzero(arr))
            elif arr.dtype.kind in "iu" or arr.size == 0:
                entries.append(arr.astype(np.int64))
            else:
                raise _not_integer(arr.dtype)
        elif isinstance(e, (int, np.integer)) and not isinstance(e, bool):
            entries.append(int(e))
        elif e is None or e is Ellipsis or isinstance(e, slice):
            entries.append(e)
        else:
            raise _index_error(f"unsupported index {e!r}: only integers, slices, None, "
                               f"Ellipsis and integer arrays are valid indices")
    consumed = sum(1 for e in entries if e is not None and e is not Ellipsis)
    if consumed > ndim:
        raise _index_error(f"too many indices for array: array is {ndim}-dimensional, but "
                           f"{consumed} were indexed")
    ellipses = [i for i, e in enumerate(entries) if e is Ellipsis]
    if len(ellipses) > 1:
        raise _index_error("an index can only have a single ellipsis ('...')")
    fill = [slice(None)] * (ndim - consumed)
    if ellipses:
        at = ellipses[0]
        return entries[:at] + fill + entries[at + 1:]
    return entries + fill


def _basic_region(shape: tuple[int, ...], entries: list[Any]):
    """Per axis of x: (start, count, step) of a basic key, with step possibly negative;
    and the shape of x[key]."""
    region, result, d = [], [], 0
    for e in entries:
        if e is None:
            result.append(1)
            continue
        n = shape[d]
        if isinstance(e, int):
            if not -n <= e < n:
                raise IndexOutOfBoundsError(e, d, n, "indexing", user_source())
            region.append((e % n, 1, 1))
        else:
            start, stop, step = e.indices(n)
            count = len(range(start, stop, step))
            region.append((start, count, step))
            result.append(count)
        d += 1
    return region, tuple(result)


def _ascending(region):
    """(start, limit, step) slices in ascending order, and the axes to reverse."""
    starts, limits, steps, flipped = [], [], [], []
    for d, (start, count, step) in enumerate(region):
        if count == 0:
            starts.append(0), limits.append(0), steps.append(1)
            continue
        first = start if step > 0 else start + (count - 1) * step
        starts.append(first)
        limits.append(first + (count - 1) * abs(step) + 1)
        steps.append(abs(step))
        if step < 0 and count > 1:
            flipped.append(d)
    return tuple(starts), tuple(limits), tuple(steps), tuple(flipped)


def _basic_get(x: Any, entries: list[Any]) -> Any:
    region, result = _basic_region(x.shape, entries)
    starts, limits, steps, flipped = _ascending(region)
    if (starts, limits, steps) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        x = L.slice_(x, start=starts, limit=limits, step=steps)
    if flipped:
        x = L.rev(x, axes=flipped)
    return reshape(x, result)


def normalized_index(idx: Any, n: int, axis: int) -> Any:
    """Index array with negative entries wrapped, bounds-checked (traced ones as the program
    runs: check_index)."""
    if isinstance(idx, Tracer):
        return I.check_index(idx, size=n, axis=axis)
    try:
        idx = in_bounds(np.asarray(idx, dtype=np.int64), n, axis, negative=True)
    except IndexOutOfBoundsError as err:
        raise err.located("indexing", user_source()) from None
    return idx % max(n, 1)


def _advanced_get(x: Any, entries: list[Any]) -> Any:
    entries = [np.asarray(e) if isinstance(e, int) else e for e in entries]
    axis_entries = [e for e in entries if e is not None]
    adv = [d for d, e in enumerate(axis_entries) if _is_index_array(e)]
    # 1. the slices on the other axes
    sliced = [slice(None) if d in adv else e for d, e in enumerate(axis_entries)]
    x = _basic_get(x, sliced)
    # 2. one take on the indexed axes, flattened into one
    sizes = [x.shape[d] for d in adv]
    idx = [normalized_index(axis_entries[d], x.shape[d], d) for d in adv]
    shapes = [np.shape(i) for i in idx]
    try:
        bshape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise _index_error(f"shape mismatch: indexing arrays could not be broadcast together "
                           f"with shapes {' '.join(map(str, shapes))} (numpy's IndexError): "
                           f"give the index arrays one shape, or shapes that broadcast") from None
    strides = np.cumprod([1] + sizes[::-1])[-2::-1].tolist()     # row-major over indexed axes
    linear = idx[-1]
    for i, stride in zip(idx[:-1], strides[:-1]):
        linear = linear + i * stride
    linear = broadcast_to_shape(linear, bshape) if np.shape(linear) != bshape else linear
    rest = [d for d in range(x.ndim) if d not in adv]
    moved = L.transpose(x, perm=tuple(adv + rest)) if adv + rest != list(range(x.ndim)) else x
    flat = reshape(moved, (int(np.prod(sizes, dtype=np.int64)),) + tuple(x.shape[d] for d in rest))
    out = I.take(lift(flat), linear, axis=0)
    # 3. numpy's placement: the indexed block replaces adjacent index entries in place,
    #    else it goes first; None entries add axes of size 1
    positions = [i for i, e in enumerate(entries) if _is_index_array(e)]
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    others = [e for e in entries if not _is_index_array(e)]
    other_sizes = []
    r = iter(rest)
    for e in others:
        other_sizes.append(1 if e is None else x.shape[next(r)])
    nb = len(bshape)
    out = reshape(out, bshape + tuple(other_sizes))
    lead = sum(1 for e in entries[:positions[0]] if not _is_index_array(e)) if adjacent else 0
    if lead:
        perm = (list(range(nb, nb + lead)) + list(range(nb))
                + list(range(nb + lead, nb + len(other_sizes))))
        out = L.transpose(out, perm=tuple(perm))
    return out


class MaskedSelection:
    """`x[mask]` for a traced bool mask, whose length depends on the values: it exists to be
    updated and written back, as `x[mask] += v` does (Python reads x[mask], adds, and writes
    the sum back) and `x[mask] = y[mask]`. The arithmetic runs on all of x (`values`); the
    write keeps it where the mask holds. Any other use is the boolean-mask error."""

    def __init__(self, x: Tracer, mask: Tracer, values: Any = None) -> None:
        _mask_fits(x, mask)
        self.x, self.mask = x, mask
        self.values = x if values is None else values

    def _combined(self, other: Any, fn: Any) -> "MaskedSelection":
        if isinstance(other, MaskedSelection):
            if other.mask is not self.mask:
                _refuse_masked()
            other = other.values
        elif np.ndim(other) > self.x.ndim - self.mask.ndim:
            _refuse_masked()
        return MaskedSelection(self.x, self.mask, fn(self.values, other))

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        _refuse_masked()

    def __getattr__(self, name: str) -> Any:
        _refuse_masked()


for _name in ("add", "sub", "mul", "truediv", "floordiv", "pow", "mod"):
    _op = getattr(operator, _name)
    for _form in (f"__{_name}__", f"__i{_name}__"):
        setattr(MaskedSelection, _form, lambda self, other, op=_op: self._combined(other, op))
    setattr(MaskedSelection, f"__r{_name}__",
            lambda self, other, op=_op: self._combined(other, lambda a, b: op(b, a)))
MaskedSelection.__array_ufunc__ = MaskedSelection.__array_function__ = \
    lambda self, *args, **kwargs: _refuse_masked()
MaskedSelection.__len__ = MaskedSelection.__iter__ = MaskedSelection.__bool__ = \
    lambda self: _refuse_masked()


def _refuse_masked() -> None:
    raise UnsupportedOperationError(at_source(_BOOL_MASK_HELP, user_source()))


def _mask_fits(x: Tracer, mask: Tracer) -> None:
    if mask.shape != x.shape[:mask.ndim]:
        raise _index_error(f"boolean index of shape {mask.shape} did not match indexed array "
                           f"of shape {x.shape}")


def getitem(x: Any, key: Any) -> Any:
    x = lift(x)
    if isinstance(key, Tracer) and key.dtype == np.bool_:
        return MaskedSelection(x, key)          # (only to be written back: `x[mask] += v`)
    entries = _expand_key(key, x.ndim)
    if any(_is_index_array(e) for e in entries):
        return _advanced_get(x, entries)                    # numpy copies
    out = _dynamic_get(x, entries)
    if out is None:
        out = _basic_get(x, entries)
    if np.ndim(out) == 0:
        return out                                          # numpy returns a scalar copy
    return as_view(x, out, View(lambda base: _basic_get(base, entries),
                                lambda base, new: setitem(base, key, new)))


def _dynamic_get(x: Any, entries: list[Any]) -> Any:
    """x[entries] where one slice has traced bounds (`x[i * b:(i + 1) * b]`) within the axis
    and a length the trace guards on: one program for every `i`, the other entries applied,
    then a take of `start + arange(length)` along that axis. None where no slice has traced
    bounds, or several do, or one has a step, or its bounds may fall outside the axis (numpy
    then clips: `_basic_get` guards on their values)."""
    traced = [k for k, e in enumerate(entries) if isinstance(e, slice)
              and any(isinstance(b, Tracer) for b in (e.start, e.stop, e.step))]
    if len(traced) != 1 or entries[traced[0]].step not in (None, 1):
        return None
    k = traced[0]
    axis = sum(1 for e in entries[:k] if e is not None)
    n = x.shape[axis]
    start, stop = entries[k].start, entries[k].stop
    start, stop = 0 if start is None else start, n if stop is None else stop
    if any(isinstance(b, Tracer) and (b.ndim or b.dtype.kind not in "iu") for b in (start, stop)):
        return None
    if not (bool(start >= 0) and bool(stop <= n) and bool(start <= stop)):
        return None
    index = start + np.arange(int(stop - start), dtype=np.int64)
    out = _basic_get(x, entries[:k] + [slice(None)] + entries[k + 1:])
    at = sum(1 for e in entries[:k] if not isinstance(e, int))   # out's axes before it
    return I.take(lift(out), normalized_index(index, n, axis), axis=at)


def linear_indices(shape: tuple[int, ...], key: Any) -> Any:
    """The flat positions x[key] selects: constant if the key is, else traced."""
    positions = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
    entries = _expand_key(key, len(shape))
    if any(isinstance(e, Tracer) for e in entries):
        return getitem(positions, tuple(entries))
    return positions[tuple(entries)]


def setitem(x: Tracer, key: Any, value: Any) -> None:
    if isinstance(key, Tracer) and key.dtype == np.bool_:
        if isinstance(value, MaskedSelection):      # x[mask] += v, x[mask] = y[mask]
            if value.mask is not key or value.values.shape != x.shape:
                _refuse_masked()
            rebind(x, E.select(_leading(key, x.ndim), lift(cast(value.values, x.dtype)), x))
            return
        rebind(x, _masked_set(x, key, cast(value, x.dtype)))
        return
    entries = _expand_key(key, x.ndim)
    value = cast(value, x.dtype)
    if any(_is_index_array(e) for e in entries):
        rebind(x, _scatter_set(x, linear_indices(x.shape, key), value))
        return
    region, result = _basic_region(x.shape, entries)
    if 0 in result:
        return
    v = broadcast_to_shape(value, result, "index assignment")
    v = reshape(v, tuple(count for _, count, _ in region))      # drop None axes, keep int axes
    starts, limits, steps, flipped = _ascending(region)
    if flipped:
        v = L.rev(v, axes=flipped)
    hi = tuple(n - limit for n, limit in zip(x.shape, limits))
    placed = L.pad(lift(v), np.zeros((), x.dtype), lo=starts, hi=hi,
                   interior=tuple(s - 1 for s in steps))
    mask = np.zeros(x.shape, dtype=bool)
    mask[tuple(slice(a, b, s) for a, b, s in zip(starts, limits, steps))] = True
    rebind(x, E.select(mask, placed, x))


def _masked_set(x: Tracer, mask: Tracer, value: Any) -> Any:
    """x[mask] = value for a traced bool mask over x's leading axes, as np.where(mask, value,
    x): for a value numpy gives every selected element (a scalar, or one row of the axes after
    the mask's). One value per selected element would need their count, a value of the call."""
    rest = x.shape[mask.ndim:]
    _mask_fits(x, mask)
    shape = np.shape(value)
    if len(shape) == len(rest) + 1 and shape[:1] == (1,):
        value, shape = reshape(value, shape[1:]), shape[1:]
    if len(shape) > len(rest) or broadcast_shapes("index assignment", shape, rest) != rest:
        raise UnsupportedOperationError(at_source(
            f"x[mask] = values of shape {shape} with a traced mask: one value per selected "
            f"element needs their count, a value of the call. Give every selected element "
            f"the same value (a scalar, or a row of shape {rest}), or write "
            f"x = np.where(mask, values, x) with values of x's shape {x.shape}", user_source()))
    return E.select(_leading(mask, x.ndim), lift(broadcast_to_shape(value, x.shape,
                                                                     "index assignment")), x)


def _leading(mask: Tracer, ndim: int) -> Any:
    """A mask over x's leading axes, with x's other axes (of length 1)."""
    return reshape(mask, mask.shape + (1,) * (ndim - mask.ndim))


def _scatter_set(x: Tracer, linear: Any, value: Any) -> Any:
    """x with x.flat[linear] = value; a repeated index keeps the last value (numpy's
    behaviour), constant or traced."""
    v = ravel(broadcast_to_shape(value, np.shape(linear), "index assignment"))
    zeros = L.broadcast_in_dim(np.zeros((), x.dtype), shape=(x.size,), dims=())
    if isinstance(linear, Tracer):
        flat_idx = ravel(linear)
        v = _last_writes(flat_idx, v)
        ones = L.broadcast_in_dim(np.ones((), x.dtype), shape=flat_idx.shape, dims=())
        mask = E.gt(I.scatter_add(lift(zeros), flat_idx, ones, axis=0), 0)
    else:
        flat_idx = np.ravel(linear)
        _, first_in_reversed = np.unique(flat_idx[::-1], return_index=True)
        keep = flat_idx.size - 1 - first_in_reversed
        flat_idx = flat_idx[keep]
        v = I.take(lift(v), keep, axis=0)
        mask = np.zeros(x.size, dtype=bool)
        mask[flat_idx] = True
    scattered = I.scatter_add(lift(zeros), flat_idx, lift(v), axis=0)
    return reshape(E.select(mask, scattered, ravel(x)), x.shape)


def _last_writes(flat_idx: Any, v: Any) -> Any:
    """v with 0 for each value a later one at the same traced index overwrites: those that a
    stable sort of the indices puts before an equal index."""
    m = flat_idx.shape[0]
    if m < 2:
        return v
    ordered, perm = S.sort(flat_idx, axis=0)
    last = L.concatenate(E.ne(ordered[:-1], ordered[1:]), np.ones(1, np.bool_), axis=0)
    counts = L.broadcast_in_dim(np.zeros((), np.int64), shape=(m,), dims=())
    kept = E.gt(I.scatter_add(lift(counts), perm, cast(last, np.dtype(np.int64)), axis=0), 0)
    return E.select(kept, lift(v), np.zeros((), v.dtype))


Tracer.__getitem__ = getitem
Tracer.__setitem__ = setitem
