"""Reverse mode as a tape -> tape transform.

`vjp_tape(tape, wrt, seeds)` returns one joint tape that computes the primal outputs and the
cotangents of the `wrt` inputs: the primal eqns, then (after `reverse_start`) the reverse sweep,
recorded by running each active eqn's VJP rule on tracers in reverse order. Because the rules are
written with traced ops, the joint tape is ordinary IR: it can be differentiated again.

The cross-cutting parts of reverse mode live here and only here:
- activity: only eqns that depend on a `wrt` input and produce floats get a VJP;
- unbroadcasting: a rule may return a cotangent of the output's broadcast shape; it is summed
  back to the input's shape;
- accumulation: cotangents of a var read several times are added;
- zeros: a `wrt` input that the outputs do not depend on gets a zero cotangent.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .avals import Aval
from .errors import UnsupportedOperationError, at_source
from .ir import Eqn, Tape, Var, dce
from .ops import OPS, NoDerivative
from .ops import layout as L
from .ops import reduce as R
from .trace import Tracer, new_trace, recording_source, var_of

ONE = "one"      # seed the output's cotangent with ones (grad of a scalar)
INPUT = "input"  # the output's cotangent is a new input of the joint tape (vjp)


def unbroadcast(ct: Any, aval: Aval) -> Any:
    """Sum a cotangent of a broadcast shape back to `aval`'s shape."""
    shape = np.shape(ct)
    if shape == aval.shape:
        return ct
    lead = len(shape) - len(aval.shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(aval.shape)
                                      if n == 1 and shape[lead + i] != 1)
    return L.reshape(R.reduce_sum(ct, axes=axes), shape=aval.shape)


def active_vars(tape: Tape, wrt: Sequence[int]) -> set[str]:
    """Names of the float vars that depend on the `wrt` inputs."""
    active = {tape.invars[i].name for i in wrt}
    for eqn in tape.eqns:
        if any(isinstance(a, Var) and a.name in active for a in eqn.ins):
            active.update(o.name for o in eqn.outs if o.aval.is_float)
    return active


def vjp_tape(tape: Tape, wrt: Sequence[int], seeds: Sequence[str | None]) -> Tape:
    """The joint tape: inputs are the primal inputs, then one cotangent input per output seeded
    with INPUT; outputs are the primal outputs, then the cotangent of each `wrt` input."""
    active = active_vars(tape, wrt)
    with new_trace() as trace:
        inputs = trace.extend(tape)
        primal_names = set(trace._names)
        ct_inputs = [trace.new_var(o.aval, f"ct_{o}") for o, s in zip(tape.outvars, seeds)
                     if s == INPUT]
        cts: dict[str, Any] = {}
        renames: dict[str, str] = {}
        fresh = iter(ct_inputs)
        for out, seed in zip(tape.outvars, seeds):
            ct = (Tracer(trace, next(fresh)) if seed == INPUT
                  else filled(trace, out.aval, 1) if seed == ONE else None)
            if ct is not None and isinstance(out, Var) and out.name in active:
                _accumulate(cts, out.name, ct)
        for eqn in reversed(tape.eqns):
            out_cts = [cts.pop(o.name, None) for o in eqn.outs]
            if all(ct is None for ct in out_cts):
                continue
            for out, ct in zip(eqn.outs, out_cts):
                _name_cotangent(ct, out.name, renames, primal_names)
            ins = [Tracer(trace, a) if isinstance(a, Var) else a.aval.dtype.type(a.value)
                   for a in eqn.ins]
            outs = [Tracer(trace, o) for o in eqn.outs]
            with recording_source(eqn.src):
                op = OPS[eqn.op]
                if op.multiple_results:      # tuples of cotangents (None: none) and outputs
                    in_cts = op.vjp(tuple(out_cts), tuple(outs), *ins, **eqn.kw)
                else:
                    in_cts = op.vjp(out_cts[0], outs[0], *ins, **eqn.kw)
                for atom, ct_in in zip(eqn.ins, in_cts):
                    if ct_in is not None and isinstance(atom, Var) and atom.name in active:
                        if isinstance(ct_in, NoDerivative):
                            raise UnsupportedOperationError(at_source(ct_in.message, eqn.src))
                        _accumulate(cts, atom.name, unbroadcast(ct_in, atom.aval))
        grads = []
        for i in wrt:
            var = tape.invars[i]
            ct = cts.get(var.name)
            if ct is None:
                ct = filled(trace, var.aval, 0)
            _name_cotangent(ct, var.name, renames, primal_names)
            grads.append(ct)
        joint = trace.to_tape([var_of(t) for t in inputs] + ct_inputs, list(tape.outvars) + grads)
    joint = Tape(joint.invars, joint.eqns, joint.outvars, joint.constvars, joint.consts,
                 reverse_start=len(tape.eqns))
    return _rename(dce(joint), renames)


def filled(trace: Any, aval: Aval, value: float) -> Tracer:
    """A traced array of `aval` filled with `value` (recorded, not a constant array)."""
    return trace.record(L.broadcast_in_dim, (np.full((), value, aval.dtype),),
                        {"shape": aval.shape, "dims": ()})


def _accumulate(cts: dict[str, Any], name: str, ct: Any) -> None:
    cts[name] = ct if name not in cts else cts[name] + ct


def _name_cotangent(ct: Any, primal: str, renames: dict[str, str],
                    primal_names: set[str]) -> None:
    """Plan to call the var holding the final cotangent of `primal` `ct_<primal>`, when it is
    a var of the reverse sweep that has no such name yet."""
    if (isinstance(ct, Tracer) and var_of(ct).name not in primal_names
            and var_of(ct).name not in renames and not var_of(ct).name.startswith("ct_")):
        renames[var_of(ct).name] = f"ct_{primal}"


def _rename(tape: Tape, renames: dict[str, str]) -> Tape:
    computed = {o.name for e in tape.eqns for o in e.outs}
    taken = computed | {v.name for v in tape.invars + tape.constvars}
    mapping = {old: new for old, new in renames.items() if new not in taken and old in computed}
    if not mapping:
        return tape

    def sub(atom: Any) -> Any:
        return Var(mapping[atom.name], atom.aval) if isinstance(atom, Var) and \
            atom.name in mapping else atom

    eqns = tuple(Eqn(e.op, tuple(map(sub, e.ins)), tuple(map(sub, e.outs)), e.params, e.src)
                 for e in tape.eqns)
    return Tape(tape.invars, eqns, tuple(map(sub, tape.outvars)), tape.constvars, tape.consts,
                tape.reverse_start)
