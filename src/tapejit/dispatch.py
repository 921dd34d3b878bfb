"""The per-signature program cache behind every transform, and how a program runs.

A transform (`value_and_grad`, `jit`, ...) is a `CachedTransform`. A call is looked up twice:

- the **fast path**: when every argument is an ndarray or a scalar (or static) and there are no
  keyword arguments, a cheap key (each argument's type, shape, dtype and strides; static values)
  finds the entry an earlier call of that key made: it calls the compiled function directly
  (numba's dispatcher, without the disk-cache recovery wrapper, which matters only on a first
  call), converting only scalars and non-contiguous arrays, and builds the result with
  everything about the signature precomputed. (Strides are in the key so that whether an
  array needs a copy is known per entry, not checked per call.)
- otherwise `split_args` flattens the call (api.py), and its full key (pytree structure, leaf
  avals, weak types, static values) finds the `Program`; on a miss it traces and builds one, and
  gets it an executable for the chosen backend (compile.py). The first call of a new program
  runs under the transform's lock, so concurrent first calls trace and compile once.

Tiers: on the numba backend a new program's first call runs on the numpy interpreter (its
tape is already optimized; nothing is generated or compiled), and the program compiles on its
second call (`interpret_first` says which programs; `TAPEJIT_FIRST_CALL=compile` turns it off).
A script that needs one gradient never waits for numba, and which calls ran where does not
depend on timing or on what the disk cache holds: call 1 interpreted, the rest compiled.

Inside another transform's trace nothing is cached: the tape is inlined. A transform keeps at
most `max_programs` programs (least recently used go first) and warns (`TapejitWarning`) when
it has been re-traced more than `RETRACE_WARNING` times. `cache_info()` reports what happened,
`clear_cache()` empties every transform's cache and the disk cache.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import threading
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from . import cache, threads
from .codegen.cpu import entry_args
from .compile import BACKENDS, Compiled, Interpreted, executable, verify
from .config import config
from .errors import ArgumentError, TapejitWarning, at_source
from .interpret import inline, interpret
from .ir import Tape, sub_tapes
from .pytree import TreeDef
from .trace import Tracer, _stack, current_trace, user_source

MAX_PROGRAMS = 64      # programs kept per transform (least recently used are dropped)
RETRACE_WARNING = 8    # re-traces of one transform before it warns
# A first call runs on the interpreter only if the arrays it makes total at most this many
# bytes (an upper bound of what it holds at once: it drops each value after its last reader).
# Fresh memory costs page faults: a first call making 160 MB took 0.13-0.37 s in a new
# process, what numba takes to compile a small program, so the bound is set below that ...
INTERPRET_FIRST_MAX_BYTES = 128 * 2**20
# ... and the tape has none of these (the interpreter runs a loop's body op by op, each step)
LOOPS = frozenset({"scan", "loop_grad", "while"})

_transforms: "weakref.WeakSet[CachedTransform]" = weakref.WeakSet()
_STATIC = object()     # marks a static argument's part of a fast key
# argument types the fast path takes (anything else goes through split_args)
_FAST_SCALARS = frozenset([float, int, bool, np.float64, np.float32, np.int64, np.int32,
                           np.bool_])


def run(tape: Tape, leaves: Sequence[Any], program: Any = None) -> list[Any]:
    """Run a tape: inline it into the open trace, or run its program (default: interpret)."""
    if current_trace() is not None:
        return inline(tape, leaves)
    outs = program(leaves) if program is not None else interpret(tape, leaves)
    return [o[()] if o.ndim == 0 else o for o in outs]


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


class Pending:
    """The runner of a numba program whose first call ran on the interpreter: the program
    compiles on its next call (`CachedTransform._lookup`)."""


PENDING = Pending()


def what_ran(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What calls of a transform did, from its `cache_info()` before and after them."""
    new = {k: after[k] - before[k] for k in ("traces", "interpreted", "compiles", "disk_loads")}
    done = [what for k, what in (("interpreted", "run on the numpy interpreter"),
                                 ("compiles", "numba compile"),
                                 ("disk_loads", "loaded from the disk cache")) if new[k]]
    if new["traces"]:
        done = ["trace + differentiate"] + (done or ["a program compiled before"])
    return " + ".join(done) or "cache hit"


