"""Which backend a transform runs on, and the interpreter's runner: what a transform needs
before anything compiles. The compiled runners are compile.py's, which `import tapejit` does
not import (code generation and llvmlite: a third of its import); the first-call tier imports
it when a program first compiles.

In the layers: below the transforms and the first-call tier, beside compile.py.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .config import config
from .cuda_support import CudaUnavailableError, problem
from .errors import ArgumentError, at_source, user_source
from .interpret import interpret, plan
from .ir import Tape


BACKENDS = ("interpret", "numba", "cuda")


def default_backend(backend: str | None) -> str:
    """The backend a transform uses: its argument, else TAPEJIT_BACKEND, else "numba";
    TAPEJIT_DISABLE_JIT=1 forces the interpreter."""
    settings = config()
    if settings.disable_jit:
        return "interpret"
    return backend or settings.backend


def check_backend(backend: str | None) -> None:
    """An unknown backend is an error where the transform is made (at the user's line)."""
    if backend is not None and backend not in BACKENDS:
        raise ArgumentError(at_source(f"unknown backend {backend!r}; choose one of "
                                      f"{', '.join(BACKENDS)}", user_source()))
    if backend == "cuda" and not config().disable_jit:
        reason = problem()
        if reason is not None:
            raise CudaUnavailableError(at_source(f'backend="cuda" cannot run: {reason}',
                                                 user_source()))


class Interpreted:
    """The numpy interpreter's runner of a tape (the "interpret" backend's, and that of a
    program numba could not compile)."""

    def __init__(self, tape: Tape) -> None:
        self.tape, self.plan = tape, plan(tape)

    def __call__(self, leaves: Sequence[Any]) -> list[np.ndarray]:
        return interpret(self.tape, leaves, self.plan)


# `fn(*args, *tail)`: a runner called with a call's arguments as given (`direct_caller`)
DirectCall = tuple[Callable[..., Sequence[Any]], tuple]


def direct_caller(runner: Any, positions: tuple[int, ...], leaves: Sequence[Any],
                  n_args: int) -> DirectCall:
    """`(fn, tail)`: `fn(*args, *tail)` are `runner`'s outputs for calls of `n_args` positional
    arguments whose leaf k is argument `positions[k]`, each with the type, shape, dtype and
    strides of `leaves[k]`: a compiled program's function called directly (its `direct_call`,
    compile.py), else the runner on the leaves."""
    direct_call = getattr(runner, "direct_call", None)
    if direct_call is None:
        return (lambda *args: runner([args[i] for i in positions])), ()
    return direct_call(positions, leaves, n_args)
