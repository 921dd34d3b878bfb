"""Writes into arrays beyond `x[key] = v` (indexing.py), each recorded as index assignments:
np.add.at, np.fill_diagonal, `x.fill(v)`, `x.flat[k] = v` and `x.flat = v`, and a ufunc's
out= into an array a numpy constructor made in the function (`buf += traced`), which restarts
the trace with a traced buffer as `buf[...] = traced` does (recording.Constant)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import (ConcretizationError, ShapeError, UnsupportedOperationError,
                      at_source, ufunc_name, user_source)
from ..guards import Outside
from ..ops import index as I
from ..ops import layout as L
from ..recording import BufferWrite, Constant
from ..trace import METHOD_RULES, Tracer, rebind
from . import cast, implements, lift, written
from .indexing import getitem, linear_indices, setitem
from .shape import broadcast_to_shape, ravel, reshape


def add_at(x: Tracer, key: Any, values: Any) -> Any:
    """np.add.at(x, key, values) as a new value: repeated indices accumulate."""
    linear = linear_indices(x.shape, key)
    v = ravel(broadcast_to_shape(cast(values, x.dtype), np.shape(linear), "numpy.add.at"))
    zeros = L.broadcast_in_dim(np.zeros((), x.dtype), shape=(x.size,), dims=())
    added = I.scatter_add(lift(zeros), ravel(linear) if isinstance(linear, Tracer)
                          else np.ravel(linear), lift(v), axis=0)
    return reshape(ravel(x) + added, x.shape)


def _refuse_or_restart(written: Any) -> None:
    """Raise for a traced write into a numpy array: made by a constructor in the function, the
    trace starts again with it traced; made outside, it cannot hold a traced value."""
    if isinstance(written, Outside):
        raise ConcretizationError(at_source(
            "a traced value written in place into an array made outside the traced function "
            "(a global, a default argument): it holds plain numbers, so the value would lose "
            "its derivative. Make the array inside the function (`acc = np.zeros(n)`), or "
            "write `acc = acc + x`.", user_source()))
    if isinstance(written, Constant):
        raise BufferWrite(written.site)


def _at_method(ufunc: np.ufunc, x: Any, index: Any, values: Any = None) -> None:
    """`np.add.at(x, index, values)` (and np.subtract.at: minus the values), written into x."""
    if ufunc in (np.add, np.subtract):
        _refuse_or_restart(x)
    if ufunc not in (np.add, np.subtract) or not isinstance(x, Tracer):
        raise UnsupportedOperationError(at_source(
            f"numpy.{ufunc.__name__}.at is not supported on traced arrays (np.add.at and "
            f"np.subtract.at are, into a traced array or one made in the function)",
            user_source()))
    rebind(x, add_at(x, index, values if ufunc is np.add else np.negative(values)))


def _call_into(ufunc: np.ufunc, *inputs: Any, out: Any = None, where: Any = True,
               **kwargs: Any) -> Any:
    """A ufunc of traced operands given out= (and where=). Into a traced array, the result
    is written as `out[...] = result` (where `where` holds). Into an array a numpy
    constructor made in the function (`buf += traced`, `buf[idx] += traced`) it is the write
    `buf[...] = traced` is: the trace starts again with a traced buffer (recording.Constant).
    Anything else is refused."""
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) == 1 and isinstance(outs[0], Tracer) and ufunc.nout == 1:
        target, result = outs[0], ufunc(*inputs, **kwargs)
        return written(ufunc_name(ufunc), target, result if where is True else
                       np.where(where, result, target), same_kind=True)
    if where is True:
        for buffer in outs:
            _refuse_or_restart(buffer)
    raise UnsupportedOperationError(at_source(
        f"{ufunc_name(ufunc)}: the out= and where= arguments are not supported on traced "
        f"arrays; use the result (and np.where) instead", user_source()))


METHOD_RULES["at"] = _at_method
METHOD_RULES["__call__"] = _call_into


@implements(np.fill_diagonal)
def fill_diagonal(a: Any, val: Any, wrap: bool = False) -> None:
    """numpy's, in place: a.flat[:end:step] = val, the main diagonal of a matrix (with `wrap`,
    again every N + 1 rows of a tall one) or of a cube of equal sides; val repeats along it."""
    _refuse_or_restart(a)           # (else `a` is traced: the only argument numpy dispatches on)
    if a.ndim < 2 or (a.ndim > 2 and len(set(a.shape)) > 1):
        raise ShapeError(at_source(f"numpy.fill_diagonal: the array must be at least 2-d, of "
                                   f"equal sides beyond 2-d: got {a.shape}", user_source()))
    if a.ndim == 2:
        step, end = a.shape[1] + 1, (None if wrap else a.shape[1] * a.shape[1])
    else:
        step, end = 1 + int(np.cumprod(a.shape[:-1]).sum()), None
    flat = np.arange(a.size)[:end:step]
    values = np.ravel(val)
    if values.size > 1 or np.ndim(val):
        values = np.take(values, np.arange(flat.size) % max(values.size, 1))
    setitem(a, np.unravel_index(flat, a.shape), values)


def fill(x: Tracer, value: Any) -> None:
    """`x.fill(value)`: numpy's in-place fill, as the assignment `x[...] = value`."""
    setitem(x, Ellipsis, value)


class _FlatView:
    """`x.flat`: x's elements in order, read and written as those of x.reshape(-1) (a view:
    writes reach x)."""

    def __init__(self, x: Tracer) -> None:
        self.line = reshape(x, (x.size,))

    def __getitem__(self, key: Any) -> Any:
        return getitem(self.line, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        setitem(self.line, key, value)


def _set_flat(x: Tracer, value: Any) -> None:
    """`x.flat = value`: value's elements in order, repeated to x's size (numpy's)."""
    values = np.ravel(value)
    if values.size != x.size:
        values = np.take(values, np.arange(x.size) % max(values.size, 1))
    setitem(reshape(x, (x.size,)), slice(None), values)


Tracer.fill = fill
Tracer.flat = property(_FlatView, _set_flat)
