"""Layout ops as index maps: the scalar expression reading an eqn's operand(s) at the loop
position `i0, i1, ...` of its output. Inside a loop nest these cost no memory traffic of their
own: a transpose, slice, flip, pad or concatenate feeding elementwise work is fused with it.
"""
from __future__ import annotations

from typing import Callable

from ..ir import Eqn
from .writer import Sizes

Reader = Callable[[int, list[str]], str]  # (operand number, index parts) -> expression
ViewExpr = Callable[[Eqn, Reader, Sizes, list[str]], str]
VIEWS: dict[str, ViewExpr] = {}


def view(name: str) -> Callable[[ViewExpr], ViewExpr]:
    def register(fn: ViewExpr) -> ViewExpr:
        VIEWS[name] = fn
        return fn
    return register


UNIT_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min")


def squeezes(eqn: Eqn) -> bool:
    """A reshape that only adds or removes unit axes, or a reduction over unit axes only:
    the same elements in the same order."""
    if eqn.op == "reshape":
        a, b = eqn.ins[0].aval.shape, eqn.outs[0].aval.shape
        return [n for n in a if n != 1] == [n for n in b if n != 1]
    if eqn.op in UNIT_REDUCTIONS:
        return all(eqn.ins[0].aval.shape[a] == 1 for a in eqn.kw["axes"])
    return False


def is_view(eqn: Eqn) -> bool:
    return eqn.op in VIEWS or squeezes(eqn)


def view_expr(eqn: Eqn, read: Reader, sizes: Sizes, idx: list[str]) -> str:
    """The value at output position `idx` (one index expression per output axis)."""
    idx = [_atomic(i) for i in idx]    # views compose: an index may be another's expression
    if squeezes(eqn):
        return _squeeze(eqn, read, sizes, idx)
    return VIEWS[eqn.op](eqn, read, sizes, idx)


def _atomic(index: str) -> str:
    """`index` as an operand of `*`, `-`, `//` or `%`: parenthesized unless a name or number."""
    return index if index.replace("_", "").isalnum() or index.startswith("(") and \
        index.endswith(")") and _balanced(index[1:-1]) else f"({index})"


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


@view("broadcast_in_dim")
def _broadcast(eqn, read, sizes, idx):
    shape = eqn.ins[0].aval.shape
    parts = ["0" if n == 1 else idx[d] for n, d in zip(shape, eqn.kw["dims"])]
    return read(0, parts)


def _squeeze(eqn, read, sizes, idx):
    free = iter(d for d, n in enumerate(eqn.outs[0].aval.shape) if n != 1)
    parts = ["0" if n == 1 else idx[next(free)] for n in eqn.ins[0].aval.shape]
    return read(0, parts)


@view("transpose")
def _transpose(eqn, read, sizes, idx):
    perm = eqn.kw["perm"]
    parts = [idx[perm.index(k)] for k in range(len(perm))]
    return read(0, parts)


@view("slice")
def _slice(eqn, read, sizes, idx):
    parts = []
    for d, (start, step) in enumerate(zip(eqn.kw["start"], eqn.kw["step"])):
        index = idx[d] if step == 1 else f"{idx[d]} * {sizes(step)}"
        parts.append(index if start == 0 else f"{sizes(start)} + {index}")
    return read(0, parts)


@view("rev")
def _rev(eqn, read, sizes, idx):
    parts = [f"{sizes(n)} - 1 - {idx[d]}" if d in eqn.kw["axes"] else idx[d]
             for d, n in enumerate(sizes.of(eqn.ins[0]))]
    return read(0, parts)


@view("pad")
def _pad(eqn, read, sizes, idx):
    # out position p maps to operand position (p - lo) / (interior + 1) when that is a whole
    # number inside the operand; every other position holds the pad value
    conditions, parts = [], []
    for d, (lo, n, interior) in enumerate(zip(eqn.kw["lo"], sizes.of(eqn.ins[0]),
                                             eqn.kw["interior"])):
        shifted = f"({idx[d]} - {sizes(lo)})" if lo else idx[d]
        stride = interior + 1
        if lo:
            conditions.append(f"{idx[d]} >= {sizes(lo)}")
        if stride != 1:
            conditions.append(f"{shifted} % {sizes(stride)} == 0")
            shifted = f"{shifted} // {sizes(stride)}"
        conditions.append(f"{shifted} < {sizes(n)}")
        parts.append(shifted)
    inside = read(0, parts)
    value = read(1, [])
    return f"({inside} if {' and '.join(conditions)} else {value})" if conditions else inside


@view("concatenate")
def _concatenate(eqn, read, sizes, idx):
    axis = eqn.kw["axis"]
    rank = eqn.outs[0].aval.ndim
    expr, offset = "", 0
    pieces = []
    for k, atom in enumerate(eqn.ins):
        n = atom.aval.shape[axis]
        at = f"{idx[axis]} - {sizes(offset)}" if offset else idx[axis]
        parts = [at if d == axis else idx[d] for d in range(rank)]
        pieces.append((offset + n, read(k, parts)))
        offset += n
    expr = pieces[-1][1]
    for end, read in reversed(pieces[:-1]):
        expr = f"({read} if {idx[axis]} < {sizes(end)} else {expr})"
    return expr
