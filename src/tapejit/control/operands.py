"""How the control-flow eqns lay out their operands and sub-tapes (shared by the primitives'
rules and their numba code)."""
from __future__ import annotations

from typing import Any, Sequence


def split(seq: Sequence[Any], *counts: int) -> list[list[Any]]:
    """`seq` cut into consecutive parts of `counts` (then the rest)."""
    parts, start = [], 0
    for c in counts:
        parts.append(list(seq[start:start + c]))
        start += c
    return parts + [list(seq[start:])]


def branches(params: dict[str, Any]) -> list[Any]:
    """A cond's branches, in order (its params `branch0`, `branch1`, ...)."""
    return [params[f"branch{k}"] for k in range(len(params))]
