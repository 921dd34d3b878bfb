"""A lowered program, loaded and ready to call: `program(*arrays) -> outputs`.

    program = Program(key(source, inputs, workspace, status, threads), lambda: lower(...),
                      sizes, workspace_arrays, out_shapes)

A program is found by its key: what decides its IR (the generated source, the shapes and dtypes
of its entry's parameters and workspace, its status and threads slots, and the source of this
package). Its code is shared by the programs with that key while any lives (then freed); a new
process finds it on disk (jit.py `read_cached`, folder `obj`: one sealed file per key holding
the object code of each part with the `Lowered` record), so a warm start neither lowers nor
runs LLVM; else the program is lowered when made and compiled on its first call. The key has
no concrete sizes (neither has the source): programs that differ only in sizes share it.

The pointer table holds, after the inputs, the frames the caller allocates (lower.py): fresh
ones per call where an output is made of them, the others once, with the workspace; a call
stores the inputs' and fresh frames' data pointers and runs the entry through the trampoline
(runtime.py `bind`).
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import logging
import math
import os
import struct
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ... import threads
from ...config import config
from ...disk.store import OBJECTS
from . import jit, runtime
from .array_kernels import array_kernel
from .emit import Frame, NotCovered
from .library import matmul, matmul_symbol, scalar_kernel, scalar_symbol
from .lower import ENTRY_SYMBOL, PART_LINES, Lowered

_FOLDER = OBJECTS.name          # jit.py's folder of the programs' entries
_log = logging.getLogger("tapejit")


class _Code:
    """Loaded object code and the record it was lowered with; the quick tier's until
    `tier_up` hands it the full tier's code, which the functions bound to it then call."""
    __slots__ = ("program", "lowered", "quick", "retired", "bound", "pending", "__weakref__")

    def __init__(self, program: jit.Program, lowered: Lowered, quick: bool) -> None:
        self.program, self.lowered, self.quick = program, lowered, quick
        self.retired: list[jit.Program] = []      # a call running still may use it
        self.bound: list[weakref.ref] = []        # runtime.bind's functions' contexts
        self.pending: tuple[str, _Entry] | None = None   # the full tier, to compile

    def start_full_tier(self) -> None:
        """Queue the full tier's compile (once): after the first call, which a compile
        beside it on a 2-CPU machine slowed (the GMM gradient's warm start: 61 to 67 ms)."""
        with _lock:
            pending, self.pending = self.pending, None
            if pending is not None:
                _tier_thread().submit(_tier_up, pending[0], weakref.ref(self), pending[1],
                                      config())

    def bind(self, table: np.ndarray, sizes: np.ndarray, inputs: int, name: str, keep: Any,
             fresh: list) -> Any:
        """runtime.bind of the entry: later tiers of the code are called through it."""
        with _lock:
            call = runtime.bind(self.program.address(ENTRY_SYMBOL), table, sizes, inputs, name,
                                keep=keep, fresh=fresh)
            self.bound = [c for c in self.bound if c() is not None]
            self.bound.append(weakref.ref(call.__self__))
        return call

    def tier_up(self, program: jit.Program) -> None:
        """Call `program` (the full tier) from now on: calls hold the GIL, so none is running
        the quick tier's code while the entries are swapped; it stays loaded all the same."""
        with _lock:
            self.retired.append(self.program)
            self.program, self.quick = program, False
            for context in (c() for c in self.bound):
                if context is not None:
                    runtime.rebind(context, program.address(ENTRY_SYMBOL))


_loaded: "weakref.WeakValueDictionary[str, _Code]" = weakref.WeakValueDictionary()
_lock = threading.Lock()


def key(source: str, inputs: Any, workspace: Any, status: int, threads: int | None) -> str:
    """The key of the program `lower` makes of these arguments."""
    return "\0".join((_sources(), source, repr(inputs), repr(workspace), repr(status),
                      repr(threads)))


