"""A lowered program, loaded and ready to call: `program(*arrays) -> outputs`.

The object code comes from the disk cache (jit.py `cached_object`, keyed by the IR text: the
IR has no concrete sizes, so programs that differ only in sizes share it) or is compiled
now. The pointer table holds, after the inputs, the frames the caller allocates (lower.py):
fresh ones per call where an output is made of them, the others once, with the workspace;
a call stores the inputs' and fresh frames' data pointers and runs the entry through the
trampoline (runtime.py `bind`).
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import math
import os
import threading
import weakref
from typing import Any, Sequence

import numpy as np

from . import jit, runtime
from .lower import ENTRY_SYMBOL, Lowered


_loaded: "weakref.WeakValueDictionary[str, jit.Program]" = weakref.WeakValueDictionary()
_lock = threading.Lock()


def _code(lowered: Lowered) -> tuple[jit.Program, str]:
    """The loaded code of a lowered program, shared by the programs using it while any lives
    (then freed), and where it came from: "memory", "disk" or "compiled". Its parts (the
    entry's module, each parallel loop's) compile on threads at once: LLVM releases the GIL."""
    ir = lowered.ir
    with _lock:
        code = _loaded.get(ir)
        if code is not None:
            return code, "memory"
        parts = lowered.parts or (ir,)

        def build(part: str) -> tuple[bytes, bool]:
            return jit.cached_object(part, lambda: jit.compile_object(part))
        workers = min(len(parts), os.cpu_count() or 1)
        if workers > 1:
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                built = list(pool.map(build, parts))
        else:
            built = [build(part) for part in parts]
        code = _loaded[ir] = jit.Program([obj for obj, _ in built], (ENTRY_SYMBOL,))
        return code, "disk" if all(disk for _, disk in built) else "compiled"


class Program:
    """Calls a lowered program. Its code is compiled or loaded on the first call (as numba's
    is): `compiles` / `disk_loads` then say which (0 and 0: another program had loaded the
    same code); `modname` names it by its IR's digest."""

    def __init__(self, lowered: Lowered, sizes: np.ndarray, workspace: Sequence[np.ndarray],
                 out_shapes: Sequence[tuple[int, ...]]) -> None:
        self.lowered, self.sizes, self.workspace = lowered, sizes, workspace
        self.out_shapes = tuple(out_shapes)
        self.modname = f"tj_llvm_{hashlib.sha256(lowered.ir.encode()).hexdigest()[:16]}"
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
        code, source = _code(lowered)
        self.compiles, self.disk_loads = int(source == "compiled"), int(source == "disk")
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
                            self.modname, keep=(code, kept), fresh=fresh)
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
