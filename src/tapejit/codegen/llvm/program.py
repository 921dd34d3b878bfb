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
import math
import os
import struct
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...cache import OBJECTS
from . import jit, runtime
from .array_kernels import array_kernel
from .emit import Frame, NotCovered
from .library import scalar_kernel
from .lower import ENTRY_SYMBOL, Lowered

_FOLDER = OBJECTS.name          # jit.py's folder of the programs' entries


class _Code:
    """Loaded object code and the record it was lowered with."""
    __slots__ = ("program", "lowered", "__weakref__")

    def __init__(self, program: jit.Program, lowered: Lowered) -> None:
        self.program, self.lowered = program, lowered


_loaded: "weakref.WeakValueDictionary[str, _Code]" = weakref.WeakValueDictionary()
_lock = threading.Lock()


def key(source: str, inputs: Any, workspace: Any, status: int | None,
        threads: int | None) -> str:
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


def _found(program_key: str) -> tuple[_Code | None, tuple[Lowered, list[bytes]] | None]:
    """The loaded code of `program_key`, else what the disk holds for it (its array kernels
    loaded: raises jit.NotBuilt under `jit.no_builds` where one is not built)."""
    with _lock:
        code = _loaded.get(program_key)
    if code is not None:
        return code, None
    payload = jit.read_cached(_FOLDER, program_key)
    entry = None if payload is None else _unpack(payload)
    if entry is not None:
        for kind, call, types in entry[0].kernels:
            try:
                (scalar_kernel if kind == "scalar" else array_kernel)(call, types)
            except jit.JitError as err:
                raise NotCovered(f"the kernel {call}: {err}") from None
    return None, entry


def _pack(lowered: Lowered, objects: list[bytes]) -> bytes:
    """The disk entry: the record (JSON, without the parts' IR), then the IR and objects."""
    blobs = [lowered.ir.encode(), *objects]
    head = json.dumps({
        "inputs": lowered.inputs, "workspace": lowered.workspace,
        "frames": [[list(f.shape), np.dtype(f.dtype).str, f.fresh] for f in lowered.frames],
        "outputs": lowered.outputs, "kernels": lowered.kernels,
        "blobs": [len(b) for b in blobs]}).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def _unpack(payload: bytes) -> tuple[Lowered, list[bytes]] | None:
    """`_pack`'s record and objects; None for an entry of another layout."""
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
                                for kind, call, types in head["kernels"]))
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    return (lowered, blobs[1:]) if at == len(payload) and len(blobs) > 1 else None


def _load(program_key: str, lowered: Lowered, objects: list[bytes] | None) -> tuple[_Code, str]:
    """The loaded code of a program, and where it came from: "memory" (another program loaded
    it), "disk" (`objects` given) or "compiled". Its parts (the entry's module, each parallel
    loop's) compile on threads at once: LLVM releases the GIL."""
    with _lock:
        code = _loaded.get(program_key)
        if code is not None:
            return code, "memory"
        source = "disk"
        if objects is None:
            objects, source = _compile(lowered.parts or (lowered.ir,)), "compiled"
            jit.write_cached(_FOLDER, program_key, _pack(lowered, objects))
        code = _loaded[program_key] = _Code(jit.Program(objects, (ENTRY_SYMBOL,)), lowered)
        return code, source


def _compile(parts: Sequence[str]) -> list[bytes]:
    workers = _workers() if len(parts) > 1 else None
    if workers is not None:
        return list(workers.map(jit.compile_object, parts))
    return [jit.compile_object(part) for part in parts]


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


class Program:
    """Calls the program of `program_key`, found in memory or on disk, else `lowering()`
    (which raises NotCovered where the lowering does not cover it). Its code is compiled or
    loaded on the first call (as numba's is): `compiles` / `disk_loads` then say which (0 and
    0: another program had loaded the same code); `modname` names it by its key's digest."""

    def __init__(self, program_key: str, lowering: Callable[[], Lowered], sizes: np.ndarray,
                 workspace: Sequence[np.ndarray], out_shapes: Sequence[tuple[int, ...]]) -> None:
        self.key, self.sizes, self.workspace = program_key, sizes, workspace
        self._code, entry = _found(program_key)
        self._objects = None if entry is None else entry[1]
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
        return self._bound(*arrays)

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        return self.fn(*arrays)

    def _bind(self) -> Any:
        lowered, sizes = self.lowered, self.sizes
        if self._code is None:
            self._code, source = _load(self.key, lowered, self._objects)
            self.compiles, self.disk_loads = int(source == "compiled"), int(source == "disk")
            self._objects = None
        code = self._code.program
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
        call = runtime.bind(code.address(ENTRY_SYMBOL), table, sizes, lowered.inputs,
                            self.modname, keep=(self._code, kept), fresh=fresh)
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
