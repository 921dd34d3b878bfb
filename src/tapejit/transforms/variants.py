"""Variants: the programs of one signature, chosen by the values their function branched on.

A function that branches on a traced value (a Python `if`, `int()`, an index) records guards:
a tape computing those values from the arguments, and the values the trace saw. Its program
holds only where the guards give the same values, so a signature may have several programs,
each keyed by a `VariantKey`; a call runs the guards of the programs kept for its signature,
the last one taken first (calls in a row tend to take the same branches), and takes the first
whose values it gives.
"""
from __future__ import annotations

import collections
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ConcretizationError, at_source
from ..interpret import interpret
from ..ir import Tape, dce
from .arguments import CacheKey
from .record import VariantKey

MAX_VARIANTS = 32      # programs of one signature, chosen by the values they branched on
# why a call traced again, and the fix where it happens often (cached.py's warning)
BRANCHED = "a value the function branched on (an `if`, int(), an index) changed"
BRANCHES_FIX = (f"Each set of values it branched on is a program of its own (at most "
                f"{MAX_VARIANTS} a signature): where the branches follow the data, write them "
                f"with np.where, tj.cond or tj.while_loop, one program for every value.")


def variant(variants: Mapping[CacheKey, collections.OrderedDict[str, Tape]],
            cache: Mapping[Any, Any], key: CacheKey,
            leaves: Sequence[Any]) -> CacheKey | VariantKey:
    """The cache key of the variant of signature `key` whose guards the call of `leaves`
    passes (the values its function branched on are this call's), else `key`. The guards
    that passed are tried first next time."""
    kept = variants.get(key, {})
    for text, guards in list(kept.items()):
        try:
            values = interpret(guards, leaves)
        except Exception:   # noqa: BLE001  a guard past one that changed reads what its
            continue        # branch guards against (an index out of range): not this one
        key_of = VariantKey(key, text, _outcome(values))
        if key_of in cache:
            try:
                kept.move_to_end(text, last=False)
            except KeyError:           # another thread cleared the cache
                pass
            return key_of
    return key


def new_variant(variants: dict[CacheKey, collections.OrderedDict[str, Tape]],
                cache: Mapping[Any, Any], key: CacheKey, guards: Tape, values: tuple,
                label: str) -> VariantKey:
    """Register a program of signature `key` that holds where `guards` give `values`; its
    cache key. Past MAX_VARIANTS, an error: the branches follow data."""
    guards = dce(guards)
    text = str(guards)
    kept = variants.setdefault(key, collections.OrderedDict())
    kept.setdefault(text, guards)
    kept.move_to_end(text, last=False)
    held = sum(1 for k in cache if isinstance(k, VariantKey) and k.signature == key)
    if held >= MAX_VARIANTS:
        raise ConcretizationError(at_source(
            f"{label} branched on values of its arguments (a Python `if`, `int()`, "
            f"an index) that changed {held} times for one signature: each value is a "
            f"program of its own. Write the choice with np.where or tj.cond (a `while` "
            f"with tj.while_loop), pass a "
            f"number that selects among a few programs through static_argnums, or set "
            f"TAPEJIT_STRICT=1 to find each such line.", _last_src(guards)))
    return VariantKey(key, text, _outcome(values))


def _outcome(values: Sequence[Any]) -> tuple:
    """Guard values as a key (NaN equal to NaN)."""
    out = []
    for value in values:
        a = np.asarray(value)
        out.append((a.dtype.str, a.shape, a.tobytes()))
    return tuple(out)


def _last_src(guards: Tape) -> Any:
    """The user's line of a guard tape's last eqn (the last branch taken)."""
    return next((e.src for e in reversed(guards.eqns) if e.src), None)
