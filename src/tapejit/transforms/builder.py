"""The one program builder every transform goes through: trace -> dce -> re-roll -> the
record's tape transform -> optimize.

`build(t, call, key)` makes the program of transform `t` (a `CachedTransform`: its record,
function and options) for one signature: the record's `trace` (by default `t.fn` traced on
the call, unused eqns dropped: traced.trace_flat), its plain Python loops re-rolled into
scans (traced.rerolled; `TAPEJIT_REROLL=0` keeps them), the record's tape transform
(reverse mode, a Jacobian, a batch, a split into two programs), then the passes. What comes
after the trace is remembered on disk (traced.derived, disk/memo.py) for records that say what
their tape transform reads besides the tape (`how`). Each stage
is reported to `stages(name, tape)` when given: "traced", "rerolled" (only when a loop was
re-rolled), the record's `stage` (e.g. "autodiff"), then each pass of `passes.PIPELINE` by
name; `tj.explain` shows them, so it shows the program the transform runs.
"""
from __future__ import annotations

from typing import Any

from ..garbage import pausing_collection
from ..passes import optimize
from ..ir import Tape
from .traced import Stages, derived, rerolled, trace_flat
from .arguments import CacheKey
from .record import Specialization, Traced


@pausing_collection
def build(t: Any, call: Any, key: CacheKey, stages: Stages | None = None) -> Specialization:
    """The optimized program of transform `t` for `call` (its signature `key`)."""
    record = t.record
    traced = (record.trace or trace_function)(t, call, key)
    if record.built:
        return Specialization(traced.tape, traced.aux, out=traced.out)

    def derive(tape: Tape) -> tuple[Tape, Tape | None, tuple[int, ...], Any]:
        made = traced._replace(tape=tape)
        if record.tape is not None:
            made = record.tape(t, call, key, made)
            if stages is not None:
                stages(record.stage, made.tape)
        second = None if made.second is None else optimize(made.second)
        return optimize(made.tape, after_each=stages), second, made.from_inputs, made.meta

    if record.how is None:          # nothing to key it by on disk: derived here
        if stages is not None:
            stages("traced", traced.tape)
        tape, second, from_inputs, meta = derive(rerolled(traced.tape, stages))
    else:
        tape, second, from_inputs, meta = derived(traced.tape, record.how(t, call, key, traced),
                                                  derive, stages)
    return Specialization(tape, traced.aux, out=traced.out, second=second,
                          from_inputs=from_inputs, meta=meta)


def trace_function(t: Any, call: Any, key: CacheKey) -> Traced:
    """A record's default trace: `t.fn` traced on the call (its aux output too with the
    option has_aux)."""
    tape, out, aux = trace_flat(t.fn, call, t.has_aux)
    return Traced(tape, out, aux)
