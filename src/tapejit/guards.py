"""numpy functions that cannot see tracers, wrapped while a recording is open.

Some numpy calls never reach a tracer's `__array_function__`: numpy's array constructors and
numpy.random are not dispatched on their arguments. While a trace is open on some thread,
these numpy module functions are wrapped (a wrapper acts only on a thread with a trace open):

- constructors given traced values (`np.array([a, b])`, `np.asarray(x)`, `np.full(n, v)`)
  record them, by the rules numpy_api/creation.py registers in `TRACED`: without the wrapper
  numpy would ask the tracers for their values (an error, or in GradientTape's eager
  recording a silent constant). Only the user's calls: an installed library (scipy, ...)
  calls np.asarray to get a numpy array, and gets numpy's (which asks the tracer for its
  value, and so raises a clear error) rather than a tracer it cannot use.

While a replayed trace (`Trace.replays`: not GradientTape's eager recording, which runs the
user's code again on every step) is open, also:

- numpy.random: a draw made while tracing would be a constant of the tape, so every call
  would reuse the same numbers (dropout, noise injection), silently. Where the trace records
  draws (draws.py, through `DRAWS`: grad, value_and_grad and jit) it is recorded from numpy's
  global RandomState, drawn anew by each call; elsewhere it is an error (`RandomnessError`) that
  points to tj.random's explicit keys (random.py).
- array constructors given a traced size (`np.ones(n)`, `np.arange(n)`, ...): numpy raises its
  own TypeError, which says nothing about tracing. It is a `ConcretizationError` naming the
  size and the fix (`static_argnums`).
- the arrays constructors make are `trace.Constant`s: indexing one by a traced integer
  array records a gather (`np.eye(k)[labels]`, `np.array(table)[labels]`). A traced value
  written into one traces the function again with the constructors of that user's line
  making traced arrays (`trace.buffer_sites`; np.empty's as zeros). np.asarray of an
  existing array returns it as is (a constant used again stays one constant of the tape).
  Under GradientTape's recording they are `Constant`s too, so that such a write is an error
  rather than a lost gradient.

The wrappers are installed when the first trace opens and restored when the last one closes
(also when tracing raised). numpy's Generator and RandomState types cannot be wrapped: those
the traced function reads by name where they can be put back are swapped for draws.py's
recorders while it is traced, and `trace_flat` compares the states of the others it reaches
(the attributes of a method's object; all of them where draws are not recorded) before and
after tracing; a draw from one of them by another thread during the trace is reported too.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import types
from typing import Any, Callable, Iterator

import numpy as np

from .errors import (ConcretizationError, RandomnessError, at_source, library_dirs,
                     user_source)
from .recording import Constant, buffer_sites
from .trace import Tracer, holds_tracer, lift, set_open_hooks

# numpy constructors -> the (position, keyword) of their arguments that are sizes or bounds
SIZED: dict[str, tuple[tuple[int, str], ...]] = {
    "zeros": ((0, "shape"),), "ones": ((0, "shape"),), "empty": ((0, "shape"),),
    "full": ((0, "shape"),), "identity": ((0, "n"),),
    "eye": ((0, "N"), (1, "M"), (2, "k")), "tri": ((0, "N"), (1, "M"), (2, "k")),
    "arange": ((0, "start"), (1, "stop"), (2, "step")),
    "linspace": ((2, "num"),), "logspace": ((2, "num"),), "geomspace": ((2, "num"),),
}
# the constructors wrapped: those of SIZED and the conversions
CONSTRUCTORS = (*SIZED, "array", "asarray", "asanyarray")
# functions of an array that numpy does not dispatch when it is a list (np.mean([a, b]) of
# traced a, b): wrapped to make the list one traced array first
OF_SEQUENCES = ("sum", "mean", "prod", "max", "min", "amax", "amin", "std", "var", "average",
                "median", "ptp", "any", "all", "argmax", "argmin", "cumsum", "cumprod")
# constructor name -> (does this call hold traced values?, the rule that records it)
TRACED: dict[str, tuple[Callable[..., bool], Callable[..., Any]]] = {}
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# code whose arrays, made at a user's line, are never the user's buffers
_MAKERS = (_PACKAGE, os.path.dirname(os.path.abspath(np.__file__)))
_HINTS = {"arange": " For a traced start or step with a fixed length n, write "
                    "`start + step * np.arange(n)`."}


class _Depth(threading.local):
    def __init__(self) -> None:
        self.traces = 0     # replayed traces open on this thread
        self.any = 0        # traces of any kind open on this thread


_depth = _Depth()
_lock = threading.Lock()
_open = 0                   # traces open on every thread
_originals: dict[Any, dict[str, Callable[..., Any]]] = {}   # module -> name -> function
_guards: dict[Any, dict[str, Callable[..., Any]]] = {}
# called when the first trace opens (numpy_api/stats.py's: wrap scipy.stats once it is imported)
ON_FIRST_OPEN: list[Callable[[], None]] = []
# draws.py's: numpy.random's function `name` as the trace open on this thread records it, or None
DRAWS: list[Callable[[str], Callable[..., Any] | None]] = []


def random_message(what: str) -> str:
    return (f"{what} while tracing: tapejit records a function once and replays the recording "
            f"on every call, so these random numbers would be drawn once and be the same on "
            f"every call. Instead, draw them with tj.random from a key passed in as an "
            f"argument, e.g. `noise = tj.random.normal(key, x.shape)` in `step(x, key)`, "
            f"called with a new key each time (`key, sub = tj.random.split(key); step(x, sub)`); "
            f"or draw them outside the traced function and pass them in as an argument.")


def caller_source() -> tuple[str, int] | None:
    """The innermost frame outside tapejit and installed libraries (numpy, scipy, ...): the
    user's line a library's call came from."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(library_dirs(True) + (_PACKAGE, "<__array_function__")):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def size_error(what: str, value: Any, src: Any, hint: str = "") -> ConcretizationError:
    """The error for a traced value used as an array size in `what`."""
    return ConcretizationError(at_source(
        f"{what}: a size is a traced value ({value!r}), but tapejit fixes every array's shape "
        f"when it records the function. Pass the size as a Python int marked static, e.g. "
        f"`tj.jit(f, static_argnums=1)` for `f(x, n)` (a new value traces again; for tj.vmap, "
        f"bind it: `tj.vmap(functools.partial(f, n=5))`), or compute it from an argument's "
        f"shape (`x.shape[0]` is a Python int while tracing).{hint}",
        src))


