"""Python's cyclic garbage collector, paused while tapejit builds a program.

A build (trace, derivation, passes, code generation, LLVM lowering) makes millions of small
objects and almost no cycles: reference counting frees them, while the collector, run every
700 allocations, walks the objects that live on (the tapes kept, the caches) each time.
Paused, HIPS autograd's hmm_em example ran in 9.8-10.2 s against 11.4-11.9 s (A/B, fresh
caches); with the collector off, its derivation took 0.56 s against 1.08 s and its code
generation 0.15 s against 0.65 s; `import tapejit` took 42 ms against 46 ms (medians of
15). Any garbage the build left in cycles is collected by the first collection after it.
numba's compiler (the numba backend) makes garbage in cycles: it runs with the collector on
(paused, a 13-layer MLP gradient's first compile took 38 MB more memory at its peak, and no
less time).

`collection_paused()` (a `with` block) and `pausing_collection` (a decorator) nest and may be
entered by several threads at once: the collector is disabled by the first to enter and
enabled again, where it was enabled then, by the last to leave.
"""
from __future__ import annotations

import functools
import gc
import threading
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_lock = threading.Lock()
_inside = 0                 # blocks running with the collector paused
_was_enabled = False        # whether the first of them found it enabled


class _Paused:
    def __enter__(self) -> None:
        global _inside, _was_enabled
        with _lock:
            if _inside == 0:
                _was_enabled = gc.isenabled()
                gc.disable()
            _inside += 1

    def __exit__(self, *exc: Any) -> None:
        global _inside
        with _lock:
            _inside -= 1
            if _inside == 0 and _was_enabled:
                gc.enable()


_PAUSED = _Paused()


def collection_paused() -> _Paused:
    """The collector disabled for a `with` block (see the module docstring)."""
    return _PAUSED


def pausing_collection(fn: F) -> F:
    """`fn` run with the collector paused (a wrapper in this module: errors that name the
    user's line pass over its frame as over tapejit's others)."""
    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> Any:
        with _PAUSED:
            return fn(*args, **kwargs)
    return paused  # type: ignore[return-value]
