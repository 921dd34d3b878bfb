"""Merging a saving scan into its primal twin (the `merge_scans` pass).

Reverse mode records, for a scan of static length, the same scan again with `save=True`: it
also stacks the carries its reverse sweep reads (control/primitives.py). `merge_saving_scans`
runs that one in the primal's place (its first outputs are the primal's) and drops the copy,
so the steps run once. Eqns are matched on op, inputs and every param but `save`.
"""
from __future__ import annotations

from typing import Any

from ..ir import Atom, Eqn, Tape
from .rewrite import forward_rewrite


def _key(eqn: Eqn) -> tuple[Any, ...]:
    return (eqn.op, eqn.ins, tuple((k, v) for k, v in eqn.params if k != "save"))


def _saves(eqn: Eqn) -> bool:
    return any(k == "save" and v is True for k, v in eqn.params)


def merge_saving_scans(tape: Tape) -> Tape:
    saving = {}
    for eqn in tape.eqns:
        if _saves(eqn):
            saving.setdefault(_key(eqn), eqn)
    if not saving:
        return tape
    merged: dict[tuple, Eqn] = {}

    def decide(eqn: Eqn) -> Eqn | tuple[Atom, ...] | None:
        key = _key(eqn)
        if not _saves(eqn) and key in saving and key not in merged:
            twin = saving[key]
            merged[key] = Eqn(eqn.op, eqn.ins, eqn.outs + twin.outs[len(eqn.outs):],
                              twin.params, eqn.src)
            return merged[key]
        if _saves(eqn) and key in merged:
            return merged[key].outs
        return None
    return forward_rewrite(tape, decide)
