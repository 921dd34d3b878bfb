"""Array values in one function of the loop language: names bound to buffers, array variables
read back from their slots, views (`a[i]` with fewer indices than axes), reshapes, copies and
allocations: `np.empty`/`zeros`/`full` at the entry's top level with a shape known up front
are frames the caller allocates (lower.py `Lowered`); others come from the runtime's allocator
(`tj_rt_alloc`, alloc_ir.py: its cache keeps them for the next call) and are freed at the end
of their loop's iteration or of the function.

An array name assigned once is bound at lowering time to its buffer (views share their buffer's
`root`); one assigned more than once is an `ArrayVar` (ownership.py), whose value has a root of
its own (`var:<name>`). Reads and writes carry their buffer's alias scope (scopes.py): the
buffers allocated here are `distinct`, the arrays the function was `given` are not.
"""
from __future__ import annotations

import ast
from typing import Any

import numpy as np

from . import functions
from .emit import (BOOL, I64, Array, ArrayVar, Frame, Local, NotCovered, Scalar, allocates,
                   constant, mem, reg)
from .failures import allocate
from .expr import Expressions, cast, parse_dtype
from .scopes import key, mark

Shaped = tuple[tuple[str, np.dtype], ...]    # per array: its shape over S (source), dtype
VAR = "var:"        # the root of an ArrayVar's value: the variable, not a buffer
_MUL = "llvm.umul.with.overflow.i64"


