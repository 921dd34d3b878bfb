"""The statements of one function of the loop language as LLVM IR: assignments, array reads
and writes, loops (`range`; `numba.prange` through parallel.py), `if`, `while`,
`break`/`continue`, matrix products, library kernels, calls of the module's other functions
(functions.py). Array values are arrays.py's, array variables' buffers ownership.py's.

Locals live in stack slots that LLVM promotes to registers.
"""
from __future__ import annotations

import ast
from collections import Counter
from typing import Any

from . import library
from . import functions
from .arrays import Shaped
from .emit import (BOOL, I64, Array, Function, Local, NotCovered, Scalar, allocates, constant,
                   mem, reg)
from .expr import cast
from .failures import is_library_call, return_if_failed
from .jit import JitError
from .library_calls import library_call
from .ownership import Ownership
from .parallel import parallel_loop
from .scopes import attach


class Body(Ownership):
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
        self.held: dict[str, str] = {}     # each buffer allocated here -> its slot (ownership.py)
        self.cleanup: str | None = None    # the block a failure leaves through (failures.py)
        self.outputs: tuple = ()           # a module function's output layout (functions.py)
        self.distinct: set[str] = set()
        self.given: set[str] = set()
        self.statement = 0

    def finish(self) -> None:
        """End the function: free what it still owns (ownership.py) and tell LLVM which of
        its array accesses cannot overlap (scopes.py)."""
        super().finish()
        self.module.metadata = attach(self.fn, self.module.metadata)

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
        self.module.kernels[k.symbol] = ("scalar", call, tuple(a.dtype.str for a in args))
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

    # ---- statements ---------------------------------------------------------------------
    def block(self, statements: list[ast.stmt]) -> None:
        for node in statements:
            self.statement += self.depth == 0
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
            return_if_failed(self, value)
            return
        if isinstance(target, ast.Name) and self._is_array(value):
            if target.id in self.multi:
                self.store_var(target.id, value)
            else:
                self.env[target.id] = self.array(value, target.id)
            return
        self.assign(target, self.extremum(target, value) or self.scalar(value))
        if isinstance(target, ast.Name) and target.id not in self.multi and self.nonneg(value):
            self.nonnegative.add(target.id)       # (a chunk count: `min(S[t], S[0])`)

    def extremum(self, target: ast.expr, value: ast.expr) -> Scalar | None:
        """`acc = np.maximum(acc, x)` (or minimum) of floats, a reduction's update, as LLVM's
        `llvm.maximum`: NaN wins, as in numpy, and LLVM's vectoriser knows the loop for a
        reduction (numba's kernel, compares and selects, it does not). Of two zeros it keeps
        +0.0 (-0.0 for minimum), where numba keeps the first and numpy's reduction the last."""
        call = ast.unparse(value.func) if isinstance(value, ast.Call) else ""
        local = self.env.get(getattr(target, "id", None))
        if call not in _EXTREMA or not isinstance(local, Local) or local.dtype.kind != "f" \
                or len(value.args) != 2 or getattr(value.args[0], "id", None) != target.id:
            return None
        a, b = self.scalar(value.args[0]), self.scalar(value.args[1])
        if b.dtype != a.dtype:
            return self.kernel(f"{call}(a0, a1)", [a, b])
        intrinsic = f"llvm.{_EXTREMA[call]}.{'f64' if a.dtype.itemsize == 8 else 'f32'}"
        ty = reg(a.dtype)
        self.module.declarations.add(f"declare {ty} @{intrinsic}({ty}, {ty})")
        return Scalar(self.fn.op(f"call {ty} @{intrinsic}({ty} {a.ref}, {ty} {b.ref})"),
                      a.dtype)

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
        self.fn.do(f"store {mem(array.dtype)} {ref}, ptr {ptr}{self.scoped(array)}")

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
        self.module.kernels[kern.symbol] = ("matmul", out.dtype.str, ())
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
            f.do(f"call void @tj_rt_free(ptr {ptr})")
            self.let_go(ptr)
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
        if step > 0 and (lo.ref.isdigit() or len(call.args) > 1 and self.nonneg(call.args[0])):
            self.nonnegative.add(name)
        else:
            self.nonnegative.discard(name)
        if any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(node)) and \
                any(allocates(n) for n in ast.walk(node)):
            raise NotCovered("an allocation in a loop with break/continue")

        def body(i: Scalar) -> None:
            self.env[name] = i
            self.block(node.body)
        self.counted(lo, hi, body, step)

    def nonneg(self, node: ast.expr) -> bool:
        """Whether `node` is never negative: sizes, non-negative constants and loop indices,
        and their sums, products and floor quotients (a chunk's first index, `k * n // c`).
        Indices known so need no wrap-around test, which would hide the loop's stride from
        LLVM's vectoriser."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and node.value >= 0
        if isinstance(node, ast.Name):
            return node.id in self.nonnegative
        if isinstance(node, ast.Subscript):     # a size (not an index check's status slot)
            return getattr(node.value, "id", None) == "S" and \
                getattr(node.slice, "value", None) not in self.module.mutable or \
                isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult,
                                                                ast.FloorDiv)):
            return self.nonneg(node.left) and self.nonneg(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            known = [self.nonneg(a) for a in node.args]    # Python's min and max
            return all(known) if node.func.id == "min" else \
                any(known) if node.func.id == "max" else False
        return False

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
        if any(allocates(n) for n in ast.walk(node)):
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


_EXTREMA = {"np.maximum": "maximum", "np.minimum": "minimum"}    # LLVM's NaN-propagating


def _as_load(target: ast.expr) -> ast.expr:
    node = ast.parse(ast.unparse(target), mode="eval").body
    return node
