"""Generated functions of bounded size: a long tape runs as a chain of `segment` calls.

numba's compile time grows faster than linearly with the size of one function (its SSA
reconstruction, type inference and LLVM's passes over one huge body), so a tape that stays long
after re-rolling (a loop whose steps differ, thousands of distinct ops) compiles as functions of
at most `MAX_SEGMENT_OPS` ops each, called in order by the entry point: compile time then grows
linearly with the tape (bench/unrolled.py measures the slope). Each function costs a fixed
overhead, so a tape of at most `SEGMENT_ABOVE` ops stays one function (measured on the N-body
gradient with cached kernels: 195 ops compiled in 4.7 s whole and 6.7 s as two segments; 370 ops
in 11.6 s and 12.4 s; 720 ops in 35 s whole, 25 s in segments).

A `segment` eqn's `body` is a sub-tape over the same values as the tape around it (dims.py
gives both the same axis symbols, so small fixed sizes stay numbers in its source): its inputs
are the values it reads from before it, its outputs those read after it. Segments are made by
code generation from an optimized tape, so they are never differentiated or fused.
"""
from __future__ import annotations

from typing import Any

from ..avals import Aval
from ..batching import batched_body
from ..errors import IRError
from ..interpret import evaluate
from ..ir import Eqn, Tape, Var, sub_tapes
from ..ops import HOST, OPS, Kind, defop

MAX_SEGMENT_OPS = 120     # ops per segment function
SEGMENT = "segment"       # the stem of their names in generated modules
SEGMENT_ABOVE = 400       # a tape of at most this many ops is one function
CONTROL_WEIGHT = 10       # a loop's ops in its caller (HMM forward-backward: 270 IR lines)


def _shape(*avals: Aval, body: Tape) -> tuple[Aval, ...]:
    expected = tuple(v.aval for v in body.invars)
    if tuple(avals) != expected:
        raise IRError(f"segment: inputs {' '.join(map(str, avals))} do not match the body's "
                      f"inputs {' '.join(map(str, expected))}")
    return tuple(o.aval for o in body.outvars)


def _impl(*ins: Any, body: Tape) -> tuple:
    return tuple(evaluate(body, ins))


def _vjp(cts: Any, outs: Any, *ins: Any, body: Tape) -> tuple:
    raise IRError("a segment is not differentiated: code generation makes it")


def _cpu(kit: Any, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
    function = kit.function(eqn.kw["body"], SEGMENT)
    result = f"{outs[0]}_s" if outs else "segment_s"
    kit.line(f"{result} = {function}({''.join(a + ', ' for a in ins)}S)")
    for k, out in enumerate(outs):
        kit.line(f"{out} = {result}[{k}]")


# batched: its body's eqns batched in its place
segment = defop("segment", Kind.SEGMENT, _impl, shape=_shape, vjp=_vjp, multiple_results=True,
                batch=lambda bind, xs, flags, *, body: batched_body(body, xs, flags),
                cpu=_cpu, cuda=HOST)


def segmented(tape: Tape) -> Tape:
    """`tape`, or where it has more than `SEGMENT_ABOVE` ops, a chain of segments of at most
    `MAX_SEGMENT_OPS` ops each (an eqn larger than that is a segment of its own)."""
    limit = MAX_SEGMENT_OPS
    weights = [_weight(eqn) for eqn in tape.eqns]
    if sum(weights) <= max(limit, SEGMENT_ABOVE):
        return tape
    parts: list[list[Eqn]] = [[]]
    size = 0
    for eqn, weight in zip(tape.eqns, weights):
        if parts[-1] and size + weight > limit:
            parts.append([])
            size = 0
        parts[-1].append(eqn)
        size += weight
    if len(parts) == 1:          # one eqn past the limit: a segment of it would be itself
        return tape
    read_after = _read_after(parts, tape)
    eqns = []
    for part, later in zip(parts, read_after):
        made = {o.name for e in part for o in e.outs}
        ins: dict[str, Var] = {}
        for atom in (a for e in part for a in e.ins):
            if isinstance(atom, Var) and atom.name not in made:
                ins.setdefault(atom.name, atom)
        outs = tuple(o for e in part for o in e.outs if o.name in later)
        body = Tape(tuple(ins.values()), tuple(part), outs)
        eqns.append(Eqn(segment.name, tuple(ins.values()), outs, (("body", body),)))
    return Tape(tape.invars, tuple(eqns), tape.outvars, tape.constvars, tape.consts)


def _weight(eqn: Eqn) -> int:
    """An eqn's ops: a fused group's; a loop's or branch's `CONTROL_WEIGHT` (its body is a
    function of its own, but the caller slices its inputs, stacks its outputs and frees
    what each step made); one for any other."""
    kind = OPS[eqn.op].kind
    if kind is Kind.FUSED:
        return sum(_weight(e) for _, body in sub_tapes(eqn) for e in body.eqns)
    return CONTROL_WEIGHT if kind is Kind.CONTROL else 1


def _read_after(parts: list[list[Eqn]], tape: Tape) -> list[set[str]]:
    """Per part, the names read by the parts after it or by the tape's outputs."""
    later = {v.name for v in tape.outvars if isinstance(v, Var)}
    result = []
    for part in reversed(parts):
        result.append(set(later))
        later |= {a.name for e in part for a in e.ins if isinstance(a, Var)}
    return result[::-1]
