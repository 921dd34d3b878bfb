"""numpy random generators drawn from inside a traced function: fresh numbers on every call.

A Monte-Carlo objective draws from a numpy generator it reads by name (`rs.randn(n, D)` with
`rs = npr.RandomState(0)` a global or a closure cell; `np.random.randn(...)`, numpy's global
RandomState). A draw made while tracing would be a constant of the tape, the same numbers on
every call. So while `grad`, `value_and_grad` or `jit` traces a function (a `Recording`), each
numpy `RandomState` and `Generator` it reads by name where it can be swapped
(`guards.swappable`: its globals, closure cells and default arguments, and those of the user's
functions it reaches; the attributes of a bound method's object; a static argument) is a
`Recorder`, put back after the trace (also when it raises). A recorder's draw is a `_Site`:
the numpy call that makes its numbers (`rs.normal(mu, s, n)`: `rs.standard_normal(n)`, then
`mu + s * z` traced, as numpy computes it), whose values are a slice of an input of the
program, one flat buffer per generator and dtype, after the argument leaves (a Python loop of
draws reads rows of it, so it re-rolls). Each call makes every site's numpy call on the
generator itself, in the order the trace made them (`with_draws`): the generator advances as
numpy's code would, and the numbers are numpy's for that seed.

Where it cannot work, `RandomnessError` names the generator, the method and the line: a
method the recorder does not offer, or a draw whose numbers depend on a traced value (integer
bounds, `choice`'s probabilities); a draw under `vmap` (each example would need draws of its
own) or in a control-flow body (traced once, run many times); the transforms whose programs
take no draws (jacobian, hessian, jvp, ...: `guards.check_generators` sees the generator's
state change); and everything under TAPEJIT_STRICT=1. A generator made inside the function
from a seed gives the same numbers on every call in numpy too: it stays a constant.

In the layers: on draw_methods.py, guards.py and compile.py; below the transforms package, where
transforms/traced.py opens a `Recording` around each trace and the per-signature cache
(transforms/cached.py) says which transform builds (`collecting`) and adds the draws to each
call (`with_draws`, `fast_caller`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import re
import threading
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from . import guards
from .avals import Aval
from .backends import DirectCall, direct_caller
from .config import config
from .draw_methods import GENERATOR, LEGACY
from .errors import RandomnessError, at_source, user_source
from .ir import Eqn, Src, Tape, Var, make_params
from .ops import layout as L
from .passes.rewrite import fresh_names
from .trace import Trace, Tracer, current_trace, var_of

DRAWING = frozenset({"grad", "value_and_grad", "jit"})  # transforms whose programs take draws
_GENERATORS = (np.random.Generator, np.random.RandomState)
_BODY = ("in a body tapejit traces once and runs many times (tj.fori_loop, scan, while_loop, "
         "cond, checkpoint, a custom_vjp rule), where it would be the same draw every time")


class _Site(NamedTuple):
    """One draw of a call: `generator.<method>(*args)`, its numbers at `offset` of the call's
    buffer `buffer` (of `dtype`)."""
    generator: Any
    method: str
    args: tuple
    buffer: int
    offset: int
    size: int
    dtype: np.dtype


@dataclasses.dataclass
class _Collector:
    """The draws of the program being built for one transform (`collecting`)."""
    label: str                  # `grad(f)`, for messages
    drawing: bool               # its programs take draws
    batched: bool               # vmap
    drawn: list[_Site] = dataclasses.field(default_factory=list)  # in the trace's order


_collector: contextvars.ContextVar[_Collector | None] = contextvars.ContextVar(
    "tapejit_draws", default=None)


@contextlib.contextmanager
def collecting(transform: Any) -> Iterator[list[Any]]:
    """Within: programs are built for `transform` (a transforms.cached.CachedTransform; its
    record's name says whether its programs take draws). Yields the draws of the program
    built, in order (its buffers are inputs after the argument leaves)."""
    name = transform.record.name
    found = _Collector(transform.label(), name in DRAWING, name == "vmap")
    token = _collector.set(found)
    try:
        yield found.drawn
    finally:
        _collector.reset(token)


def with_draws(sites: Sequence[_Site], leaves: Sequence[Any]) -> Sequence[Any]:
    """A call's leaves, then its draws' buffers."""
    if not sites:
        return leaves
    return [*leaves, *_drawn(sites)]


def _buffers(sites: Sequence[_Site]) -> list[np.ndarray]:
    """The sites' buffers, empty (a site's offset is past the one before it in its buffer)."""
    ends = {site.buffer: (site.offset + site.size, site.dtype) for site in sites}
    return [np.empty(*ends[k]) for k in range(len(ends))]


def _drawn(sites: Sequence[_Site]) -> list[np.ndarray]:
    """Each site's numpy call on its generator, in order, into its buffer."""
    buffers = _buffers(sites)
    for site in sites:
        buffers[site.buffer][site.offset:site.offset + site.size] = np.ravel(
            getattr(site.generator, site.method)(*site.args))
    return buffers


