"""The per-signature cache of programs behind every transform.

A transform (`value_and_grad`, `jit`, ...) is a `CachedTransform`. A call is looked up twice:

- the **fast path**: when every argument is an ndarray or a scalar (or static) and there are no
  keyword arguments, a cheap key (each argument's type, shape, dtype and strides; static values)
  finds the entry an earlier call of that key made: it calls the runner as `direct_caller`
  (compile.py) prepared it for that key (a compiled program's numba function directly; new
  keys of its numpy random draws passed after the arguments, draws.py), and builds the result
  with everything about the signature precomputed. (Strides are in the key so that whether an
  array needs a copy is known per entry, not checked per call.)
- otherwise the subclass's `_signature` flattens the call (`arguments.split_args`), and its full
  key (pytree structure, leaf avals, weak types, static values) finds the `Specialization`; on
  a miss it builds one (programs.py) and gets its runner and first outputs from the first-call
  tier (first_call.py: on the numba backend the first call is interpreted, the second
  compiles). The first call of a new program runs under the transform's lock, so concurrent
  first calls trace and compile once.

A program remembers which input leaves its function assigns into (`x[i] = v`); every call of it
refuses arguments where such a leaf shares memory with another (numpy would show the write
through the other; tapejit never writes into the arrays passed in).

Transforms of one plain function with the same options share their programs while it reads
the same things by name (sharing.py). Inside another transform's trace nothing is cached: the
tape is inlined. A transform keeps at
most `max_programs` programs (least recently used go first) and warns (`TapejitWarning`) when
it has been re-traced more than `RETRACE_WARNING` times. `cache_info()` reports what happened,
`clear_cache()` empties every transform's cache and the disk cache. A transform pickles as its
function and options (`__reduce__`); unpickled in a process that has it already (a Dask worker
getting it task after task), it is that process's transform, programs and all.

In the layers: above arguments.py, programs.py, compile.py and first_call.py; below the
transforms (api.py, transforms.py, gradient_tape.py), which subclass `CachedTransform`.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import threading
import uuid
import weakref
from collections import Counter, OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from . import cache, sharing
from .arguments import fn_name, miss_reason, refuse_aliasing
from .compile import check_backend, default_backend
from .config import config
from .cuda_support import device_key
from .draws import collecting, fast_caller, with_keys
from .errors import ConcretizationError, at_source, require_callable, warn_at_user
from .first_call import PENDING, compile_and_run, start
from .interpret import inline, interpret
from .ir import Tape
from .passes import dce
from .programs import collecting_rerolls
from .pytree import TreeDef, unflatten
from .trace import (Tracer, _stack, collecting_assignments, collecting_guards,
                    current_trace)

MAX_PROGRAMS = 64      # programs kept per transform (least recently used are dropped)
MAX_VARIANTS = 32      # programs of one signature, chosen by the values they branched on
_VARIANT = object()    # marks a variant's cache key: (_VARIANT, signature key, guards, values)
RETRACE_WARNING = 8    # re-traces of one transform before it warns

_transforms: "weakref.WeakSet[CachedTransform]" = weakref.WeakSet()
_STATIC = object()     # marks a static argument's part of a fast key
# argument types the fast path takes (anything else goes through split_args)
_FAST_SCALARS = frozenset([float, int, bool, np.float64, np.float32, np.int64, np.int32,
                           np.bool_])


# what a transform has only in the process it runs in (`__reduce__` leaves them behind)
_PER_PROCESS = frozenset(["_cache", "_fast", "_lock", "_info", "_last_miss", "_retraces",
                          "_warned", "_cleared", "_static_at", "_variants"])
# token -> the transform of this process pickled or unpickled under it; the last few unpickled
# are also kept alive, so a worker that gets a transform task after task keeps its programs
_by_token: "weakref.WeakValueDictionary[str, CachedTransform]" = weakref.WeakValueDictionary()
_unpickled: "OrderedDict[str, CachedTransform]" = OrderedDict()
KEEP_UNPICKLED = 32
_restore_lock = threading.Lock()


def _restore(cls: type, token: str, state: dict[str, Any]) -> "CachedTransform":
    """The transform pickled under `token`: this process's, or a new one with empty caches."""
    with _restore_lock:
        transform = _by_token.get(token)
        if transform is None:
            transform = cls.__new__(cls)
            transform.__dict__.update(state)
            transform._fresh()
            _by_token[token] = transform
        _unpickled[token] = transform
        _unpickled.move_to_end(token)
        while len(_unpickled) > KEEP_UNPICKLED:
            _unpickled.popitem(last=False)
    return transform


