"""LLVM IR text for one function: fresh value names, basic blocks, the entry block's stack
slots, and how dtypes and constants are spelled (opaque pointers: every pointer is `ptr`).

A value the lowering works with is a `Scalar` (an LLVM value of a numpy dtype; `sym`, where the
value is known before the call, is its Python expression over the size table `S`) or an
`Array` (a C-contiguous buffer: its data pointer and one `Scalar` per axis)."""
from __future__ import annotations

import ast
import dataclasses
import struct

import numpy as np

BOOL = np.dtype(np.bool_)
F64, F32, I64 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int64)
_INT_BITS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}


class NotCovered(Exception):
    """Source the lowering does not handle: the program compiles with numba instead."""


ALLOCATIONS = ("empty", "zeros", "full")     # np.empty, np.zeros, np.full


def allocates(node: ast.AST) -> bool:
    """Whether `node` allocates an array (`np.empty(...)`, ...)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr in ALLOCATIONS and getattr(node.func.value, "id", None) == "np"


@dataclasses.dataclass(frozen=True)
class Scalar:
    ref: str                 # an LLVM value: `%t3` or a constant
    dtype: np.dtype
    sym: str | None = None   # its value as a Python expression over S, where known up front


@dataclasses.dataclass(frozen=True)
class Array:
    ptr: str                       # the data pointer
    dtype: np.dtype
    dims: tuple[Scalar, ...]       # int64 lengths, C order
    root: str                      # the name of the buffer it views (reshapes share it)


@dataclasses.dataclass(frozen=True)
class Local:
    """A variable of the function: a stack slot holding a value of `dtype`."""
    slot: str
    dtype: np.dtype


@dataclasses.dataclass(frozen=True)
class ArrayVar:
    """An array variable assigned more than once (a loop's carry): stack slots for its data
    pointer, whether it owns that buffer (allocated by a called function) and its lengths;
    `syms` are the lengths' Python expressions over S from its first binding."""
    ptr: str
    owned: str
    dims: tuple[str, ...]
    dtype: np.dtype
    syms: tuple[str | None, ...]


@dataclasses.dataclass
class Frame:
    """An array the caller allocates: its shape (Python expressions over S) and dtype; `fresh`
    when an output is made of it (a new one per call), else one per program."""
    shape: tuple[str, ...]
    dtype: np.dtype
    fresh: bool = False


def reg(dtype: np.dtype) -> str:
    """The LLVM type of a value of `dtype` in a register."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "i1"
    if dtype == F64:
        return "double"
    if dtype == F32:
        return "float"
    if dtype.kind in "iu":
        return _INT_BITS[dtype.itemsize]
    raise NotCovered(f"dtype {dtype}")


def mem(dtype: np.dtype) -> str:
    """... and in memory (numpy's bools are bytes)."""
    return "i8" if np.dtype(dtype) == BOOL else reg(dtype)


def constant(value: object, dtype: np.dtype) -> Scalar:
    """`value` as a constant of `dtype`."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return Scalar("true" if value else "false", dtype, repr(bool(value)))
    if dtype.kind == "f":
        v = float(dtype.type(value))       # float32: rounded first, written as a double
        return Scalar(f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}", dtype,
                      repr(v) if v == v and abs(v) != float("inf") else None)
    v = int(value)
    return Scalar(str(v), dtype, repr(v))


class Function:
    """The text of one LLVM function being written, block by block."""

    def __init__(self, name: str, params: str, linkage: str = "") -> None:
        self.header = f"define {linkage}void @{name}({params})"
        self.name = name
        self.metadata: list[str] = []   # module-level lines: its alias scopes (scopes.py)
        self.slots: list[str] = []      # entry block: stack slots and values read once
        self.lines: list[str] = []
        self.count = 0
        self.terminated = False
        self.block = "body"             # the block being written

    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"%{prefix}{self.count}"

    def op(self, text: str) -> str:
        """Append `%tN = text`; returns `%tN`."""
        name = self.fresh()
        self.do(f"{name} = {text}")
        return name

    def do(self, text: str) -> None:
        if self.terminated:      # code after a `continue`/`break`: unreachable, own block
            self.start(self.label("dead"))
        self.lines.append(f"  {text}")

    def label(self, what: str) -> str:
        return self.fresh(what)[1:]

    def start(self, label: str) -> None:
        """Begin block `label` (the current one must have ended)."""
        self.lines.append(f"{label}:")
        self.terminated = False
        self.block = label

    def branch(self, label: str) -> None:
        if not self.terminated:
            self.lines.append(f"  br label %{label}")
        self.terminated = True

    def cond_branch(self, cond: str, yes: str, no: str) -> None:
        self.do(f"br i1 {cond}, label %{yes}, label %{no}")
        self.terminated = True

    def slot(self, ty: str) -> str:
        """A stack slot in the entry block (promoted to registers by LLVM's mem2reg)."""
        name = self.fresh("s")
        self.slots.append(f"  {name} = alloca {ty}")
        return name

    def init(self, text: str) -> None:
        """An instruction run once at the function's start (initialising a stack slot)."""
        self.slots.append(f"  {text}")

    def early(self, text: str) -> str:
        """`%tN = text` in the entry block, after the stack slots (its operands must be
        function parameters)."""
        name = self.fresh("e")
        self.slots.append(f"  {name} = {text}")
        return name

    def text(self) -> str:
        body = self.lines + ([] if self.terminated else ["  ret void"])
        return "\n".join([self.header + " {", "entry:", *self.slots, "  br label %body",
                          "body:", *body, "}", *self.metadata])
