"""Programs shared between the transforms of one function, as JAX's caches are keyed by the
function: `tj.grad(f)(x)` written inside a loop (HIPS autograd's style) traces and compiles
once, not once per step.

A transform of a plain function (`grad`, `value_and_grad`, `jit`) takes its program store
(programs, fast-path entries, lock, guarded variants) from the last transform of the same
function with the same options and settings (`config()`), provided the function still reads
equal things by name (`read_by_name`: the same functions, library modules and classes; equal
numbers and strings; arrays of up to 1 MiB equal by content; in tuples, lists and dicts). A
global or closure variable it reads that was rebound or changed in place, or one that cannot be
compared cheaply (a larger array, an object, a generator, a module or class of the user's),
gives the new transform a store of its own, which traces again: what a new transform computes
never depends on what an older one saw. `clear_cache()` forgets every store.
"""
from __future__ import annotations

import threading
import types
import weakref
from typing import Any, Callable

import numpy as np

from .. import guards

_PLAIN = (int, float, complex, bool, str, bytes, type(None), np.generic)
_COMPARED = 1 << 20     # bytes of an array read by name compared by content (larger: unshared)
# code compared by identity: a function's own reads are walked (guards.py); a builtin, a ufunc
# or numpy's dispatcher of a function holds nothing of the user's that can change
_CODE = (types.FunctionType, types.BuiltinFunctionType, np.ufunc, type(np.dot))


def read_by_name(fn: Callable[..., Any]) -> tuple | None:
    """What the plain function `fn` reads by name (its globals, closure cells and defaults,
    and those of the user's functions it reaches), as a tuple equal for two calls exactly when
    they read equal values: the same functions and library modules and classes, equal numbers
    and strings, arrays of up to 1 MiB equal by content. None where it reads something else (a
    larger array, an object, a generator, a module or class of the user's, whose attributes
    may change) or is not a plain function."""
    if type(fn) is not types.FunctionType:
        return None
    found = []
    for name, value, _ in guards.swappable(fn, (object,)):
        print_ = _fingerprint(value)
        if print_ is None:
            return None
        found.append((name, print_))
    return tuple(found)


def _fingerprint(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, _CODE) or (isinstance(value, (type, types.ModuleType))
                                    and guards.in_library(value)):
        return (id(value), value)       # (identity: the tuples compare `is` first)
    if type(value) is np.ndarray:       # its contents too: they may change in place
        return None if value.nbytes > _COMPARED else \
            (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        parts = [_fingerprint(v) for v in value]
        return None if None in parts else (type(value), tuple(parts))
    if isinstance(value, dict):
        parts = [(k, _fingerprint(v)) for k, v in value.items()]
        return None if any(p is None for _, p in parts) else (dict, tuple(parts))
    return None


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
