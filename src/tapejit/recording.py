"""Recording a Python function into a Tape: `trace_to_tape` runs it on fresh tracers of a new
trace, and traces it again where it wrote a traced value into an array a numpy constructor made
(`Constant`, `BufferWrite`, `with_traced_buffers`). The collectors report what the function
traced at one level did beyond its outputs: the values it branched on (`collecting_guards`)
and the inputs it assigned into (`collecting_assignments`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from .avals import Aval
from .errors import ConcretizationError, at_source, user_source
from .ir import Src, Tape
from .trace import Tracer, holds_tracer, new_trace, open_traces, var_of

T = TypeVar("T")


class Constant(np.ndarray):
    """A numpy array that a numpy constructor made while a replayed recording was open
    (guards.py), at the user's line `site`: indexed by a traced integer array it records a
    gather (`np.eye(k)[labels]`, the one-hot idiom), where a plain ndarray would ask the tracer
    for its value. A traced value (or index) written into it raises `BufferWrite`: the trace
    starts again with that line's constructor making traced arrays (`out = np.zeros(n);
    out[i] = traced`). Operations on it keep the type and the site; a trace records its value
    as a plain ndarray."""

    site: Src | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self.site = getattr(obj, "site", None)

    def __getitem__(self, key: Any) -> Any:
        if holds_tracer(key):
            return Tracer.__getitem__(self.view(np.ndarray), key)   # type: ignore[call-arg]
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        if holds_tracer(value) or holds_tracer(key):
            raise BufferWrite(self.site)
        super().__setitem__(key, value)

    @property
    def flat(self) -> Any:
        """numpy's flat iterator, whose writes are checked as `__setitem__`'s (np.fill_diagonal
        writes `a.flat[::n + 1] = val`)."""
        return _Flat(self)

    @flat.setter
    def flat(self, value: Any) -> None:
        if holds_tracer(value):
            self[...] = value                   # (raises, as a traced write does)
        np.ndarray.flat.__set__(self, value)


class _Flat:
    """A Constant's `flat`: numpy's flat iterator, whose traced writes go through the array's
    own `__setitem__` (so they raise as its index writes do)."""

    def __init__(self, base: Constant) -> None:
        self.base, self.iterator = base, np.ndarray.flat.__get__(base)

    def __setitem__(self, key: Any, value: Any) -> None:
        if holds_tracer(value) or holds_tracer(key):
            self.base[key] = value              # (raises, as a traced write does)
        self.iterator[key] = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.iterator, name)

    def __getitem__(self, key: Any) -> Any:
        return self.iterator[key]

    def __iter__(self) -> Any:
        return iter(self.iterator)

    def __len__(self) -> int:
        return len(self.iterator)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        return self.iterator.__array__(*args, **kwargs)


class BufferWrite(ConcretizationError):
    """A traced value or index written into a `Constant` made at `site` (a user's line). The
    tracing of a function catches it and traces again (`trace_to_tape`); where nothing does
    (GradientTape's recording runs the code once), its message is the error."""

    def __init__(self, site: Src | None) -> None:
        super().__init__(at_source(
            "x[...] = a recorded value (or at a recorded index), where x is an array made by a "
            "numpy constructor (np.zeros, np.array of numbers, ...) or outside: x holds plain "
            "numbers, so the value would be written without its derivative. Make the buffer "
            "from a recorded value, `out = np.zeros_like(x)`, then assign into it; or build the "
            "array at once with `np.stack([...])`.", site or user_source()))
        self.site = site


def trace_to_tape(fn: Callable[[Sequence[Tracer]], Sequence[Any]], avals: Sequence[Aval],
                  names: Sequence[str], weak: Sequence[bool] | None = None,
                  evaluate: Callable[[Tape], np.ndarray | None] | None = None) -> Tape:
    """Trace `fn` on fresh tracers; `fn` takes the list of input tracers and returns the list of
    output leaves. Returns the tape (not yet dead-code eliminated). Where `fn` writes a traced
    value into an array a numpy constructor made (`BufferWrite`), it is traced again with that
    line's constructors making traced arrays (`buffer_sites`), once per such line.

    `evaluate(tape)`: the value of a tape from these inputs (with the call's arguments) to one
    output, or None. Given, and guards collected at this level (`collecting_guards`), `fn` may
    ask for the values of its tracers (`if`, `int()`, an index): each becomes a guard."""
    weak = weak or [False] * len(avals)
    return with_traced_buffers(lambda: _trace_once(fn, avals, names, weak, evaluate))



def with_traced_buffers(run: Callable[[], T]) -> T:
    """`run()` (a trace of the user's code), run again while it raises `BufferWrite` for a line
    not tried yet, with that line's numpy constructors making traced arrays (guards.py reads
    `buffer_sites`)."""
    tried: set[Src] = set()
    try:
        while True:
            try:
                return run()
            except BufferWrite as write:
                if write.site is None or write.site in tried:
                    raise
                tried.add(write.site)
                open_traces.buffers[write.site] = open_traces.buffers.get(write.site, 0) + 1
    finally:
        for site in tried:
            open_traces.buffers[site] -= 1
            if not open_traces.buffers[site]:
                del open_traces.buffers[site]


def buffer_sites() -> dict[Src, int]:
    """The user's lines whose numpy constructors make traced arrays on this thread (each with
    the number of `with_traced_buffers` that asked for it)."""
    return open_traces.buffers


def _trace_once(fn: Callable[[Sequence[Tracer]], Sequence[Any]], avals: Sequence[Aval],
                names: Sequence[str], weak: Sequence[bool],
                evaluate: Callable[[Tape], np.ndarray | None] | None) -> Tape:
    with new_trace() as trace:
        inputs = [trace.new_tracer(a, n, w) for a, n, w in zip(avals, names, weak)]
        invars = [var_of(t) for t in inputs]  # before fn: `x[i] = v` / `x += v` rebind them
        guarded = open_traces.guarded
        if evaluate is not None and guarded is not None and guarded[0] == trace.level:
            trace.evaluate = lambda t: evaluate(trace.to_tape(invars, [t]))
        outs = fn(inputs)
        if open_traces.assigned is not None and open_traces.assigned[0] == trace.level:
            open_traces.assigned[1].extend(i for i, (t, v) in enumerate(zip(inputs, invars))
                                           if var_of(t) is not v)
        if trace.guards:
            guarded[1].append((trace.to_tape(invars, [v for v, _ in trace.guards]),
                               tuple(value for _, value in trace.guards)))
        return trace.to_tape(invars, outs)


class collecting_guards:
    """Within this context, the function traced here (not those traced inside it) may branch
    on the values it computes from the call (`trace_to_tape`'s `evaluate`); its guards are
    collected as `(tape, values)`: a tape from its inputs to the values it asked for, and
    those values."""

    def __enter__(self) -> list[tuple[Tape, tuple]]:
        self.saved, found = open_traces.guarded, []
        open_traces.guarded = (len(open_traces.traces), found)
        return found

    def __exit__(self, *exc: Any) -> None:
        open_traces.guarded = self.saved


class collecting_assignments:
    """Within this context, the positions of the inputs that the function traced here (not
    those traced inside it) assigns into (`x[i] = v`, `x += v`, `x.fill(v)`) are collected."""

    def __enter__(self) -> list[int]:
        self.saved, found = open_traces.assigned, []
        open_traces.assigned = (len(open_traces.traces), found)
        return found

    def __exit__(self, *exc: Any) -> None:
        open_traces.assigned = self.saved
