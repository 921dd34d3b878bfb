"""The statements of one function of the loop language as LLVM IR: assignments, array reads
and writes, allocations, loops (`range`; `numba.prange` through parallel.py), `if`, `while`,
`break`/`continue`, matrix products, calls of the module's other functions (functions.py).

Locals live in stack slots that LLVM promotes to registers. An array name assigned once is
bound at lowering time to its buffer (views share their buffer's `root`); one assigned more
than once (a loop's carry) is an `ArrayVar`: slots for its data pointer, lengths and whether
it owns its buffer (one a called function allocated): an owned buffer is freed when the
variable moves to another one and at the function's end.
"""
from __future__ import annotations

import ast
from collections import Counter
from typing import Any

import numpy as np

from . import library
from . import functions
from .emit import (BOOL, I64, Array, ArrayVar, Frame, Function, Local, NotCovered, Scalar, constant,
                   mem, reg)
from .expr import Expressions, cast, parse_dtype
from .jit import JitError
from .library_calls import is_library_call, library_call, return_if_failed
from .parallel import parallel_loop

Shaped = tuple[tuple[str, np.dtype], ...]    # per array: its shape over S (source), dtype
VAR = "var:"        # the root of an ArrayVar's value: the variable, not a buffer


class Body(Expressions):
    """Lowers the statements of one function (the entry, or a parallel loop's chunk)."""

    def __init__(self, module: Any, fn: Function, sizes_ptr: str, top: bool = True,
                 statements: list[ast.stmt] = (), in_nest: bool = False) -> None:
        self.module, self.fn, self.sizes_ptr = module, fn, sizes_ptr
        self.env: dict[str, Any] = {}     # Scalar, Array, Local, ArrayVar or Results
        self.in_nest = in_nest            # a parallel loop's chunk (no nested parallel loops)
        # names assigned more than once (array ones become ArrayVars)
        counts = Counter(t.id for s in statements for n in ast.walk(s)
                         if isinstance(n, ast.Assign) for t in n.targets
                         if isinstance(t, ast.Name))
        self.multi = {name for name, c in counts.items() if c > 1}
        self.results: list[functions.Results] = []   # call sites (their outputs are freed)
        self.drops: list[tuple[str, str, str]] = []   # (buffer, i1: owned and let go, var)
        self.nonnegative: set[str] = set()
        self.loaded: dict[int, Scalar] = {}
        self.loops: list[tuple[str, str, list[str]]] = []   # (continue to, break to, mallocs)
        self.top = top                    # the entry function (its top level has frames)
        self.depth = 0
        self.workspace: Shaped = ()
        self.mallocs: dict[str, str] = {}  # top-level allocations that are not frames: root -> ptr

    # ---- what expressions read ----------------------------------------------------------
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

    def size(self, slot: int) -> Scalar:
        if slot in self.module.mutable:
            ptr = self.fn.op(f"getelementptr i64, ptr {self.sizes_ptr}, i64 {slot}")
            return Scalar(self.fn.op(f"load i64, ptr {ptr}"), I64)
        if slot not in self.loaded:
            ptr = self.fn.early(f"getelementptr i64, ptr {self.sizes_ptr}, i64 {slot}")
            self.loaded[slot] = Scalar(self.fn.early(f"load i64, ptr {ptr}"), I64, f"S[{slot}]")
        return self.loaded[slot]

    def kernel(self, call: str, args: list[Scalar]) -> Scalar:
        try:
            k = library.scalar_kernel(call, tuple(a.dtype for a in args))
        except JitError as err:         # numba cannot compile it: numba's path decides
            raise NotCovered(f"the kernel {call}: {err}") from None
        self.module.declarations.add(k.declaration)
        return self.call_kernel(k, args)

    def call_kernel(self, k: library.Kernel, args: list[Scalar | str]) -> Scalar:
        parts = []
        for arg, ty in zip(args, k.argtypes_ir):
            if isinstance(arg, str):
                parts.append(f"{ty} {arg}")
                continue
            ref = arg.ref
            if arg.dtype == BOOL and ty == "i8":
                ref = self.fn.op(f"zext i1 {ref} to i8")
            parts.append(f"{ty} {ref}")
        if k.restype_ir == "void":
            self.fn.do(f"call void @{k.symbol}({', '.join(parts)})")
            return constant(0, I64)
        value = self.fn.op(f"call {k.restype_ir} @{k.symbol}({', '.join(parts)})")
        if k.restype == BOOL and k.restype_ir == "i8":
            value = self.fn.op(f"trunc i8 {value} to i1")
        return Scalar(value, k.restype)

    # ---- outputs ----------------------------------------------------------------------
    def dims(self, node: ast.expr) -> tuple[Scalar, ...]:
        parts = node.elts if isinstance(node, ast.Tuple) else [node]
        return tuple(cast(self.fn, self.scalar(p), I64) for p in parts)

    # ---- statements ---------------------------------------------------------------------
    def block(self, statements: list[ast.stmt]) -> None:
        for node in statements:
            method = getattr(self, f"_stmt_{type(node).__name__}", None)
            if method is None:
                raise NotCovered(f"statement {ast.unparse(node)[:60]}")
            method(node)

    def _stmt_Pass(self, node: ast.Pass) -> None:
        pass

    def _stmt_Expr(self, node: ast.Expr) -> None:
        value = node.value
        if isinstance(value, ast.Constant):         # a docstring
            return
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "tj_blas.matmul":
            self.matmul(value.args)
            return
        if is_library_call(value):
            library_call(self, value)
            return
        raise NotCovered(f"call {ast.unparse(value)[:60]}")

    def _stmt_AugAssign(self, node: ast.AugAssign) -> None:
        self._stmt_Assign(ast.Assign([node.target], ast.BinOp(
            _as_load(node.target), node.op, node.value)))

    def _stmt_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            raise NotCovered("chained assignment")
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Tuple):
            if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts):
                raise NotCovered("tuple unpacking")
            values = [self.scalar(v) for v in value.elts]
            for t, v in zip(target.elts, values):
                self.assign(t, v)
            return
        if isinstance(target, ast.Name) and isinstance(value, ast.Call) \
                and getattr(value.func, "id", None) in self.module.defs:
            self.env[target.id] = functions.call(self, value)
            return_if_failed(self, value, self.env[target.id])
            return
        if isinstance(target, ast.Name) and self._is_array(value):
            if target.id in self.multi:
                self.store_var(target.id, value)
            else:
                self.env[target.id] = self.array(value, target.id)
            return
        self.assign(target, self.scalar(value))
        if isinstance(target, ast.Name) and target.id not in self.multi and self._nonneg(value):
            self.nonnegative.add(target.id)       # (a chunk count: `min(S[t], S[0])`)

    def store_var(self, name: str, node: ast.expr) -> None:
        """`name = <array>` for an array variable: it takes over the buffer where `node` is a
        call's owned output, and frees the buffer it held if it owned that one."""
        f, value = self.fn, self.array(node, name)
        var = self.env.get(name)
        if var is None:
            var = self.env[name] = ArrayVar(
                f.slot("ptr"), f.slot("i1"), tuple(f.slot("i64") for _ in value.dims),
                value.dtype, tuple(d.sym for d in value.dims))
            f.init(f"store ptr null, ptr {var.ptr}")
            f.init(f"store i1 false, ptr {var.owned}")
        if not isinstance(var, ArrayVar) or var.dtype != value.dtype \
                or len(var.dims) != len(value.dims):
            raise NotCovered(f"{name} is bound to arrays of different kinds")
        owned = functions.take(self, value.root) if "#" in value.root else "false"
        if value.root == name and self.mallocs.get(name) == value.ptr:
            del self.mallocs[name]      # a buffer allocated for the variable: it owns it (one
            owned = "true"              # bound to another name first stays that name's)
        old, was = f.op(f"load ptr, ptr {var.ptr}"), f.op(f"load i1, ptr {var.owned}")
        same = f.op(f"icmp eq ptr {old}, {value.ptr}")
        drop = f.op(f"and i1 {was}, {f.op(f'xor i1 {same}, true')}")
        self.drops.append((old, drop, name))      # freed, or handed over: `_settle_drops`
        f.do(f";@@DROP{len(self.drops) - 1}")
        kept = f.op(f"and i1 {same}, {was}")
        f.do(f"store i1 {f.op(f'or i1 {owned}, {kept}')}, ptr {var.owned}")
        f.do(f"store ptr {value.ptr}, ptr {var.ptr}")
        for slot, d in zip(var.dims, value.dims):
            f.do(f"store i64 {d.ref}, ptr {slot}")

    def hand_over(self, value: Array) -> str:
        """Whether the caller owns `value`'s buffer once this function returns it (an i1):
        one it allocated, an array variable's or a call's owned one; not an argument."""
        root, f = value.root, self.fn
        var = self.env.get(root.removeprefix(VAR))
        if root in self.mallocs and value.ptr == self.mallocs[root]:
            del self.mallocs[root]
            return "true"
        if isinstance(var, ArrayVar):
            owned = f.op(f"load i1, ptr {var.owned}")
            f.do(f"store i1 false, ptr {var.owned}")
            return owned
        if "#" in root:
            return functions.take(self, root)
        if isinstance(var, Array) and var.root == root and not self.top:   # an argument
            return "false"
        raise NotCovered(f"a function returning a view or temporary ({root})")

    def _settle_drops(self) -> None:
        """Where an array variable let go of a buffer it owned: another variable or a call's
        result that holds the same buffer takes it over (carries that trade buffers: a swap,
        a rotation, a body returning its argument); where none does, it is freed. Written once
        the function's variables and call sites are all known."""
        f = self.fn
        holders = [(n, v) for n, v in self.env.items() if isinstance(v, ArrayVar)]
        for k, (old, drop, name) in enumerate(self.drops):
            at = f.lines.index(f"  ;@@DROP{k}")
            lines, terminated = f.lines, f.terminated
            f.lines, f.terminated, found = [], False, "false"
            for other, var in holders:
                if other != name:
                    found = self._hand(var.ptr, var.owned, old, drop, found)
            for results in self.results:
                found = functions.adopt(self, results, old, drop, found)
            free = f.op(f"and i1 {drop}, {f.op(f'xor i1 {found}, true')}")
            f.do(f"call void @free(ptr {f.op(f'select i1 {free}, ptr {old}, ptr null')})")
            lines[at:at + 1] = f.lines
            f.lines, f.terminated = lines, terminated

    def _hand(self, ptr_slot: str, owned_slot: str, old: str, drop: str, found: str) -> str:
        """The variable whose slots are given takes over `old` if it holds it and nobody took
        it yet; returns whether somebody has."""
        f = self.fn
        held = f.op(f"icmp eq ptr {f.op(f'load ptr, ptr {ptr_slot}')}, {old}")
        free = f.op(f"xor i1 {found}, true")
        hit = f.op(f"and i1 {drop}, {f.op(f'and i1 {held}, {free}')}")
        owned = f.op(f"or i1 {f.op(f'load i1, ptr {owned_slot}')}, {hit}")
        f.do(f"store i1 {owned}, ptr {owned_slot}")
        return f.op(f"or i1 {found}, {hit}")

    def finish(self) -> None:
        """Free what the function still owns: array variables' and calls' buffers, and its
        top-level allocations."""
        self._settle_drops()
        self.free_owned()

    def free_owned(self, skip: Any = None) -> None:
        """Free the array variables' and call sites' buffers (but call site `skip`'s) and the
        top-level allocations: at the end, or where the function returns early (a failed
        library call: library_calls.py)."""
        f = self.fn
        for var in [v for v in self.env.values() if isinstance(v, ArrayVar)]:
            owned = f.op(f"load i1, ptr {var.owned}")
            ptr = f.op(f"load ptr, ptr {var.ptr}")
            f.do(f"call void @free(ptr {f.op(f'select i1 {owned}, ptr {ptr}, ptr null')})")
        for results in self.results:
            if results is not skip:
                functions.release(self, results)
        for ptr in self.mallocs.values():
            f.do(f"call void @free(ptr {ptr})")

    def assign(self, target: ast.expr, value: Scalar) -> None:
        if isinstance(target, ast.Subscript):
            self.store(target, value)
            return
        if not isinstance(target, ast.Name):
            raise NotCovered(f"assignment to {ast.unparse(target)}")
        local = self.env.get(target.id)
        if local is None:
            local = self.env[target.id] = Local(self.fn.slot(reg(value.dtype)), value.dtype)
        if not isinstance(local, Local):
            raise NotCovered(f"{target.id} is rebound with another kind of value")
        if local.dtype != value.dtype and (local.dtype.kind == "b") != (value.dtype.kind == "b") \
                or local.dtype.kind in "iu" and value.dtype.kind == "f":
            raise NotCovered(f"{target.id} holds values of two types")
        value = cast(self.fn, value, local.dtype)
        self.fn.do(f"store {reg(local.dtype)} {value.ref}, ptr {local.slot}")

    def store(self, target: ast.Subscript, value: Scalar) -> None:
        if isinstance(target.value, ast.Name) and target.value.id == "S":
            slot = target.slice
            if not (isinstance(slot, ast.Constant) and slot.value in self.module.mutable):
                raise NotCovered("a write to a size slot")
            ptr = self.fn.op(f"getelementptr i64, ptr {self.sizes_ptr}, i64 {slot.value}")
            self.fn.do(f"store i64 {cast(self.fn, value, I64).ref}, ptr {ptr}")
            return
        array = self.value(target.value)
        if not isinstance(array, Array):
            raise NotCovered(f"a store into a scalar: {ast.unparse(target)}")
        parts = list(target.slice.elts) if isinstance(target.slice, ast.Tuple) else [target.slice]
        ptr = self.element(array, parts)
        value = cast(self.fn, value, array.dtype)
        ref = self.fn.op(f"zext i1 {value.ref} to i8") if array.dtype == BOOL else value.ref
        self.fn.do(f"store {mem(array.dtype)} {ref}, ptr {ptr}")

    # ---- arrays -------------------------------------------------------------------------
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
            return ast.unparse(node.func) in ("np.empty", "np.zeros", "np.full") or \
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
            self.fn.do(f"store {ty} {self.fn.op(f'load {ty}, ptr {at}')}, ptr {to}")
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
            count = self._count(dims)
            nbytes = self.fn.op(f"mul i64 {count}, {np.dtype(dtype).itemsize}")
            ptr = self.fn.op(f"call ptr @malloc(i64 {nbytes})")
            if self.loops:
                self.loops[-1][2].append(ptr)
            else:
                self.mallocs[name] = ptr
        return Array(ptr, dtype, dims, name)

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
            self.fn.do(f"store {mem(array.dtype)} {ref}, ptr {ptr}")
        self.counted(constant(0, I64), Scalar(count, I64), body)

    def matmul(self, args: list[ast.expr]) -> None:
        a, b, out = (self.array(x) for x in args[:3])
        ta, tb = (self.scalar(x) for x in args[3:5])
        threads = cast(self.fn, self.scalar(args[5]), I64)
        if len(out.dims) != 2 or len(a.dims) != 2 or len(b.dims) != 2:
            raise NotCovered("a matrix product of other than 2-d arrays")
        m, n = out.dims
        flag = ta.ref == "true"
        k = a.dims[0] if flag else a.dims[1]
        kern = library.matmul(out.dtype)
        self.module.declarations.add(kern.declaration)
        self.call_kernel(kern, [a.ptr, b.ptr, out.ptr, m, n, k, ta, tb, threads])

    # ---- control flow -------------------------------------------------------------------
    def counted(self, lo: Scalar, hi: Scalar, body, step: int = 1,
                mallocs: list[str] | None = None) -> None:
        """`for i in range(lo, hi, step)`, `body(i)` writing each iteration."""
        f = self.fn
        head, inside, latch, done = (f.label(x) for x in ("head", "loop", "latch", "done"))
        before = f.block
        f.branch(head)
        f.start(head)
        i, nxt = f.fresh("i"), f.fresh("n")
        f.do(f"{i} = phi i64 [{lo.ref}, %{before}], [{nxt}, %{latch}]")
        f.cond_branch(f.op(f"icmp {'slt' if step > 0 else 'sgt'} i64 {i}, {hi.ref}"),
                      inside, done)
        f.start(inside)
        allocated: list[str] = [] if mallocs is None else mallocs
        self.loops.append((latch, done, allocated))
        self.depth += 1
        body(Scalar(i, I64))
        self.depth -= 1
        self.loops.pop()
        for ptr in allocated:
            f.do(f"call void @free(ptr {ptr})")
        f.branch(latch)
        f.start(latch)
        f.do(f"{nxt} = add i64 {i}, {step}")
        f.branch(head)
        f.start(done)

    def _stmt_For(self, node: ast.For) -> None:
        call = node.iter
        if node.orelse or not isinstance(node.target, ast.Name) or not isinstance(call, ast.Call):
            raise NotCovered(f"loop {ast.unparse(node.iter)}")
        kind, name = ast.unparse(call.func), node.target.id
        if kind == "numba.prange" and len(call.args) == 1 and not self.in_nest:
            parallel_loop(self, node)
            return
        if kind not in ("range", "numba.prange") or not 1 <= len(call.args) <= 3:
            raise NotCovered(f"loop over {ast.unparse(call)}")
        bounds = [cast(self.fn, self.scalar(a), I64) for a in call.args]
        lo, hi = (constant(0, I64), bounds[0]) if len(bounds) == 1 else bounds[:2]
        step = 1
        if len(bounds) == 3:
            if not (bounds[2].ref.lstrip("-").isdigit() and int(bounds[2].ref) != 0):
                raise NotCovered("a range with a step that is not a constant")
            step = int(bounds[2].ref)
        if step > 0 and (lo.ref.isdigit() or len(call.args) > 1 and self._nonneg(call.args[0])):
            self.nonnegative.add(name)
        else:
            self.nonnegative.discard(name)
        if any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(node)) and \
                any(self._allocates(n) for n in ast.walk(node)):
            raise NotCovered("an allocation in a loop with break/continue")

        def body(i: Scalar) -> None:
            self.env[name] = i
            self.block(node.body)
        self.counted(lo, hi, body, step)

    def _nonneg(self, node: ast.expr) -> bool:
        """Whether `node` is never negative: sizes, non-negative constants and loop indices,
        and their sums, products and floor quotients (a chunk's first index, `k * n // c`).
        Indices known so need no wrap-around test, which would hide the loop's stride from
        LLVM's vectoriser."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and node.value >= 0
        if isinstance(node, ast.Name):
            return node.id in self.nonnegative
        if isinstance(node, ast.Subscript):
            return getattr(node.value, "id", None) == "S" or \
                isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult,
                                                                ast.FloorDiv)):
            return self._nonneg(node.left) and self._nonneg(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            known = [self._nonneg(a) for a in node.args]    # Python's min and max
            return all(known) if node.func.id == "min" else \
                any(known) if node.func.id == "max" else False
        return False

    def _allocates(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "np.empty", "np.zeros", "np.full")

    def _stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise NotCovered("while ... else")
        f = self.fn
        head, inside, done = f.label("whead"), f.label("wbody"), f.label("wdone")
        f.branch(head)
        f.start(head)
        cond = cast(f, self.scalar(node.test), BOOL)
        f.cond_branch(cond.ref, inside, done)
        f.start(inside)
        if any(self._allocates(n) for n in ast.walk(node)):
            raise NotCovered("an allocation in a while loop")
        self.loops.append((head, done, []))
        self.depth += 1
        self.block(node.body)
        self.depth -= 1
        self.loops.pop()
        f.branch(head)
        f.start(done)

    def _stmt_If(self, node: ast.If) -> None:
        f = self.fn
        cond = cast(f, self.scalar(node.test), BOOL)
        yes, no, done = f.label("then"), f.label("else"), f.label("endif")
        f.cond_branch(cond.ref, yes, no if node.orelse else done)
        arrays = {k: v for k, v in self.env.items() if isinstance(v, Array)}
        for label, statements in ((yes, node.body), (no, node.orelse)):
            if label == no and not node.orelse:
                continue
            f.start(label)
            self.depth += 1
            self.block(statements)
            self.depth -= 1
            f.branch(done)
        if {k: v for k, v in self.env.items() if isinstance(v, Array)} != arrays:
            raise NotCovered("an array bound inside an if")
        f.start(done)

    def _stmt_Continue(self, node: ast.Continue) -> None:
        if not self.loops:
            raise NotCovered("continue outside a loop")
        self.fn.branch(self.loops[-1][0])

    def _stmt_Break(self, node: ast.Break) -> None:
        if not self.loops:
            raise NotCovered("break outside a loop")
        self.fn.branch(self.loops[-1][1])


def _constant(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    raise NotCovered(f"a non-constant index into a call's results: {ast.unparse(node)}")


def _parts(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _as_load(target: ast.expr) -> ast.expr:
    node = ast.parse(ast.unparse(target), mode="eval").body
    return node
