"""The call path of the LLVM programs: a trampoline from Python into `tj_entry`, and the parallel
loop runtime their chunked nests call.

One small LLVM module, loaded once per process by `ensure()` (its object code compiled once
per machine and cached by jit.py; no numba import):
- `tj_rt_call`, a CPython METH_FASTCALL function. `bind(entry, table, sizes, count, fresh=)`
  makes it a builtin function per program, whose `self` is a context (`_Context`, an int64
  array of words, runtime_ir.py) that keeps the table, the size table and the PyMethodDef
  alive. A call checks that it has `count` arguments, each a numpy ndarray (its type is
  ndarray's or a subtype), stores argument k's data pointer into `table[k]`, makes the `fresh`
  arrays (the outputs a call returns new: numpy's PyArray_NewFromDescr, cheaper than
  `np.empty` from Python) into the slots after them, calls `entry(table, sizes)` and returns
  the fresh arrays (a tuple; None without). Anything else raises TypeError naming the
  program, the argument and its type. Dtype, shape and contiguity are the caller's to
  guarantee (dispatch checks the signature).
- `tj_rt_parallel_for(fn, ctx, n, chunks)` runs `fn(ctx, c, lo, hi)` for each chunk c of
  `[0, n)`, `lo = c*n//chunks`, `hi = (c+1)*n//chunks`, on the runtime's own thread pool, and
  returns when every chunk is done. A call of `chunks` chunks runs on at most `chunks` threads,
  the caller's included (the generated code passes the call's budget, threads.py, or fewer),
  and on no more than `tj_rt_pool_size` (`threads.pool()`, set when the runtime loads). The
  pool's threads are POSIX threads started by the first call that needs them: no numba
  import, no Python; on Linux they are named `tapejit-pool` (threads.py counts the process's
  other running threads as load). A job is published with one atomic word (`ticket`: its
  epoch, its items, the next item); the waiting threads spin for a while (`SPINS` pause
  instructions while a program runs, counted by `tj_rt_call`; `IDLE_SPINS` once none does),
  then sleep on a condition; each takes items while there are any, the caller too, and the
  caller returns once the last is finished. A call made while another call's job runs (a
  chunk's own parallel loop, or a second Python thread calling with the GIL released) runs
  its chunks on its own thread. A forked child starts its own threads
  (`os.register_at_fork`). The caller's GIL stays held: a program's table, size table and
  workspace serve all its calls, and the GIL keeps two Python threads from running one
  program at once. The module is never unloaded: a pool thread may spin in it until the
  process ends.

- `tj_rt_alloc(n, status)` and `tj_rt_free(ptr)`, the allocator of generated code (null,
  and the failure recorded in the program's status slots, where it gets no memory): large buffers go
  back into a cache that the next call's allocations of the same sizes take again
  (alloc_ir.py), of at most `CACHE_BYTES` (an eighth of the machine's memory, 1 GiB at most);
  `release_memory()` empties it.

Generated modules `declare void @tj_rt_parallel_for(ptr, ptr, i64, i64)` and the allocator's
functions: importing this module registers them with jit.py (`add_external`: a program that
uses one loads the runtime), and `ensure` with `llvmlite.binding.add_symbol` (and lists them
in `Runtime.symbols`).
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
from typing import Any, Callable, Sequence

import llvmlite.binding as llvm
import numpy as np

from ... import threads
from . import alloc_ir, jit, pool_ir
from .runtime_ir import (ARRAY_DATA, ARRAY_TYPE, EXPORTS, NEW_FROM_DESCR, OB_TYPE, W_COUNT,
                         W_ENTRY, W_ERROR, W_FRESH, W_NAME, W_NDARRAY, W_SIZES, W_SPECS,
                         W_TABLE, WORDS, source)

METH_FASTCALL = 0x0080
CALLED = ("tj_rt_parallel_for", "tj_rt_alloc", "tj_rt_free")   # what generated code calls


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The loaded runtime module: its code (kept for the process's life), the trampoline's
    address and the symbols generated code may declare (name -> address, also registered
    with llvmlite and jit.py)."""
    code: jit.Program
    trampoline: int
    symbols: dict[str, int]