def default_backend(backend: str | None) -> str:
    """The backend a transform uses: its argument, else TAPEJIT_BACKEND, else "numba";
    TAPEJIT_DISABLE_JIT=1 forces the interpreter."""
    settings = config()
    if settings.disable_jit:
        return "interpret"
    return backend or settings.backend


def check_backend(backend: str | None) -> None:
    """An unknown backend is an error where the transform is made (at the user's line)."""
    if backend is not None and backend not in BACKENDS:
        raise ArgumentError(at_source(f"unknown backend {backend!r}; choose one of "
                                      f"{', '.join(BACKENDS)}", user_source(2)))
    if backend == "cuda" and not config().disable_jit:
        from .cuda_support import CudaUnavailableError, problem
        reason = problem()
        if reason is not None:
            raise CudaUnavailableError(at_source(f'backend="cuda" cannot run: {reason}',
                                                 user_source(2)))


@dataclasses.dataclass(frozen=True)
class Program:
    """What a transform caches per signature: the optimized tape, how to run it, the output
    structures and the names of the input leaves (for cache-miss reasons)."""

    tape: Tape
    aux: TreeDef | None
    run: Any = None           # Interpreted | Compiled | PENDING; None when built in a trace
    out: TreeDef | None = None
    names: tuple[str, ...] = ()


def getter(tape: Tape, k: int, keep: bool = False) -> Callable[[Sequence[Any]], Any]:
    """`outs -> result` for output `k` alone: `unbox` of one output."""
    if tape.outvars[k].aval.ndim == 0 and not keep:
        return lambda outs: outs[k][()]
    return operator.itemgetter(k)


def unbox(tape: Tape, keep: Sequence[bool]) -> Callable[[Sequence[Any]], list[Any]]:
    """How a program's outputs become results: 0-d arrays become numpy scalars, except those
    marked `keep` (e.g. the gradient of a 0-d array argument)."""
    scalar = [o.aval.ndim == 0 and not k for o, k in zip(tape.outvars, keep)]
    if not any(scalar):
        return list
    return lambda outs: [o[()] if s else o for o, s in zip(outs, scalar)]


def unbox_traced(keep: Sequence[bool]) -> Callable[[Sequence[Any]], list[Any]]:
    """`unbox` for a tape inlined into a trace: tracers stay; a concrete output marked `keep`
    becomes an array."""
    return lambda outs: [o if isinstance(o, Tracer) or not k else np.asarray(o)
                         for o, k in zip(outs, keep)]


# A transform's finisher: the call's outputs (tape outputs) -> the transform's result.
Finish = Callable[[Sequence[Any]], Any]