def traced_in(value: Any) -> Any:
    """The tracer `value` is or holds (in a tuple or list of sizes), else None."""
    for item in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(item, Tracer):
            return item
    return None


def _random_guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        # default_rng(seed) gives the same numbers on every call in numpy too
        seeded = name == "default_rng" and (args[0] if args else kwargs.get("seed")) is not None
        if _depth.traces and not seeded:
            drawn = next((d for d in (draw(name) for draw in DRAWS) if d is not None), None)
            if drawn is not None:   # recorded from numpy's global RandomState (draws.py)
                return drawn(*args, **kwargs)
            raise RandomnessError(at_source(random_message(f"numpy.random.{name} was called"),
                                            user_source()))
        return fn(*args, **kwargs)
    return guarded


def _constructor_guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    sizes = SIZED.get(name, ())

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not _depth.any:
            return fn(*args, **kwargs)
        lowering = TRACED.get(name)
        if lowering is not None and lowering[0](*args, **kwargs) and \
                not sys._getframe(1).f_code.co_filename.startswith(library_dirs(True)):
            return lowering[1](*args, **kwargs)
        for position, keyword in sizes if _depth.traces else ():
            given = args[position] if position < len(args) else kwargs.get(keyword)
            tracer = traced_in(given)
            if tracer is not None:
                raise size_error(f"numpy.{name}", tracer, user_source(), _HINTS.get(name, ""))
        out = fn(*args, **kwargs)
        if type(out) is not np.ndarray or (args and out is args[0]) or \
                sys._getframe(1).f_code.co_filename.startswith(_MAKERS):
            return out      # tapejit's own arrays (setitem's mask), numpy's (broadcast_shapes')
        if not _depth.traces:           # GradientTape's recording: a write into it is an error
            return out.view(Constant)
        site = user_source()
        if site in buffer_sites():      # a traced value is written into this line's arrays
            return lift(np.zeros_like(out) if name == "empty" else out)
        out = out.view(Constant)
        out.site = site
        return out
    return guarded


