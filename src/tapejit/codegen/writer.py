"""A small source writer shared by the backends: indented lines, and how names, sizes, dtypes,
literals and index parts are spelled in generated code.

Generated code never contains a concrete array size: every size other than 0 and 1 (and the
small fixed ones) is read from the run-time size table `S` (one slot per axis symbol, dims.py),
so a program compiled for one batch size serves every other one with the same ranks and
broadcast pattern.
"""
from __future__ import annotations

import hashlib
import keyword
import math
import re
from typing import Iterable

import numpy as np

from ..avals import dtype_name
from ..dims import Dim, Dims
from ..ir import Atom, Eqn, Lit, Tape, Var

ENTRY = "entry"     # the CPU module's entry point
_RESERVED = {"np", "math", "numba", "S", "W", ENTRY} | set(keyword.kwlist)
# the names of generated temporaries, loop indices, outputs, functions and modules
_GENERATED = re.compile(r"(t|acc|h|r|tot|tj)_.*|(out|body|i)\d.*")

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
    """The size table `S` as generated code reads it: one slot per axis symbol (dims.py) of
    length > 1 and one per distinct other number (slice starts, trip counts, counts of
    reduced elements), except the symbols in `fixed`, whose lengths are written as numbers.
    `within` gives the view of one sub-tape's values; every view shares one table."""

    def __init__(self, dims: Dims, fixed: frozenset[int] = frozenset(),
                 tape: Tape | None = None, slots: dict | None = None) -> None:
        self.dims = dims
        self.fixed = fixed
        self.names = dims.scope(tape if tape is not None else dims.root)
        self.slots: dict[tuple[str, int], int] = {} if slots is None else slots

    def within(self, tape: Tape) -> "Sizes":
        return Sizes(self.dims, self.fixed, tape, self.slots)

    def of(self, atom: Atom) -> tuple[Dim, ...]:
        """The dims of a value of this view's tape."""
        return () if isinstance(atom, Lit) else self.names[atom.name]

    def __call__(self, n: Dim | int) -> str:
        if isinstance(n, Dim):
            if n.size in (0, 1) or n.sym in self.fixed:
                return str(n.size)
            key = ("axis", n.sym)
        else:
            n = int(n)
            if n in (0, 1):
                return str(n)
            key = ("number", n)
        if key not in self.slots:
            self.slots[key] = len(self.slots)
        return f"S[{self.slots[key]}]"

    def threads(self) -> str:
        """The slot of the threads this call's matrix products may use (threads.py writes it
        before each call; 1 in the table as generated)."""
        self.slots.setdefault(("threads", 1), len(self.slots))
        return f"S[{self.slots[('threads', 1)]}]"

    def threads_slot(self) -> int | None:
        return self.slots.get(("threads", 1))

    def status(self) -> int:
        """The first of the three status slots an index check writes when it fails (the
        check's number from 1, the index, the axis length; 0 in the table as generated)."""
        for k in range(3):
            self.slots.setdefault(("status", k), len(self.slots))
        return self.slots[("status", 0)]

    def status_slot(self) -> int | None:
        return self.slots.get(("status", 0))

    def is_fixed(self, n: Dim) -> bool:
        return n.sym in self.fixed or n.size in (0, 1)

    def shape(self, dims: Iterable[Dim | int]) -> str:
        parts = [self(n) for n in dims]
        return "(" + "".join(f"{d}, " for d in parts).rstrip(" ") + ")" if parts else "()"

    def product(self, dims: Iterable[Dim | int]) -> str:
        parts = [self(n) for n in dims]
        return " * ".join(parts) if parts else "1"

    def type(self, var: Var) -> str:
        """A var's type with its sizes as slots (`f64[S0,2]`): comments must not carry
        sizes."""
        dims = ",".join(self(n).replace("[", "").replace("]", "") for n in self.of(var))
        return f"{dtype_name(var.aval.dtype)}[{dims}]"

    def values(self) -> np.ndarray:
        """The table's values for the analysed tape."""
        return np.array([self.dims.length(k[1]) if k[0] == "axis" else
                         0 if k[0] == "status" else k[1]
                         for k in sorted(self.slots, key=self.slots.get)], dtype=np.int64)


def name_of(var: Var) -> str:
    """The Python name of a var: the tape's own name (a user's parameter or variable name),
    unless it is no identifier, a reserved word or a generated name: then a name of its own
    (`u_<letters>_<hash>`)."""
    name = var.name
    if name.isidentifier() and name not in _RESERVED and not _GENERATED.fullmatch(name):
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"u_{re.sub(r'[^0-9a-zA-Z]', '_', name)}_{digest}"


def comment(eqn: Eqn, sizes: Sizes) -> str:
    """The IR line of an eqn, without params and with sizes as slots: generated source must
    be the same for every batch size."""
    outs = " ".join(f"{o.name}:{sizes.type(o)}" for o in eqn.outs)
    ins = " ".join(a.name if isinstance(a, Var) else str(a) for a in eqn.ins)
    return f"# {outs} = {eqn.op} {ins}"


def full_index(shape: tuple[int, ...], idx: list[str]) -> list[str]:
    """Index parts for an array of `shape` whose non-unit axes are the loop's axes, in order."""
    loop = iter(idx)
    return ["0" if n == 1 else next(loop) for n in shape]


def operand_parts(operand: tuple[int, ...], out: list[str], out_shape: tuple[int, ...]):
    """Index parts reading a broadcast operand at output position `out`."""
    offset = len(out_shape) - len(operand)
    return ["0" if n == 1 else out[offset + k] for k, n in enumerate(operand)]


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