class CachedTransform:
    """A per-signature cache of programs, with counts of what happened (`cache_info()`).

    Subclasses provide `_signature(args, kwargs) -> (call, key, build)` (call: api._Args; key:
    a tuple `(options, treedefs, avals, weak, static, n_pos)`; build: () -> Program) and
    `_finisher(program, call, traced) -> Finish`, and call `self._call(args, kwargs)`."""

    max_programs = MAX_PROGRAMS

    def __init__(self, fn: Callable[..., Any], static_argnums: int | Sequence[int],
                 backend: str | None) -> None:
        functools.update_wrapper(self, fn, updated=())
        # copy the function's attributes, but not those of a transform it may be
        self.__dict__.update((k, v) for k, v in getattr(fn, "__dict__", {}).items()
                             if k not in ("cache_info", "__wrapped_transform__"))
        check_backend(backend)
        self.fn, self.backend = fn, backend
        self.static_argnums = ((static_argnums,) if isinstance(static_argnums, int)
                               else tuple(static_argnums))
        self._cache: OrderedDict[tuple, Program] = OrderedDict()
        self._fast: dict[tuple, tuple] = {}     # fast key -> (key, fn, tail, finish)
        self._lock = threading.Lock()
        self._info = {"traces": 0, "interpreted": 0, "compiles": 0, "disk_loads": 0,
                      "hits": 0}
        self._last_miss: str | None = None
        self._retraces = 0           # traces since the first (since the last clear)
        self._warned = False
        self._cleared = False
        self._static_at: dict[int, tuple[int, ...] | None] = {}
        _transforms.add(self)

    def cache_info(self) -> dict[str, Any]:
        """Counts of traces, first calls run on the interpreter, compiles, disk loads and cache
        hits, how many programs are kept, and why the last call missed the cache."""
        return {**self._info, "programs": len(self._cache), "last_miss": self._last_miss}

    def clear(self) -> None:
        """Forget every program (the counts stay)."""
        with self._lock:
            self._cache.clear()
            self._fast.clear()
            self._retraces, self._warned, self._cleared = 0, False, True

    # -- subclass hooks ------------------------------------------------------------------------
    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, tuple, Callable[[], Program]]:
        raise NotImplementedError

    def _finisher(self, program: Program, call: Any, traced: bool) -> Finish:
        raise NotImplementedError

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, args: tuple, kwargs: dict) -> Any:
        fast_key: tuple | None = None
        if not kwargs and not _stack.traces:
            if self.static_argnums:
                fast_key = self._fast_key_static(args)
            else:       # the common case, inline: every argument an array or a scalar
                parts = []
                for a in args:
                    t = type(a)
                    if t is np.ndarray:
                        parts.append((a.shape, a.dtype, a.strides))
                    elif t in _FAST_SCALARS:
                        parts.append(t)
                    else:
                        break
                else:
                    fast_key = tuple(parts)
            entry = self._fast.get(fast_key)
            if entry is not None:
                try:
                    self._cache.move_to_end(entry[0])       # least recently used goes first
                except KeyError:
                    pass                                    # evicted meanwhile: the slow path
                else:
                    self._info["hits"] += 1
                    key, fn, tail, finish = entry
                    return finish(fn(*args, *tail))
        return self._call_slow(args, kwargs, fast_key)

    def _fast_key_static(self, args: tuple) -> tuple | None:
        """`_call`'s fast key when some arguments are static: their values are part of it."""
        static = self._static_positions(len(args))
        if static is None:
            return None
        parts: list[Any] = []
        for i, a in enumerate(args):
            t = type(a)
            if i in static:
                try:
                    hash(a)
                except TypeError:
                    return None
                parts.append((_STATIC, t, a))
            elif t is np.ndarray:
                parts.append((a.shape, a.dtype, a.strides))
            elif t in _FAST_SCALARS:
                parts.append(t)
            else:
                return None
        return tuple(parts)

    def _static_positions(self, nargs: int) -> tuple[int, ...] | None:
        """The static argument positions for `nargs` positional arguments (None: one is out
        of range, which `split_args` reports)."""
        if nargs not in self._static_at:
            ok = all(-nargs <= i < nargs for i in self.static_argnums)
            self._static_at[nargs] = (tuple(sorted({i % nargs for i in self.static_argnums}))
                                      if ok else None)
        return self._static_at[nargs]

    def _call_slow(self, args: tuple, kwargs: dict, fast_key: tuple | None) -> Any:
        call, key, build = self._signature(args, kwargs)
        if default_backend(self.backend) == "cuda":     # programs are per device
            from .cuda_support import device_key
            key = (*key, device_key())
        if current_trace() is not None:   # inside another trace: inline, never cache
            program = build()
            return self._finisher(program, call, True)(inline(program.tape, call.leaves))
        program, outs = self._lookup(key, call, build)
        if outs is None:
            outs = program.run(call.leaves)
        finish = self._finisher(program, call, False)
        result = finish(outs)
        if fast_key is not None and program.run is not PENDING:
            self._fast[fast_key] = (key, *_fast_call(program.run, call), finish)
        return result

    def _lookup(self, key: tuple, call: Any, build: Callable[[], Program],
                ) -> tuple[Program, list[Any] | None]:
        """The program for `key`, and its outputs on `call` when this call made it (or
        compiled it: the second call of a program whose first ran on the interpreter)."""
        program = self._cache.get(key)
        if program is not None and program.run is not PENDING:
            try:
                self._cache.move_to_end(key)
            except KeyError:
                pass
            self._info["hits"] += 1
            return program, None
        with self._lock:          # concurrent first calls trace and compile once
            program = self._cache.get(key)
            if program is not None:
                self._info["hits"] += 1
                if program.run is not PENDING:
                    return program, None
                runner, outs = self._compile(program.tape, call.leaves)
                program = self._cache[key] = dataclasses.replace(program, run=runner)
                return program, outs
            self._last_miss = self._miss_reason(key, call.names)
            self._info["traces"] += 1
            if self._cache:
                self._retraces += 1
            program = build()
            runner, outs = self._start(program.tape, call.leaves)
            program = dataclasses.replace(program, run=runner, names=tuple(call.names))
            self._cache[key] = program
            self._evict()
            warn = self._retraces > RETRACE_WARNING and not self._warned
            self._warned |= warn
        if warn:
            self._warn_retrace()
        return program, outs

    def _start(self, tape: Tape, leaves: Sequence[Any]) -> tuple[Any, list[Any]]:
        """The runner for a new program and its first outputs."""
        if default_backend(self.backend) == "numba" and interpret_first(tape):
            self._info["interpreted"] += 1
            return PENDING, interpret(tape, leaves)
        return self._compile(tape, leaves)

    def _compile(self, tape: Tape, leaves: Sequence[Any]) -> tuple[Any, list[Any]]:
        """The backend's runner for a program and its outputs on `leaves`. A program the numba
        backend cannot compile runs on the interpreter, with a warning, rather than failing."""
        backend = default_backend(self.backend)
        try:
            runner = executable(tape, backend)
            return runner, self._first_call(runner, leaves)
        except Exception as err:
            if backend != "numba" or not _compile_failure(err):
                raise
            name = getattr(self.fn, "__name__", type(self.fn).__name__)
            src = user_source() or ("<unknown>", 0)
            warnings.warn_explicit(
                f"tapejit could not compile {name} with numba ({type(err).__name__}: "
                f"{str(err).strip().splitlines()[0][:200]}); it runs on the numpy interpreter "
                f"instead. Please report this with the output of tj.explain.",
                TapejitWarning, src[0], src[1])
            runner = Interpreted(tape)
            return runner, runner(leaves)

    def _first_call(self, runner: Any, leaves: Sequence[Any]) -> list[Any]:
        """Run a new program, counting the compile or disk load it caused (a program whose
        source was compiled before, e.g. for another batch size, causes neither)."""
        if not isinstance(runner, Compiled):
            return runner(leaves)
        before = runner.program.compiles, runner.program.disk_loads
        try:
            return runner(leaves)
        finally:
            self._info["compiles"] += runner.program.compiles - before[0]
            self._info["disk_loads"] += runner.program.disk_loads - before[1]

    def _evict(self) -> None:
        while len(self._cache) > self.max_programs:
            old, _ = self._cache.popitem(last=False)
            for fast_key, entry in list(self._fast.items()):
                if entry[0] == old:
                    self._fast.pop(fast_key, None)

    def _miss_reason(self, key: tuple, names: Sequence[str]) -> str:
        if not self._cache:
            return "cache cleared" if self._cleared else "first call"
        last_key, last = next(reversed(self._cache.items()))   # the most recently used
        return miss_reason(last_key, last.names, key, names)

    def _warn_retrace(self) -> None:
        src = user_source() or ("<unknown>", 0)
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        warnings.warn_explicit(
            f"{name} was traced {self._info['traces']} times ({self._retraces} re-traces "
            f"since its first call); the last because {self._last_miss}. Every new pytree "
            f"structure, leaf shape or dtype, or static argument value traces again: pass "
            f"changing numbers as arguments rather than static_argnums, and keep shapes to a "
            f"few sizes (pad batches).", TapejitWarning, src[0], src[1])


