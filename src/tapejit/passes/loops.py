"""Merging a saving scan into its primal twin (run by `cse`).

Reverse mode records, for a scan of static length, the same scan again with `save=True`: it
also stacks the carries its reverse sweep reads (ops/control.py). `merge_saving_scans` runs
that one in the primal's place (its first outputs are the primal's) and drops the copy, so the
steps run once. Eqns are matched on op, inputs and every param but `save`.
"""
from __future__ import annotations

from typing import Any

from ..ir import Atom, Eqn, Tape, Var


def _key(eqn: Eqn) -> tuple[Any, ...]:
    return (eqn.op, eqn.ins, tuple((k, v) for k, v in eqn.params if k != "save"))


def _saves(eqn: Eqn) -> bool:
    return any(k == "save" and v is True for k, v in eqn.params)


def merge_saving_scans(tape: Tape) -> Tape:
    saving: dict[tuple, Eqn] = {}
    for eqn in tape.eqns:
        if _saves(eqn):
            saving.setdefault(_key(eqn), eqn)
    if not saving:
        return tape
    subst: dict[str, Atom] = {}
    merged: dict[tuple, Eqn] = {}
    eqns: list[Eqn] = []
    reverse_start = None
    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            reverse_start = len(eqns)
        ins = tuple(subst.get(a.name, a) if isinstance(a, Var) else a for a in eqn.ins)
        eqn = eqn._replace(ins=ins)
        key = _key(eqn)
        if not _saves(eqn) and key in saving and key not in merged:
            twin = saving[key]
            eqn = Eqn(eqn.op, eqn.ins, eqn.outs + twin.outs[len(eqn.outs):], twin.params,
                      eqn.src)
            merged[key] = eqn
        elif _saves(eqn) and key in merged:
            subst.update((a.name, b) for a, b in zip(eqn.outs, merged[key].outs))
            continue
        eqns.append(eqn)
    if tape.reverse_start is not None and reverse_start is None:
        reverse_start = len(eqns)
    outvars = tuple(subst.get(a.name, a) if isinstance(a, Var) else a for a in tape.outvars)
    return Tape(tape.invars, tuple(eqns), outvars, tape.constvars, tape.consts, reverse_start)