def what_ran(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What calls of a transform did, from its `cache_info()` before and after them."""
    new = {k: after[k] - before[k] for k in ("traces", "interpreted", "compiles", "disk_loads")}
    by_llvm = after["codegen"]["llvm"] > before["codegen"]["llvm"]
    done = [what for k, what in (("interpreted", "run on the numpy interpreter"),
                                 ("compiles", "LLVM compile" if by_llvm else "numba compile"),
                                 ("disk_loads", "loaded from the disk cache")) if new[k]]
    if new["traces"]:
        done = ["trace + differentiate"] + (done or ["a program compiled before"])
    return " + ".join(done) or "cache hit"


@dataclasses.dataclass(frozen=True)
class Specialization:
    """What a transform caches per signature: the optimized tape, how to run it, the output
    structures and the names of the input leaves (for cache-miss reasons)."""

    tape: Tape
    aux: TreeDef | None
    run: Any = None           # a compile.py runner | PENDING; None when built in a trace
    out: TreeDef | None = None
    names: tuple[str, ...] = ()
    assigned: tuple[int, ...] = ()   # the input leaves the function assigns into
    guarded: bool = False            # one of several variants: its guards choose it per call
    draws: tuple = ()                # the generators whose keys each call adds (draws.py)


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


def as_output_tree(program: "Specialization", traced: bool) -> Finish:
    """The finisher of a program whose outputs are the function's, as its pytree `program.out`
    (jit, vmap)."""
    keep = [False] * len(program.tape.outvars)
    outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)
    out_td = program.out
    assert out_td is not None
    if out_td.kind == "leaf":
        return getter(program.tape, 0) if not traced else lambda outs: outs_of(outs)[0]
    return lambda outs: unflatten(out_td, outs_of(outs))


class CachedTransform:
    """A per-signature cache of programs, with counts of what happened (`cache_info()`).

    Subclasses provide `_signature(args, kwargs) -> (call, key, build)` (call: an
    `arguments.CallArgs`, or anything with its `leaves`, `names`, `dynamic` and `args`; key: a
    tuple `(options, treedefs, avals, weak, static, n_pos)`; build: () -> Specialization) and
    `_finisher(program, call, traced) -> Finish`, and call `self._call(args, kwargs)`."""

    max_programs = MAX_PROGRAMS
    transform = "jit"       # the transform's name, for messages: `jit(step)`

    def __init__(self, fn: Callable[..., Any], static_argnums: int | Sequence[int],
                 backend: str | None, transform: str | None = None) -> None:
        transform = transform or type(self).transform
        require_callable(fn, f"tj.{transform}")
        functools.update_wrapper(self, fn, updated=())
        # copy the function's attributes, but not those of a transform it may be
        self.__dict__.update((k, v) for k, v in getattr(fn, "__dict__", {}).items()
                             if k not in ("cache_info", "__wrapped_transform__"))
        self.transform = transform
        check_backend(backend)
        self.fn, self.backend = fn, backend
        self.static_argnums = ((static_argnums,) if isinstance(static_argnums, int)
                               else tuple(static_argnums))
        self._fresh()

    def _fresh(self) -> None:
        """Empty caches, counts and lock: what a transform starts with in each process."""
        self._cache: OrderedDict[tuple, Specialization] = OrderedDict()
        self._fast: dict[tuple, tuple] = {}     # fast key -> (key, fn, tail, finish)
        self._lock = threading.Lock()
        self._info = {"traces": 0, "interpreted": 0, "compiles": 0, "disk_loads": 0,
                      "hits": 0, "rerolled": 0}
        self._last_miss: str | None = None
        self._retraces = 0           # traces since the first (since the last clear)
        self._warned = False
        self._cleared = False
        self._static_at: dict[int, tuple[int, ...] | None] = {}
        # signature key -> guard tape's text -> that tape (its values choose the variant)
        self._variants: dict[tuple, dict[str, Tape]] = {}
        _transforms.add(self)

    def _share(self, *options: Any) -> None:
        """Take the store of the last transform of fn with these options (sharing.py)."""
        self._cache, self._fast, self._lock, self._variants = sharing.store(
            self.fn, (type(self), self.transform, self.backend, self.static_argnums, config(),
                      *options), lambda: (self._cache, self._fast, self._lock, self._variants))

    def __reduce__(self) -> tuple:
        """Pickled (cloudpickle, as Dask ships functions) as its function and options with a
        token: unpickled again in one process, it is the transform that process already has,
        with its programs, so a worker traces once per signature (and loads the compiled
        program from its disk cache)."""
        token = self.__dict__.get("_token")
        if token is None:
            token = self._token = uuid.uuid4().hex
            _by_token[token] = self
        state = {k: v for k, v in self.__dict__.items() if k not in _PER_PROCESS}
        return _restore, (type(self), token, state)

    def cache_info(self) -> dict[str, Any]:
        """Counts of traces, first calls run on the interpreter, compiles, disk loads, cache
        hits and Python loops re-rolled into scans while tracing, how many programs are kept
        and how many of those each code generator made (`codegen`: tapejit's LLVM lowering,
        numba) and run their quick tier (`quick_tier`: the LLVM code calling its kernels,
        while the full tier compiles), and why the last call missed the cache."""
        runs = [p.run for p in self._cache.values()]
        made = Counter(getattr(run, "codegen", None) for run in runs)
        return {**self._info, "programs": len(self._cache),
                "codegen": {"llvm": made["llvm"], "numba": made["numba"]},
                "quick_tier": sum(bool(getattr(run, "quick_tier", False)) for run in runs),
                "last_miss": self._last_miss}

    def clear(self) -> None:
        """Forget every program (the counts stay)."""
        with self._lock:
            self._cache.clear()
            self._fast.clear()
            self._variants.clear()
            self._retraces, self._warned, self._cleared = 0, False, True

    # -- subclass hooks ------------------------------------------------------------------------
    def _signature(self, args: tuple, kwargs: dict,
                   ) -> tuple[Any, tuple, Callable[[], Specialization]]:
        raise NotImplementedError

    def _finisher(self, program: Specialization, call: Any, traced: bool) -> Finish:
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
                    try:
                        return finish(fn(*args, *tail))
                    except OverflowError:   # a Python int beyond int64: split_args says so
                        fast_key = None
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
            key = (*key, device_key())
        if current_trace() is not None:   # inside another trace: inline, never cache
            with collecting_assignments() as assigned, collecting_guards(), collecting(self):
                program = build()       # (its guards are the enclosing trace's: _evaluator)
            refuse_aliasing(call.leaves, assigned, call.names, self.label())
            return self._finisher(program, call, True)(inline(program.tape, call.leaves))
        program, outs = self._lookup(key, call, build)
        if outs is None:
            outs = program.run(with_keys(program.draws, call.leaves))
        finish = self._finisher(program, call, False)
        result = finish(outs)
        if fast_key is not None and program.run is not PENDING and not program.guarded:
            fn, tail = fast_caller(program.run, call, program.draws)
            if program.assigned:
                fn = self._refusing_aliases(fn, call, program.assigned)
            self._fast[fast_key] = (key, fn, tail, finish)
        return result

    def _refusing_aliases(self, fn: Callable, call: Any, assigned: tuple[int, ...]) -> Callable:
        """`fn` (a fast path's caller) checking first that no argument it assigns into shares
        memory with another (on the fast path each traced argument is one leaf)."""
        positions, names, label = call.dynamic, call.names, self.label()

        def checked(*args: Any) -> Any:
            refuse_aliasing([args[p] for p in positions], assigned, names, label)
            return fn(*args)
        return checked

    def _lookup(self, key: tuple, call: Any, build: Callable[[], Specialization],
                ) -> tuple[Specialization, list[Any] | None]:
        """The program for `key`, and its outputs on `call` when this call made it (or
        compiled it: the second call of a program whose first ran on the interpreter)."""
        base, key = key, self._variant(key, call)
        program = self._cache.get(key)
        if program is not None and program.assigned:
            refuse_aliasing(call.leaves, program.assigned, call.names, self.label())
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
                runner, outs = compile_and_run(program.tape, with_keys(program.draws, call.leaves),
                                               default_backend(self.backend), self._info,
                                               self.label())
                program = self._cache[key] = dataclasses.replace(program, run=runner)
                return program, outs
            self._last_miss = self._miss_reason(base, call.names)
            self._info["traces"] += 1
            if self._cache:
                self._retraces += 1
            with collecting_rerolls() as loops, collecting_assignments() as assigned, \
                    collecting_guards() as guards, collecting(self) as drawn:
                program = build()
            self._info["rerolled"] += len(loops)
            refuse_aliasing(call.leaves, assigned, call.names, self.label())
            if guards:
                key = self._new_variant(base, *guards[0])
            runner, outs = start(program.tape, with_keys(drawn, call.leaves),
                                 default_backend(self.backend), self._info, self.label())
            program = dataclasses.replace(program, run=runner, names=tuple(call.names),
                                          assigned=tuple(assigned), guarded=bool(guards),
                                          draws=tuple(drawn))
            self._cache[key] = program
            self._evict()
            warn = self._retraces > RETRACE_WARNING and not self._warned
            self._warned |= warn
        if warn:
            self._warn_retrace()
        return program, outs

    def _variant(self, key: tuple, call: Any) -> tuple:
        """The cache key of the variant of signature `key` whose guards `call` passes (the
        values its function branched on are this call's), else `key`."""
        for text, guards in self._variants.get(key, {}).items():
            try:
                values = interpret(guards, call.leaves)
            except Exception:   # noqa: BLE001  a guard past one that changed reads what its
                continue        # branch guards against (an index out of range): not this one
            variant = (_VARIANT, key, text, _outcome(values))
            if variant in self._cache:
                return variant
        return key

    def _new_variant(self, key: tuple, guards: Tape, values: tuple) -> tuple:
        """Register a program of signature `key` that holds where `guards` give `values`;
        its cache key. Past MAX_VARIANTS, an error: the branches follow data."""
        guards = dce(guards)
        text = str(guards)
        tapes = self._variants.setdefault(key, {})
        tapes.setdefault(text, guards)
        held = sum(1 for k in self._cache if k[0] is _VARIANT and k[1] == key)
        if held >= MAX_VARIANTS:
            raise ConcretizationError(at_source(
                f"{self.label()} branched on values of its arguments (a Python `if`, `int()`, "
                f"an index) that changed {held} times for one signature: each value is a "
                f"program of its own. Write the choice with np.where or tj.cond, pass a "
                f"number that selects among a few programs through static_argnums, or set "
                f"TAPEJIT_STRICT=1 to find each such line.", _last_src(guards)))
        return (_VARIANT, key, text, _outcome(values))

    def label(self) -> str:
        """`value_and_grad(step)`: the transform and its function, for messages."""
        return f"{self.transform}({fn_name(self.fn)})"

    def _evict(self) -> None:
        while len(self._cache) > self.max_programs:
            old, _ = self._cache.popitem(last=False)
            for fast_key, entry in list(self._fast.items()):
                if entry[0] == old:
                    self._fast.pop(fast_key, None)

    def _miss_reason(self, key: tuple, names: Sequence[str]) -> str:
        if not self._cache:
            return "cache cleared" if self._cleared else "first call"
        if key in self._variants:
            return "a value the function branched on (an `if`, int(), an index) changed"
        last_key, last = next(reversed(self._cache.items()))   # the most recently used
        if last_key[0] is _VARIANT:
            last_key = last_key[1]
        return miss_reason(last_key, last.names, key, names)

    def _warn_retrace(self) -> None:
        warn_at_user(
            f"{fn_name(self.fn)} was traced {self._info['traces']} times ({self._retraces} "
            f"re-traces since its first call); the last because {self._last_miss}. Every new "
            f"pytree structure, leaf shape or dtype, or static argument value traces again: pass "
            f"changing numbers as arguments rather than static_argnums, and keep shapes to a "
            f"few sizes (pad batches).")


def _outcome(values: Sequence[Any]) -> tuple:
    """Guard values as a key (NaN equal to NaN)."""
    out = []
    for value in values:
        a = np.asarray(value)
        out.append((a.dtype.str, a.shape, a.tobytes()))
    return tuple(out)


def _last_src(guards: Tape) -> Any:
    """The user's line of a guard tape's last eqn (the last branch taken)."""
    return next((e.src for e in reversed(guards.eqns) if e.src), None)


def clear_cache() -> int:
    """Empty the program cache of every transform in this process and the disk cache of
    compiled programs; return how many programs were on disk."""
    sharing.forget()
    for transform in list(_transforms):
        transform.clear()
    return cache.clear_cache()
