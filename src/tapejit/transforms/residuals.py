"""The second half of a split program (`vjp`'s reverse sweep, `linearize`'s linear map): a
cached program of its own, built with the first half and run on the residuals it saved, then
the cotangents or tangents."""
from __future__ import annotations

from typing import Any

from ..ir import Tape
from .outputs import as_list
from .arguments import CacheKey
from .record import NO_SIGNATURE, Leaves, Traced, Transform


def _signature(t: Any, args: tuple, kwargs: dict) -> tuple[Leaves, CacheKey]:
    return Leaves(list(args), [v.name for v in t.tape.invars], tuple(range(len(args)))), \
        NO_SIGNATURE


def _given(t: Any, call: Leaves, key: CacheKey) -> Traced:
    return Traced(t.tape)


SECOND_HALF = Transform("second half", _signature, as_list, trace=_given, fast_path=False,
                        built=True)


def second_half(first: Any, tape: Tape) -> Any:
    """The cache of the second half `tape` of transform `first`'s program."""
    return type(first)(SECOND_HALF, first.fn, (), first.backend, first.transform, tape=tape)
