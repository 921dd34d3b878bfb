"""Programs shared between the transforms of one function, as JAX's caches are keyed by the
function: `tj.grad(f)(x)` written inside a loop (HIPS autograd's style) traces and compiles
once, not once per step.

A transform of a plain function (`grad`, `value_and_grad`, `jit`) takes its program store
(programs, fast-path entries, lock, guarded variants) from the last transform of the same
function with the same options and settings (`config()`), provided the function still reads
equal things by name (`guards.read_by_name`: numbers, strings, and arrays of up to 1 MiB
compared by content, in tuples, lists and dicts). A global or closure variable the function reads that was rebound or
changed in place, or one that cannot be compared cheaply (a larger array, an object, a
generator, a method's `self`), gives the new transform a store of its own, which traces again:
what a new transform computes never depends on what an older one saw. `clear_cache()` forgets
every store.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from .guards import read_by_name

# function -> options -> (what it read by name, the store)
_stores: "weakref.WeakKeyDictionary[Callable, dict[tuple, tuple[tuple, Any]]]" = \
    weakref.WeakKeyDictionary()
_lock = threading.Lock()


def store(fn: Callable[..., Any], options: tuple, make: Callable[[], Any]) -> Any:
    """The store of `fn`'s transforms with `options` (hashable), or a new one from `make()`
    (kept for the next transform only where `fn` can share)."""
    read = read_by_name(fn)
    if read is None:
        return make()
    with _lock:
        by_options = _stores.setdefault(fn, {})
        held = by_options.get(options)
        if held is not None and held[0] == read:
            return held[1]
        made = make()
        by_options[options] = (read, made)
        return made


def forget() -> None:
    """Drop every shared store (transforms keep theirs)."""
    with _lock:
        _stores.clear()