def _compile_failure(err: Exception) -> bool:
    """Whether `err` says code generation or numba compilation failed (not the program)."""
    from numba.core.errors import NumbaError
    return isinstance(err, (NotImplementedError, NumbaError))


def miss_reason(old: tuple, old_names: Sequence[str], new: tuple,
                new_names: Sequence[str]) -> str:
    """Why `new` missed: what differs from `old` (keys `(options, treedefs, avals, weak,
    static, n_pos)`, then the device on the CUDA backend), naming the leaves whose shape or
    dtype changed."""
    o_opts, o_tds, o_avals, o_weak, o_static, o_npos = old[:6]
    n_opts, n_tds, n_avals, n_weak, n_static, n_npos = new[:6]
    reasons = []
    if old[6:] != new[6:]:
        reasons.append(f"device changed: {old[6:]} -> {new[6:]}")
    if o_opts != n_opts:
        reasons.append(f"argnums changed: {o_opts} -> {n_opts}")
    if o_npos != n_npos:
        reasons.append(f"positional count changed: {o_npos} -> {n_npos}")
    if o_tds != n_tds:
        shown = lambda tds: ", ".join(map(str, tds))  # noqa: E731
        reasons.append(f"structure changed: ({shown(o_tds)}) -> ({shown(n_tds)})")
    elif o_avals != n_avals or o_weak != n_weak:
        def typed(aval: Any, weak: bool) -> str:
            return f"{aval}{' (Python scalar)' if weak else ''}"
        leaves = [f"{name}: {typed(a, w)} -> {typed(b, v)}" for name, a, w, b, v
                  in zip(new_names, o_avals, o_weak, n_avals, n_weak) if (a, w) != (b, v)]
        what = "shapes/dtypes" if o_avals != n_avals else "weak types"
        reasons.append(f"{what} changed: {', '.join(leaves[:4])}"
                       + (f" (and {len(leaves) - 4} more)" if len(leaves) > 4 else ""))
    if o_static != n_static:
        old_values = {i: (t, v) for i, t, v in o_static}
        changed = [f"argument {i}: {old_values[i][1]!r:.40} -> {v!r:.40}"
                   for i, t, v in n_static if old_values.get(i, (t, v)) != (t, v)]
        reasons.append("static arguments changed: " + (", ".join(changed) or
                                                        f"{o_static!r:.60} -> {n_static!r:.60}"))
    return "; ".join(reasons) or "signature changed"


