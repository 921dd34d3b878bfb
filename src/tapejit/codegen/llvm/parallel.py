"""A `numba.prange` loop of the entry as a chunked parallel loop: its body becomes a function
`void @tj_nestN(ptr %ctx, i64 %chunk, i64 %lo, i64 %hi)` that runs iterations `lo..hi`, and
the entry calls `tj_rt_parallel_for` (runtime.py: the runtime's own thread pool) with
`min(S[threads], n)` chunks (one where the program has no threads slot).

The context is an array of 8-byte cells holding what the body reads: each scalar, each array's
data pointer and lengths (constant lengths stay constants, so fixed sizes remain numbers in the
chunk's code), the size table's address and, per reduction, the address of its partial sums.
A reduction is a local the body updates from itself (`acc = acc + x`): each chunk sums into
its own zero, and the entry adds the partial sums to the local's value in chunk order.
A chunk whose allocation fails leaves at once (failures.py); the entry leaves after the loop.
"""
from __future__ import annotations

import ast
from typing import Any

from .emit import I64, Array, ArrayVar, Function, Local, NotCovered, Scalar, constant, mem, reg
from .expr import cast
from .failures import allocate, leave_if_set, may_fail


def parallel_loop(outer: Any, node: ast.For) -> None:
    """Lower `for name in numba.prange(n): body` in `outer` (lower.py's `_Body`)."""
    f, module = outer.fn, outer.module
    n = cast(f, outer.scalar(node.iter.args[0]), I64)
    name = node.target.id
    names = {x.id for x in ast.walk(node) if isinstance(x, ast.Name)}
    captured = [k for k in outer.env if k in names and k != name]
    reductions = [k for k in captured if isinstance(outer.env[k], Local) and _reduced(node, k)]
    number = module.nests = module.nests + 1
    symbol = f"tj_nest{number}"

    cells: list[tuple[str, str]] = []   # (value, "i64" or "ptr"), in the outer function
    read: dict[tuple[str, str], str] = {}   # (value, type) -> its reading in the chunk
    inner = type(outer)(module, Function(symbol, "ptr %ctx, i64 %chunk, i64 %lo, i64 %hi",
                                         "internal "), "", top=False, in_nest=True)
    inner.multi = outer.multi
    inner.distinct, inner.given = set(outer.distinct), set(outer.given)   # the same buffers
    g = inner.fn

    def cell(value: str, ty: str) -> str:
        """Pass `value` (of LLVM type `ty`) in the next cell; its reading in the chunk. A
        pointer travels as a pointer: one made from an integer would hide from LLVM's alias
        analysis which buffer it is (a loop storing through it would not vectorise). A value
        passed already is read from its cell: arrays of equal lengths then have equal strides
        in the chunk too (strided loops share their induction variables)."""
        if (value, ty) in read:
            return read[value, ty]
        cells.append((value, "ptr") if ty == "ptr" else (to_cell(f, value, ty), "i64"))
        ptr = g.early(f"getelementptr i64, ptr %ctx, i64 {len(cells) - 1}")
        read[value, ty] = g.early(f"load ptr, ptr {ptr}") if ty == "ptr" else \
            from_cell(g, g.early(f"load i64, ptr {ptr}"), ty)
        return read[value, ty]

    inner.sizes_ptr = cell(outer.sizes_ptr, "ptr")
    partials: dict[str, str] = {}
    for k in captured:
        value = outer.env[k]
        if isinstance(value, ArrayVar):
            value = outer.lookup(k)
        if not isinstance(value, (Array, Local, Scalar)):
            raise NotCovered(f"a parallel loop reading {k}, a call's results")
        if isinstance(value, Array):
            dims = tuple(_length(inner, d, cell) for d in value.dims)
            inner.env[k] = Array(cell(value.ptr, "ptr"), value.dtype, dims, value.root)
        elif k in reductions:
            local = Local(g.slot(reg(value.dtype)), value.dtype)
            inner.env[k] = local
            g.do(f"store {reg(value.dtype)} {constant(0, value.dtype).ref}, ptr {local.slot}")
        else:
            scalar = outer.lookup(k)
            ref = scalar.ref if _is_constant(scalar) else cell(scalar.ref, reg(scalar.dtype))
            if isinstance(value, Local):       # private: the body may assign it
                local = Local(g.slot(reg(value.dtype)), value.dtype)
                inner.env[k] = local
                g.do(f"store {reg(value.dtype)} {ref}, ptr {local.slot}")
            else:
                inner.env[k] = Scalar(ref, scalar.dtype, scalar.sym)
    chunks = _chunks(outer, n)
    inside: dict[str, str] = {}    # reduction -> its partial sums' address, in the chunk
    if reductions:                 # one block: per reduction, 8 bytes per chunk
        block = allocate(outer, Scalar(f.op(f"mul i64 {chunks}, {8 * len(reductions)}"), I64))
    for j, k in enumerate(reductions):
        partials[k] = f.op(f"getelementptr i64, ptr {block}, i64 {f.op(f'mul i64 {chunks}, {j}')}")
        inside[k] = cell(partials[k], "ptr")
    inner.nonnegative = set(outer.nonnegative) | {name}

    def body(i: Scalar) -> None:
        inner.env[name] = i
        inner.block(node.body)
    inner.counted(Scalar("%lo", I64), Scalar("%hi", I64), body)
    for k, ptr in inside.items():
        local = inner.env[k]
        value = g.op(f"load {reg(local.dtype)}, ptr {local.slot}")
        at = g.op(f"getelementptr {mem(local.dtype)}, ptr {ptr}, i64 %chunk")
        g.do(f"store {reg(local.dtype)} {value}, ptr {at}")
    inner.finish()
    module.functions.append(g.text())

    ctx = f.slot(f"[{max(1, len(cells))} x i64]")
    for k, (value, ty) in enumerate(cells):
        f.do(f"store {ty} {value}, ptr {f.op(f'getelementptr i64, ptr {ctx}, i64 {k}')}")
    f.do(f"call void @tj_rt_parallel_for(ptr @{symbol}, ptr {ctx}, i64 {n.ref}, i64 {chunks})")
    for k in reductions:
        _combine(outer, outer.env[k], partials[k], chunks)
    if reductions:
        f.do(f"call void @tj_rt_free(ptr {block})")
    if may_fail(module, node):      # a chunk failed: the others ran to their end
        leave_if_set(outer)


