"""numpy layout functions -> layout primitives: reshape transpose swapaxes moveaxis rollaxis
expand_dims squeeze broadcast_to ravel atleast_*d concatenate stack hstack vstack dstack split
hsplit vsplit dsplit where clip diff *_like, and the matching Tracer methods (np.tile, np.flip,
np.roll, np.rot90: rearrange.py; np.repeat and np.pad gather: gathers.py)."""
from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from ..avals import broadcast_shapes, dtype_name
from ..errors import ShapeError, UnsupportedOperationError, at_source, user_error, user_source
from ..guards import size_error, traced_in
from ..ops import elementwise as E
from ..ops import layout as L
from ..trace import Tracer, View, as_view, rebind, trace_of, var_of
from . import asarray, cast, dtype_of, implements, lift, normalize_axes, normalize_axis, reject
from .math import compute_dtype


def broadcast_to_shape(x: Any, shape: Sequence[int], what: str = "numpy.broadcast_to") -> Any:
    x = asarray(x)
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if broadcast_shapes(what, x.shape, shape) != shape:
        raise ShapeError(at_source(f"{what}: cannot broadcast {x.shape} to {shape}",
                                   user_source()))
    return L.broadcast_in_dim(x, shape=shape, dims=tuple(range(len(shape) - x.ndim, len(shape))))


@implements(np.reshape)
def reshape(x: Any, *dims: Any, shape: Any = None, order: str = "C", newshape: Any = None,
            copy: Any = None) -> Any:
    x = asarray(x)
    if order in ("F", "f"):     # Fortran order: the reversed axes, reshaped in C order
        return transpose(reshape(transpose(x), *reversed_shape(dims, shape, newshape)))
    if order not in ("C", "c"):
        raise UnsupportedOperationError(at_source(
            f"reshape: order={order!r} depends on how the array is laid out in memory, which "
            f"traced arrays do not have: pass order='C' or order='F'", user_source()))
    for given in (shape, newshape):     # np.reshape(x, shape=...) (numpy 2.1), newshape=...
        if given is not None:
            dims = (given,)
    shape = dims
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, Tracer)):
        shape = tuple(shape[0])
    traced = traced_in(shape)
    if traced is not None:
        raise size_error("reshape", traced, user_source())
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) == 1:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ShapeError(at_source(f"reshape: cannot reshape array of shape {x.shape} "
                                       f"into shape {shape}", user_source()))
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if shape == x.shape:
        return x
    return as_view(x, L.reshape(x, shape=shape), View(
        lambda base: L.reshape(base, shape=shape),
        lambda base, new: rebind(base, L.reshape(new, shape=base.shape))))


def reversed_shape(dims: tuple, shape: Any, newshape: Any) -> tuple:
    """The shape reshape was given (`dims`, `shape=` or `newshape=`), its dimensions reversed."""
    given = next((g for g in (shape, newshape) if g is not None), dims)
    if len(given) == 1 and not isinstance(given[0], (int, np.integer, Tracer)):
        given = given[0]
    given = (given,) if isinstance(given, (int, np.integer, Tracer)) else tuple(given)
    return tuple(reversed(given))


@implements(np.ravel)
def ravel(x: Any, order: str = "C") -> Any:
    return reshape(x, (asarray(x).size,), order=order)


@implements(np.transpose)
def transpose(x: Any, *dims: Any, axes: Any = None) -> Any:
    """np.transpose(x, axes), np.transpose(x, axes=axes), x.transpose(*axes)."""
    x = asarray(x)
    if axes is None and len(dims) == 1 and not isinstance(dims[0], (int, np.integer)):
        axes = dims[0]        # a sequence or None
    elif axes is None and dims:
        axes = dims
    perm = tuple(range(x.ndim))[::-1] if axes is None else tuple(
        normalize_axis(a, x.ndim, "numpy.transpose") for a in axes)
    if perm == tuple(range(x.ndim)):
        return x
    inverse = tuple(int(i) for i in np.argsort(perm))
    return as_view(x, L.transpose(x, perm=perm), View(
        lambda base: L.transpose(base, perm=perm),
        lambda base, new: rebind(base, L.transpose(new, perm=inverse))))