def _fast_call(runner: Any, call: Any) -> tuple[Callable[..., Sequence[Any]], tuple]:
    """`(fn, tail)`: `fn(*args, *tail)` are the outputs for calls whose arguments have the
    types, shapes, dtypes and strides of `call`'s (each positional, its own leaf). The compiled
    function is called directly; only what needs it is converted (scalars; arrays that are not
    C-contiguous). With TAPEJIT_VERIFY each such call is checked against the interpreter."""
    positions = call.dynamic
    if not isinstance(runner, Compiled):
        return (lambda *args: runner([args[i] for i in positions])), ()
    fn, tail = _direct(runner, call)
    if not config().verify:
        return fn, tail

    def verified(*args: Any) -> Sequence[Any]:
        outs = fn(*args, *tail)
        verify(runner.tape, [args[i] for i in positions], [np.asarray(o) for o in outs])
        return outs
    return verified, ()


def _direct(runner: Compiled, call: Any) -> tuple[Callable[..., Sequence[Any]], tuple]:
    """`_fast_call`'s function for a compiled program."""
    positions = call.dynamic
    fn, tape = runner.program.fn, runner.tape
    tail = (*entry_args(tape, list(call.leaves))[len(tape.invars):], runner.sizes,
            runner.workspace)
    if runner.threads_slot is not None:     # calls run in a thread window (threads.py)
        fn = functools.partial(_windowed, fn, runner.sizes, runner.threads_slot)
    ready = [isinstance(leaf, np.ndarray) and leaf.flags.c_contiguous for leaf in call.leaves]
    # the compiled function is called with the arguments as given only if each is its leaf
    # (no static argument among them: those are in the program, not passed to it)
    if all(ready) and positions == tuple(range(len(call.args))):
        return fn, tail
    convert = [None if ok else _c_array if isinstance(leaf, np.ndarray) else
               functools.partial(np.asarray, dtype=var.aval.dtype)
               for ok, leaf, var in zip(ready, call.leaves, tape.invars)]
    return (lambda *args: fn(*[args[i] if c is None else c(args[i])
                               for c, i in zip(convert, positions)], *tail)), ()


def _windowed(fn: Callable[..., Sequence[Any]], sizes: np.ndarray, slot: int,
              *args: Any) -> Sequence[Any]:
    return threads.run(fn, args, sizes, slot)


def _c_array(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, order="C")


def clear_cache() -> int:
    """Empty the program cache of every transform in this process and the disk cache of
    compiled programs; return how many programs were on disk."""
    for transform in list(_transforms):
        transform.clear()
    return cache.clear_cache()
