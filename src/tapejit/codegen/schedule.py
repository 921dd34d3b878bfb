"""The steps of a fused tape, in order: each `fused` eqn is a `Loop` nest (passes/fuse.py), any
other eqn a `Call` with its own code (its op record's `cpu`/`cuda`)."""
from __future__ import annotations

import dataclasses

from ..ir import Eqn, Tape
from ..ops import OPS, Kind
from ..passes.fuse import Loop, Names, loop_of


@dataclasses.dataclass
class Call:
    eqn: Eqn


Step = Loop | Call


def steps(tape: Tape, dims: Names) -> list[Step]:
    """`dims`: the tape's dims by name (dims.py)."""
    return [loop_of(e.kw["body"], dims) if OPS[e.op].kind is Kind.FUSED else Call(e)
            for e in tape.eqns]
