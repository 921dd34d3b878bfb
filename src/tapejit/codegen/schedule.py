"""Fusion: split an optimized tape into the steps of a compiled program.

A `Loop` is one loop nest over a `domain` shape (axes of size 1 dropped: a loop over a scalar
domain is straight-line code). It holds elementwise eqns whose output has the
domain's shape, layout ops producing that shape (views.py: read from memory through an index
map), and the reductions (sum/max/min) that consume them (accumulated inside the nest). Values that live only
inside a loop never touch memory. A `Call` is a single eqn with its own code (matrix products,
gathers, scatters, layout changes): fusion barriers.

An eqn joins the latest loop of its domain when everything it reads is ready there: values of
that loop computed before it (not the loop's own reductions, which finish only after the nest),
or values of earlier steps. Loops are capped at `MAX_LOOP_OPS` ops, about where LLVM stops
vectorising a loop body (bodies calling libm's sin/exp are not vectorised anyway, and every
split costs an array written and read back).
"""
from __future__ import annotations

import dataclasses

from ..ir import Eqn, Tape, Var
from ..ops import OPS, Kind
from .views import is_view

MAX_LOOP_OPS = 40
FUSIBLE_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min")


@dataclasses.dataclass
class Loop:
    domain: tuple[int, ...]
    eqns: list[Eqn] = dataclasses.field(default_factory=list)
    reductions: set[str] = dataclasses.field(default_factory=set)  # accumulated outputs

    def op_count(self) -> int:
        return len(self.eqns)


@dataclasses.dataclass
class Call:
    eqn: Eqn


Step = Loop | Call


def squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The loop domain of a shape: its axes of size 1 need no loop."""
    return tuple(n for n in shape if n != 1)


def _loop_domain(eqn: Eqn) -> tuple[int, ...] | None:
    kind = OPS[eqn.op].kind
    if kind is Kind.ELEMENTWISE or is_view(eqn):
        return squeezed(eqn.outs[0].aval.shape)
    if eqn.op in FUSIBLE_REDUCTIONS:
        return squeezed(eqn.ins[0].aval.shape)
    return None


def schedule(tape: Tape) -> list[Step]:
    steps: list[Step] = []
    producer: dict[str, int] = {}  # var name -> index of the step computing it

    def fits(index: int, loop: Loop, eqn: Eqn) -> bool:
        for atom in eqn.ins:
            if not isinstance(atom, Var) or atom.name not in producer:
                continue
            where = producer[atom.name]
            if where == index:
                if atom.name in loop.reductions or is_view(eqn):
                    return False
            elif where > index:
                return False
        return loop.op_count() < MAX_LOOP_OPS

    for eqn in tape.eqns:
        domain = _loop_domain(eqn)
        target = None
        if domain is not None:
            for index in range(len(steps) - 1, -1, -1):
                step = steps[index]
                if isinstance(step, Loop) and step.domain == domain and fits(index, step, eqn):
                    target = index
                    break
            if target is None:
                steps.append(Loop(domain))
                target = len(steps) - 1
            loop = steps[target]
            assert isinstance(loop, Loop)
            loop.eqns.append(eqn)
            if eqn.op in FUSIBLE_REDUCTIONS:
                loop.reductions.add(eqn.outs[0].name)
        else:
            steps.append(Call(eqn))
            target = len(steps) - 1
        for out in eqn.outs:
            producer[out.name] = target
    return steps
