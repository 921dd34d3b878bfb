"""Tape -> Tape passes, each a pure function, listed once in `PIPELINE` in the order they run.

`optimize` runs the pipeline: every program the interpreter or the compiler runs has had it
(`tj.make_tape` shows tapes before it). `fused` then groups a program's loop nests for code
generation. Only compiled programs are fused: the interpreter runs a group's eqns one by one,
so fusing the programs it runs (a new program's first calls) would cost time and save none.
"""
from __future__ import annotations

from typing import Callable

from ..ir import Tape, dce
from .bodies import in_bodies
from .contract import small_contractions, sums_of_products
from .cse import cse
from .distribute import split_products
from .fuse import fuse
from .loops import merge_saving_scans
from .simplify import simplify
from .spread import spread_broadcasts

Pass = Callable[[Tape], Tape]

PIPELINE: tuple[tuple[str, Pass, str], ...] = (
    ("split", split_products, "long products of a difference of broadcasts as two products"),
    ("sums", sums_of_products, "sums moved before matrix products and constant factors"),
    ("contract", small_contractions, "small matrix products as broadcast multiply and sum"),
    ("spread", spread_broadcasts, "broadcasts of cheap arithmetic broadcast its operands"),
    ("simplify", simplify, "algebraic rewrites (x*1, x+0, -(-x), no-op layout) and folding"),
    ("merge_scans", merge_saving_scans, "a scan saving its carries for reverse mode runs in "
     "place of its primal twin"),
    ("cse", cse, "reuse identical eqns"),
    ("dce", dce, "drop eqns and constants nothing reads"),
)
FUSION = "group elementwise ops, views and their reductions into loop nests"


def optimize(tape: Tape, after_each: Callable[[str, Tape], None] | None = None) -> Tape:
    """Run every pass of the PIPELINE, in control-flow bodies too; `after_each(name, tape)`
    observes (tests typecheck)."""
    for name, run, _ in PIPELINE:
        tape = in_bodies(run, tape)
        if after_each is not None:
            after_each(name, tape)
    return tape


def fused(tape: Tape) -> Tape:
    """An optimized tape with each loop nest as one `fused` eqn, in control-flow bodies too:
    what code generation compiles."""
    return in_bodies(fuse, tape)


__all__ = ["FUSION", "PIPELINE", "optimize", "fused", "cse", "dce", "fuse", "merge_saving_scans",
           "simplify", "small_contractions", "split_products", "spread_broadcasts",
           "sums_of_products"]
