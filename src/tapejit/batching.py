"""Batching: run a tape on inputs with an extra leading axis, recording one batched eqn per eqn.

`batched_inline(tape, args, batched)` is `interpret.inline` for inputs of which those marked
`batched` carry a leading batch axis of the same size (the others are shared by every batch
element). Each eqn that reads a batched value is recorded once, on the whole batch, by the
`batch` rule of its op record (elementwise ops by their kind); an op declared `UNROLLED` (or
whose rule has no case for these operands) is recorded once per batch element and the results
stacked (correct for every op, just longer). Outputs come back
with their flags. `transforms.jacobian_tape` runs a reverse sweep this way on a batch of
one-hot cotangents: every row of a Jacobian in one pass.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .ir import Lit, Tape
from .ops import OPS, Kind
from .ops import layout as L
from .trace import bind_recorded, recording_source


def batched_inline(tape: Tape, args: Sequence[Any], batched: Sequence[bool]
                   ) -> list[tuple[Any, bool]]:
    """The tape applied to `args` (recorded into the current trace); (output, batched) pairs."""
    env: dict[str, tuple[Any, bool]] = {v.name: (a, b) for v, a, b in
                                        zip(tape.invars, args, batched)}
    env.update((v.name, (c, False)) for v, c in zip(tape.constvars, tape.consts))

    def read(atom: Any) -> tuple[Any, bool]:
        if isinstance(atom, Lit):
            return atom.aval.dtype.type(atom.value), False
        return env[atom.name]

    for eqn in tape.eqns:
        ins = [read(a) for a in eqn.ins]
        values, flags = [v for v, _ in ins], [f for _, f in ins]
        op = OPS[eqn.op]
        with recording_source(eqn.src):
            if not any(flags):
                out = bind_recorded(op, values, eqn.kw)
            elif op.kind is Kind.ELEMENTWISE:
                out = _elementwise(op, values, flags, eqn.kw, eqn.outs[0].aval.ndim)
            else:
                out = _batched(op, values, flags, eqn.kw)
        outs = out if op.multiple_results else (out,)
        env.update((o.name, (v, any(flags))) for o, v in zip(eqn.outs, outs))
    return [read(o) for o in tape.outvars]


def _size(values: list[Any], flags: list[bool]) -> int:
    return next(np.shape(v)[0] for v, f in zip(values, flags) if f)


def _batched(op: Any, values: list[Any], flags: list[bool], params: dict) -> Any:
    """The op's batching rule applied, or the op once per batch element where it has none."""
    if callable(op.batch):          # not UNROLLED
        out = op.batch(lambda *xs, **p: bind_recorded(op, xs, p), values, flags, **params)
        if out is not NotImplemented:
            return out
    return _unrolled(op, values, flags, params)


def _unrolled(op: Any, values: list[Any], flags: list[bool], params: dict) -> Any:
    """The op once per batch element, stacked (the rule of ops without one)."""
    results = [bind_recorded(op, [v[b] if f else v for v, f in zip(values, flags)], params)
               for b in range(_size(values, flags))]
    if op.multiple_results:
        return tuple(np.stack(list(outs)) for outs in zip(*results))
    return np.stack(results)


def _elementwise(op: Any, values: list[Any], flags: list[bool], params: dict, rank: int) -> Any:
    # batched operands get unit axes after the batch axis up to the output's rank, so numpy's
    # right-aligned broadcasting lines the rest up; shared operands broadcast as they are
    aligned = [L.reshape(v, shape=(np.shape(v)[0],) + (1,) * (rank + 1 - np.ndim(v))
                         + np.shape(v)[1:]) if f and np.ndim(v) < rank + 1 else v
               for v, f in zip(values, flags)]
    return bind_recorded(op, aligned, params)
