"""Common-subexpression elimination: an eqn equal to an earlier one (same op, inputs and params)
is dropped and its readers use the earlier output. All primitives are pure, so this is safe."""
from __future__ import annotations

from ..ir import Atom, Eqn, Tape, Var


def cse(tape: Tape) -> Tape:
    seen: dict[tuple, Var] = {}
    subst: dict[str, Atom] = {}
    eqns: list[Eqn] = []
    reverse_start = None

    def read(atom: Atom) -> Atom:
        return subst.get(atom.name, atom) if isinstance(atom, Var) else atom

    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            reverse_start = len(eqns)
        ins = tuple(read(a) for a in eqn.ins)
        key = (eqn.op, ins, eqn.params)
        if key in seen:
            subst[eqn.outs[0].name] = seen[key]
            continue
        eqn = eqn if ins == eqn.ins else Eqn(eqn.op, ins, eqn.outs, eqn.params, eqn.src)
        seen[key] = eqn.outs[0]
        eqns.append(eqn)
    if tape.reverse_start is not None and reverse_start is None:
        reverse_start = len(eqns)
    return Tape(tape.invars, tuple(eqns), tuple(read(o) for o in tape.outvars),
                tape.constvars, tape.consts, reverse_start)
