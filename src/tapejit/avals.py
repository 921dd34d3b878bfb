"""Abstract values: the static shape and dtype of every value on a tape.

`Aval(shape, dtype)` is frozen and hashable. Shapes are tuples of ints (static in the IR);
dtypes are numpy dtypes, printed with short names (`f64[3,4]`, `i64[]`, `bool[5]`).
This module also holds numpy's broadcasting rule, used by the elementwise shape rules.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .errors import ShapeError

DTYPE_NAMES = {
    np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
    np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.int16): "i16",
    np.dtype(np.int8): "i8", np.dtype(np.uint64): "u64", np.dtype(np.uint32): "u32",
    np.dtype(np.uint16): "u16", np.dtype(np.uint8): "u8", np.dtype(np.bool_): "bool",
}
DTYPES_BY_NAME = {name: dt for dt, name in DTYPE_NAMES.items()}


class Aval(NamedTuple):
    """The abstract value of an array: its shape and dtype. (A NamedTuple rather than a frozen
    dataclass: tracing creates one per recorded op, and this is 5x cheaper.)"""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f"

    def update(self, shape: tuple[int, ...] | None = None, dtype: np.dtype | None = None) -> "Aval":
        return Aval(self.shape if shape is None else tuple(shape),
                    self.dtype if dtype is None else np.dtype(dtype))

    def __str__(self) -> str:
        return f"{dtype_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __reduce__(self) -> tuple:
        # numpy unpickles a dtype as a new instance, not its builtin one: np.asarray(x, dtype=it)
        # then made a view of x, so a program from the disk cache returned a copy of an input
        return _unpickled, (self.shape, self.dtype.str)


def _unpickled(shape: tuple[int, ...], code: str) -> Aval:
    return Aval(shape, np.dtype(code))


def dtype_name(dtype: np.dtype) -> str:
    """Short printed name of a dtype (`f64`, `i32`, `bool`)."""
    try:
        return DTYPE_NAMES[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"tapejit does not support dtype {np.dtype(dtype)}; "
                        f"supported: {', '.join(str(d) for d in DTYPE_NAMES)}") from None


def aval_of(value: object) -> Aval:
    """The aval of a concrete numpy array or scalar."""
    arr = np.asarray(value)
    dtype_name(arr.dtype)  # raises for unsupported dtypes
    return Aval(tuple(arr.shape), arr.dtype)


def broadcast_shapes(opname: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcasting rule, raising a ShapeError that names the op."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return tuple(first)
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            shown = " and ".join(str(tuple(s)) for s in shapes)
            raise ShapeError(f"{opname}: cannot broadcast shapes {shown} together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)
