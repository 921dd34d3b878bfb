"""Passes inside sub-tapes: `in_bodies(run, tape)` applies a pass to the body of every eqn
holding sub-tapes (loops, branches, checkpoints; recursively), then to the tape itself. A
pass keeps a tape's inputs and outputs, so a body stays a valid body of its eqn. The bodies of
`fused` eqns are made by fusion (`passes.fused`) and left alone."""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..ir import Eqn, Tape, make_params, sub_tapes
from ..ops import OPS, Kind
from .rewrite import expand


def in_bodies(run: Callable[[Tape], Tape], tape: Tape) -> Tape:
    eqns = tuple(_eqn_in_bodies(run, e) for e in tape.eqns)
    if any(a is not b for a, b in zip(eqns, tape.eqns)):
        tape = dataclasses.replace(tape, eqns=eqns)
    return run(tape)


def _eqn_in_bodies(run: Callable[[Tape], Tape], eqn: Eqn) -> Eqn:
    bodies = sub_tapes(eqn)
    if not bodies or OPS[eqn.op].kind is Kind.FUSED:
        return eqn
    params = dict(eqn.params)
    params.update((key, in_bodies(run, body)) for key, body in bodies)
    return Eqn(eqn.op, eqn.ins, eqn.outs, make_params(params), eqn.src)


def unfuse(tape: Tape) -> Tape:
    """`tape` with every `fused` eqn (in bodies too) replaced by its eqns: what autodiff can
    differentiate again (fusion keeps names, so the eqns fit in place)."""
    def rewrite(eqn: Eqn) -> list[Eqn] | None:
        if OPS[eqn.op].kind is Kind.FUSED:
            return list(unfuse(eqn.kw["body"]).eqns)
        if sub_tapes(eqn):
            params = dict(eqn.params)
            params.update((key, unfuse(body)) for key, body in sub_tapes(eqn))
            return [Eqn(eqn.op, eqn.ins, eqn.outs, make_params(params), eqn.src)]
        return None
    return expand(tape, rewrite)
