"""The forward walk shared by the rewriting passes: each eqn (its inputs already substituted)
is kept, replaced by an existing atom (which its readers then use), or rewritten into another
eqn computing the same outputs."""
from __future__ import annotations

from typing import Callable

from ..ir import Atom, Eqn, Tape, Var

Decide = Callable[[Eqn], "Atom | Eqn | None"]   # replacement atom, rewritten eqn, or None


def forward_rewrite(tape: Tape, decide: Decide) -> Tape:
    subst: dict[str, Atom] = {}
    eqns: list[Eqn] = []
    reverse_start = None

    def read(atom: Atom) -> Atom:
        return subst.get(atom.name, atom) if isinstance(atom, Var) else atom

    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            reverse_start = len(eqns)
        ins = tuple(read(a) for a in eqn.ins)
        if ins != eqn.ins:
            eqn = Eqn(eqn.op, ins, eqn.outs, eqn.params, eqn.src)
        replacement = decide(eqn)
        if replacement is None:
            eqns.append(eqn)
        elif isinstance(replacement, Eqn):
            eqns.append(replacement)
        else:
            subst[eqn.outs[0].name] = replacement
    if tape.reverse_start is not None and reverse_start is None:
        reverse_start = len(eqns)
    return Tape(tape.invars, tuple(eqns), tuple(read(o) for o in tape.outvars),
                tape.constvars, tape.consts, reverse_start)