@implements(np.swapaxes)
def swapaxes(x: Any, axis1: int, axis2: int) -> Any:
    x = asarray(x)
    perm = list(range(x.ndim))
    a, b = (normalize_axis(ax, x.ndim, "numpy.swapaxes") for ax in (axis1, axis2))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


@implements(np.moveaxis)
def moveaxis(x: Any, source: Any, destination: Any) -> Any:
    x = asarray(x)
    src = [normalize_axis(a, x.ndim, "numpy.moveaxis") for a in np.atleast_1d(source)]
    dst = [normalize_axis(a, x.ndim, "numpy.moveaxis") for a in np.atleast_1d(destination)]
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


@implements(np.rollaxis)
def rollaxis(x: Any, axis: int, start: int = 0) -> Any:
    """Move `axis` to sit before position `start` (numpy's older moveaxis)."""
    x = asarray(x)
    n = x.ndim
    ax = normalize_axis(axis, n, "numpy.rollaxis")
    start = start + n if start < 0 else start
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"'start' arg requires {-n} <= start < {n + 1}, but "
                                      f"{start} was passed in")
    order = [d for d in range(n) if d != ax]
    order.insert(start - 1 if ax < start else start, ax)
    return transpose(x, order)


@implements(np.expand_dims)
def expand_dims(x: Any, axis: Any) -> Any:
    x = asarray(x)
    axes = normalize_axes(axis, x.ndim + len(np.atleast_1d(axis)), "numpy.expand_dims")
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return L.reshape(x, shape=tuple(shape))


@implements(np.squeeze)
def squeeze(x: Any, axis: Any = None) -> Any:
    x = asarray(x)
    axes = (tuple(d for d, n in enumerate(x.shape) if n == 1) if axis is None
            else normalize_axes(axis, x.ndim, "numpy.squeeze"))
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(at_source(f"numpy.squeeze: cannot select an axis to squeeze out "
                                   f"which has size not equal to one ({x.shape}, {axis})",
                                   user_source()))
    return reshape(x, tuple(n for d, n in enumerate(x.shape) if d not in axes))


@implements(np.broadcast_to)
def broadcast_to(x: Any, shape: Any, subok: bool = False) -> Any:
    return broadcast_to_shape(x, (shape,) if isinstance(shape, int) else shape)


@implements(np.broadcast_arrays)
def broadcast_arrays(*args: Any, subok: bool = False) -> list[Any]:
    shape = broadcast_shapes("numpy.broadcast_arrays", *(np.shape(asarray(a)) for a in args))
    return [broadcast_to_shape(a, shape) for a in args]


def _atleast_rule(n: int):
    """atleast_1d / atleast_2d: leading axes of size 1 up to n dimensions."""
    def rule(*arys: Any) -> Any:
        outs = [a if a.ndim >= n else reshape(a, (1,) * (n - a.ndim) + a.shape)
                for a in map(asarray, arys)]
        return outs[0] if len(outs) == 1 else outs
    return rule


implements(np.atleast_1d)(_atleast_rule(1))
implements(np.atleast_2d)(_atleast_rule(2))


@implements(np.atleast_3d)
def atleast_3d(*arys: Any) -> Any:
    """() -> (1, 1, 1), (n,) -> (1, n, 1), (m, n) -> (m, n, 1) (numpy's placement)."""
    shapes = {0: lambda s: (1, 1, 1), 1: lambda s: (1,) + s + (1,), 2: lambda s: s + (1,)}
    outs = [reshape(a, shapes[a.ndim](a.shape)) if a.ndim < 3 else a for a in map(asarray, arys)]
    return outs[0] if len(outs) == 1 else outs


def in_common_dtype(arrays: Sequence[Any], what: str) -> list[Any]:
    """Operands in their common dtype (numpy's promotion)."""
    arrays = [asarray(a) for a in arrays]
    dtype = np.result_type(*[np.empty(0, dtype_of(a)) for a in arrays])
    return [cast(a, dtype) for a in arrays]


@implements(np.concatenate)
def concatenate(arrays: Sequence[Any], axis: Any = 0, out: Any = None, dtype: Any = None,
                casting: str = "same_kind") -> Any:
    reject("numpy.concatenate", out=out)
    arrays = in_common_dtype(arrays, "numpy.concatenate")
    if dtype is not None:
        arrays = [cast(a, np.dtype(dtype)) for a in arrays]
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    if not arrays:
        raise user_error("need at least one array to concatenate")
    ax = normalize_axis(axis, arrays[0].ndim, "numpy.concatenate")
    arrays = [lift(a) for a in arrays]
    return arrays[0] if len(arrays) == 1 else L.concatenate(*arrays, axis=ax)