@functools.cache
def _sources() -> str:
    """A digest of this package's source: a changed lowering never reads an old entry."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


class _Entry(NamedTuple):
    """A program's object code (one per part) and the IR of the parts whose full tier is yet
    to compile (part number -> IR; none on disk once it has)."""
    objects: list[bytes]
    again: dict[int, str]


def _found(program_key: str) -> tuple[_Code | None, tuple[Lowered, _Entry] | None]:
    """The loaded code of `program_key`, else what the disk holds for it (its array kernels
    loaded: raises jit.NotBuilt under `jit.no_builds` where one is not built)."""
    with _lock:
        code = _loaded.get(program_key)
    if code is not None:
        return code, None
    payload = jit.read_cached(_FOLDER, program_key)
    found = None if payload is None else _unpack(payload)
    if found is not None:
        calls = None if found[1].again else \
            {s for obj in found[1].objects for s in jit.undefined_symbols(obj)}
        for kind, call, types in found[0].kernels:
            if calls is not None and kind != "array" and not _calls(calls, kind, call, types):
                continue            # inlined into the full tier's code: nothing to load
            # (a quick tier's full one compiles here: every kernel it inlines is registered)
            try:
                _KERNELS[kind](call, types)
            except jit.JitError as err:
                raise NotCovered(f"the kernel {call}: {err}") from None
    return None, found


# a disk entry's kernels by kind (lower.py's `kernels`): registered again in a new process
_KERNELS: dict[str, Callable[[str, Any], Any]] = {
    "scalar": scalar_kernel, "array": array_kernel,
    "matmul": lambda dtype, _: matmul(np.dtype(dtype))}


def _calls(symbols: set[str], kind: str, call: str, types: Any) -> bool:
    """Whether object code using `symbols` calls the scalar kernel of `call` on `types` (the
    product kernel of dtype `call`)."""
    symbol = matmul_symbol(np.dtype(call)) if kind == "matmul" else scalar_symbol(call, types)
    return any(s == symbol or s.startswith((symbol + "_v", symbol + ".")) for s in symbols)


def _pack(lowered: Lowered, entry: _Entry) -> bytes:
    """The disk entry: the record (JSON, without the parts' IR), then the IR, the objects
    and the parts to compile again."""
    again = sorted(entry.again)
    blobs = [lowered.ir.encode(), *entry.objects, *(entry.again[k].encode() for k in again)]
    head = json.dumps({
        "inputs": lowered.inputs, "workspace": lowered.workspace,
        "frames": [[list(f.shape), np.dtype(f.dtype).str, f.fresh] for f in lowered.frames],
        "outputs": lowered.outputs, "kernels": lowered.kernels, "fails": lowered.fails,
        "objects": len(entry.objects), "again": again,
        "blobs": [len(b) for b in blobs]}).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def _unpack(payload: bytes) -> tuple[Lowered, _Entry] | None:
    """`_pack`'s record and entry; None for an entry of another layout."""
    try:
        size, = struct.unpack_from("<Q", payload)
        head = json.loads(payload[8:8 + size])
        at, blobs = 8 + size, []
        for length in head["blobs"]:
            blobs.append(payload[at:at + length])
            at += length
        frames = tuple(Frame(tuple(shape), np.dtype(dtype), fresh)
                       for shape, dtype, fresh in head["frames"])
        lowered = Lowered(blobs[0].decode(), head["inputs"], frames, head["workspace"],
                          tuple((kind, k) for kind, k in head["outputs"]), (),
                          tuple((kind, call, tuple(tuple(t) if isinstance(t, list) else t
                                                   for t in types))
                                for kind, call, types in head["kernels"]),
                          bool(head["fails"]))
        count, again = int(head["objects"]), [int(k) for k in head["again"]]
        entry = _Entry(blobs[1:1 + count],
                       {k: b.decode() for k, b in zip(again, blobs[1 + count:])})
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error):
        return None
    if at != len(payload) or count < 1 or len(blobs) != 1 + count + len(again):
        return None
    return lowered, entry


