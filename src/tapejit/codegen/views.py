"""Layout ops as index maps: the scalar expression reading an eqn's operand(s) at the loop
position `i0, i1, ...` of its output, from the `View` of its op record (ops/layout.py). Inside
a loop nest these cost no memory traffic of their own: a transpose, slice, flip, pad or
concatenate feeding elementwise work is fused with it.
"""
from __future__ import annotations

from typing import Callable

from ..ir import Eqn
from ..ops import OPS, is_view
from .writer import Sizes

__all__ = ["is_view", "view_expr"]

Reader = Callable[[int, list[str]], str]  # (operand number, index parts) -> expression


def view_expr(eqn: Eqn, read: Reader, sizes: Sizes, idx: list[str]) -> str:
    """The value at output position `idx` (one index expression per output axis)."""
    idx = [_atomic(i) for i in idx]    # views compose: an index may be another's expression
    return OPS[eqn.op].view.index(eqn, read, sizes, idx)


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
