"""Dead-code elimination: drop eqns whose outputs nothing reads, and constants no eqn reads."""
from __future__ import annotations

from ..ir import Tape, Var


def dce(tape: Tape) -> Tape:
    live = {o.name for o in tape.outvars if isinstance(o, Var)}
    kept = []
    for i, eqn in reversed(list(enumerate(tape.eqns))):
        if any(o.name in live for o in eqn.outs):
            kept.append((i, eqn))
            live.update(a.name for a in eqn.ins if isinstance(a, Var))
    kept.reverse()
    consts = [(v, c) for v, c in zip(tape.constvars, tape.consts) if v.name in live]
    reverse_start = None
    if tape.reverse_start is not None:
        reverse_start = sum(1 for i, _ in kept if i < tape.reverse_start)
    return Tape(tape.invars, tuple(e for _, e in kept), tape.outvars,
                tuple(v for v, _ in consts), tuple(c for _, c in consts), reverse_start)
