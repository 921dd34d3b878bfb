"""The one per-signature cache of programs, which runs every transform's record (record.py).

A transform (`grad(f)`, `jit(f)`, `vmap(f)`, ...) is a `CachedTransform` of its record; it is
never subclassed. A call is looked up twice:

- the **fast path** (records with `fast_path`): when every argument is an ndarray or a scalar
  (or static) and there are no keyword arguments, a cheap key (each argument's type, shape,
  dtype and strides; static values) finds the entry an earlier call of that key made: it calls
  the runner as `direct_caller` (compile.py) prepared it for that key (a compiled program's
  function directly; the draws of its numpy generators after the arguments, draws.py), and
  builds the result with all about the signature precomputed (strides are in the key: whether
  an array needs a copy is known per entry, not per call).
- otherwise the record's `signature` makes the call (`arguments.split_args`) and its
  `CacheKey`, which finds the `Specialization`; on a miss the builder (builder.py) makes one,
  and the first-call tier (first_call.py) gives its runner and first outputs (on the numba
  backend the first calls are interpreted, then one compiles). The first call of a new
  program runs under the transform's lock, so concurrent first calls trace and compile once.

A program remembers which input leaves its function assigns into (`x[i] = v`); every call of it
refuses arguments where such a leaf shares memory with another (numpy would show the write
through the other; tapejit never writes into the arrays passed in). A signature may have
several programs, chosen by the values the function branched on (variants.py).

Transforms of one plain function with the same options share their programs while it reads
the same things by name (sharing.py). Inside another transform's trace nothing is cached: the
tape is inlined. A transform keeps at most `max_programs` programs (least recently used go
first) and warns (`TapejitWarning`) when it has been re-traced more than `RETRACE_WARNING`
times. `cache_info()` reports what happened, `clear_cache()` empties every transform's cache,
the memory compiled programs keep and the disk cache. A transform pickles as pickling.py says.
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections import Counter, OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from ..backends import check_backend, default_backend
from ..config import config
from ..cuda_support import device_key
from ..disk import store
from ..draws import collecting, fast_caller, with_draws
from ..errors import TapejitError, require_callable, warn_at_user
from ..interpret import inline
from .traced import collecting_rerolls
from ..recording import collecting_assignments, collecting_guards
from ..trace import current_trace, open_traces
from . import pickling, sharing
from .arguments import (SIGNATURE_FIX, CacheKey, fn_name, miss_reason, refuse_aliasing,
                        static_argnums_of)
from .builder import build
from .first_call import Pending, compile_and_run, start
from .outputs import owning
from .record import Specialization, Transform, VariantKey
from .residuals import second_half
from .variants import BRANCHED, BRANCHES_FIX, new_variant, variant

MAX_PROGRAMS = 64      # programs kept per transform (least recently used are dropped)
RETRACE_WARNING = 8    # re-traces of one transform before it warns

_transforms: "weakref.WeakSet[CachedTransform]" = weakref.WeakSet()
_STATIC = object()     # marks a static argument's part of a fast key
# argument types the fast path takes (anything else goes through split_args)
_FAST_SCALARS = frozenset([float, int, bool, np.float64, np.float32, np.int64, np.int32, np.bool_])


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


class CachedTransform:
    """A per-signature cache of the programs of one transform `record` of `fn`, with counts
    of what happened (`cache_info()`). `options` (argnums, has_aux, in_axes, ...) are
    attributes the record's functions read."""

    max_programs = MAX_PROGRAMS

    def __init__(self, record: Transform, fn: Callable[..., Any],
                 static_argnums: int | Sequence[int] = (), backend: str | None = None,
                 name: str | None = None, static_argnames: str | Sequence[str] = (),
                 **options: Any) -> None:
        name = name or record.name
        require_callable(fn, f"tj.{name}")
        functools.update_wrapper(self, fn, updated=())
        # copy the user function's attributes, not those of a transform it may be
        user = fn
        while isinstance(user, CachedTransform):
            user = user.fn
        self.__dict__.update((k, v) for k, v in getattr(user, "__dict__", {}).items()
                             if k not in ("cache_info", "__wrapped_transform__"))
        self.record, self.transform = record, name
        check_backend(backend)
        self.fn, self.backend = fn, backend
        self.static_argnums = static_argnums_of(fn, static_argnums, static_argnames)
        self.has_aux = False        # fn returns (out, aux): an option of some records
        self.__dict__.update(options)
        self._fresh()
        if record.shared:
            self._cache, self._fast, self._lock, self._variants = sharing.store(
                fn, (record.name, name, backend, self.static_argnums, config(),
                     *options.values()),
                lambda: (self._cache, self._fast, self._lock, self._variants))

    def _fresh(self) -> None:
        """Empty caches, counts and lock: what a transform starts with in each process."""
        self._cache: OrderedDict[CacheKey | VariantKey, Specialization] = OrderedDict()
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
        self._variants: dict[CacheKey, OrderedDict[str, Any]] = {}
        _transforms.add(self)

    def __reduce__(self) -> tuple:
        return pickling.reduce(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

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

    def label(self) -> str:
        """`value_and_grad(step)`: the transform and its function, for messages."""
        return f"{self.transform}({fn_name(self.fn)})"

    def program(self, args: tuple, kwargs: dict, stages: Any = None,
                ) -> tuple[CacheKey, Specialization]:
        """The signature of a call of `args` and the program it would run, built anew (not
        cached, not compiled), each stage reported to `stages(name, tape)` (tj.explain)."""
        call, key = self.record.signature(self, args, kwargs)
        with collecting(self):
            return key, build(self, call, key, stages)

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, args: tuple, kwargs: dict) -> Any:
        fast_key: tuple | None = None
        if not kwargs and not open_traces.traces:
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
                    except (OverflowError, MemoryError, SystemError, ValueError) as err:
                        if isinstance(err, TapejitError):
                            raise   # (below: an int beyond int64, a failed allocation, numba's
                        fast_key = None  # LinAlgError: split_args, Compiled name them)
        return self._call_slow(args, kwargs, fast_key)

    def _fast_key_static(self, args: tuple) -> tuple | None:
        """`_call`'s fast key when some arguments are static: their values are part of it."""
        static = self._static_positions(len(args))
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

    def _static_positions(self, nargs: int) -> tuple[int, ...]:
        """The static argument positions among `nargs` positional arguments (one not given
        takes its default, the same on every call)."""
        if nargs not in self._static_at:
            self._static_at[nargs] = tuple(sorted({
                i % nargs for i in self.static_argnums
                if isinstance(i, int) and -nargs <= i < nargs}))
        return self._static_at[nargs]

    def _call_slow(self, args: tuple, kwargs: dict, fast_key: tuple | None) -> Any:
        record = self.record
        call, key = record.signature(self, args, kwargs)
        if default_backend(self.backend) == "cuda":     # programs are per device
            key = key._replace(device=device_key())
        if current_trace() is not None:   # inside another trace: inline, never cache
            with collecting_assignments() as assigned, collecting_guards(), collecting(self):
                program = self._built(call, key)    # (its guards are the enclosing trace's)
            refuse_aliasing(call.leaves, assigned, call.names, self.label())
            return record.finish(self, program, call, True)(inline(program.tape, call.leaves))
        program, outs = self.lookup(key, call, lambda: self._built(call, key))
        if outs is None:
            outs = program.run(with_draws(program.draws, call.leaves))
        finish = owning(record.finish(self, program, call, False), program.tape)
        result = finish(outs)
        if fast_key is not None and record.fast_path and not isinstance(program.run, Pending) \
                and not program.guarded:
            fn, tail = fast_caller(program.run, call, program.draws)
            if program.assigned:
                fn = self._refusing_aliases(fn, call, program.assigned)
            self._fast[fast_key] = (key, fn, tail, finish)
        return result

    def _built(self, call: Any, key: CacheKey) -> Specialization:
        """The builder's program, with the cache of its second half where it has one."""
        program = build(self, call, key)
        if not self.record.residuals:
            return program
        return program._replace(second=second_half(self, program.second))

    def _refusing_aliases(self, fn: Callable, call: Any, assigned: tuple[int, ...]) -> Callable:
        """`fn` (a fast path's caller) checking first that no argument it assigns into shares
        memory with another (on the fast path each traced argument is one leaf)."""
        positions, names, label = call.dynamic, call.names, self.label()

        def checked(*args: Any) -> Any:
            refuse_aliasing([args[p] for p in positions], assigned, names, label)
            return fn(*args)
        return checked

    def lookup(self, key: CacheKey, call: Any, build: Callable[[], Specialization],
               ) -> tuple[Specialization, list[Any] | None]:
        """The program for `key`, and its outputs on `call` when this call made it (or
        compiled it: the call after those a program ran on the interpreter)."""
        base, key = key, variant(self._variants, self._cache, key, call.leaves)
        program = self._cache.get(key)
        if program is not None and program.assigned:
            refuse_aliasing(call.leaves, program.assigned, call.names, self.label())
        if program is not None and not isinstance(program.run, Pending):
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
                run = program.run
                if not isinstance(run, Pending):
                    return program, None
                if run.take():            # still on the interpreter: _call_slow runs it
                    self._info["interpreted"] += 1
                    return program, None
                runner, outs = compile_and_run(program.tape, with_draws(program.draws, call.leaves),
                                               default_backend(self.backend), self._info,
                                               self.label())
                program = self._cache[key] = program._replace(run=runner)
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
                key = new_variant(self._variants, self._cache, base, *guards[0], self.label())
            runner, outs = start(program.tape, with_draws(drawn, call.leaves),
                                 default_backend(self.backend), self._info, self.label(),
                                 self._compiled_at_other_sizes(base))
            program = program._replace(run=runner, names=tuple(call.names),
                                          assigned=tuple(assigned), guarded=bool(guards),
                                          draws=tuple(drawn))
            self._cache[key] = program
            self._evict()
            warn = self._retraces > RETRACE_WARNING and not self._warned and self.record.warns
            self._warned |= warn
        if warn:
            self._warn_retrace()
        return program, outs

    def _compiled_at_other_sizes(self, key: CacheKey) -> bool:
        """Whether a program of `key` but for its sizes runs compiled code (most likely this)."""
        sizeless = key.sizeless()
        return any(getattr(p.run, "codegen", None) and sizeless == (
            k.signature if isinstance(k, VariantKey) else k).sizeless()
            for k, p in list(self._cache.items()))

    def _evict(self) -> None:
        while len(self._cache) > self.max_programs:
            old, _ = self._cache.popitem(last=False)
            for fast_key, entry in list(self._fast.items()):
                if entry[0] == old:
                    self._fast.pop(fast_key, None)

    def _miss_reason(self, key: CacheKey, names: Sequence[str]) -> str:
        if not self._cache:
            return "cache cleared" if self._cleared else "first call"
        if self.record.new_signature:
            return self.record.new_signature
        if key in self._variants:
            return BRANCHED
        last_key, last = next(reversed(self._cache.items()))   # the most recently used
        if isinstance(last_key, VariantKey):
            last_key = last_key.signature
        return miss_reason(last_key, last.names, key, names)

    def _warn_retrace(self) -> None:
        fix = BRANCHES_FIX if self._last_miss == BRANCHED else SIGNATURE_FIX
        warn_at_user(
            f"{fn_name(self.fn)} was traced {self._info['traces']} times ({self._retraces} "
            f"re-traces since its first call); the last because {self._last_miss}. {fix}")


