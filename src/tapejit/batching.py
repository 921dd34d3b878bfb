"""Batching: run a tape on inputs with an extra leading axis, recording one batched eqn per eqn.

`batched_inline(tape, args, batched)` is `interpret.inline` for inputs of which those marked
`batched` carry a leading batch axis of the same size (the others are shared by every batch
element). Each eqn that reads a batched value is recorded once, on the whole batch, by the rule
of its op in `RULES` (elementwise ops by their kind); an op without a rule is recorded once per
batch element and the results stacked (correct for every op, just longer). Outputs come back
with their flags. `transforms.jacobian_tape` runs a reverse sweep this way on a batch of
one-hot cotangents: every row of a Jacobian in one pass.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .ir import Lit, Tape
from .ops import OPS, Kind
from .ops import layout as L
from .trace import bind_recorded, recording_source

Rule = Callable[[Any, list[Any], list[bool], dict[str, Any]], Any]
RULES: dict[str, Rule] = {}   # op name -> rule(op, args, batched flags, params) -> batched out


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
            elif eqn.op in RULES and not op.multiple_results:
                out = RULES[eqn.op](op, values, flags, eqn.kw)
            else:
                out = _unrolled(op, values, flags, eqn.kw)
        outs = out if op.multiple_results else (out,)
        env.update((o.name, (v, any(flags))) for o, v in zip(eqn.outs, outs))
    return [read(o) for o in tape.outvars]


def _size(values: list[Any], flags: list[bool]) -> int:
    return next(np.shape(v)[0] for v, f in zip(values, flags) if f)


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


def _shifted(axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(a + 1 for a in axes)


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn
    return register


def _one(op: Any, x: Any, **params: Any) -> Any:
    return bind_recorded(op, [x], params)


@rule("broadcast_in_dim")
def _broadcast(op, values, flags, p):
    x = values[0]
    return _one(op, x, shape=(np.shape(x)[0],) + tuple(p["shape"]),
                dims=(0,) + _shifted(p["dims"]))


@rule("reshape")
def _reshape(op, values, flags, p):
    return _one(op, values[0], shape=(np.shape(values[0])[0],) + tuple(p["shape"]))


@rule("transpose")
def _transpose(op, values, flags, p):
    return _one(op, values[0], perm=(0,) + _shifted(p["perm"]))


@rule("rev", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _axes(op, values, flags, p):
    return _one(op, values[0], **{**p, "axes": _shifted(p["axes"])})


@rule("argmax", "argmin", "cumsum", "cumprod")
def _axis(op, values, flags, p):
    return _one(op, values[0], **{**p, "axis": p["axis"] + 1})


@rule("slice")
def _slice(op, values, flags, p):
    return _one(op, values[0], start=(0,) + tuple(p["start"]),
                limit=(np.shape(values[0])[0],) + tuple(p["limit"]),
                step=(1,) + tuple(p["step"]))


@rule("pad")
def _pad(op, values, flags, p):
    if flags[1]:                               # a batched padding value: no rule
        return _unrolled(op, values, flags, p)
    return bind_recorded(op, values, {"lo": (0,) + tuple(p["lo"]), "hi": (0,) + tuple(p["hi"]),
                                      "interior": (0,) + tuple(p["interior"])})


@rule("take")
def _take(op, values, flags, p):
    if flags[1]:                               # batched indices: no rule
        return _unrolled(op, values, flags, p)
    return bind_recorded(op, values, {"axis": p["axis"] + 1})


@rule("concatenate")
def _concatenate(op, values, flags, p):
    n = _size(values, flags)
    xs = [v if f else L.broadcast_in_dim(v, shape=(n,) + np.shape(v),
                                         dims=_shifted(range(np.ndim(v))))
          for v, f in zip(values, flags)]
    return bind_recorded(op, xs, {"axis": p["axis"] + 1})


@rule("stop_gradient")
def _identity(op, values, flags, p):
    return _one(op, values[0])


@rule("dot_general")
def _dot_general(op, values, flags, p):
    (lc, rc), (lb, rb) = p["contract"], p["batch"]
    lhs, rhs = values
    if all(flags):
        return bind_recorded(op, values, {"contract": (_shifted(lc), _shifted(rc)),
                                          "batch": ((0,) + _shifted(lb), (0,) + _shifted(rb))})
    if flags[0]:
        out = bind_recorded(op, values, {"contract": (_shifted(lc), tuple(rc)),
                                         "batch": (_shifted(lb), tuple(rb))})
        where = len(lb)                        # the first free axis of lhs
    else:
        out = bind_recorded(op, values, {"contract": (tuple(lc), _shifted(rc)),
                                         "batch": (tuple(lb), _shifted(rb))})
        where = np.ndim(lhs) - len(lc)         # batch dims, lhs free, then rhs's first free
    if where == 0:
        return out
    perm = (where,) + tuple(d for d in range(np.ndim(out)) if d != where)
    return L.transpose(out, perm=perm)
