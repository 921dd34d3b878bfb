"""What the rewriting passes share: the forward walk, where each eqn (its inputs already
substituted) is kept, replaced by an existing atom (which its readers then use), or rewritten
into another eqn computing the same outputs; the expansion of eqns into several; and fresh
names for the eqns a pass adds."""
from __future__ import annotations

import itertools
from typing import Callable

from ..ir import Atom, Eqn, Lit, Tape, Var

# what becomes of an eqn: None (kept), a rewritten eqn, or the atom (atoms, one per output)
# its readers use instead
Decide = Callable[[Eqn], "Atom | tuple[Atom, ...] | Eqn | None"]


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
        elif isinstance(replacement, (Var, Lit)):
            subst[eqn.outs[0].name] = replacement
        else:
            subst.update((o.name, a) for o, a in zip(eqn.outs, replacement))
    if tape.reverse_start is not None and reverse_start is None:
        reverse_start = len(eqns)
    return Tape(tape.invars, tuple(eqns), tuple(read(o) for o in tape.outvars),
                tape.constvars, tape.consts, reverse_start)


def expand(tape: Tape, rewrite: Callable[[Eqn], "list[Eqn] | None"]) -> Tape:
    """`tape` with each eqn for which `rewrite` returns eqns (computing its outputs, in order)
    replaced by them; the same tape when it returns None for every eqn."""
    eqns: list[Eqn] = []
    reverse_start = None
    changed = False
    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            reverse_start = len(eqns)
        replacement = rewrite(eqn)
        changed |= replacement is not None
        eqns.extend([eqn] if replacement is None else replacement)
    if not changed:
        return tape
    if tape.reverse_start is not None and reverse_start is None:
        reverse_start = len(eqns)
    return Tape(tape.invars, tuple(eqns), tape.outvars, tape.constvars, tape.consts,
                reverse_start)


def fresh_names(tape: Tape, sep: str) -> Callable[[str], str]:
    """A function giving names `<base><sep><k>` that no var of `tape`, nor an earlier call,
    has."""
    taken = {v.name for v in tape.invars + tape.constvars}
    taken.update(o.name for eqn in tape.eqns for o in eqn.outs)
    counter = itertools.count(1)

    def fresh(base: str) -> str:
        while True:
            name = f"{base}{sep}{next(counter)}"
            if name not in taken:
                taken.add(name)
                return name
    return fresh
