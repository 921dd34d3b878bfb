"""The first-call tier: how a new program gets its runner and its first outputs.

On the numba backend a new program that tapejit's own LLVM lowering covers (codegen/llvm/;
milliseconds to compile) compiles on its first call, where the library code it calls (kernels
numba compiles once per machine) is built. One that numba must compile, or whose kernels are
not built yet, runs its first call on the numpy interpreter (its tape is already optimized;
nothing is compiled) and compiles on its second call (`interpret_first` says which programs;
`TAPEJIT_FIRST_CALL=compile` turns it off): a script that needs one gradient never waits for
numba. Which calls ran where does not depend on timing. A program whose first call was
interpreted has the runner `PENDING` until its second call calls `compile_and_run`.

A program the numba backend cannot compile runs on the interpreter, with a warning, rather
than failing. A compile still running after a second is announced on the `tapejit` logger
(warning level, so Python's default handler prints it while the user waits);
`TAPEJIT_LOG=info` reports every compile with its time. Both functions count what they did in the `counts` they are given (a transform's
`cache_info()` counts: "interpreted", "compiles", "disk_loads").

In the layers: above compile.py (the runners), below cached.py (the per-signature cache,
which calls `start` on a miss).
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Sequence

from ..compile import Compiled, Interpreted, executable, llvm_executable
from ..config import config
from ..control import primitives as C
from ..errors import warn_at_user
from ..interpret import interpret
from ..ir import Tape, sub_tapes



# A first call runs on the interpreter only if the arrays it makes total at most this many
# bytes (an upper bound of what it holds at once: it drops each value after its last reader).
# Fresh memory costs page faults: a first call making 160 MB took 0.13-0.37 s in a new
# process, what numba takes to compile a small program, so the bound is set below that ...
INTERPRET_FIRST_MAX_BYTES = 128 * 2**20
# ... and the tape has none of these (the interpreter runs a loop's body op by op, each step)
LOOPS = frozenset(op.name for op in (C.scan, C.loop_grad, C.while_))


class Pending:
    """The runner of a numba program whose first call ran on the interpreter: the program
    compiles on its next call."""


PENDING = Pending()


def interpret_first(tape: Tape) -> bool:
    """Whether a new numba program runs its first call on the interpreter (see the module
    docstring): when `TAPEJIT_FIRST_CALL` allows it, the tape has no loop, and the interpreter's
    arrays are small enough."""
    if config().first_call != "interpret":
        return False
    made = _interpreted_bytes(tape)
    return made is not None and made <= INTERPRET_FIRST_MAX_BYTES


def _interpreted_bytes(tape: Tape) -> int | None:
    """The bytes of every array the interpreter makes running `tape` (None: it has a loop)."""
    total = 0
    for eqn in tape.eqns:
        if eqn.op in LOOPS:
            return None
        total += sum(o.aval.size * o.aval.dtype.itemsize for o in eqn.outs)
        for _, body in sub_tapes(eqn):
            inner = _interpreted_bytes(body)
            if inner is None:
                return None
            total += inner
    return total


def start(tape: Tape, leaves: Sequence[Any], backend: str, counts: dict[str, int],
          name: str) -> tuple[Any, list[Any]]:
    """The runner for a new program of the function `name` on `backend`, and its outputs on
    `leaves`: `PENDING` and the interpreter's outputs when the tier says so."""
    if backend == "numba" and interpret_first(tape):
        runner = llvm_executable(tape)
        if runner is not None:
            return runner, _first_call(runner, leaves, counts, name)
        counts["interpreted"] += 1
        return PENDING, interpret(tape, leaves)
    return compile_and_run(tape, leaves, backend, counts, name)


def compile_and_run(tape: Tape, leaves: Sequence[Any], backend: str, counts: dict[str, int],
                    name: str) -> tuple[Any, list[Any]]:
    """The backend's runner for a program and its outputs on `leaves`. A program the numba
    backend cannot compile runs on the interpreter, with a warning, rather than failing."""
    try:
        runner = executable(tape, backend)
        return runner, _first_call(runner, leaves, counts, name)
    except Exception as err:
        if backend != "numba" or not _compile_failure(err):
            raise
        warn_at_user(
            f"tapejit could not compile {name} with numba ({type(err).__name__}: "
            f"{str(err).strip().splitlines()[0][:200]}); it runs on the numpy interpreter "
            f"instead. Please report this with the output of tj.explain.")
        runner = Interpreted(tape)
        return runner, runner(leaves)


def _first_call(runner: Any, leaves: Sequence[Any], counts: dict[str, int],
                name: str) -> list[Any]:
    """Run a new program, counting (and logging) the compile or disk load it caused (a
    program whose source was compiled before, e.g. for another batch size, causes neither).
    A call still compiling after `ANNOUNCE_SECONDS` says so once, while the user waits (with
    the hint to set TAPEJIT_LOG=info where the logger does not already report compiles)."""
    if not isinstance(runner, Compiled):
        return runner(leaves)
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
    ops, loops = _census(tape)
    return (f"{name} — {ops:,} op{'s' * (ops != 1)}"
            + (f", {loops} loop{'s' * (loops != 1)}" if loops else ""))


def _census(tape: Tape) -> tuple[int, int]:
    """The eqns of `tape` and of its sub-tapes, and how many are loops."""
    ops = loops = 0
    for eqn in tape.eqns:
        ops, loops = ops + 1, loops + (eqn.op in LOOPS)
        for _, body in sub_tapes(eqn):
            inner = _census(body)
            ops, loops = ops + inner[0], loops + inner[1]
    return ops, loops


_configured: str | None = None


def _logger() -> logging.Logger:
    """The `tapejit` logger, set up as `TAPEJIT_LOG` says (once per setting): "info" and
    "debug" print it on stderr, "off" silences it, the default leaves it to the application."""
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