@implements(np.stack)
def stack(arrays: Sequence[Any], axis: int = 0, out: Any = None, dtype: Any = None,
          casting: str = "same_kind") -> Any:
    arrays = [asarray(a) for a in arrays]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ShapeError(at_source(f"numpy.stack: all input arrays must have the same shape, "
                                   f"got {sorted(shapes)}", user_source()))
    ax = normalize_axis(axis, arrays[0].ndim + 1, "numpy.stack")
    return concatenate([expand_dims(a, ax) for a in arrays], axis=ax, out=out, dtype=dtype)


@implements(np.hstack)
def hstack(tup: Sequence[Any], dtype: Any = None, casting: str = "same_kind") -> Any:
    arrays = [_atleast_rule(1)(a) for a in tup]
    return concatenate(arrays, axis=0 if arrays[0].ndim == 1 else 1, dtype=dtype)


@implements(np.vstack)
def vstack(tup: Sequence[Any], dtype: Any = None, casting: str = "same_kind") -> Any:
    return concatenate([_atleast_rule(2)(a) for a in tup], axis=0, dtype=dtype)


@implements(np.dstack)
def dstack(tup: Sequence[Any]) -> Any:
    return concatenate([atleast_3d(a) for a in tup], axis=2)


@implements(np.column_stack)
def column_stack(tup: Sequence[Any]) -> Any:
    arrays = [asarray(a) for a in tup]
    return concatenate([reshape(a, (a.size, 1)) if a.ndim < 2 else a for a in arrays], axis=1)


def slice_axis(x: Any, axis: int, start: int, stop: int, step: int = 1) -> Any:
    """x[..., start:stop:step, ...] along one axis (non-negative start/stop, step >= 1)."""
    starts = tuple(start if d == axis else 0 for d in range(x.ndim))
    limits = tuple(stop if d == axis else n for d, n in enumerate(x.shape))
    steps = tuple(step if d == axis else 1 for d in range(x.ndim))
    if starts == (0,) * x.ndim and limits == x.shape and steps == (1,) * x.ndim:
        return x
    return L.slice_(x, start=starts, limit=limits, step=steps)


