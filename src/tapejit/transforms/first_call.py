"""The first-call tier: how a new program gets its runner and its first outputs.

On the numba backend a new program with no loop and small arrays runs its first calls on the
numpy interpreter (its tape is optimized, not fused; nothing is generated or compiled), and the
call after them compiles it. How many calls run interpreted is the number whose extra time
would about pay for the compile, estimated from the tape (`interpreted_calls`: one for a
program over large arrays, hundreds for a scalar function), so a script that needs one
gradient, or a hundred steps of a tiny model, never waits for a compile, and a training loop
spends at most about twice what the better choice would have. The exception is a program a
process compiled before, which tapejit's LLVM lowering covers and whose library code (kernels
numba compiles once per machine) is built: its code loads from disk and its first call runs
it. `TAPEJIT_FIRST_CALL=compile` compiles every program on its first call. Which calls ran
where does not depend on timing. A program whose calls run on the interpreter has a
`Pending` runner until `compile_and_run` replaces it.

A program the numba backend cannot compile runs on the interpreter, with a warning, rather
than failing. A compile still running after a second is announced on the `tapejit` logger
(warning level, so Python's default handler prints it while the user waits);
`TAPEJIT_LOG=info` reports every compile with its time. Both functions count what they did in
the `counts` they are given (a transform's `cache_info()` counts: "interpreted", "compiles",
"disk_loads").

In the layers: above compile.py (the runners), below cached.py (the per-signature cache,
which calls `start` on a miss).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from ..backends import Interpreted
from ..config import config
from ..control import primitives as C
from ..disk.memo import digest, kept
from ..errors import warn_at_user
from ..interpret import interpret, plan
from ..ir import Eqn, Lit, Tape, sub_tapes

if TYPE_CHECKING:
    import logging



# A program's calls run on the interpreter only if the arrays a call makes total at most this
# many bytes. Fresh memory costs page faults: a first call making 160 MB took 0.13-0.37 s in a
# new process, what numba takes to compile a small program, so the bound is set below that.
INTERPRET_FIRST_MAX_BYTES = 128 * 2**20
# The loops: the interpreter runs a loop's body op by op, each step; a loop whose number of
# steps is not a constant (a while loop, a run-time length) makes its program compile at once.
LOOPS = frozenset(op.name for op in (C.scan, C.loop_grad, C.while_))

# What an interpreted call costs over a compiled one, and what a compile costs (LLVM lowering,
# kernels built), measured on a 2-vCPU VM: the interpreter's per-call dispatch, ~4 us an
# equation evaluated and ~2 ns an element made (fused away when compiled); 12 ms and 0.2 ms
# an equation. The estimates overstate what a call saves where products dominate (both run
# BLAS): such programs compile sooner rather than later.
CALL_S, EQN_S, ELEMENT_S = 20e-6, 4e-6, 2e-9
COMPILE_S, COMPILE_EQN_S = 12e-3, 0.2e-3
MAX_INTERPRETED_CALLS = 1000


class Census(NamedTuple):
    """A tape's equations (its sub-tapes' included) and loops; and what a call on the
    interpreter evaluates: equations, and the elements and bytes of the arrays they make, its
    loops' bodies counted once per step (None where a loop's number of steps is not known)."""
    ops: int
    loops: int
    steps: int | None
    elements: int | None
    bytes: int | None


class Pending:
    """The runner of a numba program while its calls run on the interpreter: `left` more
    calls do, then the next compiles it (`compile_and_run`)."""

    def __init__(self, tape: Tape, left: int) -> None:
        self.tape, self.left, self.plan = tape, left, plan(tape)

    def take(self) -> bool:
        """Whether the next call runs on the interpreter (counted; called under a lock)."""
        self.left -= 1
        return self.left >= 0

    def __call__(self, leaves: Sequence[Any]) -> list[Any]:
        return interpret(self.tape, leaves, self.plan)


def interpreted_calls(tape: Tape) -> int:
    """How many calls of a new numba program run on the interpreter before one compiles it
    (see the module docstring): none where `TAPEJIT_FIRST_CALL=compile`, a loop's number of
    steps is not known or a call makes large arrays; else those whose extra time would about
    pay the compile (ski rental: never more than twice the time of the better choice in
    hindsight), at least one and at most MAX_INTERPRETED_CALLS."""
    if config().first_call != "interpret":
        return 0
    made = census(tape)
    if made.steps is None or made.bytes > INTERPRET_FIRST_MAX_BYTES:
        return 0
    saved = CALL_S + EQN_S * made.steps + ELEMENT_S * made.elements
    return max(1, min(MAX_INTERPRETED_CALLS,
                      int((COMPILE_S + COMPILE_EQN_S * made.ops) / saved)))


def census(tape: Tape) -> Census:
    """What `tape` holds, and what a call of it on the interpreter evaluates."""
    ops = loops = steps = elements = nbytes = 0
    known = True
    for eqn in tape.eqns:
        ops, loops, steps = ops + 1, loops + (eqn.op in LOOPS), steps + 1
        for o in eqn.outs:
            elements, nbytes = elements + o.aval.size, nbytes + o.aval.size * o.aval.dtype.itemsize
        trips = _trips(eqn) if eqn.op in LOOPS else 1
        for _, body in sub_tapes(eqn):
            inner = census(body)
            ops, loops = ops + inner.ops, loops + inner.loops
            if trips is None or inner.steps is None:
                known = False
                continue
            steps, elements = steps + trips * inner.steps, elements + trips * inner.elements
            nbytes += trips * inner.bytes
    return Census(ops, loops, *((steps, elements, nbytes) if known else (None,) * 3))


def _trips(eqn: Eqn) -> int | None:
    """The steps of a loop: a scan's (or its gradient's) constant count, else None."""
    count = eqn.ins[0]
    return int(count.value) if eqn.op != C.while_.name and isinstance(count, Lit) else None


def start(tape: Tape, leaves: Sequence[Any], backend: str, counts: dict[str, int],
          name: str, resized: bool = False) -> tuple[Any, list[Any]]:
    """The runner for a new program of the function `name` on `backend`, and its outputs on
    `leaves`: a `Pending` runner and the interpreter's outputs when the tier says so (the
    module docstring). `resized`: a program of the function that differs only in sizes runs
    compiled code (a new batch size), most likely the same code: this one compiles at once."""
    calls = interpreted_calls(tape) if backend == "numba" and not resized else 0
    if calls:
        key = digest(tape)
        if kept("generate", key):        # compiled before: its code may load from disk
            from ..compile import llvm_executable
            runner = llvm_executable(tape, key)
            if runner is not None:
                return runner, _first_call(runner, leaves, counts, name)
        counts["interpreted"] += 1
        runner = Pending(tape, calls - 1)
        return runner, runner(leaves)
    return compile_and_run(tape, leaves, backend, counts, name)


def compile_and_run(tape: Tape, leaves: Sequence[Any], backend: str, counts: dict[str, int],
                    name: str) -> tuple[Any, list[Any]]:
    """The backend's runner for a program and its outputs on `leaves`. A program the numba
    backend cannot compile runs on the interpreter, with a warning, rather than failing."""
    from ..compile import executable       # code generation, llvmlite: loaded when needed
    try:
        runner = executable(tape, backend)
        return runner, _first_call(runner, leaves, counts, name)
    except Exception as err:
        if backend != "numba" or not _compile_failure(err):
            raise
        half = any(v.aval.is_float and v.aval.dtype.itemsize == 2
                   for e in tape.eqns for v in e.outs)
        warn_at_user(
            f"tapejit could not compile {name} with numba ({type(err).__name__}: "
            f"{str(err).strip().splitlines()[0][:200]}); it runs on the numpy interpreter "
            f"instead. " + ("numba does not compile float16: compute in float32 "
                            "(x.astype(np.float32)) to compile it." if half else
                            "Please report this with the output of tj.explain."))
        runner = Interpreted(tape)
        return runner, runner(leaves)


def _first_call(runner: Any, leaves: Sequence[Any], counts: dict[str, int],
                name: str) -> list[Any]:
    """Run a new program, counting (and logging) the compile or disk load it caused (a
    program whose source was compiled before, e.g. for another batch size, causes neither).
    A call still compiling after `ANNOUNCE_SECONDS` says so once, while the user waits (with
    the hint to set TAPEJIT_LOG=info where the logger does not already report compiles)."""
    if getattr(runner, "codegen", None) is None:     # not a compile.Compiled
        return runner(leaves)
    import logging
    program, log = runner.program, _logger()
    before = program.compiles, program.disk_loads
    what = _describe(name, runner.tape)
    hint = "" if log.isEnabledFor(logging.INFO) else " (TAPEJIT_LOG=info shows each compile)"
    announce = threading.Timer(ANNOUNCE_SECONDS, log.warning,
                               (f"tapejit: compiling {what}{hint}",))
    announce.daemon = True
    start = time.perf_counter()
    announce.start()
    try:
        return runner(leaves)
    finally:
        announce.cancel()
        compiled = program.compiles - before[0]
        loaded = program.disk_loads - before[1]
        counts["compiles"] += compiled
        counts["disk_loads"] += loaded
        if compiled or loaded:
            log.info(f"tapejit: {'compiled' if compiled else 'loaded from the disk cache'} "
                     f"{what} in {time.perf_counter() - start:.2f} s")


ANNOUNCE_SECONDS = 1.0


def _compile_failure(err: Exception) -> bool:
    """Whether `err` says code generation or numba compilation failed (not the program). A
    NumbaError's module is loaded where one was raised: numba is not imported here (it may be
    being imported on threads.py's thread, beside which importing its submodules deadlocks)."""
    errors = sys.modules.get("numba.core.errors")
    return isinstance(err, NotImplementedError) or (
        errors is not None and isinstance(err, getattr(errors, "NumbaError", ())))


def _describe(name: str, tape: Tape) -> str:
    """`value_and_grad(step) — 1,234 ops, 3 loops`."""
    ops, loops = census(tape)[:2]
    return (f"{name} — {ops:,} op{'s' * (ops != 1)}"
            + (f", {loops} loop{'s' * (loops != 1)}" if loops else ""))


_configured: str | None = None


def _logger() -> logging.Logger:
    """The `tapejit` logger, set up as `TAPEJIT_LOG` says (once per setting): "info" and
    "debug" print it on stderr, "off" silences it, the default leaves it to the application.
    (logging is imported here, at the first compile: 3 ms of `import tapejit` otherwise.)"""
    import logging
    global _configured
    log, level = logging.getLogger("tapejit"), config().log
    if level != _configured:
        _configured = level
        for handler in [h for h in log.handlers if getattr(h, "tapejit", False)]:
            log.removeHandler(handler)
        log.setLevel({"off": logging.CRITICAL + 1, "warning": logging.NOTSET}.get(
            level, level.upper()))
        log.propagate = level in ("off", "warning")
        if not log.propagate:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            handler.tapejit = True  # type: ignore[attr-defined]
            log.addHandler(handler)
    return log