_lock = threading.Lock()
_runtime: Runtime | None = None


def _cache_bytes() -> int:
    """An eighth of the machine's memory, 1 GiB at most (256 MiB where it cannot be read)."""
    try:
        return min(1 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8)
    except (AttributeError, ValueError, OSError):
        return 1 << 28


# the bytes the allocator's cache holds at most (HIPS convnet's gradient allocates 430 MB in
# each call)
CACHE_BYTES = _cache_bytes()


def ensure() -> Runtime:
    """The runtime module, loaded on the first call in a process (compiled on the first in a
    machine: a few milliseconds each)."""
    global _runtime
    if _runtime is not None:
        return _runtime
    with _lock:
        if _runtime is None:
            _runtime = _compile()
    return _runtime


def _compile() -> Runtime:
    _check_layout()
    api = ctypes.pythonapi
    for name in ("PyType_IsSubtype", "PyErr_Format", "Py_IncRef", "Py_DecRef", "PyTuple_New",
                 "PyTuple_SetItem"):
        llvm.add_symbol(name, ctypes.cast(getattr(api, name), ctypes.c_void_p).value)
    llvm.add_symbol("_Py_NoneStruct", id(None))
    ir = source() + pool_ir.source() + alloc_ir.source()
    obj, _ = jit.cached_bytes("runtime", ir, lambda: _object(ir))
    code = jit.Program(obj, EXPORTS + pool_ir.EXPORTS + alloc_ir.EXPORTS)
    symbols = {name: code.address(name) for name in CALLED}
    for name, address in symbols.items():
        llvm.add_symbol(name, address)
    runtime = Runtime(code, code.address("tj_rt_call"), symbols)
    _set(runtime, "tj_rt_pool_size", threads.pool())
    _set(runtime, "tj_rt_new_array", _numpy_api()[NEW_FROM_DESCR])
    _set(runtime, "tj_rt_cache_limit", CACHE_BYTES)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(code))     # never freed (the docstring)
    for forked in ("tj_rt_forked", "tj_rt_cache_forked"):
        os.register_at_fork(after_in_child=ctypes.CFUNCTYPE(None)(code.address(forked)))
    return runtime


def _object(ir: str) -> bytes:
    """The runtime's object code: no IR passes (it is a few dozen instructions, written as
    they should run), the host's instruction selection."""
    module = jit.parse(ir, llvm.create_context())
    machine = jit.target_machine()
    module.triple, module.data_layout = machine.triple, str(machine.target_data)
    return machine.emit_object(module)


def _numpy_api() -> ctypes.Array:
    """numpy's C API table (what `import_array()` reads in a C extension)."""
    try:
        from numpy._core import _multiarray_umath as multiarray
    except ImportError:                         # numpy 1.x
        from numpy.core import _multiarray_umath as multiarray  # type: ignore[no-redef]
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype, pointer.argtypes = ctypes.c_void_p, (ctypes.py_object, ctypes.c_char_p)
    return (ctypes.c_void_p * (NEW_FROM_DESCR + 1)).from_address(
        pointer(multiarray._ARRAY_API, None))


def _check_layout() -> None:
    """The offsets tj_rt_call reads, checked on an array (a build of CPython or numpy that lays
    its objects out otherwise is refused here, not crashed on)."""
    a = np.empty(1)
    at = [ctypes.c_void_p.from_address(id(a) + offset).value for offset in (OB_TYPE, ARRAY_DATA)]
    if at != [id(np.ndarray), a.ctypes.data] or _numpy_api()[ARRAY_TYPE] != id(np.ndarray):
        raise RuntimeError(f"tapejit's LLVM call path expects an ndarray's type at offset "
                           f"{OB_TYPE} and its data pointer at {ARRAY_DATA}: not so in this "
                           f"build of Python and numpy (use TAPEJIT_CODEGEN=numba)")


def _set(runtime: Runtime, variable: str, value: int) -> None:
    ctypes.c_void_p.from_address(runtime.code.address(variable)).value = value


