"""Dead-code elimination: drop eqns whose outputs nothing reads, and constants no eqn reads."""
from __future__ import annotations

from ..ir import Tape, Var


def dce(tape: Tape) -> Tape:
    live = {o.name for o in tape.outvars if isinstance(o, Var)}
    keep = [False] * len(tape.eqns)
    for i in range(len(tape.eqns) - 1, -1, -1):
        eqn = tape.eqns[i]
        if eqn.outs[0].name in live or any(o.name in live for o in eqn.outs[1:]):
            keep[i] = True
            for a in eqn.ins:
                if type(a) is Var:
                    live.add(a.name)
    eqns = tuple(e for e, k in zip(tape.eqns, keep) if k)
    consts = [(v, c) for v, c in zip(tape.constvars, tape.consts) if v.name in live]
    reverse_start = None
    if tape.reverse_start is not None:
        reverse_start = sum(keep[:tape.reverse_start])
    return Tape(tape.invars, eqns, tape.outvars,
                tuple(v for v, _ in consts), tuple(c for _, c in consts), reverse_start)
