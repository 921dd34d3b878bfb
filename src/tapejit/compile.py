"""Optimized tape -> something to call on its input leaves: the backends and their calling
conventions.

`executable(tape, backend)` returns a runner: `runner(leaves) -> outputs`. "interpret" runs the
tape on numpy; "numba" generates the module source (codegen/cpu.py) and loads it through the
disk cache (disk/store.py): the source contains no concrete sizes (they are passed in the size
table `S`), so tapes that differ only in sizes share one source, one module and one compiled
function; "cuda" is cuda_support.py's (backends.py says which backend a transform uses). A
tape's generated module is remembered on disk (disk/memo.py): a new process reads it rather
than generate it again. `direct_caller` is how the dispatch's fast path calls
a runner: a compiled program's numba function directly, with everything about its calling
convention precomputed (`Compiled.direct_call`).

In the layers: above code generation and the disk cache, beside cuda_support.py; below the
first-call tier (first_call.py) and the per-signature cache (cached.py), which run what this
module makes. `import tapejit` does not import it: the first-call tier does, when a program
first compiles (or loads from disk), and so code generation and llvmlite load then.

A compiled program whose index checks found an index out of range (codegen/calls.py
`index_check`: its status slots in `S`) raises IndexOutOfBoundsError after the call, its
outputs dropped; the interpreter raises the same error on the same call. So does one whose
LLVM code recorded a failure there (codegen/llvm/failures.py): the LAPACK error numba would
raise, or OutOfMemoryError where an allocation got no memory (numpy's MemoryError on the
interpreter becomes the same error). Where the generator gave the program no status slots,
the LLVM lowering gets three after the others, and uses them where its code may fail.

With `TAPEJIT_VERIFY=1` every call of a compiled program also runs the tape on the interpreter
and raises `CompiledMismatchError` unless the two agree (the test suite runs this way).
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import numpy as np

from . import threads
from .codegen.cpu import ENTRY, Generated, entry_args, generate
from .codegen.llvm import failures, library_calls
from .codegen.llvm import jit
from .codegen.llvm.emit import NotCovered
from .codegen.llvm.lower import lower
from .codegen.llvm import program as llvm_program
from .codegen.llvm.program import Program as LlvmProgram
from .config import config
from .backends import BACKENDS, DirectCall, Interpreted
from .cuda_support import CudaCompiled
from .disk.memo import digest, remembered
from .disk.store import load_module, program_hash
from .errors import (ArgumentError, CompiledMismatchError, IndexOutOfBoundsError, LinAlgError,
                     OutOfMemoryError)
from .garbage import pausing_collection
from .program_text import dump
from .interpret import interpret, makers, out_of_memory
from .ir import Tape
from .pages import prefault
from .passes import fused


class Compiled:
    """A tape compiled to one native function; `program` counts compiles and disk loads.
    Programs with parallel work run each call in a thread window (threads.py).

    The program is tapejit's own LLVM lowering of the generated module (codegen/llvm/) where
    it covers the module and TAPEJIT_CODEGEN is "llvm" (`codegen` says "llvm"), else numba's
    compile of it ("numba"). The calling convention: the entry function takes the tape's
    inputs (C-contiguous arrays, 0-d ones for scalars; `entry_args`) and its constants, and
    for numba also the size table `S` and the workspace (`tail`), and returns the outputs; a
    nonzero status slot of `S` after the call is an index out of range (`_checked`)."""

    def __init__(self, tape: Tape, numba: bool = True, key: str | None = None) -> None:
        """`numba=False`: raise NotCovered rather than compile with numba. `key`: the tape's
        digest, where the caller has it."""
        self.tape = tape
        generated = remembered("generate", key or digest(tape), lambda: generate(fused(tape)))
        self.source, self.sizes, workspace, self.threads_slot = generated[:4]
        self.status, self.checks = generated.status, generated.checks
        # the program's temporaries, reused by every call (codegen/cpu.py `allocate`)
        try:
            self.workspace = tuple(np.empty(a.shape, a.dtype) for a in workspace)
        except MemoryError as err:
            raise out_of_memory(err, tape) from None
        prefault(self.workspace)         # mapped while the program loads (pages.py)
        self.program: Any = _llvm_program(tape, generated, self.workspace)
        self.codegen = "numba" if self.program is None else "llvm"
        if self.program is not None and self.status is None:
            self.sizes = self.program.sizes      # with the lowering's own status slots
            if self.program.lowered.fails:
                self.status = len(generated.sizes)
        self.tail: tuple = ()      # what the entry takes after the inputs and constants
        if self.program is None:
            if not numba:
                raise NotCovered("the LLVM lowering does not cover this program")
            self.program = load_module(self.source, ENTRY)
            self.tail = (self.sizes, self.workspace)
        dump(f"tj_{program_hash(self.source)}", tape, self.source, self.sizes)   # TAPEJIT_DUMP

    @property
    def quick_tier(self) -> bool:
        """Whether the LLVM program's calls run its quick tier (program.py)."""
        return bool(getattr(self.program, "quick_tier", False))

    def __call__(self, leaves: Sequence[Any]) -> list[np.ndarray]:
        args = (*entry_args(self.tape, leaves), *self.tail)
        try:
            outs = self.program(*args) if self.threads_slot is None else \
                threads.run(self.program, args, self.sizes, self.threads_slot,
                            self.codegen == "numba")
            if self.status is not None and self.sizes[self.status]:
                raise self.recorded_error()
        except np.linalg.LinAlgError as err:        # numba's message, no line: locate it
            raise located_failure(err, self.tape, leaves) from None
        except (MemoryError, SystemError, ValueError) as err:   # its arrays: ours, numba's
            raise allocation_failure(err, self.tape) from None
        outs = [np.asarray(o) for o in outs]
        if config().verify:
            verify(self.tape, leaves, outs)
        return outs

    def direct_call(self, positions: tuple[int, ...], leaves: Sequence[Any],
                    n_args: int) -> DirectCall:
        """`direct_caller`'s `(fn, tail)` for this program: numba's dispatcher itself (without
        the disk cache's recovery wrapper, which matters only on a first call), converting
        only what needs it (scalars; arrays that are not C-contiguous); with TAPEJIT_VERIFY
        each call is checked against the interpreter."""
        fn, tail = self._direct_call(positions, leaves, n_args)
        if not config().verify:
            return fn, tail

        def verified(*args: Any) -> Sequence[Any]:
            outs = fn(*args, *tail)
            verify(self.tape, [args[i] for i in positions], [np.asarray(o) for o in outs])
            return outs
        return verified, ()

    def _direct_call(self, positions: tuple[int, ...], leaves: Sequence[Any],
                     n_args: int) -> DirectCall:
        fn, tape = self.program.fn, self.tape
        tail = (*entry_args(tape, list(leaves))[len(tape.invars):], *self.tail)
        if self.threads_slot is not None:     # calls run in a thread window (threads.py)
            fn = functools.partial(_windowed, fn, self.sizes, self.threads_slot,
                                   self.codegen == "numba")
        if self.status is not None:
            fn = _checked(fn, self)
        ready = [isinstance(leaf, np.ndarray) and leaf.flags.c_contiguous for leaf in leaves]
        # the compiled function is called with the arguments as given only if each is its leaf
        # (no static argument among them: those are in the program, not passed to it)
        if all(ready) and positions == tuple(range(n_args)):
            return fn, tail
        convert = [None if ok else _c_array if isinstance(leaf, np.ndarray) else
                   functools.partial(np.asarray, dtype=var.aval.dtype)
                   for ok, leaf, var in zip(ready, leaves, tape.invars)]
        return (lambda *args: fn(*[args[i] if c is None else c(args[i])
                                   for c, i in zip(convert, positions)], *tail)), ()

    def recorded_error(self) -> BaseException:
        """The error a call recorded in its status slots (cleared): an index check's, or a
        failure of the LLVM lowering's code (codegen/llvm/failures.py): a LAPACK/sorting call
        that raised, an allocation that got no memory."""
        slot = self.status
        number, value, size = (int(v) for v in self.sizes[slot:slot + 3])
        self.sizes[slot] = 0
        if number == failures.LIBRARY:
            return library_calls.raised(value)
        if number == failures.MEMORY:
            return OutOfMemoryError(value, makers(self.tape, value))
        op, src, axis = self.checks[number - 1]
        return IndexOutOfBoundsError(value, axis, size, op, src)