def _reduced(node: ast.For, name: str) -> bool:
    """Whether the loop updates local `name` from itself; only a sum may be (`x = x + e`)."""
    updates = [a for a in ast.walk(node) if isinstance(a, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
               and any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(a.value))]
    for a in updates:
        v = a.value
        if not (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add)
                and isinstance(v.left, ast.Name) and v.left.id == name):
            raise NotCovered(f"a parallel loop's reduction other than a sum: {ast.unparse(a)}")
    return bool(updates)


def _chunks(outer: Any, n: Scalar) -> str:
    f, slot = outer.fn, outer.module.threads
    if slot is None:
        return "1"
    t = outer.size(slot).ref
    c = f.op(f"select i1 {f.op(f'icmp slt i64 {t}, {n.ref}')}, i64 {t}, i64 {n.ref}")
    return f.op(f"select i1 {f.op(f'icmp slt i64 {c}, 1')}, i64 1, i64 {c}")


def _combine(outer: Any, local: Local, partials: str, chunks: str) -> None:
    """local += partials[0] + partials[1] + ... (in chunk order)."""
    f, ty = outer.fn, reg(local.dtype)
    add = "fadd" if local.dtype.kind == "f" else "add"

    def body(c: Scalar) -> None:
        part = f.op(f"load {ty}, ptr {f.op(f'getelementptr {ty}, ptr {partials}, i64 {c.ref}')}")
        total = f.op(f"{add} {ty} {f.op(f'load {ty}, ptr {local.slot}')}, {part}")
        f.do(f"store {ty} {total}, ptr {local.slot}")
    outer.counted(constant(0, I64), Scalar(chunks, I64), body)


def _length(inner: Any, d: Scalar, cell: Any) -> Scalar:
    """An array's length `d` in the chunk: a constant as it is, a size read from the chunk's
    own size table (where the loops' bounds come from too: LLVM then sees them equal), any
    other in a cell."""
    if _is_constant(d):
        return d
    slot = d.sym[2:-1] if d.sym and d.sym.startswith("S[") and d.sym.endswith("]") else ""
    if slot.isdigit() and int(slot) not in inner.module.mutable:
        return inner.size(int(slot))
    return Scalar(cell(d.ref, "i64"), I64, d.sym)


def _is_constant(x: Scalar) -> bool:
    return x.ref.lstrip("-").isdigit() or x.ref.startswith("0x") or x.ref in ("true", "false")


def to_cell(f: Function, value: str, ty: str) -> str:
    """`value` (of LLVM type `ty`) as the bits of an i64."""
    if ty == "ptr":
        return f.op(f"ptrtoint ptr {value} to i64")
    if ty == "i64":
        return value
    if ty == "double":
        return f.op(f"bitcast double {value} to i64")
    if ty == "float":
        return f.op(f"zext i32 {f.op(f'bitcast float {value} to i32')} to i64")
    return f.op(f"zext {ty} {value} to i64")


def from_cell(g: Function, cell: str, ty: str, early: bool = True) -> str:
    """The value of LLVM type `ty` whose bits `cell` (an i64) holds; computed in the entry
    block where `early`."""
    op = g.early if early else g.op
    if ty == "ptr":
        return op(f"inttoptr i64 {cell} to ptr")
    if ty == "i64":
        return cell
    if ty == "double":
        return op(f"bitcast i64 {cell} to double")
    if ty == "float":
        return op(f"bitcast i32 {op(f'trunc i64 {cell} to i32')} to float")
    return op(f"trunc i64 {cell} to {ty}")

