"""A user's function traced on a call's arguments, and the steps after the trace that every
program shares: the first half of the builder (transforms/builder.py).

- `trace_flat(fn, call)`: `fn` traced on the call's signature, its outputs flattened (and
  checked: arrays, numbers or pytrees of them), unused eqns dropped.
- `rerolled(tape)`: its plain Python loops re-rolled into scans (control/reroll.py;
  `TAPEJIT_REROLL=0` keeps them unrolled), reported to `stages(name, tape)` as "rerolled"
  when one was. The loops re-rolled by the programs built within `collecting_rerolls()` are
  collected (cache_info counts them, explain lists them).
- `derived(traced, how, derive)`: `derive` (a record's tape transform, then the passes) of the
  re-rolled tape, remembered on disk (disk/memo.py) by the re-rolled tape and `how`.

In the layers: in the transforms package, above arguments.py and below the builder and
the cache; above tracing, autodiff and the passes. Nothing here compiles or runs a program.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .. import guards
from .arguments import CallArgs, fn_name
from ..config import config
from ..control.reroll import RerolledLoop, reroll
from ..disk.memo import digest, remembered
from ..draws import Recording
from ..errors import ArgumentError, ConcretizationError, DtypeError, at_source
from ..interpret import Growing
from ..ir import Tape
from ..passes import dce
from ..pytree import TreeDef, flatten
from ..recording import trace_to_tape
from ..trace import Tracer, current_trace, guarded_value

# observes each stage of a program being built: (stage name, tape)
Stages = Callable[[str, Tape], None]
# raises unless fn's traced tape (with its output structure) has an output grad can seed
OutputCheck = Callable[[Callable[..., Any], Tape, TreeDef], None]

_rerolls: contextvars.ContextVar[list[RerolledLoop] | None] = contextvars.ContextVar(
    "tapejit_rerolls", default=None)


@contextlib.contextmanager
def collecting_rerolls() -> Iterator[list[RerolledLoop]]:
    """A list that collects the loops re-rolled by the programs built within (in this thread;
    programs of transforms inlined into them included)."""
    found: list[RerolledLoop] = []
    token = _rerolls.set(found)
    try:
        yield found
    finally:
        _rerolls.reset(token)


def rerolled(tape: Tape, stages: Stages | None = None) -> Tape:
    """The traced tape with its plain Python loops as scans (with TAPEJIT_REROLL=0: as is)."""
    if not config().reroll:
        return tape
    tape, loops = reroll(tape)
    found = _rerolls.get()
    if found is not None:
        found.extend(loops)
    if loops and stages is not None:
        stages("rerolled", tape)
    return tape


def derived(traced: Tape, how: tuple, derive: Callable[[Tape], Tape],
            stages: Stages | None = None) -> Tape:
    """`derive` (reverse mode, the passes) of the traced tape with its loops re-rolled, each
    stage reported to `stages`; without `stages`, read from disk where another process derived
    the same re-rolled tape the same way (`how`: disk/memo.py), the loops `derive` re-rolled
    collected all the same. Keyed after the re-roll: a traced tape of 4,000 equations took
    15 ms to digest, its re-rolled one well under 1."""
    if stages is not None:
        stages("traced", traced)
    tape = rerolled(traced, stages)
    if stages is not None:
        return derive(tape)

    def made() -> tuple[Tape, list[RerolledLoop]]:
        with collecting_rerolls() as loops:
            return derive(tape), loops
    result, loops = remembered("derive", digest(tape, how), made)
    found = _rerolls.get()
    if found is not None:
        found.extend(loops)
    return result


def fn_source(fn: Callable[..., Any]) -> tuple[str, int] | None:
    """Where `fn` is defined (for errors about what it returned)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


def _check_output(leaf: Any, fn: Callable[..., Any]) -> None:
    if not isinstance(leaf, (Tracer, np.ndarray, np.generic, bool, int, float)):
        raise ArgumentError(at_source(
            f"{fn_name(fn)} returned a {type(leaf).__name__} ({leaf!r:.40}); a traced "
            f"function must return arrays, numbers, or pytrees of them", fn_source(fn)))