MAX_FUNCTIONS = 64    # jvp, vjp and linearize transforms kept (per function and options)
_functions: "OrderedDict[tuple, CachedTransform]" = OrderedDict()
_functions_lock = threading.Lock()


def transform_of(key: tuple, make: Callable[[], CachedTransform]) -> CachedTransform:
    """The cached transform for `key` (kind, function, options): `jvp(f, ...)` called again
    traces and compiles only for a new signature. The least recently used go first; a
    function that cannot be a key (unhashable) gets a new transform each call."""
    try:
        hash(key)
    except TypeError:
        return make()
    with _functions_lock:
        transform = _functions.get(key)
        if transform is None:
            transform = _functions[key] = make()
            if len(_functions) > MAX_FUNCTIONS:
                _functions.popitem(last=False)
        _functions.move_to_end(key)
        return transform


def calls_interpreted() -> int:
    """The calls of this process's transforms that ran on the interpreter so far (first-call
    tier): a benchmark warms a function up until a call adds none, then times compiled code."""
    return sum(t._info["interpreted"] for t in list(_transforms))


def clear_cache() -> int:
    """Empty every transform's program cache, the memory compiled programs keep for their
    next call and the disk cache; return how many programs were on disk."""
    from ..codegen.llvm import runtime
    sharing.forget()
    for transform in list(_transforms):
        transform.clear()
    runtime.release_memory()
    return store.clear_cache()