def _sequence_guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(a: Any, *args: Any, **kwargs: Any) -> Any:
        if _depth.any and isinstance(a, (list, tuple)) and holds_tracer(a):
            a = np.array(a)                 # (the guarded np.array: traced values stacked)
        return fn(a, *args, **kwargs)
    return guarded


def _wrap_all() -> None:
    """Make the wrappers (once): numpy.random's module functions (not its classes) and the
    constructors of `CONSTRUCTORS`."""
    functions = {name: getattr(np.random, name) for name in np.random.__all__
                 if not isinstance(getattr(np.random, name), type)}
    _originals[np.random] = functions
    _guards[np.random] = {name: _random_guard(name, fn) for name, fn in functions.items()}
    _originals[np] = {name: getattr(np, name) for name in CONSTRUCTORS + OF_SEQUENCES}
    _guards[np] = {name: _constructor_guard(name, fn) if name in CONSTRUCTORS else
                   _sequence_guard(fn) for name, fn in _originals[np].items()}


def _install() -> None:
    if not _originals:
        _wrap_all()
    for module, guards in _guards.items():
        vars(module).update(guards)
    for hook in ON_FIRST_OPEN:
        hook()


def _uninstall() -> None:
    for module, functions in _originals.items():
        vars(module).update(functions)


def trace_opened(replays: bool) -> None:
    """A trace opens on this thread (`replays`: one whose recording is replayed)."""
    global _open
    _depth.traces += replays
    _depth.any += 1
    with _lock:
        _open += 1
        if _open == 1:
            _install()


def trace_closed(replays: bool) -> None:
    """A trace closes on this thread."""
    global _open
    _depth.traces -= replays
    _depth.any -= 1
    with _lock:
        _open -= 1
        if _open == 0:
            _uninstall()


set_open_hooks(trace_opened, trace_closed)


# -- generators the traced function reaches by name -------------------------------------------
_GENERATORS = (np.random.Generator, np.random.RandomState)
States = list[tuple[str, Any, Any]]


def generator_state(gen: Any) -> Any:
    """A numpy Generator's or RandomState's state, to compare."""
    if isinstance(gen, np.random.Generator):
        return gen.bit_generator.state
    return gen.get_state(legacy=False)


def generator_states(fn: Callable[..., Any]) -> States:
    """`(name, generator, state)` of each numpy Generator or RandomState `fn` can read by
    name: its module's globals, its closure, the attributes of a bound method's object, and
    the same of every function of the user's it reaches through those (`grad(lambda x: g(x))`
    reaches g's; a loss calling a module-level helper reaches the helper's closure). Each
    generator once, whatever names it has."""
    found: dict[int, tuple[str, Any]] = {}
    for name, value, _ in _by_name(fn, set()):
        if isinstance(value, _GENERATORS):
            found.setdefault(id(value), (name, value))
    return [(name, gen, generator_state(gen)) for name, gen in found.values()]


Put = Callable[[Any], None]


def swappable(fn: Callable[..., Any], types: tuple[type, ...]) -> list[tuple[str, Any, Put]]:
    """`(name, value, put)` of what `fn` reads by name (`_by_name`) that is of `types`, where
    `put` can replace it (draws.py swaps generators so while `fn` is traced)."""
    return [(name, value, put) for name, value, put in _by_name(fn, set())
            if put is not None and isinstance(value, types)]