for _name in CALLED:
    jit.add_external(_name, lambda name=_name: ensure().symbols[name])


def release_memory() -> None:
    """Give the allocator's cached blocks back to libc (where the runtime is loaded)."""
    if _runtime is not None:
        ctypes.CFUNCTYPE(None)(_runtime.code.address("tj_rt_cache_clear"))()


def cached_bytes() -> int:
    """The bytes the allocator's cache holds (0 where the runtime is not loaded)."""
    if _runtime is None:
        return 0
    return ctypes.c_int64.from_address(_runtime.code.address("tj_rt_cached")).value


class _Context(np.ndarray):
    """A bound program's words (`W_*`), holding what must live as long as its function."""


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_void_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_void_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = (ctypes.c_void_p, ctypes.py_object, ctypes.py_object)


def bind(entry: int, table: np.ndarray, sizes: np.ndarray, count: int, name: str = "tj_entry",
         keep: object = None, fresh: Sequence[tuple[tuple[int, ...], Any]] = ()) -> Callable:
    """A builtin function `call(*arrays)`: stores `arrays[k]`'s data pointer into `table[k]`
    for k < count, makes a new C-contiguous array for each (shape, dtype) of `fresh` with its
    data pointer in `table[count + j]` (the caller fills the slots after those once), calls
    `entry(table, sizes)` and returns the tuple of the new arrays (None without `fresh`);
    raises TypeError unless it is given `count` numpy arrays. `name` names it in errors;
    `keep` (the program's code) lives as long as it."""
    _check(entry, table, sizes, count, len(fresh))
    runtime = ensure()
    label = ctypes.create_string_buffer(name.encode())
    method = _MethodDef(ctypes.addressof(label), runtime.trampoline, METH_FASTCALL, None)
    descrs = [np.dtype(dtype) for _, dtype in fresh]
    dims = [np.array(shape or (0,), np.int64) for shape, _ in fresh]
    specs = np.array([(id(d), len(shape), a.ctypes.data)
                      for d, a, (shape, _) in zip(descrs, dims, fresh)], np.int64).reshape(-1)
    context = np.zeros(len(WORDS), np.int64).view(_Context)
    words = {W_ENTRY: entry, W_TABLE: table.ctypes.data, W_SIZES: sizes.ctypes.data,
             W_COUNT: count, W_NDARRAY: id(np.ndarray), W_ERROR: id(TypeError),
             W_NAME: ctypes.addressof(label), W_FRESH: len(fresh), W_SPECS: specs.ctypes.data}
    for k, value in words.items():
        context[k] = value
    context.keep = (table, sizes, label, method, keep, runtime, descrs, dims, specs)
    return _new_function(ctypes.addressof(method), context, None)


def _check(entry: int, table: np.ndarray, sizes: np.ndarray, count: int, fresh: int) -> None:
    if isinstance(entry, bool) or not isinstance(entry, int) or entry <= 0:
        raise ValueError(f"bind: entry {entry!r} must be the address of the program's entry")
    for what, a in (("table", table), ("sizes", sizes)):
        if not (isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1
                and a.flags.c_contiguous and a.flags.writeable):
            raise ValueError(f"bind: {what} must be a writeable 1-d C-contiguous int64 array, "
                             f"got {type(a).__name__} {getattr(a, 'dtype', '')}")
    if isinstance(count, bool) or not isinstance(count, int) or \
            not 0 <= count <= len(table) - fresh:
        raise ValueError(f"bind: count {count!r} must be an int in [0, {len(table) - fresh}] "
                         f"(the table's length less the {fresh} fresh arrays)")


def rebind(context: np.ndarray, entry: int) -> None:
    """Make the function `bind` made with `context` (its `__self__`) call `entry`, a program
    of the same calling convention, from its next call on."""
    if isinstance(entry, bool) or not isinstance(entry, int) or entry <= 0:
        raise ValueError(f"rebind: entry {entry!r} must be the address of a program's entry")
    context[W_ENTRY] = entry