def fast_caller(runner: Any, call: Any, sites: Sequence[_Site]) -> DirectCall:
    """backends.py's `direct_caller` `(fn, tail)` for the cache's fast path on calls like `call`
    (positional leaves): `fn(*args, *tail)` passes the call's draws after the arguments."""
    n = len(call.args)
    if not sites:
        return direct_caller(runner, call.dynamic, call.leaves, n)
    buffers = _buffers(sites)
    fn, tail = direct_caller(runner, (*call.dynamic, *range(n, n + len(buffers))),
                             [*call.leaves, *buffers], n + len(buffers))
    return (lambda *args: fn(*args[:n], *_drawn(sites), *args[n:])), tail


class _Thread(threading.local):
    recording: "Recording | None" = None    # the top-level recording open on this thread


_active = _Thread()
# held while a thread's trace has generators swapped for its recorders: a trace on another
# thread reaching them waits, rather than find recorders that are not its own
_swapping = threading.Lock()


class Recording:
    """One trace of `trace_flat`: at the top level of a keyed transform, the generators
    swapped for recorders and the keys drawn from; nested in it, its trace allowed to draw
    (or why not). Elsewhere it does nothing but say why draws are refused (`refusal`)."""

    def __init__(self, fn: Callable[..., Any], call: Any) -> None:
        self.fn, self.call, self.collector = fn, call, _collector.get()
        self.checked: list[tuple[str, Any, Any]] = []   # static arguments' (name, gen, state)
        self.parent, self.top, self.locked = current_trace(), None, False
        self.saved: list[tuple[Callable[[Any], None], Any]] = []
        self.traces: dict[Trace, str | None] = {}   # trace -> why it may not draw (None: may)
        self.sites: list[tuple[_Site, Var, Src | None]] = []   # each draw, its var and line
        self.buffers: dict[tuple[int, np.dtype], int] = {}    # (id(generator), dtype) -> k
        self.names: list[str] = []                  # each buffer's name
        self.ends: list[int] = []                   # and its length so far

    @property
    def refusal(self) -> str:
        """Why draws from numpy generators are not recorded here ('' where nothing says)."""
        if config().strict:
            return " (TAPEJIT_STRICT=1 keeps this an error)"
        found = self.collector
        if found is None or found.drawing:
            return ""
        if found.batched:
            return f" Under {found.label} it is refused: each example would need draws of its own."
        return (f" Under {found.label} it is refused: draws from numpy generators are taken "
                f"per call only under tj.grad, tj.value_and_grad and tj.jit.")

    def __enter__(self) -> "Recording":
        found = self.collector
        static = [(i, gen) for i, gen in enumerate(self.call.args)
                  if i not in self.call.dynamic and isinstance(gen, _GENERATORS)]
        if self.parent is not None or found is None or not found.drawing or config().strict:
            self.checked = [(_argument(self.fn, i), gen, guards.generator_state(gen))
                            for i, gen in static]
        else:
            _active.recording = self
            self._swap_arguments(static)
            if self._places(_DRAWN):
                _swapping.acquire()     # another thread's recorders are put back first
                self.locked = True
                try:
                    self._swap()
                except BaseException:
                    self.__exit__()
                    raise
        return self

    def _swap_arguments(self, static: list[tuple[int, Any]]) -> None:
        """Static arguments that are generators, as recorders (a new one traces again)."""
        args = list(self.call.args)
        for i, gen in static:
            args[i] = Recorder(self, gen, _argument(self.fn, i))
        self.call = dataclasses.replace(self.call, args=tuple(args))

    def _places(self, types: tuple[type, ...]) -> list[tuple[str, Any, Any]]:
        """`guards.swappable`'s places of `types`, and the attributes of a bound method's
        object (`tj.grad(model.loss)` reading `self.rng`): `(name, value, put)`."""
        places = guards.swappable(self.fn, types)
        attributes = getattr(guards.bound_object(inspect.unwrap(self.fn)), "__dict__", None)
        if isinstance(attributes, dict):
            places += [(f"self.{name}", value, functools.partial(attributes.__setitem__, name))
                       for name, value in list(attributes.items()) if isinstance(value, types)]
        return places

    def _swap(self) -> None:
        recorders: dict[int, Recorder] = {}
        for name, value, put in self._places(_GENERATORS):
            put(recorders.setdefault(id(value), Recorder(self, value, name)))
            self.saved.append((put, value))

    def __exit__(self, *exc: Any) -> None:
        for put, gen in reversed(self.saved):
            put(gen)
        if _active.recording is self:
            _active.recording = None
        if self.locked:
            _swapping.release()

    def enter(self, trace: Trace) -> None:
        """The trace of the function opened (again: a retry starts afresh)."""
        top = _active.recording
        if top is self:
            self.top, self.traces, self.sites, self.buffers, self.names, self.ends = \
                trace, {trace: None}, [], {}, [], []
        elif top is not None and self.parent is not None:
            batched = self.collector is not None and self.collector.batched
            reason = top.traces.get(self.parent, _BODY)
            top.traces[trace] = (f"under {self.collector.label}, where each example would "
                                 f"need draws of its own" if batched and reason is None
                                 else reason)

    def taking_draws(self, tape: Tape) -> Tape:
        """The traced tape taking its draws' buffers after its inputs, each draw a slice of
        its buffer (reshaped) at the tape's start."""
        if not self.sites:
            return tape
        self.collector.drawn[:] = [site for site, _, _ in self.sites]
        fresh = fresh_names(tape, "_")
        buffers = [Var(fresh(name), Aval((end,), dtype))
                   for name, end, (_, dtype) in zip(self.names, self.ends, self.buffers)]
        eqns = []
        for site, var, src in self.sites:
            flat = Var(fresh("drawn"), Aval((site.size,), site.dtype))
            eqns.append(Eqn(L.slice_.name, (buffers[site.buffer],), (flat,), make_params(
                {"start": (site.offset,), "limit": (site.offset + site.size,),
                 "step": (1,)}), src))
            eqns.append(Eqn(L.reshape.name, (flat,), (var,),
                            make_params({"shape": var.aval.shape}), src))
        start = None if tape.reverse_start is None else tape.reverse_start + len(eqns)
        return dataclasses.replace(tape, invars=tape.invars + tuple(buffers),
                                   eqns=tuple(eqns) + tuple(tape.eqns), reverse_start=start)

    def live(self) -> bool:
        """Whether this thread is tracing the function (elsewhere recorders are generators)."""
        return _active.recording is self

    def take(self, recorder: "Recorder", method: str, call: str, args: tuple,
             shape: tuple[int, ...], dtype: Any) -> Tracer:
        """The numbers of `recorder`'s generator's `call(*args)`, drawn anew on every call
        of the program (`recorder.method` was called): a tracer of `shape` and `dtype`."""
        trace = current_trace()
        reason = self.traces.get(trace, _BODY) if trace is not None else _BODY
        if reason is not None:
            raise RandomnessError(at_source(
                f"`{recorder.name}.{method}(...)` draws from a numpy random generator "
                f"{reason}. Draw it outside, or with tj.random from a key passed in.",
                user_source()))
        gen, dtype = recorder.generator, np.dtype(dtype)
        ident = re.sub(r"\W", "_", recorder.name)
        k = self.buffers.setdefault((id(gen), dtype), len(self.buffers))
        if k == len(self.ends):
            self.names.append(f"draws_{ident}" + ("" if dtype == np.float64 else f"_{dtype.name}"))
            self.ends.append(0)
        offset, size = self.ends[k], int(np.prod(shape, dtype=np.int64))
        self.ends[k] += size
        tracer = self.top.new_tracer(Aval(tuple(shape), dtype), f"drawn_{ident}")
        self.sites.append((_Site(gen, call, args, k, offset, size, dtype), var_of(tracer),
                           user_source()))
        return tracer