def _load(program_key: str, lowered: Lowered, entry: _Entry | None) -> tuple[_Code, str]:
    """The loaded code of a program, and where it came from: "memory" (another program loaded
    it), "disk" (`entry` given) or "compiled". Its parts (the entry's module, each parallel
    loop's, a large program's functions) compile on threads at once: LLVM releases the GIL.
    Where the full tier inlines kernels (`jit.inlines`), the quick tier, calling them, is
    compiled (and kept on disk) first, and the full one on a thread after the first call
    (`_tier_up`), which replaces it on disk. A program of more than PART_LINES lines has a
    quick tier whatever it inlines, LLVM's cheap one (`jit.compile_object`'s `cheap`): HIPS
    hmm_em's first call came after 8.5 s of compiling, now 3.2 s; mixture_variational_inference
    7.5 s, now 1.9 s (its 200 steps: 15.5 s, now 9.3 s; autograd's 12.7 s)."""
    with _lock:
        code = _loaded.get(program_key)
        if code is not None:
            return code, "memory"
        source = "disk"
        if entry is None:
            parts = lowered.parts or (lowered.ir,)
            large = lowered.ir.count("\n") > PART_LINES
            if not _spare_cpu():
                again = {}
            elif large:
                again = dict(enumerate(parts))
            else:
                again = {k: part for k, part in enumerate(parts) if jit.inlines(part)}
            objects = _compile(parts, inline=not again, cheap=large and bool(again))
            entry, source = _Entry(objects, again), "compiled"
            jit.write_cached(_FOLDER, program_key, _pack(lowered, entry))
        code = _loaded[program_key] = _Code(jit.Program(entry.objects, (ENTRY_SYMBOL,)),
                                            lowered, quick=bool(entry.again))
        if entry.again:
            code.pending = (program_key, entry)
        return code, source


def _tier_up(program_key: str, code: "weakref.ref[_Code]", quick: _Entry,
             settings: Any) -> None:
    """Compile the full tier of the parts `quick.again` names (the others keep their quick
    objects), keep it on disk (in the cache directory of the `settings` it was queued with,
    unless they changed since: not in another's) and hand it to `code`, unless every program
    using the code was dropped first."""
    start = time.perf_counter()
    try:
        loaded = code()
        if loaded is None:
            return
        lowered, loaded = loaded.lowered, None
        objects = [jit.compile_object(quick.again[k]) if k in quick.again else obj
                   for k, obj in enumerate(quick.objects)]
        loaded = code()
        if loaded is None:            # (tj.clear_cache() drops the programs: nothing is kept)
            return
        if config() is settings:
            jit.write_cached(_FOLDER, program_key, _pack(lowered, _Entry(objects, {})))
        loaded.tier_up(jit.Program(objects, (ENTRY_SYMBOL,)))
    except Exception as err:      # noqa: BLE001 (the quick tier stays: it is as correct)
        _log.warning("tapejit: the full tier of a program failed to compile (%s: %s); its "
                     "calls keep the quick tier", type(err).__name__, err)
        return
    _log.debug("llvm: full tier of %d part(s) in %.1f ms", len(quick.again),
               1e3 * (time.perf_counter() - start))


def _compile(parts: Sequence[str], inline: bool, cheap: bool) -> list[bytes]:
    compile_part = functools.partial(jit.compile_object, inline=inline, cheap=cheap)
    workers = _workers() if len(parts) > 1 else None
    if workers is not None:
        return list(workers.map(compile_part, parts))
    return [compile_part(part) for part in parts]


_pool: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _workers() -> concurrent.futures.ThreadPoolExecutor | None:
    """The threads parts compile on, for the process's life (a forked child makes its own):
    each keeps its target machine and its allocator's arena (a pool per program cost 1 MB of
    RSS per program, never given back: 100 small gradients, +104 MB against +9 MB); None on
    one CPU. Called with `_lock` held."""
    global _pool
    cpus = os.cpu_count() or 1
    if cpus > 1 and (_pool is None or _pool[0] != os.getpid()):
        _pool = (os.getpid(), concurrent.futures.ThreadPoolExecutor(cpus, "tapejit-llvm"))
    return _pool[1] if cpus > 1 else None       # type: ignore[index]


_tier: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _tier_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread full tiers compile on, for the process's life (a forked child makes its
    own), at a lower priority than the threads running programs (`_lower_priority`). Called
    with `_lock` held."""
    global _tier
    if _tier is None or _tier[0] != os.getpid():
        _tier = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
            1, "tapejit-tier", initializer=_lower_priority))
    return _tier[1]


def _lower_priority() -> None:
    """The full tier's thread: it runs only on a CPU nothing else wants (Linux's SCHED_IDLE,
    else a niceness of 10), and has a name the busy rule passes over (threads.py: the calls
    may use every core beside it). At niceness 10 it still slowed HIPS convnet's 20 calls,
    which use both cores of a 2-core machine, on the quick tier: 14.2-14.8 s against
    12.1-12.3 s, its full tier (77 parts, 13 s) not in before the end either way."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):     # no per-thread priority here: as it is
            pass
    threads.name_thread(threads.TIER_NAME)