def _call_traced(fn: Callable[..., Any], call: CallArgs, tracers: Sequence[Tracer]) -> Any:
    try:
        return call.call(fn, tracers)
    except ValueError as err:
        # numpy's `array[i] = tracer` turns the tracer's ConcretizationError into a ValueError
        if isinstance(err.__cause__, ConcretizationError):
            raise ConcretizationError(
                f"Assigning a traced value into a numpy array (e.g. `out = np.zeros(3); "
                f"out[0] = traced`; create `out` with np.zeros_like(x) instead): "
                f"{err.__cause__}") from None
        raise


def trace_flat(fn: Callable[..., Any], call: CallArgs, has_aux: bool = False,
               ) -> tuple[Tape, TreeDef, TreeDef | None]:
    """Trace `fn` on the call's signature: a tape whose outputs are the leaves of fn's output
    (then of its aux output), and those two structures."""
    structure: dict[str, Any] = {}

    def flat_fn(tracers: Sequence[Tracer]) -> list[Any]:
        drawn.enter(current_trace())
        out = _call_traced(fn, drawn.call, tracers)   # its generators swapped
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ArgumentError(at_source(
                    f"with has_aux=True the function must return a pair (output, aux), but "
                    f"{fn_name(fn)} returned a {type(out).__name__}", fn_source(fn)))
            out, aux = out
        out_leaves, structure["out"] = flatten(out)
        aux_leaves, structure["aux"] = flatten(aux) if has_aux else ([], None)
        for leaf in out_leaves + aux_leaves:
            _check_output(leaf, fn)
        return out_leaves + aux_leaves

    with Recording(fn, call) as drawn, guards.outside_arrays(fn):   # swapped: not checked
        generators = guards.generator_states(fn) + drawn.checked
        tape = trace_to_tape(flat_fn, call.avals, call.names, call.weak, _evaluator(call))
    guards.check_generators(generators, fn_name(fn), fn_source(fn), drawn.refusal)
    return dce(drawn.taking_draws(tape)), structure["out"], structure["aux"]


def _evaluator(call: CallArgs) -> Callable[[Tape], np.ndarray | None] | None:
    """A traced value's value on `call`'s arguments, for the branches and indices that need
    one (trace.trace_to_tape): run on the interpreter; where the call is inlined into an
    enclosing trace, that trace's guarded value of it. None under TAPEJIT_STRICT=1 (JAX's
    rule: no Python branching on traced values)."""
    if config().strict:
        return None
    values = Growing(call.leaves, inlined=any(isinstance(leaf, Tracer) for leaf in call.leaves))

    def value(tape: Tape) -> np.ndarray | None:
        try:
            out = values.value(tape)
        except KeyError:            # it reads a random draw's key (draws.py): not a value of
            return None             # the call's arguments
        return guarded_value(out) if isinstance(out, Tracer) else out
    return value


def require_scalar_float(fn: Callable[..., Any], tape: Tape, out_td: TreeDef) -> None:
    """grad's `OutputCheck`: fn must return one floating-point scalar."""
    out = tape.outvars[0] if out_td.num_leaves == 1 else None
    if out is None or out.aval.shape != ():
        shown = (out.aval if out is not None else "None (is a `return` missing?)"
                 if out_td.kind == "none" else f"a pytree {out_td}")
        src = tape.eqns[-1].src if out is not None and tape.eqns else fn_source(fn)
        raise ArgumentError(at_source(
            f"grad requires a function with a scalar output, but {fn_name(fn)} "
            f"returned {shown}. Reduce it to a scalar (e.g. np.sum or np.mean), or use "
            f"tj.vjp for vector outputs.", src))
    if not out.aval.is_float:
        raise DtypeError(at_source(f"grad requires a floating-point output, but "
                                   f"{fn_name(fn)} returned {out.aval}", fn_source(fn)))
