"""Batching: run a tape on inputs with an extra leading axis, recording one batched eqn per eqn.

`batched_inline(tape, args, batched)` is `interpret.inline` for inputs of which those marked
`batched` carry a leading batch axis of the same size (the others are shared by every batch
element). Each eqn that reads a batched value is recorded once, on the whole batch, by the
`batch` rule of its op record (elementwise ops by their kind), so the tape does not grow with
the batch size. An op declared `MAPPED` (user code: custom_vjp functions, njit kernels; control
flow), or whose rule has no case for these operands (NotImplemented), runs in a compiled loop
over the batch axis: the mapper control flow installs (`install_mapper`, a scan); without one
it is an error at tracing. Outputs come back with their flags. derived_tapes.py batches a
function's tape this way (vmap's `mapped_tape`), and its `jacobian_tape` runs a reverse sweep
on a batch of one-hot cotangents: every row of a Jacobian in one pass.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .errors import UnsupportedOperationError, at_source, user_source
from .ir import Lit, Tape
from .ops import OPS, Kind
from .ops import layout as L
from .trace import bind_recorded, recording_source

# fn(op, values, flags, params) -> out (a tuple for ops with several results)
Mapper = Callable[[Any, list, list, dict], Any]
_mapper: Mapper | None = None


def install_mapper(fn: Mapper) -> None:
    """Installed by control flow (a scan over the batch axis): how an op without a batching
    rule runs on batched operands."""
    global _mapper
    _mapper = fn


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
                out = _batched(op, values, flags, eqn.kw, eqn.src)
        outs = out if op.multiple_results else (out,)
        env.update((o.name, (v, any(flags))) for o, v in zip(eqn.outs, outs))
    return [read(o) for o in tape.outvars]


def batched_body(body: Tape, values: Sequence[Any], flags: Sequence[bool]) -> tuple:
    """A sub-tape's outputs on batched operands, every one with the batch axis (the batching
    rule of ops that run a body: fused groups, segments)."""
    size = batch_size(values, flags)
    return tuple(v if f else broadcast_batch(v, size)
                 for v, f in batched_inline(body, values, flags))


def batch_size(values: Sequence[Any], flags: Sequence[bool]) -> int:
    """The length of the batch axis of the flagged operands."""
    return next(np.shape(v)[0] for v, f in zip(values, flags) if f)


def broadcast_batch(x: Any, size: int) -> Any:
    """`x` repeated along a new leading batch axis of `size` (recorded)."""
    return bind_recorded(L.broadcast_in_dim, [x], {
        "shape": (size,) + np.shape(x), "dims": L.shifted(range(np.ndim(x)))})


def _batched(op: Any, values: list[Any], flags: list[bool], params: dict, src: Any) -> Any:
    """The op's batching rule applied, or the op mapped over the batch axis where it has none."""
    if callable(op.batch):          # not MAPPED
        out = op.batch(_Binder(op), values, flags, **params)
        if out is not NotImplemented:
            return out
    if _mapper is None:
        raise UnsupportedOperationError(at_source(
            f"vmap: {op.name} has no batching rule and runs in a compiled loop over the batch "
            f"axis, which needs tapejit.control (import tapejit, not only its submodules)",
            src or user_source()))
    return _mapper(op, values, flags, params)


class _Binder:
    """A batching rule's `bind`: `bind(*values, **params)` records its op (with new params),
    `bind.record(other, *values, **params)` another op; both also on constants only (a fill is
    an op of the tape, not a constant array)."""

    def __init__(self, op: Any) -> None:
        self.op = op

    def __call__(self, *values: Any, **params: Any) -> Any:
        return bind_recorded(self.op, values, params)

    @staticmethod
    def record(op: Any, *values: Any, **params: Any) -> Any:
        return bind_recorded(op, values, params)


def _elementwise(op: Any, values: list[Any], flags: list[bool], params: dict, rank: int) -> Any:
    # batched operands get unit axes after the batch axis up to the output's rank, so numpy's
    # right-aligned broadcasting lines the rest up; shared operands broadcast as they are
    aligned = [L.reshape(v, shape=(np.shape(v)[0],) + (1,) * (rank + 1 - np.ndim(v))
                         + np.shape(v)[1:]) if f and np.ndim(v) < rank + 1 else v
               for v, f in zip(values, flags)]
    return bind_recorded(op, aligned, params)