def _by_name(fn: Any, seen: set[int]) -> Iterator[tuple[str, Any, Put | None]]:
    """`(name, value, put)` for what `fn` can read by name: the attributes of a bound
    method's object, its module's globals, its closure cells and default arguments, then the
    same of each function of the user's it reaches through those it reads. `put(v)` stores v
    in that place: None for an object's attributes and the globals it does not read (those
    are not changed)."""
    fn = inspect.unwrap(fn)
    if id(fn) in seen:
        return
    seen.add(id(fn))
    places: list[tuple[str, Any, Put | None, bool]] = []     # ..., whether to follow it
    owner = bound_object(fn)
    if owner is not None:
        places += [(f"self.{name}", value, None, True) for name, value in vars(owner).items()]
        fn = fn.__func__
    code = getattr(fn, "__code__", None)
    if code is not None and not code.co_filename.startswith(library_dirs(True) + (_PACKAGE,)):
        names, read = getattr(fn, "__globals__", {}), _global_names(code)
        places += [(name, value, functools.partial(names.__setitem__, name), True)
                   if name in read else (name, value, None, False)
                   for name, value in names.items()]
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                places.append((name, cell.cell_contents,
                               functools.partial(setattr, cell, "cell_contents"), True))
            except ValueError:          # a cell not filled yet
                continue
        places += [(f"default {k}", value, functools.partial(_put_default, fn, k), True)
                   for k, value in enumerate(getattr(fn, "__defaults__", None) or ())]
    for name, value, put, follow in places:
        yield name, value, put
        if follow and callable(value) and not isinstance(value, _GENERATORS):
            yield from _by_name(value, seen)


def bound_object(fn: Any) -> Any:
    """The object of a bound method of the user's (`model.loss`), where it has attributes;
    else None (a builtin function's `__self__` is its module: `tj.grad(np.dot)` does not read
    numpy's namespace by name)."""
    owner = fn.__self__ if isinstance(fn, types.MethodType) else None
    return owner if hasattr(owner, "__dict__") else None


def in_library(value: Any) -> bool:
    """Whether a module or class belongs to an installed library, the standard library or
    tapejit (a builtin one has no file)."""
    module = value if isinstance(value, types.ModuleType) else \
        sys.modules.get(getattr(value, "__module__", ""))
    path = getattr(module, "__file__", None)
    return module is not None and (
        path is None or path.startswith(library_dirs(True) + (_PACKAGE,)))


def _global_names(code: Any) -> set[str]:
    """The global names `code` and the functions defined in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return bool(a == b)


def check_generators(before: States, fn_name: str, src: Any, why: str = "") -> None:
    """Raise if a generator of `before` was drawn from since (while `fn_name` was traced);
    `why` says why its draws were not recorded (draws.py)."""
    for name, gen, state in before:
        if not _same(state, generator_state(gen)):
            raise RandomnessError(at_source(random_message(
                f"the numpy random generator `{name}` was drawn from in {fn_name}") + why, src))


# -- arrays the traced function reads by name -------------------------------------------------
class outside_arrays:
    """Within this context (a replayed trace of `fn`), the plain numpy arrays `fn` reads by
    name (its globals, closure cells and default arguments, and those of the user's functions
    it reaches by global name) are `Constant` views of themselves, put back on exit: indexed
    by traced values one records a gather or a slice of traced bounds (`table[i]`,
    `data[i * b:(i + 1) * b]`: HIPS autograd's minibatches), where numpy would ask the tracer
    for its value (one program per value). The views share the arrays' memory; a traced value
    written into one is the concretization error it was (`Outside`)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __enter__(self) -> None:
        self.saved: list[tuple[Callable[[Any], None], np.ndarray]] = []
        views: dict[int, Outside] = {}
        for _, array, put in _by_name(self.fn, set()):
            if put is not None and type(array) is np.ndarray and array.ndim:
                put(views.setdefault(id(array), array.view(Outside)))
                self.saved.append((put, array))

    def __exit__(self, *exc: Any) -> None:
        for put, array in reversed(self.saved):
            put(array)


class Outside(Constant):
    """An array from outside the traced function: read as a `Constant`, written as a plain
    ndarray (numpy asks a traced value written into it for its value: the error says to
    write into a buffer made inside the function)."""

    __setitem__ = np.ndarray.__setitem__


def _put_default(fn: Any, k: int, value: Any) -> None:
    defaults = fn.__defaults__
    fn.__defaults__ = defaults[:k] + (value,) + defaults[k + 1:]
