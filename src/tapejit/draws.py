"""numpy random generators drawn from inside a traced function: fresh numbers on every call.

A Monte-Carlo objective draws from a numpy generator it reads by name (`rs.randn(n, D)` with
`rs = npr.RandomState(0)` a global or a closure cell; `np.random.randn(...)`, numpy's global
RandomState). A draw made while tracing would be a constant of the tape, the same numbers on
every call. So while `grad`, `value_and_grad` or `jit` traces a function (a `Recording`), each
numpy `RandomState` and `Generator` it reads by name where it can be swapped
(`guards.swappable`: its globals, closure cells and default arguments, and those of the user's
functions it reaches; the attributes of a bound method's object; a static argument) is a
`Recorder`, put back after the trace (also when it raises). A
recorder's draws are tj.random's ops (random.py) on `fold_in(key, k)`, k the draw's index in
the trace, and `key` a uint32[2] input of the program, one per generator drawn from, after
the argument leaves. Each call takes those keys from the generators themselves (`with_keys`:
`randint(0, 2**32, size=2, dtype=uint32)`), so a generator advances once per call and each
call draws new numbers: numpy's distributions, not numpy's numbers.

Where it cannot work, `RandomnessError` names the generator, the method and the line: a
method the recorder does not offer; a draw under `vmap` (each example would need draws of its
own) or in a control-flow body (traced once, run many times); the transforms whose programs
take no keys (jacobian, hessian, jvp, ...: `guards.check_generators` sees the generator's
state change); and everything under TAPEJIT_STRICT=1. A generator made inside the function
from a seed gives the same numbers on every call in numpy too: it stays a constant.

In the layers: on random.py, guards.py and compile.py; below the transforms package, where
transforms/traced.py opens a `Recording` around each trace and the per-signature cache
(transforms/cached.py) says which transform builds (`collecting`) and adds the keys to each
call (`with_keys`, `fast_caller`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import re
import threading
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import guards, random
from .avals import Aval
from .backends import DirectCall, direct_caller
from .config import config
from .errors import ArgumentError, RandomnessError, at_source, user_source
from .ir import Tape
from .trace import Trace, Tracer, current_trace, lift, var_of

KEYED = frozenset({"grad", "value_and_grad", "jit"})  # transforms whose programs take keys
_GENERATORS = (np.random.Generator, np.random.RandomState)
_KEY = Aval((2,), np.dtype(np.uint32))
_BODY = ("in a body tapejit traces once and runs many times (tj.fori_loop, scan, while_loop, "
         "cond, checkpoint, a custom_vjp rule), where it would be the same draw every time")


@dataclasses.dataclass
class _Collector:
    label: str                  # `grad(f)`, for messages
    keyed: bool                 # its programs take keys
    batched: bool               # vmap
    drawn: list[Any] = dataclasses.field(default_factory=list)  # generators, key order


_collector: contextvars.ContextVar[_Collector | None] = contextvars.ContextVar(
    "tapejit_draws", default=None)


@contextlib.contextmanager
def collecting(transform: Any) -> Iterator[list[Any]]:
    """Within: programs are built for `transform` (a transforms.cached.CachedTransform; its
    record's name says whether its programs take keys). Yields the generators whose keys the
    program built takes, in order (after the argument leaves)."""
    name = transform.record.name
    found = _Collector(transform.label(), name in KEYED, name == "vmap")
    token = _collector.set(found)
    try:
        yield found.drawn
    finally:
        _collector.reset(token)


def with_keys(generators: Sequence[Any], leaves: Sequence[Any]) -> Sequence[Any]:
    """A call's leaves, then a new key from each generator (each advances once)."""
    if not generators:
        return leaves
    return [*leaves, *(_new_key(gen) for gen in generators)]


def fast_caller(runner: Any, call: Any, generators: Sequence[Any]) -> DirectCall:
    """backends.py's `direct_caller` `(fn, tail)` for the cache's fast path on calls like `call`
    (positional leaves): `fn(*args, *tail)` passes a new key from each generator after the
    arguments."""
    n = len(call.args)
    if not generators:
        return direct_caller(runner, call.dynamic, call.leaves, n)
    keys = [np.zeros(2, np.uint32)] * len(generators)
    fn, tail = direct_caller(runner, (*call.dynamic, *range(n, n + len(keys))),
                             [*call.leaves, *keys], n + len(keys))
    return (lambda *args: fn(*args[:n], *map(_new_key, generators), *args[n:])), tail


def _new_key(gen: Any) -> np.ndarray:
    draw = gen.integers if isinstance(gen, np.random.Generator) else gen.randint
    return draw(0, 2 ** 32, size=2, dtype=np.uint32)


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
        self.keys: dict[int, Tracer] = {}           # id(generator) -> its key's tracer
        self.order: list[Any] = []
        self.count = 0

    @property
    def refusal(self) -> str:
        """Why draws from numpy generators are not recorded here ('' where nothing says)."""
        if config().strict:
            return " (TAPEJIT_STRICT=1 keeps this an error)"
        found = self.collector
        if found is None or found.keyed:
            return ""
        if found.batched:
            return f" Under {found.label} it is refused: each example would need draws of its own."
        return (f" Under {found.label} it is refused: draws from numpy generators are taken "
                f"per call only under tj.grad, tj.value_and_grad and tj.jit.")

    def __enter__(self) -> "Recording":
        found = self.collector
        static = [(i, gen) for i, gen in enumerate(self.call.args)
                  if i not in self.call.dynamic and isinstance(gen, _GENERATORS)]
        if self.parent is not None or found is None or not found.keyed or config().strict:
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
        owner = getattr(inspect.unwrap(self.fn), "__self__", None)
        attributes = getattr(owner, "__dict__", None)
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
            self.top, self.traces, self.keys, self.order, self.count = trace, {trace: None}, \
                {}, [], 0
        elif top is not None and self.parent is not None:
            batched = self.collector is not None and self.collector.batched
            reason = top.traces.get(self.parent, _BODY)
            top.traces[trace] = (f"under {self.collector.label}, where each example would "
                                 f"need draws of its own" if batched and reason is None
                                 else reason)

    def keyed(self, tape: Tape) -> Tape:
        """The traced tape taking the keys of the generators drawn from, after its inputs."""
        if not self.order:
            return tape
        self.collector.drawn[:] = self.order
        keys = tuple(var_of(self.keys[id(gen)]) for gen in self.order)
        return dataclasses.replace(tape, invars=tape.invars + keys)

    def live(self) -> bool:
        """Whether this thread is tracing the function (elsewhere recorders are generators)."""
        return _active.recording is self

    def key(self, recorder: "Recorder", method: str) -> Any:
        """The key of this draw of `recorder`'s generator (the trace's k-th draw)."""
        trace = current_trace()
        reason = self.traces.get(trace, _BODY) if trace is not None else _BODY
        if reason is not None:
            raise RandomnessError(at_source(
                f"`{recorder.name}.{method}(...)` draws from a numpy random generator "
                f"{reason}. Draw it outside, or with tj.random from a key passed in.",
                user_source()))
        gen = recorder.generator
        if id(gen) not in self.keys:
            ident = re.sub(r"\W", "_", recorder.name)
            self.keys[id(gen)] = self.top.new_tracer(_KEY, f"key_{ident}")
            self.order.append(gen)
        self.count += 1
        return random.fold_in(self.keys[id(gen)], self.count - 1)


def _argument(fn: Callable[..., Any], i: int) -> str:
    """The name of `fn`'s positional parameter i, for messages."""
    try:
        return list(inspect.signature(fn).parameters)[i]
    except (TypeError, ValueError, IndexError):
        return f"argument {i}"


def _size(size: Any) -> tuple[int, ...]:
    if size is None:
        return ()
    return tuple(size) if isinstance(size, (tuple, list)) else (size,)


class Recorder:
    """A numpy RandomState or Generator as the traced function sees it: its drawing methods
    record tj.random's ops; on another thread, or once the trace is over, it is the generator
    (every method and attribute)."""

    def __init__(self, recording: Recording, generator: Any, name: str) -> None:
        self.recording, self.generator, self.name = recording, generator, name
        self.offered = _GENERATOR if isinstance(generator, np.random.Generator) else _LEGACY

    def __getattr__(self, method: str) -> Any:
        real = getattr(self.generator, method)
        if not self.recording.live():
            return real
        if method in self.offered:
            return lambda *args, **kwargs: self.offered[method](
                self.recording.key(self, method), *args, **kwargs)
        kind = "Generator" if isinstance(self.generator, np.random.Generator) else "RandomState"
        raise RandomnessError(at_source(
            f"`{self.name}.{method}` (a numpy {kind}) is called while tapejit traces the "
            f"function; draws are recorded per call from {kind}'s "
            f"{', '.join(sorted(self.offered))} only. Draw the rest outside the traced "
            f"function and pass them in, or use tj.random with a key passed in.",
            user_source()))


_DRAWN = (*_GENERATORS, Recorder)     # a generator, or one a trace swapped


def _normal(key: Any, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
    shape = np.broadcast_shapes(np.shape(loc), np.shape(scale)) if size is None else size
    return loc + scale * random.normal(key, _size(shape))


def _uniform(key: Any, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
    shape = np.broadcast_shapes(np.shape(low), np.shape(high)) if size is None else size
    return low + (high - low) * random.uniform(key, _size(shape))


def _randint(key: Any, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
             endpoint: bool = False) -> Any:
    low, high = (0, low) if high is None else (low, high)
    high = high + endpoint
    if not isinstance(low, Tracer) and not isinstance(high, Tracer) and np.any(
            np.asarray(high) <= np.asarray(low)):
        raise ArgumentError(at_source(f"randint/integers: low >= high ({low!r} >= {high!r} "
                                      f"with high exclusive), as numpy says", user_source()))
    return random.randint(key, _size(size), low, high, dtype)


def _choice(key: Any, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
    items = None if np.ndim(a) == 0 and not isinstance(a, Tracer) else lift(a)
    n, shape = (int(a) if items is None else items.shape[0]), _size(size)
    if replace:
        index = (random.randint(key, shape, 0, n) if p is None else
                 random.categorical(key, np.log(p), shape=shape))
    elif p is None and int(np.prod(shape)) <= n:
        index = np.reshape(random.permutation(key, n)[:int(np.prod(shape))], shape)
    else:
        raise RandomnessError(at_source(
            "choice(replace=False) is recorded only without p and for a size up to the "
            "population's", user_source()))
    return index if items is None else items[index]


def _permutation(key: Any, x: Any, axis: int = 0) -> Any:
    return random.permutation(key, x, axis)


_LEGACY: dict[str, Callable[..., Any]] = {
    "randn": lambda key, *shape: random.normal(key, shape),
    "rand": lambda key, *shape: random.uniform(key, shape),
    "standard_normal": lambda key, size=None: random.normal(key, _size(size)),
    "random_sample": lambda key, size=None: random.uniform(key, _size(size)),
    "normal": _normal, "uniform": _uniform, "randint": _randint, "choice": _choice,
    "permutation": lambda key, x: random.permutation(key, x),
}
_LEGACY["random"] = _LEGACY["random_sample"]
_GENERATOR: dict[str, Callable[..., Any]] = {
    "standard_normal": lambda key, size=None, dtype=np.float64: random.normal(
        key, _size(size), dtype),
    "random": lambda key, size=None, dtype=np.float64: random.uniform(key, _size(size), dtype),
    "normal": _normal, "uniform": _uniform, "choice": _choice, "permutation": _permutation,
    "integers": lambda key, low, high=None, size=None, dtype=np.int64, endpoint=False:
        _randint(key, low, high, size, dtype, endpoint),
}


def _module_draw(name: str) -> Callable[..., Any] | None:
    """numpy.random's function `name` drawing from numpy's global RandomState, where the
    trace on this thread records draws and offers it (guards.DRAWS)."""
    recording = _active.recording
    if recording is None or not recording.live() or name not in _LEGACY:
        return None
    return getattr(Recorder(recording, np.random.mtrand._rand, "numpy.random"), name)


guards.DRAWS.append(_module_draw)
