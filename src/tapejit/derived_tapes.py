"""Tapes derived from reverse mode: Tape -> Tape functions the transforms are made of.

All are built from `autodiff.vjp_tape` and `batching.batched_inline` alone:
- `split_joint` cuts a joint tape into its reverse sweep as a tape of its own (inputs: the
  residuals it reads, then the output cotangents). `jacobian_tape` runs the forward once and the
  reverse sweep once, batched over the rows of an identity matrix as cotangents: every row in
  one pass (reverse mode: best when outputs are fewer than inputs).
- `jvp_tape` transposes the VJP: the joint tape is linear in its cotangent inputs, so a second
  reverse pass with respect to them, seeded with the tangents, gives J @ tangent (forward mode
  without forward rules; it works through custom_vjp, whose bwd is ordinary IR). `jacfwd_tape`
  runs it once on a batch of one-hot tangents (best when inputs are fewer than outputs).
- `split_known` cuts a tape into what its first inputs determine and the rest (partial
  evaluation): `vjp` cuts the joint tape at the cotangents, `linearize` the JVP tape at the
  tangents, so `vjp_fn` and `f_jvp` run only the part that reads them, on stored residuals.
- `mapped_tape` is one example's tape run on a batch (`vmap`), mapped axes moved to the front.

In the layers: beside autodiff.py and batching.py, below the passes; the transforms
(transforms/ and the modules on it) put these tapes into programs.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import autodiff
from .avals import Aval
from .batching import batched_inline, broadcast_batch
from .errors import ArgumentError, ShapeError, at_source
from .interpret import inline
from .ir import Tape, Var, dce
from .ops import layout as L
from .trace import Tracer, new_trace, var_of


def split_joint(joint: Tape, n_primal_in: int, n_primal_out: int) -> Tape:
    """The reverse sweep of a joint tape (`vjp_tape`) as a tape: inputs are the values of the
    forward part it reads (residuals: primal inputs, forward eqn outputs), then the joint's
    cotangent inputs; outputs are the joint's cotangent outputs. The joint's constants it reads
    (e.g. the zeros a gather's VJP scatters into) stay constants of the new tape: they are
    no value of the forward part a caller could pass in."""
    start = joint.reverse_start if joint.reverse_start is not None else len(joint.eqns)
    reverse = joint.eqns[start:]
    cts = joint.invars[n_primal_in:]
    consts = {v.name: (v, c) for v, c in zip(joint.constvars, joint.consts)}
    defined = {o.name for e in reverse for o in e.outs} | {v.name for v in cts}
    residuals: dict[str, Var] = {}
    used: dict[str, tuple[Var, Any]] = {}
    for atom in [a for e in reverse for a in e.ins] + list(joint.outvars[n_primal_out:]):
        if not isinstance(atom, Var) or atom.name in defined:
            continue
        if atom.name in consts:
            used.setdefault(atom.name, consts[atom.name])
        else:
            residuals.setdefault(atom.name, atom)
    return Tape(tuple(residuals.values()) + tuple(cts), reverse, joint.outvars[n_primal_out:],
                tuple(v for v, _ in used.values()), tuple(c for _, c in used.values()))


def _forward(joint: Tape, n_primal_in: int, outs: Sequence[Any]) -> Tape:
    """The forward part of a joint tape, computing `outs` from the primal inputs."""
    start = joint.reverse_start if joint.reverse_start is not None else len(joint.eqns)
    return dce(Tape(joint.invars[:n_primal_in], joint.eqns[:start], tuple(outs),
                    joint.constvars, joint.consts))


def split_known(tape: Tape, n_known: int, n_first: int) -> tuple[Tape, Tape, tuple[int, ...]]:
    """Partial evaluation: `tape` cut into what its first `n_known` inputs determine and what
    reads its other inputs. The first tape: inputs those `n_known`; outputs `tape`'s first
    `n_first` (which must not read the other inputs), then the residuals it computes. The second:
    inputs the residuals (those that are inputs of `tape` first, then the computed ones), then
    `tape`'s other inputs; outputs `tape`'s other outputs. Eqns that read no input (fills) go
    where they are needed. Also returns the positions of the inputs that are residuals."""
    later = {v.name for v in tape.invars[n_known:]}
    free = {v.name for v in tape.constvars}
    first, second = [], []
    for eqn in tape.eqns:
        reads = [a.name for a in eqn.ins if isinstance(a, Var)]
        outs = [o.name for o in eqn.outs]
        if any(n in later for n in reads):
            later.update(outs)
            second.append(eqn)
        elif all(n in free for n in reads):
            free.update(outs)
            first.append(eqn)
            second.append(eqn)
        else:
            first.append(eqn)
    assert not any(isinstance(o, Var) and o.name in later for o in tape.outvars[:n_first])
    residuals: dict[str, Var] = {}
    for atom in [a for e in second for a in e.ins] + list(tape.outvars[n_first:]):
        if isinstance(atom, Var) and atom.name not in later and atom.name not in free:
            residuals.setdefault(atom.name, atom)
    known = {v.name: i for i, v in enumerate(tape.invars[:n_known])}
    from_inputs = tuple(sorted(known[n] for n in residuals if n in known))
    computed = tuple(v for n, v in residuals.items() if n not in known)
    saved = tuple(tape.invars[i] for i in from_inputs) + computed
    return (dce(Tape(tape.invars[:n_known], tuple(first), tuple(tape.outvars[:n_first]) + computed,
                     tape.constvars, tape.consts)),
            dce(Tape(saved + tuple(tape.invars[n_known:]), tuple(second),
                     tuple(tape.outvars[n_first:]), tape.constvars, tape.consts)),
            from_inputs)


def jacobian_tape(tape: Tape, wrt: Sequence[int], n_out: int) -> Tape:
    """Inputs: `tape`'s; outputs: for each of its first `n_out` outputs and each input in
    `wrt`, the Jacobian block of shape out.shape + input.shape; then its other outputs."""
    n_in, outs = len(tape.invars), tape.outvars[:n_out]
    joint = autodiff.vjp_tape(tape, wrt, [autodiff.INPUT] * n_out + [None] * (
        len(tape.outvars) - n_out))
    reverse = split_joint(joint, n_in, len(tape.outvars))
    n_res = len(reverse.invars) - n_out
    forward = _forward(joint, n_in,
                       reverse.invars[:n_res] + joint.outvars[n_out:len(tape.outvars)])
    sizes = [o.aval.size for o in outs]
    offsets, rows = np.cumsum([0] + sizes[:-1]), sum(sizes)
    with new_trace() as trace:
        inputs = [trace.new_tracer(v.aval, v.name) for v in tape.invars]
        if rows == 0:                      # no outputs: empty blocks
            blocks = [autodiff.filled(trace, v.aval.update(o.aval.shape + v.aval.shape), 0)
                      for o in outs for v in (tape.invars[i] for i in wrt)]
            return dce(trace.to_tape([var_of(t) for t in inputs],
                                     blocks + inline(tape, inputs)[n_out:]))
        values = inline(forward, inputs)
        residuals, rest = values[:n_res], values[n_res:]
        if rows == 1:                      # one row: the reverse sweep as it is
            ones = [autodiff.filled(trace, o.aval, 1) for o in outs]
            grads = [(np.reshape(g, (1,) + np.shape(g)), True)
                     for g in inline(reverse, residuals + ones)]
        else:   # the cotangents of all rows at once: output k's block of the identity's columns
            seeds = [Tracer(trace, trace.atom(np.eye(rows, dtype=o.aval.dtype)[:, at:at + m]))
                     .reshape((rows,) + o.aval.shape) for o, at, m in zip(outs, offsets, sizes)]
            grads = batched_inline(reverse, residuals + seeds, [False] * n_res + [True] * n_out)
        blocks = []
        for o, at, m in zip(outs, offsets, sizes):
            for (g, batched), i in zip(grads, wrt):
                shape = tape.invars[i].aval.shape
                if not batched:            # the same for every row (zeros)
                    g = np.broadcast_to(g, (rows,) + shape)
                blocks.append(g[at:at + m].reshape(o.aval.shape + shape))
        return dce(trace.to_tape([var_of(t) for t in inputs], blocks + rest))


def jacfwd_tape(tape: Tape, wrt: Sequence[int], n_out: int) -> Tape:
    """`jacobian_tape` in forward mode: the JVP tape (`jvp_tape`) run once on a batch of
    one-hot tangents, every column of every block in one pass."""
    n_in, outs, wrt = len(tape.invars), tape.outvars[:n_out], list(wrt)
    ins = [tape.invars[i].aval for i in wrt]
    sizes = [a.size for a in ins]
    offsets, cols = np.cumsum([0] + sizes[:-1]), sum(sizes)
    with new_trace() as trace:
        inputs = [trace.new_tracer(v.aval, v.name) for v in tape.invars]
        if cols == 0:                      # no inputs: empty blocks
            blocks = [autodiff.filled(trace, a.update(o.aval.shape + a.shape), 0)
                      for o in outs for a in ins]
            return dce(trace.to_tape([var_of(t) for t in inputs],
                                     blocks + inline(tape, inputs)[n_out:]))
        forward = jvp_tape(tape, n_out, wrt)
        if cols == 1:                      # one column: the JVP as it is
            ones = [autodiff.filled(trace, a, 1) for a in ins]
            results = [(np.reshape(t, (1,) + np.shape(t)) if k >= len(tape.outvars) else t, True)
                       for k, t in enumerate(inline(forward, inputs + ones))]
        else:   # the tangents of all columns at once: input k's block of the identity's columns
            seeds = [Tracer(trace, trace.atom(np.eye(cols, dtype=a.dtype)[:, at:at + m]))
                     .reshape((cols,) + a.shape) for a, at, m in zip(ins, offsets, sizes)]
            results = batched_inline(forward, inputs + seeds, [False] * n_in + [True] * len(wrt))
        blocks = []
        for o, (t, batched) in zip(outs, results[len(tape.outvars):]):
            if not batched:                # the same for every column (zeros)
                t = np.broadcast_to(t, (cols,) + o.aval.shape)
            for a, at, m in zip(ins, offsets, sizes):
                block = t[at:at + m].reshape(a.shape + o.aval.shape)
                blocks.append(np.transpose(block, tuple(range(a.ndim, block.ndim))
                                           + tuple(range(a.ndim))))
        rest = [v for v, _ in results[n_out:len(tape.outvars)]]
        return dce(trace.to_tape([var_of(t) for t in inputs], blocks + rest))


def jvp_tape(tape: Tape, n_out: int, wrt: Sequence[int] | None = None) -> Tape:
    """Inputs: `tape`'s, then a tangent per input in `wrt` (default: every float input);
    outputs: `tape`'s, then the tangents of its first `n_out` (J @ tangents; zeros for
    non-float outputs)."""
    n_in = len(tape.invars)
    wrt = [i for i, v in enumerate(tape.invars) if v.aval.is_float] if wrt is None else list(wrt)
    seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars[:n_out]]
    seeds += [None] * (len(tape.outvars) - n_out)
    joint = autodiff.vjp_tape(tape, wrt, seeds)
    n_ct = seeds.count(autodiff.INPUT)
    # the joint is linear in its cotangents: d<grads, t>/d ct = J @ t
    transposed = autodiff.vjp_tape(joint, range(n_in, n_in + n_ct),
                                   [None] * len(tape.outvars) + [autodiff.INPUT] * len(wrt))
    with new_trace() as trace:
        inputs = [trace.new_tracer(v.aval, v.name) for v in tape.invars]
        tangents = [trace.new_tracer(tape.invars[i].aval, f"t_{tape.invars[i].name}")
                    for i in wrt]
        cts = [autodiff.filled(trace, o.aval, 0) for o, s in zip(tape.outvars, seeds) if s]
        result = inline(transposed, inputs + cts + tangents)
        primal, jt = result[:len(tape.outvars)], iter(result[len(joint.outvars):])
        out_tangents = [next(jt) if s else autodiff.filled(trace, o.aval, 0)
                        for o, s in zip(tape.outvars[:n_out], seeds)]
        return dce(trace.to_tape([var_of(t) for t in inputs + tangents], primal + out_tangents))


def mapped_tape(tape: Tape, in_axes: Sequence[int | None], in_avals: Sequence[Aval],
                names: Sequence[str], size: int, out_axes: Sequence[int | None],
                src: tuple[str, int] | None) -> Tape:
    """`tape` (one example's) on inputs of avals `in_avals`, mapped along `in_axes` (None:
    shared), with outputs mapped along `out_axes` (normalized later, per output rank)."""
    with new_trace() as trace:
        inputs = [trace.new_tracer(a, n) for a, n in zip(in_avals, names)]
        moved = [x if a in (None, 0) else L.transpose(
            x, perm=(a,) + tuple(d for d in range(x.ndim) if d != a))
            for x, a in zip(inputs, in_axes)]
        results = []
        for k, ((value, mapped), axis) in enumerate(zip(
                batched_inline(tape, moved, [a is not None for a in in_axes]), out_axes)):
            if axis is None:
                if mapped:
                    raise ArgumentError(at_source(
                        f"vmap: out_axes is None for output {k} ({tape.outvars[k].aval} per "
                        f"example), but it depends on a mapped argument, so it differs "
                        f"between examples: give it an int out_axes", src))
                results.append(value)
                continue
            if not mapped:
                value = broadcast_batch(value, size)
            rank = np.ndim(value)
            if not -rank <= axis < rank:
                raise ShapeError(at_source(
                    f"vmap: out_axes {axis} is out of range for output {k} (rank {rank} with "
                    f"the batch axis)", src))
            axis %= rank
            if axis:
                value = L.transpose(value, perm=tuple(range(1, axis + 1)) + (0,)
                                    + tuple(range(axis + 1, rank)))
            results.append(value)
        return dce(trace.to_tape([var_of(t) for t in inputs], results))
