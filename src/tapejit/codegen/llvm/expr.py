"""Scalar expressions of the loop language (the Python numba is given: codegen/cpu.py) as
LLVM IR, with numba's typing of scalars: integers compute in at least 64 bits, `/` of integers
is a float64 division, `//` and `%` round toward minus infinity, a comparison of an integer
with a float compares in float, Python literals are int64/float64/bool.

Arithmetic, comparisons, conversions (`np.float32(x)`, `float(x)`), `a if c else b`, `and`,
`or`, `not` and array reads are written here; every other call (`tj_vmath.exp(x)`,
`math.lgamma(x)`, `np.maximum(a, b)`, `a ** b`, float `//` and `%`) is a library kernel
(library.py): numba's own code for that call, compiled once per machine and inlined by LLVM.
"""
from __future__ import annotations

import ast
import math
import struct
import numpy as np

from .emit import BOOL, F32, F64, I64, Array, Function, NotCovered, Scalar, constant, mem, reg

_U64 = np.dtype(np.uint64)
_DTYPES = {"float64": F64, "float32": F32, "int64": I64, "int32": np.dtype(np.int32),
           "int16": np.dtype(np.int16), "int8": np.dtype(np.int8), "uint64": _U64,
           "uint32": np.dtype(np.uint32), "uint16": np.dtype(np.uint16),
           "uint8": np.dtype(np.uint8), "bool_": BOOL, "intp": I64}
_BUILTIN_CASTS = {"float": F64, "int": I64, "bool": BOOL}
_ARITH = {ast.Add: ("fadd", "add"), ast.Sub: ("fsub", "sub"), ast.Mult: ("fmul", "mul")}
_FCMP = {ast.Eq: "oeq", ast.NotEq: "une", ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt",
         ast.GtE: "oge"}
_ICMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
         ast.GtE: "ge"}
_INT_FLOOR = {"np.floor_divide": ast.FloorDiv, "np.remainder": ast.Mod,  # (and numba's safe
              "tj_special.int_floor_divide": ast.FloorDiv, "tj_special.int_remainder": ast.Mod}
