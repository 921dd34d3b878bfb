"""Optimized tape -> something to call: the numpy interpreter or a numba-compiled program.

`executable(tape, backend)` returns a callable on the tape's input leaves. For "numba" it
generates the module source (codegen/cpu.py) and loads it through the disk cache (cache.py):
the source contains no concrete sizes (they are passed in the size table `S`), so tapes that
differ only in sizes share one source, one module and one compiled function.

With `TAPEJIT_VERIFY=1` every call of a compiled program also runs the tape on the interpreter
and raises `CompiledMismatchError` unless the two agree (the test suite runs this way).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import threads
from .cache import Program, load_program
from .codegen.cpu import ENTRY, entry_args, generate
from .config import config
from .errors import ArgumentError, CompiledMismatchError
from .interpret import interpret
from .ir import Tape

BACKENDS = ("interpret", "numba", "cuda")


class Interpreted:
    def __init__(self, tape: Tape) -> None:
        self.tape = tape

    def __call__(self, leaves: Sequence[Any]) -> list[np.ndarray]:
        return interpret(self.tape, leaves)


class Compiled:
    """A tape compiled to one numba function; `program` counts compiles and disk loads.
    Programs with parallel work run each call in a thread window (threads.py)."""

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.source, self.sizes, workspace, self.threads_slot = generate(tape)
        # the program's temporaries, reused by every call (codegen/cpu.py `allocate`)
        self.workspace = tuple(np.empty(a.shape, a.dtype) for a in workspace)
        self.program: Program = load_program(self.source, ENTRY)
        from .explain import dump  # TAPEJIT_DUMP (a late import: explain.py imports this module)
        dump(self)

    def __call__(self, leaves: Sequence[Any]) -> list[np.ndarray]:
        args = (*entry_args(self.tape, leaves), self.sizes, self.workspace)
        outs = self.program(*args) if self.threads_slot is None else \
            threads.run(self.program, args, self.sizes, self.threads_slot)
        outs = [np.asarray(o) for o in outs]
        if config().verify:
            verify(self.tape, leaves, outs)
        return outs


# how far a compiled float output may be from the interpreter's: summation order and the
# vectorised math kernels (within 1.5 ulp each) move the last bits, a wrong index moves O(1)
_TOLERANCE = {8: 1e-7, 4: 1e-3, 2: 1e-2}


def verify(tape: Tape, leaves: Sequence[Any], outs: Sequence[np.ndarray]) -> None:
    """Raise CompiledMismatchError unless the interpreter gives `outs` for `leaves`: the same
    shapes and dtypes, equal integers and booleans, and floats within `_TOLERANCE` (relative,
    and absolute on the scale of the largest output), NaN where NaN."""
    for k, (got, want) in enumerate(zip(outs, interpret(tape, leaves))):
        want = np.asarray(want)
        same = got.shape == want.shape and got.dtype == want.dtype
        if same and want.dtype.kind == "f" and want.size:
            tol = _TOLERANCE[want.dtype.itemsize]
            finite = np.abs(want[np.isfinite(want)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            same = np.allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)
        elif same:
            same = np.array_equal(got, want)
        if not same:
            src = next((e.src for e in tape.eqns if e.src), None)
            where = f" (traced at {src[0]}:{src[1]})" if src else ""
            raise CompiledMismatchError(
                f"the compiled program's output {k} differs from the interpreter's{where}: "
                f"got {got.dtype}{list(got.shape)} {np.array2string(got, threshold=8)}, "
                f"expected {want.dtype}{list(want.shape)} "
                f"{np.array2string(want, threshold=8)}. This is a tapejit bug: please report "
                f"it with tj.explain's output; backend=\"interpret\" gives the right result.")


def executable(tape: Tape, backend: str) -> Interpreted | Compiled:
    if backend == "interpret":
        return Interpreted(tape)
    if backend == "numba":
        return Compiled(tape)
    if backend == "cuda":      # numba.cuda kernels (cuda_support.py, codegen/cuda.py)
        from .cuda_support import CudaCompiled
        return CudaCompiled(tape)  # type: ignore[return-value]
    raise ArgumentError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