@implements(np.array_split)
def array_split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    x = asarray(x)
    ax = normalize_axis(axis, x.ndim, "numpy.array_split")
    n = x.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise user_error("number sections must be larger than 0.")
        sizes = [n // sections + (1 if i < n % sections else 0) for i in range(sections)]
        bounds = np.cumsum([0] + sizes).tolist()
    else:
        # split points clip like slice bounds: a negative one counts from the end
        bounds = [0] + [builtins.min(builtins.max(int(i) + n if i < 0 else int(i), 0), n)
                        for i in indices_or_sections] + [n]
    return [slice_axis(x, ax, a, builtins.max(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


@implements(np.split)
def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """array_split, but a number of sections must divide the axis (numpy's ValueError)."""
    x = asarray(x)
    if isinstance(indices_or_sections, (int, np.integer)) and indices_or_sections and \
            x.shape[normalize_axis(axis, x.ndim, "numpy.split")] % indices_or_sections:
        raise user_error("array split does not result in an equal division")
    return array_split(x, indices_or_sections, axis)


def _split_along(name: str, axis: int, min_ndim: int):
    """hsplit (axis 1, or 0 for 1-d arrays), vsplit (axis 0), dsplit (axis 2)."""
    def rule(x: Any, indices_or_sections: Any) -> list[Any]:
        x = asarray(x)
        if x.ndim < min_ndim:
            raise user_error(f"{name} only works on arrays of {min_ndim} or more dimensions")
        return split(x, indices_or_sections, axis if x.ndim > 1 else 0)
    return rule


implements(np.hsplit)(_split_along("hsplit", 1, 1))
implements(np.vsplit)(_split_along("vsplit", 0, 2))
implements(np.dsplit)(_split_along("dsplit", 2, 3))


@implements(np.where)
def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None and y is None:
        raise UnsupportedOperationError(at_source(
            "numpy.where(condition) with one argument returns indices whose number depends on "
            "the data; use the three-argument form np.where(condition, x, y)", user_source()))
    cond = asarray(condition)
    if cond.dtype != np.bool_:
        cond = E.ne(cond, 0)
    dtype = compute_dtype(np.add, (x, y), common=True)
    return E.select(cond, cast(x, dtype), cast(y, dtype))


@implements(np.clip)
def clip(x: Any, a_min: Any = None, a_max: Any = None, out: Any = None, *,
         min: Any = None, max: Any = None, **kwargs: Any) -> Any:
    reject("numpy.clip", out=out)
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


@implements(np.diff)
def diff(x: Any, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Any:
    x = asarray(x)
    ax = normalize_axis(axis, x.ndim, "numpy.diff")
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        shape = lambda p: x.shape[:ax] + (1,) + x.shape[ax + 1:] if np.ndim(p) == 0 else None
        x = concatenate([broadcast_to_shape(p, shape(p)) if shape(p) else p for p in parts],
                        axis=ax)
    for _ in range(n):
        m = x.shape[ax]
        x = slice_axis(x, ax, 1, m) - slice_axis(x, ax, 0, builtins.max(m - 1, 0))
    return x


def _filled(x: Any, value: Any, dtype: Any, shape: Any) -> Any:
    x = asarray(x)
    dtype = np.dtype(dtype) if dtype is not None else x.dtype
    shape = x.shape if shape is None else ((shape,) if isinstance(shape, int) else tuple(shape))
    if isinstance(value, Tracer):
        return broadcast_to_shape(cast(value, dtype), shape)
    return broadcast_to_shape(lift(np.asarray(value, dtype=dtype)), shape)


implements(np.zeros_like)(lambda a, dtype=None, order="K", subok=True, shape=None, **k:
                          _filled(a, 0, dtype, shape))
implements(np.ones_like)(lambda a, dtype=None, order="K", subok=True, shape=None, **k:
                         _filled(a, 1, dtype, shape))
implements(np.empty_like)(lambda a, dtype=None, order="K", subok=True, shape=None, **k:
                          _filled(a, 0, dtype, shape))
implements(np.full_like)(lambda a, fill_value, dtype=None, order="K", subok=True, shape=None,
                         **k: _filled(a, fill_value, dtype, shape))
implements(np.copy)(lambda a, order="K", subok=False: copy_of(a))
implements(np.shape)(lambda a: asarray(a).shape)
implements(np.ndim)(lambda a: asarray(a).ndim)
implements(np.size)(lambda a, axis=None: asarray(a).size if axis is None
                    else asarray(a).shape[axis])
implements(np.round, np.around)(lambda a, decimals=0, out=None: _round(a, decimals, out))


def copy_of(x: Any) -> Any:
    """A new tracer of the same value, of the same kind (eager or not); a constant copied."""
    return type(x)(trace_of(x), var_of(x), x.weak) if isinstance(x, Tracer) else np.array(x)


def _round(x: Any, decimals: int, out: Any) -> Any:
    reject("numpy.round", out=out)
    if decimals == 0:
        return np.rint(x)
    scale = 10.0 ** decimals
    return np.rint(x * scale) / scale


def _astype(x: Tracer, dtype: Any, order: str = "K", casting: str = "unsafe",
            subok: bool = True, copy: bool = True) -> Any:
    dtype = np.dtype(dtype)
    dtype_name(dtype)
    return cast(x, dtype)


def _reshape_method(x: Tracer, *shape: Any, order: str = "C") -> Any:
    return reshape(x, *shape, order=order)


def _flatten(x: Tracer, order: str = "C") -> Any:
    return copy_of(ravel(x, order))   # numpy's flatten copies: not a view


for _name, _fn in {"reshape": _reshape_method, "ravel": ravel, "flatten": _flatten,
                   "squeeze": squeeze, "swapaxes": swapaxes, "clip": clip,
                   "astype": _astype, "round": lambda x, decimals=0: _round(x, decimals, None),
                   "copy": lambda x, order="C": copy_of(x),
                   "transpose": transpose}.items():
    setattr(Tracer, _name, _fn)
Tracer.T = property(lambda x: transpose(x))
Tracer.real = property(lambda x: x)
Tracer.mT = property(lambda x: swapaxes(x, -1, -2))
