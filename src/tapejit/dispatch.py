"""The per-signature program cache behind every transform, and how a program runs.

A transform (`value_and_grad`, ...) looks its call's signature up in a `CachedTransform`; on a
miss it traces and builds a `Program` (the optimized tape and its output structures), then gets
it an executable for the chosen backend (compile.py). Inside another transform's trace nothing
is cached: the tape is inlined. `cache_info()` reports what happened.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Callable, Sequence

from .compile import BACKENDS, Compiled, executable
from .config import config
from .errors import ArgumentError, at_source
from .interpret import inline, interpret
from .ir import Tape
from .pytree import TreeDef
from .trace import current_trace, user_source


def run(tape: Tape, leaves: Sequence[Any], program: Any = None) -> list[Any]:
    """Run a tape: inline it into the open trace, or run its program (default: interpret)."""
    if current_trace() is not None:
        return inline(tape, leaves)
    outs = program(leaves) if program is not None else interpret(tape, leaves)
    return [o[()] if o.ndim == 0 else o for o in outs]


def default_backend(backend: str | None) -> str:
    """The backend a transform uses: its argument, else TAPEJIT_BACKEND, else "interpret" (the
    numba backend is opt-in until the compiler is complete); TAPEJIT_DISABLE_JIT=1 forces the
    interpreter."""
    settings = config()
    if settings.disable_jit:
        return "interpret"
    return backend or settings.backend


@dataclasses.dataclass(frozen=True)
class Program:
    """What a transform caches per signature: the optimized tape, how to run it, and the
    output structures."""

    tape: Tape
    aux: TreeDef | None
    run: Any = None           # Interpreted | Compiled, None when built inside a trace
    out: TreeDef | None = None


class CachedTransform:
    """A per-signature cache of programs, with counts of what happened (`cache_info()`)."""

    def __init__(self, fn: Callable[..., Any], static_argnums: int | Sequence[int],
                 backend: str | None) -> None:
        functools.update_wrapper(self, fn)
        if backend is not None and backend not in BACKENDS:
            raise ArgumentError(at_source(f"unknown backend {backend!r}; choose one of "
                                          f"{', '.join(BACKENDS)}", user_source(2)))
        self.fn, self.backend = fn, backend
        self.static_argnums = ((static_argnums,) if isinstance(static_argnums, int)
                               else tuple(static_argnums))
        self._cache: dict[tuple, Program] = {}
        self._lock = threading.Lock()
        self._info = {"traces": 0, "compiles": 0, "disk_loads": 0, "hits": 0}
        self._last_miss: str | None = None

    def cache_info(self) -> dict[str, Any]:
        """Counts of traces, compiles, disk loads and cache hits, and why the last call
        missed the cache."""
        return {**self._info, "last_miss": self._last_miss}

    def _program(self, key: tuple, build: Callable[[], Program]) -> Program:
        if current_trace() is not None:
            return build()        # inside another trace: inline, never cache
        program = self._cache.get(key)
        if program is not None:
            self._info["hits"] += 1
            return program
        with self._lock:          # concurrent first calls build once
            program = self._cache.get(key)
            if program is None:
                self._last_miss = _miss_reason(key, self._cache)
                self._info["traces"] += 1
                program = build()
                program = dataclasses.replace(program, run=self._executable(program.tape))
                self._cache[key] = program
            else:
                self._info["hits"] += 1
        return program

    def _executable(self, tape: Tape) -> Any:
        runner = executable(tape, default_backend(self.backend))
        return _Counted(runner, self._info) if isinstance(runner, Compiled) else runner


class _Counted:
    """Runs a compiled program, adding its first call's compile or disk load to the counts
    (a program whose source was compiled before, e.g. for another batch size, adds neither)."""

    def __init__(self, runner: Compiled, info: dict[str, int]) -> None:
        self.runner, self.info = runner, info
        program = runner.program
        self.before: tuple[int, int] | None = (program.compiles, program.disk_loads)

    def __call__(self, leaves: Sequence[Any]) -> Any:
        outs = self.runner(leaves)
        if self.before is not None:
            program = self.runner.program
            self.info["compiles"] += program.compiles - self.before[0]
            self.info["disk_loads"] += program.disk_loads - self.before[1]
            self.before = None
        return outs


def _miss_reason(key: tuple, cache: dict[tuple, Any]) -> str:
    if not cache:
        return "first call"
    last = next(reversed(cache))
    names = ("argnums", "structure", "shapes/dtypes", "weak types", "static arguments",
             "positional count")
    changed = [n for n, a, b in zip(names, key, last) if a != b] or ["signature"]
    return f"{', '.join(changed)} changed"