def _argument(fn: Callable[..., Any], i: int) -> str:
    """The name of `fn`'s positional parameter i, for messages."""
    try:
        return list(inspect.signature(fn).parameters)[i]
    except (TypeError, ValueError, IndexError):
        return f"argument {i}"


class Recorder:
    """A numpy RandomState or Generator as the traced function sees it: its drawing methods
    (draw_methods.py) record draws (`Recording.take`); on another thread, or once the trace
    is over, it is the generator (every method and attribute)."""

    def __init__(self, recording: Recording, generator: Any, name: str) -> None:
        self.recording, self.generator, self.name = recording, generator, name
        self.offered = GENERATOR if isinstance(generator, np.random.Generator) else LEGACY

    def __getattr__(self, method: str) -> Any:
        real = getattr(self.generator, method)
        if not self.recording.live():
            return real
        if method in self.offered:
            return functools.partial(self.offered[method],
                                     functools.partial(self.recording.take, self, method))
        kind = "Generator" if isinstance(self.generator, np.random.Generator) else "RandomState"
        raise RandomnessError(at_source(
            f"`{self.name}.{method}` (a numpy {kind}) is called while tapejit traces the "
            f"function; draws are recorded per call from {kind}'s "
            f"{', '.join(sorted(self.offered))} only. Draw the rest outside the traced "
            f"function and pass them in, or use tj.random with a key passed in.",
            user_source()))


_DRAWN = (*_GENERATORS, Recorder)     # a generator, or one a trace swapped


def _module_draw(name: str) -> Callable[..., Any] | None:
    """numpy.random's function `name` drawing from numpy's global RandomState, where the
    trace on this thread records draws and offers it (guards.DRAWS)."""
    recording = _active.recording
    if recording is None or not recording.live() or name not in LEGACY:
        return None
    return getattr(Recorder(recording, np.random.mtrand._rand, "numpy.random"), name)


guards.DRAWS.append(_module_draw)
