"""Common-subexpression elimination: an eqn equal to an earlier one (same op, inputs and params)
is dropped and its readers use the earlier output. All primitives are pure, so this is safe."""
from __future__ import annotations

from ..ir import Atom, Eqn, Tape, Var
from .rewrite import forward_rewrite


def cse(tape: Tape) -> Tape:
    seen: dict[tuple, Var] = {}

    def decide(eqn: Eqn) -> Atom | None:
        if len(eqn.outs) > 1:
            return None
        key = (eqn.op, eqn.ins, eqn.params)
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = eqn.outs[0]
        return earlier

    return forward_rewrite(tape, decide)