@pausing_collection
def llvm_executable(tape: Tape, key: str) -> Compiled | None:
    """The compiled program for `tape` (whose digest is `key`) where tapejit's LLVM lowering
    covers it and the library code it calls is built, else None: nothing is compiled by
    numba."""
    if config().codegen != "llvm" or not jit.SUPPORTED:
        return None
    try:
        with jit.no_builds():
            return Compiled(tape, numba=False, key=key)
    except (NotCovered, jit.NotBuilt):
        return None


def _llvm_program(tape: Tape, generated: Generated,
                  workspace: Sequence[np.ndarray]) -> LlvmProgram | None:
    """The program tapejit's LLVM lowering makes of the generated module; None where
    TAPEJIT_CODEGEN=numba or the lowering does not cover it (logged at debug level)."""
    if config().codegen != "llvm" or not jit.SUPPORTED:
        return None
    made, sizes = lowering(tape, generated)
    try:
        return LlvmProgram(llvm_program.key(*made), lambda: lower(*made), sizes,
                           workspace, [v.aval.shape for v in tape.outvars])
    except NotCovered as why:
        logging.getLogger("tapejit").debug(f"tapejit: numba compiles this program: the LLVM "
                                           f"lowering does not cover {why}")
        return None


def lowering(tape: Tape, generated: Generated) -> tuple[tuple, np.ndarray]:
    """The arguments of `lower` for `generated` (the module of `tape`), and the size table its
    program reads: three status slots after the generator's where it gave none (a failed
    allocation is recorded there)."""
    inputs = tuple(zip(generated.shapes, (v.aval.dtype for v in tape.invars + tape.constvars)))
    spaces = tuple(zip(generated.workspace_shapes, (a.dtype for a in generated.workspace)))
    sizes, status = generated.sizes, generated.status
    if status is None:
        sizes, status = np.concatenate([sizes, np.zeros(3, np.int64)]), len(sizes)
    return (generated.source, inputs, spaces, status, generated.threads), sizes


