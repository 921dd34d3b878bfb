"""Calls of the module's other functions (a loop's body, a branch, a segment, ...).

Each is lowered once per signature (its arguments' kinds, dtypes and ranks) as
`void @tj_fnN(<arguments>, ptr %S, ptr %out)`, a long tape's segments `noinline` (LLVM would
inline each, called once, back into one function whose passes cost more than linearly): an array argument is its data pointer and
lengths, a scalar its value. The results go to `out`, the call site's 8-byte cells: per array,
its data pointer, whether the caller now owns it (a buffer the function allocated) and its
lengths; per scalar, its bits. A call site's owned results are freed before it runs again and
at the caller's end, unless an array variable took them over (ownership.py).
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Any

import numpy as np

from ..segments import SEGMENT
from .emit import I64, Array, Function, Local, NotCovered, Scalar, reg
from .parallel import from_cell, to_cell


@dataclasses.dataclass(frozen=True)
class Output:
    array: bool
    dtype: np.dtype
    ndim: int
    cell: int                          # its first cell
    syms: tuple[str | None, ...] = ()  # an array's lengths over S, where the function knows


@dataclasses.dataclass(frozen=True)
class Results:
    """The outputs of a call site: its cells (a stack slot of the caller) and their layout."""
    cells: str
    layout: tuple[Output, ...]


def call(body: Any, node: ast.Call) -> Results:
    """Lower `f(args...)` (f a function of the module) in `body`; the function is lowered
    first where this signature is new."""
    f = body.fn
    nodes = node.args[:-1] if node.args and getattr(node.args[-1], "id", "") == "S" \
        else node.args
    args = [body.array(a) if body._is_array(a) else body.value(a) for a in nodes]
    symbol, layout = define(body, node.func.id, tuple(_kind(a) for a in args))
    count = sum(2 + o.ndim if o.array else 1 for o in layout)
    cells = f.slot(f"[{max(1, count)} x i64]")
    f.init(f"store [{max(1, count)} x i64] zeroinitializer, ptr {cells}")
    results = Results(cells, layout)
    release(body, results)
    body.results.append(results)
    parts = []
    for a in args:
        if isinstance(a, Array):
            parts += [f"ptr {a.ptr}"] + [f"i64 {d.ref}" for d in a.dims]
        else:
            parts.append(f"{reg(a.dtype)} {a.ref}")
    f.do(f"call void @{symbol}({', '.join(parts + [f'ptr {body.sizes_ptr}', f'ptr {cells}'])})")
    return results


def _kind(value: Scalar | Array) -> tuple:
    if isinstance(value, Array):      # with its lengths over S, which hold inside the function
        return ("array", value.dtype, len(value.dims), tuple(d.sym for d in value.dims))
    return ("scalar", value.dtype)


def _cell(f: Function, cells: str, k: int) -> str:
    return f.op(f"getelementptr i64, ptr {cells}, i64 {k}")


def output(body: Any, results: Results, k: int) -> Scalar | Array:
    """Output `k` of a call site (an array's root names the call site's cell)."""
    f, out = body.fn, results.layout[k]
    if not out.array:
        bits = f.op(f"load i64, ptr {_cell(f, results.cells, out.cell)}")
        return Scalar(from_cell(f, bits, reg(out.dtype), early=False), out.dtype)
    ptr = f.op(f"load ptr, ptr {_cell(f, results.cells, out.cell)}")   # as a pointer: for
    dims = tuple(Scalar(f.op(f"load i64, ptr {_cell(f, results.cells, out.cell + 2 + d)}"),
                        I64, out.syms[d] if d < len(out.syms) else None)
                 for d in range(out.ndim))                            # LLVM's alias analysis
    return Array(ptr, out.dtype, dims, f"{results.cells}#{out.cell}")


def take(body: Any, root: str) -> str:
    """Whether the buffer of `root` (a call site's array output) is owned, as an i1, handing
    the ownership over to the caller (the call site no longer frees it)."""
    cells, cell = root.split("#")
    f = body.fn
    at = _cell(f, cells, int(cell) + 1)
    owned = f.op(f"icmp ne i64 {f.op(f'load i64, ptr {at}')}, 0")
    f.do(f"store i64 0, ptr {at}")
    return owned


def adopt(body: Any, results: Results, old: str, drop: str, found: str) -> str:
    """A call site's array output that holds `old` takes it over (owns it) where `drop` and
    nobody took it yet (`found`); returns whether somebody has (an i1)."""
    f = body.fn
    for out in results.layout:
        if not out.array:
            continue
        ptr = f.op(f"load i64, ptr {_cell(f, results.cells, out.cell)}")
        held = f.op(f"icmp eq i64 {ptr}, {f.op(f'ptrtoint ptr {old} to i64')}")
        free = f.op(f"xor i1 {found}, true")
        hit = f.op(f"and i1 {drop}, {f.op(f'and i1 {held}, {free}')}")
        at = _cell(f, results.cells, out.cell + 1)
        owned = f.op(f"or i64 {f.op(f'load i64, ptr {at}')}, {f.op(f'zext i1 {hit} to i64')}")
        f.do(f"store i64 {owned}, ptr {at}")
        found = f.op(f"or i1 {found}, {hit}")
    return found


def release(body: Any, results: Results) -> None:
    """Free the call site's owned array outputs (free(NULL) where not owned)."""
    f = body.fn
    for out in results.layout:
        if out.array:
            ptr = f.op(f"load i64, ptr {_cell(f, results.cells, out.cell)}")
            owned = f.op(f"load i64, ptr {_cell(f, results.cells, out.cell + 1)}")
            keep = f.op(f"icmp eq i64 {owned}, 0")
            address = f.op(f"select i1 {keep}, i64 0, i64 {ptr}")
            f.do(f"call void @tj_rt_free(ptr {f.op(f'inttoptr i64 {address} to ptr')})")


def define(caller: Any, name: str, kinds: tuple) -> tuple[str, tuple[Output, ...]]:
    """The symbol and output layout of function `name` for arguments of `kinds` (lowered by
    a body of the caller's kind, where new)."""
    module, key = caller.module, (name, kinds, caller.in_nest)
    if key in module.defined:
        return module.defined[key]
    node = module.defs.get(name)
    if node is None:
        raise NotCovered(f"a call of {name}")
    params = [a.arg for a in node.args.args]
    if params[-1:] != ["S"] or len(params) - 1 != len(kinds):
        raise NotCovered(f"the signature of {name}")
    symbol = f"tj_fn{len(module.defined) + 1}"
    module.defined[key] = None                    # recursion is not supported
    text = []
    inner = type(caller)(module, Function(symbol, "", "internal "), "%S", top=False,
                         statements=node.body, in_nest=caller.in_nest)
    for k, (param, kind) in enumerate(zip(params, kinds)):
        if kind[0] == "array":
            dims = tuple(Scalar(f"%a{k}d{d}", I64, kind[3][d]) for d in range(kind[2]))
            inner.env[param] = Array(f"%a{k}", kind[1], dims, param)
            inner.given.add(param)
            text += [f"ptr %a{k}"] + [f"i64 %a{k}d{d}" for d in range(kind[2])]
        else:
            local = Local(inner.fn.slot(reg(kind[1])), kind[1])
            inner.fn.init(f"store {reg(kind[1])} %a{k}, ptr {local.slot}")
            inner.env[param] = local
            text.append(f"{reg(kind[1])} %a{k}")
    inner.fn.header = (f"define internal void @{symbol}({', '.join(text + ['ptr %S', 'ptr %out'])})"
                       + (" noinline" if name.startswith(SEGMENT) else ""))
    statements = node.body
    if not statements or not isinstance(statements[-1], ast.Return):
        raise NotCovered(f"{name} without a final return")
    inner.block(statements[:-1])
    layout = inner.outputs = returns(inner, statements[-1])
    inner.finish()
    module.functions.append(inner.fn.text())
    module.defined[key] = (symbol, layout)
    return symbol, layout


def returns(body: Any, node: ast.Return) -> tuple[Output, ...]:
    """Write a function's results into `%out`, handing over the buffers it allocated."""
    if not isinstance(node.value, ast.Tuple):
        raise NotCovered("a return that is not a tuple")
    f, layout, cell, handed = body.fn, [], 0, set()
    for elt in node.value.elts:
        value = body.value(elt)
        if isinstance(value, Array):
            owned = "false" if value.root in handed else body.hand_over(value)
            handed.add(value.root)
            words = [(value.ptr, "ptr"), (to_cell(f, owned, "i1"), "i64")] + \
                [(d.ref, "i64") for d in value.dims]
            layout.append(Output(True, value.dtype, len(value.dims), cell,
                                 tuple(d.sym for d in value.dims)))
        else:
            words = [(to_cell(f, value.ref, reg(value.dtype)), "i64")]
            layout.append(Output(False, value.dtype, 0, cell))
        for word, ty in words:
            f.do(f"store {ty} {word}, ptr {_cell(f, '%out', cell)}")
            cell += 1
    return tuple(layout)
