"""Output finishing: how a program's outputs (arrays) become what a transform returns.

A transform's finisher (its record's `finish`) puts the outputs into the structures the user
expects; these are its parts: 0-d outputs become numpy scalars (`unbox`, `getter`), except
those kept as arrays (the gradient of a 0-d array argument), and tracers stay tracers when the
program is inlined into an enclosing trace (`unbox_traced`). `as_output_tree` is the finisher
of a program whose outputs are its function's (jit, vmap).
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np

from ..ir import Tape, Var
from ..pytree import unflatten
from ..trace import Tracer
from .record import Finish, Specialization


def getter(tape: Tape, k: int, keep: bool = False) -> Callable[[Sequence[Any]], Any]:
    """`outs -> result` for output `k` alone: `unbox` of one output."""
    if tape.outvars[k].aval.ndim == 0 and not keep:
        return lambda outs: outs[k][()]
    return operator.itemgetter(k)


def unbox(tape: Tape, keep: Sequence[bool]) -> Callable[[Sequence[Any]], list[Any]]:
    """How a program's outputs become results: 0-d arrays become numpy scalars, except those
    marked `keep` (e.g. the gradient of a 0-d array argument)."""
    scalar = [o.aval.ndim == 0 and not k for o, k in zip(tape.outvars, keep)]
    if not any(scalar):
        return list
    return lambda outs: [o[()] if s else o for o, s in zip(outs, scalar)]


def unbox_traced(keep: Sequence[bool]) -> Callable[[Sequence[Any]], list[Any]]:
    """`unbox` for a tape inlined into a trace: tracers stay; a concrete output marked `keep`
    becomes an array."""
    return lambda outs: [o if isinstance(o, Tracer) or not k else np.asarray(o)
                         for o, k in zip(outs, keep)]


def unboxing(tape: Tape, keep: Sequence[bool], traced: bool
             ) -> Callable[[Sequence[Any]], list[Any]]:
    """`unbox_traced(keep)` in a trace, else `unbox(tape, keep)`."""
    return unbox_traced(keep) if traced else unbox(tape, keep)


def owning(finish: Finish, tape: Tape) -> Finish:
    """`finish` of outputs that are the caller's own arrays: an output that is an input, a
    program constant or a view (of either, or of a workspace) is copied, so that writing into
    a result (`g *= 0.5`) can change neither the arguments nor a later call's results."""
    inputs = set(tape.invars)
    risky = [k for k, v in enumerate(tape.outvars) if v in inputs or not isinstance(v, Var)
             or v in tape.constvars]

    def owned(outs: Sequence[Any]) -> Any:
        for o in outs:              # (the common case, fast: fresh arrays, nothing risky)
            if getattr(o, "base", None) is not None:
                break
        else:
            if not risky:
                return finish(outs)
        return finish([np.array(o) if k in risky or getattr(o, "base", None) is not None
                       else o for k, o in enumerate(outs)])
    return owned


def as_output_tree(t: Any, program: Specialization, call: Any, traced: bool) -> Finish:
    """The finisher of a program whose outputs are the function's, as its pytree `program.out`
    (jit, vmap)."""
    keep = [False] * len(program.tape.outvars)
    outs_of = unboxing(program.tape, keep, traced)
    out_td = program.out
    assert out_td is not None
    if out_td.kind == "leaf":
        return getter(program.tape, 0) if not traced else lambda outs: outs_of(outs)[0]
    return lambda outs: unflatten(out_td, outs_of(outs))


def as_list(t: Any, program: Specialization, call: Any, traced: bool) -> Finish:
    """The finisher that returns the outputs as they are (a second program's)."""
    return list