def located_failure(err: np.linalg.LinAlgError, tape: Tape,
                    leaves: Sequence[Any]) -> LinAlgError:
    """numba's LinAlgError `err` of a call of `tape`'s program on `leaves`, located: the
    interpreter runs the call again and raises tapejit's at the eqn whose numpy code fails
    (numpy's message, the op, the user's line), as on a first call; `err`'s message where the
    interpreter fails otherwise, or not at all."""
    try:
        interpret(tape, leaves)
    except LinAlgError as located:
        return located
    except Exception:      # noqa: BLE001  (another failure: numba's error is the one to raise)
        pass
    return LinAlgError(str(err))


def allocation_failure(err: Exception, tape: Tape) -> OutOfMemoryError:
    """`err`, raised by a call of `tape`'s program, as OutOfMemoryError where an allocation
    failed: a MemoryError; numba's SystemError whose cause is one ("returned a result with an
    exception set": rebuilding the MemoryError found no memory either); numba's ValueError
    for an array whose size in bytes overflows 64 bits. Any other error is raised again."""
    if isinstance(err, ValueError):
        if not str(err).startswith("array is too big"):
            raise err
        return OutOfMemoryError(-1, makers(tape, -1))
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, MemoryError):
        cause = cause.__cause__
    if cause is None:
        raise err
    return out_of_memory(cause, tape)


def _windowed(fn: Callable[..., Sequence[Any]], sizes: np.ndarray, slot: int,
              numba_pool: bool, *args: Any) -> Sequence[Any]:
    return threads.run(fn, args, sizes, slot, numba_pool)


def _checked(fn: Callable[..., Sequence[Any]], program: Compiled) -> Callable[..., Sequence[Any]]:
    """`fn`, raising after a call that recorded an error in the status slots: one int
    read through a memoryview (40 ns a call; indexing the array costs twice that)."""
    status, slot = memoryview(program.sizes), program.status

    def checked(*args: Any) -> Sequence[Any]:
        outs = fn(*args)
        if status[slot]:
            raise program.recorded_error()
        return outs
    return checked


def _c_array(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, order="C")


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


@pausing_collection
def executable(tape: Tape, backend: str) -> Interpreted | Compiled | CudaCompiled:
    """The runner of `tape` on `backend` (made with the garbage collector paused: garbage.py;
    numba compiles a numba program at its first call, with it on)."""
    if backend == "interpret":
        return Interpreted(tape)
    if backend == "numba":
        return Compiled(tape)
    if backend == "cuda":      # numba.cuda kernels (cuda_support.py, codegen/cuda.py)
        return CudaCompiled(tape)
    raise ArgumentError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
