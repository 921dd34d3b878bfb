"""`fused`: a group of ops that runs as one loop nest (made by passes/fuse.py).

Its `body` param is a closed sub-tape holding the group's eqns; the eqn's inputs bind the body's
inputs and its outputs are the body's outputs (the values read outside the group). Fusion runs
after differentiation, and transforms that inline a fused tape into a trace inline its bodies
(interpret.inline), so a fused eqn is never differentiated.
"""
from __future__ import annotations

from typing import Any

from ..avals import Aval
from ..errors import IRError
from . import UNROLLED, Kind, defop


def _shape(*avals: Aval, body: Any) -> tuple[Aval, ...]:
    expected = tuple(v.aval for v in body.invars)
    if tuple(avals) != expected:
        raise IRError(f"fused: inputs {' '.join(map(str, avals))} do not match the body's "
                      f"inputs {' '.join(map(str, expected))}")
    return tuple(o.aval for o in body.outvars)


def _impl(*ins: Any, body: Any) -> tuple:
    from ..interpret import evaluate, apply_impl
    return tuple(evaluate(body, ins, apply_impl))


def _vjp(cts: Any, outs: Any, *ins: Any, body: Any) -> tuple:
    raise IRError("a fused group is not differentiated: fusion runs after differentiation")


fused = defop("fused", Kind.FUSED, _impl, shape=_shape, vjp=_vjp, multiple_results=True,
              batch=UNROLLED)