class Arrays(Expressions):
    """Array expressions; the statement lowering (body.py) supplies the environment and
    `counted` loops."""

    module: Any
    env: dict[str, Any]
    top: bool
    depth: int
    workspace: Shaped
    loops: list[tuple[str, str, list[str]]]
    mallocs: dict[str, str]
    distinct: set[str]    # roots of buffers allocated here: frames, workspace, mallocs
    given: set[str]       # roots of the arrays the function was given (they may overlap)
    statement: int        # which of the function's top-level statements is being lowered

    def counted(self, lo: Scalar, hi: Scalar, body, step: int = 1,
                mallocs: list[str] | None = None) -> None:
        raise NotImplementedError

    def scoped(self, array: Array) -> str:
        """What ends the line of an access to `array`: its alias scope's mark."""
        return mark(key(array.root, self.distinct, self.given), self.statement)

    def lookup(self, name: str) -> Scalar | Array:
        value = self.env.get(name)
        if value is None:
            raise NotCovered(f"name {name!r}")
        if isinstance(value, Local):
            return Scalar(self.fn.op(f"load {reg(value.dtype)}, ptr {value.slot}"), value.dtype)
        if isinstance(value, ArrayVar):
            dims = tuple(Scalar(self.fn.op(f"load i64, ptr {d}"), I64, sym)
                         for d, sym in zip(value.dims, value.syms))
            # (its own root: the buffer it holds now is not the one it was first bound to)
            return Array(self.fn.op(f"load ptr, ptr {value.ptr}"), value.dtype, dims,
                         VAR + name)
        if isinstance(value, functions.Results):
            raise NotCovered(f"a call's results used whole: {name}")
        return value

    def dims(self, node: ast.expr) -> tuple[Scalar, ...]:
        parts = node.elts if isinstance(node, ast.Tuple) else [node]
        return tuple(cast(self.fn, self.scalar(p), I64) for p in parts)

    def _is_array(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return isinstance(self.env.get(node.id), (Array, ArrayVar))
        if isinstance(node, ast.Subscript):
            base = self.env.get(getattr(node.value, "id", None))
            if isinstance(base, functions.Results):
                k = _constant(node.slice)
                return 0 <= k < len(base.layout) and base.layout[k].array
            if isinstance(base, (Array, ArrayVar)):
                return len(_parts(node.slice)) < len(base.dims)
            return getattr(node.value, "id", None) == "W"
        if isinstance(node, ast.Call):
            return allocates(node) or \
                isinstance(node.func, ast.Attribute) and node.func.attr in ("reshape", "copy")
        return False

    def array(self, node: ast.expr, name: str = "") -> Array:
        """The array `node` evaluates to (binding `name` where it allocates one)."""
        if isinstance(node, ast.Name):
            value = self.env.get(node.id)
            if isinstance(value, (Array, ArrayVar)):
                return self.lookup(node.id)
            raise NotCovered(f"{node.id} is no array")
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", "") != "W":
            base = self.env.get(getattr(node.value, "id", None))
            if isinstance(base, functions.Results):
                value = functions.output(self, base, _constant(node.slice))
                if not isinstance(value, Array):
                    raise NotCovered(f"{ast.unparse(node)} is no array")
                return value
            return self.view(self.array(node.value), _parts(node.slice))
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "W":
            k = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if not isinstance(k, int) or k >= len(self.workspace) or not self.top:
                raise NotCovered(f"workspace read {ast.unparse(node)}")
            self.module.workspace.add(k)
            slot = self.fn.op(f"getelementptr ptr, ptr %args, i64 @@W{k}@@")
            shape, dtype = self.workspace[k]
            dims = self.dims(ast.parse(shape, mode="eval").body)
            self.distinct.add(f"W{k}")
            return Array(self.fn.op(f"load ptr, ptr {slot}"), dtype, dims, f"W{k}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "reshape" and len(node.args) == 1:
            base = self.array(node.func.value)
            return Array(base.ptr, base.dtype, self.dims(node.args[0]), base.root)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "copy" and not node.args:
            base = self.array(node.func.value)
            copy = self.new_array(base.dims, base.dtype, name)
            self.copy(base, copy)
            return copy
        if isinstance(node, ast.Call):
            return self.allocate(node, name)
        raise NotCovered(f"array expression {ast.unparse(node)}")

    def copy(self, source: Array, target: Array) -> None:
        """target[...] = source[...] (equal lengths)."""
        ty = mem(source.dtype)

        def body(i: Scalar) -> None:
            at = self.fn.op(f"getelementptr {ty}, ptr {source.ptr}, i64 {i.ref}")
            to = self.fn.op(f"getelementptr {ty}, ptr {target.ptr}, i64 {i.ref}")
            value = self.fn.op(f"load {ty}, ptr {at}{self.scoped(source)}")
            self.fn.do(f"store {ty} {value}, ptr {to}{self.scoped(target)}")
        self.counted(constant(0, I64), Scalar(self._count(source.dims), I64), body)

    def view(self, array: Array, parts: list[ast.expr]) -> Array:
        """`array[i, ...]` with fewer indices than axes: the sub-array there (a view)."""
        if len(parts) >= len(array.dims):
            raise NotCovered("a full index where an array is expected")
        rest = array.dims[len(parts):]
        offset = self.fn.op(f"mul i64 {self.linear(array, parts)}, {self._count(rest)}")
        at = self.fn.op(f"getelementptr {mem(array.dtype)}, ptr {array.ptr}, i64 {offset}")
        return Array(at, array.dtype, rest, f"{array.root}@view")

    def _Subscript(self, node: ast.Subscript) -> Scalar:
        base = self.env.get(getattr(node.value, "id", None))
        if isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) in self.module.defs:
            base = functions.call(self, node.value)     # `f(...)[k]`: a while loop's test
        if isinstance(base, functions.Results):
            value = functions.output(self, base, _constant(node.slice))
            if not isinstance(value, Scalar):
                raise NotCovered(f"{ast.unparse(node)} is an array")
            return value
        return super()._Subscript(node)

    def allocate(self, node: ast.Call, name: str) -> Array:
        """`np.empty`, `np.zeros` or `np.full`."""
        kind = ast.unparse(node.func)
        args = node.args
        array = self.new_array(self.dims(args[0]), parse_dtype(args[-1]), name)
        if kind == "np.zeros":
            self.fill(array, constant(0, array.dtype))
        elif kind == "np.full":
            self.fill(array, cast(self.fn, self.scalar(args[1]), array.dtype))
        return array

    def new_array(self, dims: tuple[Scalar, ...], dtype: np.dtype, name: str) -> Array:
        """A new array: a frame at the entry's top level where its shape is known up front,
        else allocated here."""
        if self.top and self.depth == 0 and all(d.sym for d in dims):
            k = len(self.module.frames)
            self.module.frames.append(Frame(tuple(d.sym for d in dims), dtype))  # type: ignore
            self.module.frame_roots.append(name)
            slot = self.fn.op(f"getelementptr ptr, ptr %args, i64 @@F{k}@@")
            ptr = self.fn.op(f"load ptr, ptr {slot}")
        else:       # freed at the end of its loop's iteration, or of the function
            if not self.loops and self.depth:
                raise NotCovered("an array allocated inside an if")
            nbytes = self._bytes(dims, np.dtype(dtype).itemsize)
            ptr = allocate(self, Scalar(nbytes, I64))
            self.hold(ptr)
            if self.loops:
                self.loops[-1][2].append(ptr)
            else:
                self.mallocs[name] = ptr
        self.distinct.add(name)
        return Array(ptr, dtype, dims, name)

    def _bytes(self, dims: tuple[Scalar, ...], itemsize: int) -> str:
        """The bytes of an array of `dims`; all ones (more than any allocation can get) where
        the product overflows: an array of 2**66 elements is no small one."""
        f, total, over = self.fn, str(itemsize), "false"
        self.module.declarations.add(f"declare {{i64, i1}} @{_MUL}(i64, i64)")
        for d in dims:
            made = f.op(f"call {{i64, i1}} @{_MUL}(i64 {total}, i64 {d.ref})")
            total = f.op(f"extractvalue {{i64, i1}} {made}, 0")
            over = f.op(f"or i1 {over}, {f.op(f'extractvalue {{i64, i1}} {made}, 1')}")
        return f.op(f"select i1 {over}, i64 -1, i64 {total}")

    def _count(self, dims: tuple[Scalar, ...]) -> str:
        count = "1"
        for d in dims:
            count = self.fn.op(f"mul i64 {count}, {d.ref}")
        return count

    def fill(self, array: Array, value: Scalar) -> None:
        count = self._count(array.dims)
        ref = self.fn.op(f"zext i1 {value.ref} to i8") if array.dtype == BOOL else value.ref
        def body(i: Scalar) -> None:
            ptr = self.fn.op(f"getelementptr {mem(array.dtype)}, ptr {array.ptr}, i64 {i.ref}")
            self.fn.do(f"store {mem(array.dtype)} {ref}, ptr {ptr}{self.scoped(array)}")
        self.counted(constant(0, I64), Scalar(count, I64), body)


def _constant(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    raise NotCovered(f"a non-constant index into a call's results: {ast.unparse(node)}")


def _parts(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]
