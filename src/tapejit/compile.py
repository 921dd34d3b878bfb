"""Optimized tape -> something to call: the numpy interpreter or a numba-compiled program.

`executable(tape, backend)` returns a callable on the tape's input leaves. For "numba" it
generates the module source (codegen/cpu.py) and loads it through the disk cache (cache.py):
the source contains no concrete sizes (they are passed in the size table `S`), so tapes that
differ only in sizes share one source, one module and one compiled function.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .cache import Program, load_program
from .codegen.cpu import ENTRY, entry_args, generate
from .config import config
from .errors import ArgumentError
from .interpret import interpret
from .ir import Tape

BACKENDS = ("interpret", "numba", "cuda")


class Interpreted:
    def __init__(self, tape: Tape) -> None:
        self.tape = tape

    def __call__(self, leaves: Sequence[Any]) -> list[np.ndarray]:
        return interpret(self.tape, leaves)


class Compiled:
    """A tape compiled to one numba function; `program` counts compiles and disk loads."""

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        threads = config().num_threads
        if threads:       # numba's setting is per thread: the one building programs
            import numba
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        self.source, self.sizes, workspace = generate(tape)
        # the program's temporaries, reused by every call (codegen/cpu.py `allocate`)
        self.workspace = tuple(np.empty(a.shape, a.dtype) for a in workspace)
        self.program: Program = load_program(self.source, ENTRY)
        from .explain import dump  # TAPEJIT_DUMP (a late import: explain.py imports this module)
        dump(self)

    def __call__(self, leaves: Sequence[Any]) -> list[np.ndarray]:
        outs = self.program(*entry_args(self.tape, leaves), self.sizes, self.workspace)
        return [np.asarray(o) for o in outs]


def executable(tape: Tape, backend: str) -> Interpreted | Compiled:
    if backend == "interpret":
        return Interpreted(tape)
    if backend == "numba":
        return Compiled(tape)
    if backend == "cuda":      # numba.cuda kernels (cuda_support.py, codegen/cuda.py)
        from .cuda_support import CudaCompiled
        return CudaCompiled(tape)  # type: ignore[return-value]
    raise ArgumentError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
