"""A small source writer shared by the backends: indented lines, and how sizes, dtypes and
literals are spelled in generated code.

Generated code never contains a concrete array size: every size other than 0 and 1 is read
from the run-time size table `S` (one slot per distinct size of the tape), so a program
compiled for one batch size serves every other one with the same ranks and broadcast pattern.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ..avals import Aval, dtype_name
from ..ir import Lit

_DTYPE_CODE = {"f64": "np.float64", "f32": "np.float32", "f16": "np.float16",
               "i64": "np.int64", "i32": "np.int32", "i16": "np.int16", "i8": "np.int8",
               "u64": "np.uint64", "u32": "np.uint32", "u16": "np.uint16", "u8": "np.uint8",
               "bool": "np.bool_"}


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def line(self, text: str = "") -> None:
        self.lines.append("    " * self.depth + text if text else "")

    def indent(self) -> None:
        self.depth += 1

    def dedent(self) -> None:
        self.depth -= 1

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


class Sizes:
    """The size table: each distinct size > 1 of the tape gets a slot `S[k]`, except the
    `fixed` sizes, written as numbers."""

    def __init__(self, fixed: frozenset[int] = frozenset()) -> None:
        self.slots: dict[int, int] = {}
        self.fixed = fixed

    def __call__(self, n: int) -> str:
        n = int(n)
        if n in (0, 1) or n in self.fixed:
            return str(n)
        if n not in self.slots:
            self.slots[n] = len(self.slots)
        return f"S[{self.slots[n]}]"

    def shape(self, shape: Iterable[int]) -> str:
        dims = [self(n) for n in shape]
        return "(" + "".join(f"{d}, " for d in dims).rstrip(" ") + ")" if dims else "()"

    def product(self, shape: Iterable[int]) -> str:
        dims = [self(n) for n in shape]
        return " * ".join(dims) if dims else "1"

    def type(self, aval: Aval) -> str:
        """An aval with its sizes as slots (`f64[S0,2]`): comments must not carry sizes."""
        dims = ",".join(self(n).replace("[", "").replace("]", "") for n in aval.shape)
        return f"{dtype_name(aval.dtype)}[{dims}]"

    def values(self) -> np.ndarray:
        return np.array(sorted(self.slots, key=self.slots.get), dtype=np.int64)


def dtype_code(dtype: np.dtype) -> str:
    return _DTYPE_CODE[dtype_name(dtype)]


def literal(lit: Lit) -> str:
    return scalar(lit.value, lit.aval.dtype)


def scalar(value: object, dtype: np.dtype) -> str:
    """A typed scalar constant: f32 code must not be promoted by a float64 literal."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return repr(bool(value))
    if dtype.kind == "f":
        v = float(value)  # type: ignore[arg-type]
        text = ("np.nan" if math.isnan(v) else ("np.inf" if v > 0 else "-np.inf")
                if math.isinf(v) else repr(v))
        return text if dtype == np.float64 else f"{dtype_code(dtype)}({text})"
    return repr(int(value)) if dtype == np.int64 else f"{dtype_code(dtype)}({int(value)})"  # type: ignore[arg-type]