def _spare_cpu() -> bool:
    """Whether the process may run on more than one CPU: on one, the full tier compiling
    beside the calls took their CPU (a one-thread MLP gradient's second call: 405 ms against
    23), so a program compiles its full tier at once."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return (len(cpus) if cpus is not None else os.cpu_count() or 1) > 1


class Program:
    """Calls the program of `program_key`, found in memory or on disk, else `lowering()`
    (which raises NotCovered where the lowering does not cover it). Its code is compiled or
    loaded on the first call (as numba's is): `compiles` / `disk_loads` then say which (0 and
    0: another program had loaded the same code); `modname` names it by its key's digest."""

    def __init__(self, program_key: str, lowering: Callable[[], Lowered], sizes: np.ndarray,
                 workspace: Sequence[np.ndarray], out_shapes: Sequence[tuple[int, ...]]) -> None:
        self.key, self.sizes, self.workspace = program_key, sizes, workspace
        self._code, entry = _found(program_key)
        self._entry = None if entry is None else entry[1]
        self.lowered = self._code.lowered if self._code is not None else \
            entry[0] if entry is not None else lowering()
        self.out_shapes = tuple(out_shapes)
        self.modname = f"tj_llvm_{hashlib.sha256(program_key.encode()).hexdigest()[:16]}"
        self.compiles = self.disk_loads = 0
        self.fn = self._first
        self._bound: Any = None
        self._binding = threading.Lock()

    def _first(self, *arrays: Any) -> list[np.ndarray]:
        """The first call: compile or load, bind (once, whoever holds this method), then
        call."""
        with self._binding:
            if self._bound is None:
                self._bound = self.fn = self._bind()
        try:
            return self._bound(*arrays)
        finally:
            self._code.start_full_tier()

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        return self.fn(*arrays)

    @property
    def quick_tier(self) -> bool:
        """Whether its calls run the quick tier (the full one is compiling on a thread)."""
        return self._code is not None and self._code.quick

    def _bind(self) -> Any:
        lowered, sizes = self.lowered, self.sizes
        if self._code is None:
            self._code, source = _load(self.key, lowered, self._entry)
            self.compiles, self.disk_loads = int(source == "compiled"), int(source == "disk")
            self._entry = None
        frames = lowered.frames
        env = {"S": [int(v) for v in sizes]}
        shapes = [tuple(int(eval(d, {}, env)) for d in f.shape) for f in frames]  # noqa: S307
        fresh = [(shapes[k], f.dtype) for k, f in enumerate(frames) if f.fresh]
        for (kind, k), shape in zip(lowered.outputs, self.out_shapes):
            if kind == "frame" and fresh[k][0] != shape and \
                    math.prod(fresh[k][0]) == math.prod(shape):
                fresh[k] = (shape, fresh[k][1])    # made in the output's shape
        kept = [np.empty(shapes[k], f.dtype) for k, f in enumerate(frames) if not f.fresh]
        table = np.zeros(lowered.inputs + len(frames) + lowered.workspace, np.int64)
        for k, a in enumerate(kept + list(self.workspace[:lowered.workspace])):
            table[lowered.inputs + len(fresh) + k] = a.ctypes.data
        call = self._code.bind(table, sizes, lowered.inputs, self.modname,
                               keep=(self._code, kept), fresh=fresh)
        outputs = [(kind == "input", k) for kind, k in lowered.outputs]
        if all(not given and fresh[k][0] == shape
               for (given, k), shape in zip(outputs, self.out_shapes)):
            if [k for _, k in outputs] == list(range(len(fresh))):
                return call                   # the outputs are the new arrays, in order

            def run(*arrays: Any) -> list[np.ndarray]:
                made = call(*arrays)
                return [made[k] for _, k in outputs]
            return run

        def run_general(*arrays: Any) -> list[np.ndarray]:
            made = call(*arrays) or ()       # (None where nothing is made fresh)
            outs = [arrays[k] if given else made[k] for given, k in outputs]
            return [a if a.shape == shape else a.reshape(shape)
                    for a, shape in zip(outs, self.out_shapes)]
        return run_general
