"""A transform as a record, as an op is one (`defop`): what `grad`, `jit`, `vmap`, ... each are.

A `Transform` says how a call becomes a signature (the call's leaves and its `CacheKey`), what
the program's traced tape is (by default: the function traced on the call), the tape transform
that makes the program of it (Tape -> Tape: reverse mode, a Jacobian, a batch; None for `jit`),
how the program's outputs become the result (the finisher), whether calls take the fast path,
and whether the program has a second half run on its residuals (`vjp`, `linearize`). The one
cache (cached.py) runs any record; the one builder (builder.py) makes every program.

A record's functions are module-level (a transform pickles with its record, for Dask) and take
the cache first: it holds the function, the options (`argnums`, `in_axes`, ...) and the backend.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

from .arguments import CacheKey
from ..ir import Tape
from ..pytree import TreeDef


NO_SIGNATURE = CacheKey((), (), (), (), (), 0)


class VariantKey(NamedTuple):
    """The key of one of several programs of a signature, chosen by the values its function
    branched on (the guards' tape, as text, and the values they gave)."""

    signature: CacheKey
    guards: str
    outcome: tuple


@dataclasses.dataclass
class Leaves:
    """A call as a program sees it when its inputs are not one function's arguments: the
    leaves and their names (jvp's primals then tangents; a second program's residuals);
    `traced`: the call the function is traced on."""

    leaves: list[Any]
    names: list[str]
    dynamic: tuple[int, ...]
    traced: Any = None


class Traced(NamedTuple):
    """A tape and its function's output and aux structures: what a record's trace gives, and
    its tape transform returns (with the second half's tape for a split program)."""

    tape: Tape
    out: TreeDef | None = None
    aux: TreeDef | None = None
    second: Tape | None = None          # run on the residuals (vjp's reverse sweep)
    from_inputs: tuple[int, ...] = ()   # the inputs that are residuals too
    meta: Any = None                    # what the tape transform tells the finisher


class Specialization(NamedTuple):
    """What a transform caches per signature: the optimized tape, how to run it, the output
    structures and the names of the input leaves (for cache-miss reasons)."""

    tape: Tape
    aux: TreeDef | None
    run: Any = None           # a compile.py runner | first_call.Pending; None in a trace
    out: TreeDef | None = None
    names: tuple[str, ...] = ()
    assigned: tuple[int, ...] = ()   # the input leaves the function assigns into
    guarded: bool = False            # one of several variants: its guards choose it per call
    draws: tuple = ()                # the draws each call makes, in order (draws.py)
    second: Any = None               # the cache of the program run on the residuals
    from_inputs: tuple[int, ...] = ()
    meta: Any = None                 # what the tape transform told the finisher (Traced.meta)


# A finisher: the call's outputs (tape outputs) -> the transform's result.
Finish = Callable[[Sequence[Any]], Any]


class Transform(NamedTuple):
    """One transform, as data. `signature(t, args, kwargs) -> (call, CacheKey)`;
    `trace(t, call, key) -> Traced` (default: `t.fn` traced on the call, builder.py);
    `tape(t, call, key, traced) -> Traced`: the tape transform (None: the traced tape as is),
    its result shown by `tj.explain` as stage `stage`; `how(t, call, key, traced)`: what it
    reads besides the traced tape; `finish(t, program, call, traced)`:
    the finisher of a call (traced: inlined into an enclosing trace)."""

    name: str
    signature: Callable[[Any, tuple, dict], tuple[Any, CacheKey]]
    finish: Callable[[Any, Specialization, Any, bool], Finish]
    tape: Callable[[Any, Any, CacheKey, Traced], Traced] | None = None
    stage: str = ""
    trace: Callable[[Any, Any, CacheKey], Traced] | None = None
    # what the tape transform reads besides the traced tape, as plain values: the key its
    # result is remembered on disk by (disk/memo.py); None: never remembered
    how: Callable[[Any, Any, CacheKey, Traced], tuple] | None = None
    fast_path: bool = True    # calls of arrays and scalars skip the signature (cached.py)
    residuals: bool = False   # the program has a second half, run on its residuals
    built: bool = False       # `trace` gives the finished program (a second half)
    shared: bool = False      # transforms of one function with equal options share programs
    new_signature: str = ""   # why a later miss traced again, where the keys do not say
    warns: bool = True        # warn when one transform is traced again and again
