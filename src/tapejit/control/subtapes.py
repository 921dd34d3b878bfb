"""Closed sub-tapes: a Python function traced into one (`close`), and a branch given unused
inputs for the other branches' captured values (`pad_inputs`). The control-flow functions
(control/__init__.py), the primitives' VJPs and their batching rules make bodies this way."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..avals import Aval
from ..ir import Tape, Var, dce
from ..recording import with_traced_buffers
from ..trace import new_trace, var_of


def close(fn: Callable[[list[Any]], Sequence[Any]], avals: Sequence[Aval],
          ) -> tuple[Any, list[Any]]:
    """Trace `fn` on tracers of `avals` into a closed sub-tape: what it captures (arrays,
    tracers of enclosing traces) becomes extra inputs after `avals`' ones. Returns the tape
    and the captured values. (A buffer `fn` makes and fills with traced values traces it
    again: trace.with_traced_buffers.)"""
    def once() -> tuple[Any, list[Any]]:
        with new_trace() as trace:
            tracers = [trace.new_tracer(a) for a in avals]
            invars = tuple(var_of(t) for t in tracers)
            outs = fn(tracers)
            tape = dce(trace.to_tape(invars, outs))
        return Tape(invars + tape.constvars, tape.eqns, tape.outvars), list(tape.consts)
    return with_traced_buffers(once)


def pad_inputs(tape: Any, n_base: int, before: list[Aval], after: list[Aval]) -> Any:
    """`tape` taking, around its own captured inputs, unused inputs for the other branches'."""
    taken = {v.name for v in tape.invars} | {o.name for e in tape.eqns for o in e.outs}
    fresh = iter(f"unused{k}" for k in range(len(taken) + len(before) + len(after) + 1)
                 if f"unused{k}" not in taken)
    extra = [Var(next(fresh), a) for a in before], [Var(next(fresh), a) for a in after]
    invars = (tape.invars[:n_base] + tuple(extra[0]) + tape.invars[n_base:] + tuple(extra[1]))
    return Tape(invars, tape.eqns, tape.outvars)