_KERNEL_OPS = {ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%"}


def arith_type(a: np.dtype, b: np.dtype) -> np.dtype:
    """numba's result dtype of `a op b` for + - * (bools count as int64)."""
    a, b = (I64 if t == BOOL else t for t in (a, b))
    if a.kind in "iu" and b.kind in "iu":
        if a.kind == b.kind:
            return _U64 if a.kind == "u" else I64
        small = a.itemsize < 8 if a.kind == "u" else b.itemsize < 8
        return I64 if small else F64
    return np.promote_types(a, b)


def cast(fn: Function, x: Scalar, dtype: np.dtype) -> Scalar:
    """`x` converted to `dtype` as numba converts (float -> int truncates; -> bool: != 0)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.ref.startswith("0x") or x.ref.lstrip("-").isdigit() or x.ref in ("true", "false"):
        value = _constant_value(x)
        if value is not None:
            return constant(value, dtype)
    src, dst = reg(x.dtype), reg(dtype)
    if dtype == BOOL:
        zero = "0.0" if x.dtype.kind == "f" else "0"
        cmp = "fcmp une" if x.dtype.kind == "f" else "icmp ne"
        return Scalar(fn.op(f"{cmp} {src} {x.ref}, {zero}"), dtype)
    if x.dtype.kind == "f" and dtype.kind == "f":
        how = "fpext" if dtype.itemsize > x.dtype.itemsize else "fptrunc"
    elif x.dtype.kind == "f":
        how = "fptosi" if dtype.kind == "i" else "fptoui"
    elif dtype.kind == "f":
        how = "sitofp" if x.dtype.kind == "i" else "uitofp"
    elif dtype.itemsize == x.dtype.itemsize and x.dtype != BOOL:
        return Scalar(x.ref, dtype, x.sym)
    elif dtype.itemsize < x.dtype.itemsize:
        how = "trunc"
    else:
        how = "sext" if x.dtype.kind == "i" else "zext"
    sym = x.sym if dtype.kind in "iu" and x.dtype.kind in "iub" else None
    return Scalar(fn.op(f"{how} {src} {x.ref} to {dst}"), dtype, sym)


def _constant_value(x: Scalar) -> object:
    if x.dtype == BOOL:
        return x.ref == "true"
    if x.dtype.kind in "iu":
        return int(x.ref)
    return struct.unpack("<d", struct.pack("<Q", int(x.ref, 16)))[0]


class Expressions:
    """Lowers expressions in the scope of the function being written (`self.fn`); the
    statement lowering (body.py, arrays.py) supplies `lookup`, `size`, `kernel`, `nonneg`
    and `scoped`."""

    fn: Function

    def lookup(self, name: str) -> Scalar | Array:
        raise NotImplementedError

    def size(self, slot: int) -> Scalar:
        raise NotImplementedError

    def kernel(self, call: str, args: list[Scalar]) -> Scalar:
        raise NotImplementedError

    def nonneg(self, node: ast.expr) -> bool:
        raise NotImplementedError

    def scoped(self, array: Array) -> str:
        raise NotImplementedError

    # ---- entry points -------------------------------------------------------------------
    def scalar(self, node: ast.expr) -> Scalar:
        value = self.value(node)
        if not isinstance(value, Scalar):
            raise NotCovered(f"an array where a scalar is read: {ast.unparse(node)}")
        return value

    def value(self, node: ast.expr) -> Scalar | Array:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise NotCovered(f"expression {ast.unparse(node)}")
        return method(node)

    def index(self, node: ast.expr, dim: Scalar) -> Scalar:
        """An index along an axis of length `dim`, negative ones counted from the end as
        numba does (an index known to be non-negative needs no test: `i * n + j` of loop
        indices keeps the stride LLVM's vectoriser must see)."""
        i = cast(self.fn, self.scalar(node), I64)
        if i.ref.isdigit() or self.nonneg(node):
            return i
        neg = self.fn.op(f"icmp slt i64 {i.ref}, 0")
        wrapped = self.fn.op(f"add i64 {i.ref}, {dim.ref}")
        return Scalar(self.fn.op(f"select i1 {neg}, i64 {wrapped}, i64 {i.ref}"), I64)

    def linear(self, array: Array, parts: list[ast.expr]) -> str:
        """The position of `array[parts]` in its buffer, in elements (C order)."""
        offset = "0"
        for k, (part, dim) in enumerate(zip(parts, array.dims)):
            i = self.index(part, dim).ref
            offset = i if k == 0 else self.fn.op(
                f"add i64 {self.fn.op(f'mul i64 {offset}, {dim.ref}')}, {i}")
        return offset

    def element(self, array: Array, parts: list[ast.expr]) -> str:
        """The address of `array[parts]` (a full index)."""
        if len(parts) != len(array.dims):
            raise NotCovered(f"{len(parts)} indices into a {len(array.dims)}-d array")
        if not parts:
            return array.ptr
        return self.fn.op(f"getelementptr {mem(array.dtype)}, ptr {array.ptr}, "
                          f"i64 {self.linear(array, parts)}")

    def load(self, array: Array, parts: list[ast.expr]) -> Scalar:
        ptr = self.element(array, parts)
        value = self.fn.op(f"load {mem(array.dtype)}, ptr {ptr}{self.scoped(array)}")
        if array.dtype == BOOL:
            value = self.fn.op(f"trunc i8 {value} to i1")
        return Scalar(value, array.dtype)

    # ---- nodes --------------------------------------------------------------------------
    def _Constant(self, node: ast.Constant) -> Scalar:
        v = node.value
        if isinstance(v, bool):
            return constant(v, BOOL)
        if isinstance(v, int):
            return constant(v, I64)
        if isinstance(v, float):
            return constant(v, F64)
        raise NotCovered(f"constant {v!r}")

    def _Name(self, node: ast.Name) -> Scalar | Array:
        return self.lookup(node.id)

    def _Attribute(self, node: ast.Attribute) -> Scalar:
        base = getattr(node.value, "id", None)
        if base in ("np", "math") and node.attr in ("inf", "nan", "pi", "e"):
            return constant(getattr(math, node.attr), F64)
        raise NotCovered(f"attribute {ast.unparse(node)}")

    def _Subscript(self, node: ast.Subscript) -> Scalar:
        target = node.value
        if isinstance(target, ast.Name) and target.id == "S":
            return self.size(_literal_int(node.slice))
        if isinstance(target, ast.Attribute) and target.attr == "shape":
            array = self.value(target.value)
            if not isinstance(array, Array):
                raise NotCovered(f"shape of a scalar: {ast.unparse(node)}")
            return array.dims[_literal_int(node.slice)]
        array = self.value(target)
        if not isinstance(array, Array):
            raise NotCovered(f"indexing a scalar: {ast.unparse(node)}")
        return self.load(array, _parts(node.slice))

    def _UnaryOp(self, node: ast.UnaryOp) -> Scalar:
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and type(node.operand.value) in (int, float):      # a negative literal
            return self._Constant(ast.Constant(-node.operand.value))
        x = self.scalar(node.operand)
        if isinstance(node.op, ast.Not):
            b = cast(self.fn, x, BOOL)
            return Scalar(self.fn.op(f"xor i1 {b.ref}, true"), BOOL)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.USub):
            if x.dtype.kind == "f":
                return Scalar(self.fn.op(f"fneg {reg(x.dtype)} {x.ref}"), x.dtype)
            x = cast(self.fn, x, arith_type(x.dtype, x.dtype))
            sym = f"(-{x.sym})" if x.sym else None
            return Scalar(self.fn.op(f"sub {reg(x.dtype)} 0, {x.ref}"), x.dtype, sym)
        raise NotCovered(f"unary {ast.unparse(node)}")

    def _BinOp(self, node: ast.BinOp) -> Scalar:
        a, b = self.scalar(node.left), self.scalar(node.right)
        op = type(node.op)
        if op is ast.Div:
            dtype = np.promote_types(a.dtype, b.dtype) if "f" in (a.dtype.kind, b.dtype.kind) \
                else F64
            dtype = F64 if dtype.kind != "f" else dtype
            a, b = cast(self.fn, a, dtype), cast(self.fn, b, dtype)
            return Scalar(self.fn.op(f"fdiv {reg(dtype)} {a.ref}, {b.ref}"), dtype)
        dtype = arith_type(a.dtype, b.dtype)
        if op in _ARITH:
            a, b = cast(self.fn, a, dtype), cast(self.fn, b, dtype)
            instr = _ARITH[op][0 if dtype.kind == "f" else 1]
            sym = f"({a.sym} {_SYMBOL[op]} {b.sym})" if a.sym and b.sym else None
            return Scalar(self.fn.op(f"{instr} {reg(dtype)} {a.ref}, {b.ref}"), dtype, sym)
        if op in (ast.FloorDiv, ast.Mod) and dtype == I64:
            return self._floor(op, cast(self.fn, a, I64), cast(self.fn, b, I64))
        if op in _KERNEL_OPS:
            return self.kernel(f"a0 {_KERNEL_OPS[op]} a1", [a, b])
        raise NotCovered(f"operator {ast.unparse(node)}")

    def _floor(self, op: type, a: Scalar, b: Scalar) -> Scalar:
        """Python's `a // b` or `a % b` on int64, as numpy: 0 for a zero divisor, and a
        divisor of -1 negates (wrapping: int64 min // -1 is int64 min, where the machine's
        division traps)."""
        f = self.fn
        zero = f.op(f"icmp eq i64 {b.ref}, 0")
        minus = f.op(f"icmp eq i64 {b.ref}, -1")
        safe = f.op(f"select i1 {f.op(f'or i1 {zero}, {minus}')}, i64 1, i64 {b.ref}")
        q, r = f.op(f"sdiv i64 {a.ref}, {safe}"), f.op(f"srem i64 {a.ref}, {safe}")
        # the remainder's sign must be the divisor's: step the quotient down otherwise
        signs = f.op(f"xor i64 {r}, {safe}")
        fix = f.op(f"and i1 {f.op(f'icmp ne i64 {r}, 0')}, {f.op(f'icmp slt i64 {signs}, 0')}")
        if op is ast.FloorDiv:
            value = f.op(f"sub i64 {q}, {f.op(f'zext i1 {fix} to i64')}")
            negated = f.op(f"sub i64 0, {a.ref}")
            value = f.op(f"select i1 {minus}, i64 {negated}, i64 {value}")
            sym = f"({a.sym} // {b.sym})" if a.sym and b.sym else None
        else:
            value = f.op(f"select i1 {fix}, i64 {f.op(f'add i64 {r}, {safe}')}, i64 {r}")
            sym = f"({a.sym} % {b.sym})" if a.sym and b.sym else None
        return Scalar(f.op(f"select i1 {zero}, i64 0, i64 {value}"), I64, sym)

    def _Compare(self, node: ast.Compare) -> Scalar:
        left, result = self.scalar(node.left), None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.scalar(right_node)
            test = self._compare(type(op), left, right)
            result = test if result is None else \
                Scalar(self.fn.op(f"and i1 {result.ref}, {test.ref}"), BOOL)
            left = right
        assert result is not None
        return result

    def _compare(self, op: type, a: Scalar, b: Scalar) -> Scalar:
        if op not in _FCMP:
            raise NotCovered(f"comparison {op.__name__}")
        if a.dtype == BOOL and b.dtype == BOOL:
            dtype = BOOL
        elif "f" in (a.dtype.kind, b.dtype.kind):
            dtype = np.promote_types(a.dtype, b.dtype)
            dtype = F64 if dtype.kind != "f" else dtype
        else:
            dtype = arith_type(a.dtype, b.dtype)
        a, b = cast(self.fn, a, dtype), cast(self.fn, b, dtype)
        if dtype.kind == "f":
            return Scalar(self.fn.op(f"fcmp {_FCMP[op]} {reg(dtype)} {a.ref}, {b.ref}"), BOOL)
        cond = _ICMP[op]
        if op not in (ast.Eq, ast.NotEq):
            cond = ("u" if dtype.kind in "ub" else "s") + cond
        return Scalar(self.fn.op(f"icmp {cond} {reg(dtype)} {a.ref}, {b.ref}"), BOOL)

    def _BoolOp(self, node: ast.BoolOp) -> Scalar:
        values = [self.scalar(v) for v in node.values] if _pure(node) else None
        if values is None:
            return self._branching(node)
        if any(v.dtype != BOOL for v in values):
            raise NotCovered(f"`and`/`or` of non-bools: {ast.unparse(node)}")
        instr = "and" if isinstance(node.op, ast.And) else "or"
        result = values[0]
        for v in values[1:]:
            result = Scalar(self.fn.op(f"{instr} i1 {result.ref}, {v.ref}"), BOOL)
        return result

    def _branching(self, node: ast.BoolOp) -> Scalar:
        """`a and b` / `a or b` whose operands read memory: b only where it decides."""
        f, is_and = self.fn, isinstance(node.op, ast.And)
        slot = f.slot("i1")
        done = f.label("bool_done")
        for k, operand in enumerate(node.values):
            v = self.scalar(operand)
            if v.dtype != BOOL:
                raise NotCovered(f"`and`/`or` of non-bools: {ast.unparse(node)}")
            f.do(f"store i1 {v.ref}, ptr {slot}")
            if k < len(node.values) - 1:
                more = f.label("bool_more")
                f.cond_branch(v.ref, more if is_and else done, done if is_and else more)
                f.start(more)
        f.branch(done)
        f.start(done)
        return Scalar(f.op(f"load i1, ptr {slot}"), BOOL)

    def _IfExp(self, node: ast.IfExp) -> Scalar:
        cond = cast(self.fn, self.scalar(node.test), BOOL)
        if _pure(node.body) and _pure(node.orelse):
            a, b = self.scalar(node.body), self.scalar(node.orelse)
            dtype = _unify(a.dtype, b.dtype)
            a, b = cast(self.fn, a, dtype), cast(self.fn, b, dtype)
            return Scalar(self.fn.op(f"select i1 {cond.ref}, {reg(dtype)} {a.ref}, "
                                     f"{reg(dtype)} {b.ref}"), dtype)
        f = self.fn
        yes, no, join = f.label("if_yes"), f.label("if_no"), f.label("if_join")
        f.cond_branch(cond.ref, yes, no)
        f.start(yes)
        a = self.scalar(node.body)
        end_of_yes = len(f.lines)     # its store and branch go here once the type is known
        f.start(no)
        b = self.scalar(node.orelse)
        dtype = _unify(a.dtype, b.dtype)
        slot = f.slot(reg(dtype))
        f.do(f"store {reg(dtype)} {cast(f, b, dtype).ref}, ptr {slot}")
        f.branch(join)
        lines, f.lines, f.terminated = f.lines, [], False
        f.do(f"store {reg(dtype)} {cast(f, a, dtype).ref}, ptr {slot}")
        f.lines.append(f"  br label %{join}")
        lines[end_of_yes:end_of_yes] = f.lines
        f.lines = lines
        f.start(join)
        return Scalar(f.op(f"load {reg(dtype)}, ptr {slot}"), dtype)

    def _Call(self, node: ast.Call) -> Scalar:
        func = node.func
        args = node.args
        if node.keywords:
            raise NotCovered(f"keyword arguments: {ast.unparse(node)}")
        if isinstance(func, ast.Name) and func.id in _BUILTIN_CASTS and len(args) == 1:
            return cast(self.fn, self.scalar(args[0]), _BUILTIN_CASTS[func.id])
        if isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "np" \
                and func.attr in _DTYPES and len(args) == 1:
            return cast(self.fn, self.scalar(args[0]), _DTYPES[func.attr])
        if isinstance(func, ast.Name) and func.id == "min" and len(args) == 2:
            a, b = self.scalar(args[0]), self.scalar(args[1])
            if a.dtype.kind in "iu" and b.dtype.kind in "iu":
                return self._int_min(a, b)
        values = [self.scalar(a) for a in args]
        name = ast.unparse(func)
        if name in _INT_FLOOR and len(values) == 2 and values[0].dtype == values[1].dtype \
                and values[0].dtype.kind == "i":      # numpy's integer floor_divide/remainder
            a, b = (cast(self.fn, v, I64) for v in values)
            return cast(self.fn, self._floor(_INT_FLOOR[name], a, b), values[0].dtype)
        text = ast.unparse(ast.Call(func, [ast.Name(f"a{k}") for k in range(len(args))], []))
        return self.kernel(text, values)

    def _int_min(self, a: Scalar, b: Scalar) -> Scalar:
        a, b = cast(self.fn, a, I64), cast(self.fn, b, I64)
        less = self.fn.op(f"icmp slt i64 {a.ref}, {b.ref}")
        sym = f"min({a.sym}, {b.sym})" if a.sym and b.sym else None
        return Scalar(self.fn.op(f"select i1 {less}, i64 {a.ref}, i64 {b.ref}"), I64, sym)


_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def _unify(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    return arith_type(a, b)


def _pure(node: ast.AST) -> bool:
    """Whether evaluating `node` reads no memory and calls nothing (safe to evaluate always)."""
    return not any(isinstance(n, (ast.Subscript, ast.Call)) for n in ast.walk(node))


def _literal_int(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    raise NotCovered(f"a non-constant slot: {ast.unparse(node)}")


def _parts(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def parse_dtype(node: ast.expr) -> np.dtype:
    """`np.float64` & co. as a dtype."""
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "np" \
            and node.attr in _DTYPES:
        return _DTYPES[node.attr]
    raise NotCovered(f"dtype {ast.unparse(node)}")


