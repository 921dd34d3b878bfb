"""The call path of the LLVM programs: a trampoline from Python into `tj_entry`, and the parallel
loop runtime their chunked nests call.

One small LLVM module, loaded once per process by `ensure()` (its object code compiled once
per machine and cached by jit.py; no numba import):
- `tj_rt_call`, a CPython METH_FASTCALL function. `bind(entry, table, sizes, count)` makes it a
  builtin function per program, whose `self` is a context (`_Context`, an int64 array of the
  words `W_*`) that keeps the table, the size table and the PyMethodDef alive. A call checks
  that it has `count` arguments, each a numpy ndarray (its type is ndarray's or a subtype),
  stores argument k's data pointer into `table[k]` and calls `entry(table, sizes)`; anything
  else raises TypeError naming the program, the argument and its type. Dtype, shape and
  contiguity are the caller's to guarantee (dispatch checks the signature).
- `tj_rt_parallel_for(fn, ctx, n, chunks)` runs `fn(ctx, c, lo, hi)` for each chunk c of
  `[0, n)`, `lo = c*n//chunks`, `hi = (c+1)*n//chunks`, on numba's thread pool (the one numba's
  own prange uses, through its `numba_parallel_for`), and returns when every chunk is done.
  It uses at most `min(chunks, numba.get_num_threads())` threads: the calling thread's numba
  thread count, which threads.py sets to the call's budget; fewer than two run on the calling
  thread. The first call with `chunks > 1` starts the pool (`_pool_wanted`, a Python callback:
  numba is imported only by processes that run parallel loops). The caller's GIL stays held:
  a program's table, size table and workspace serve all its calls, and the GIL keeps two
  Python threads from running one program at once.

numba's `parallel_for(kernel, args, dims, steps, data, inner_ndim=0, array_count=1, threads)`
calls `kernel(args', dims', steps, data)` with `dims'[0]` iterations starting at iteration r,
where `args'[0] = args[0] + r * steps[0]` (each threading layer splits the range its own way):
`tj_rt_kernel` is given `args[0] = data` (the job) and `steps[0] = 1`, so r is `args'[0] - data`.

Generated modules `declare void @tj_rt_parallel_for(ptr, ptr, i64, i64)`: importing this module
registers it with jit.py (`add_external`: a program that uses it loads the runtime), and
`ensure` with `llvmlite.binding.add_symbol` (and lists it in `Runtime.symbols`).
"""
from __future__ import annotations

import ctypes
import dataclasses
import string
import threading
from typing import Callable

import llvmlite.binding as llvm
import numpy as np

from ...errors import warn_at_user
from . import jit

METH_FASTCALL = 0x0080
# the context's words, read by tj_rt_call
_WORDS = ("entry", "table", "sizes", "count", "ndarray", "error", "name")
W_ENTRY, W_TABLE, W_SIZES, W_COUNT, W_NDARRAY, W_ERROR, W_NAME = range(len(_WORDS))
# CPython's object header ends with ob_type; numpy's PyArrayObject puts `data` right after it
OB_TYPE = object.__basicsize__ - ctypes.sizeof(ctypes.c_void_p)
ARRAY_DATA = object.__basicsize__

EXPORTS = ("tj_rt_call", "tj_rt_parallel_for", "tj_rt_pool_for", "tj_rt_pool_threads",
           "tj_rt_pool_start")
_TEXTS = {
    "miscount": b"%s takes %zd arrays (%zd given): call the program through its transform",
    "not_array": b"%s: argument %zd of %zd has type %R, expected a numpy.ndarray",
}

_CALL = """
define ptr @tj_rt_call(ptr %self, ptr %args, i64 %nargs) {
entry:
  %words.at = getelementptr i8, ptr %self, i64 $ARRAY_DATA
  %words = load ptr, ptr %words.at
  %count.at = getelementptr i64, ptr %words, i64 $W_COUNT
  %count = load i64, ptr %count.at
  %table.at = getelementptr i64, ptr %words, i64 $W_TABLE
  %table = load ptr, ptr %table.at
  %ndarray.at = getelementptr i64, ptr %words, i64 $W_NDARRAY
  %ndarray = load ptr, ptr %ndarray.at
  %fits = icmp eq i64 %nargs, %count
  br i1 %fits, label %head, label %miscount
head:
  %none = icmp eq i64 %count, 0
  br i1 %none, label %run, label %arg
arg:
  %k = phi i64 [0, %head], [%k.next, %store]
  %arg.at = getelementptr ptr, ptr %args, i64 %k
  %a = load ptr, ptr %arg.at
  %type.at = getelementptr i8, ptr %a, i64 $OB_TYPE
  %type = load ptr, ptr %type.at
  %exact = icmp eq ptr %type, %ndarray
  br i1 %exact, label %store, label %subtype
subtype:
  %sub = call i32 @PyType_IsSubtype(ptr %type, ptr %ndarray)
  %is.sub = icmp ne i32 %sub, 0
  br i1 %is.sub, label %store, label %not_array
store:
  %data.at = getelementptr i8, ptr %a, i64 $ARRAY_DATA
  %data = load ptr, ptr %data.at
  %slot = getelementptr ptr, ptr %table, i64 %k
  store ptr %data, ptr %slot
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, %count
  br i1 %more, label %arg, label %run
run:
  %program.at = getelementptr i64, ptr %words, i64 $W_ENTRY
  %program = load ptr, ptr %program.at
  %sizes.at = getelementptr i64, ptr %words, i64 $W_SIZES
  %sizes = load ptr, ptr %sizes.at
  call void %program(ptr %table, ptr %sizes)
  call void @Py_IncRef(ptr @_Py_NoneStruct)
  ret ptr @_Py_NoneStruct
miscount:
  %error.1.at = getelementptr i64, ptr %words, i64 $W_ERROR
  %error.1 = load ptr, ptr %error.1.at
  %name.1.at = getelementptr i64, ptr %words, i64 $W_NAME
  %name.1 = load ptr, ptr %name.1.at
  %r.1 = call ptr (ptr, ptr, ...) @PyErr_Format(ptr %error.1, ptr @miscount, ptr %name.1,
                                                i64 %count, i64 %nargs)
  ret ptr null
not_array:
  %error.2.at = getelementptr i64, ptr %words, i64 $W_ERROR
  %error.2 = load ptr, ptr %error.2.at
  %name.2.at = getelementptr i64, ptr %words, i64 $W_NAME
  %name.2 = load ptr, ptr %name.2.at
  %position = add i64 %k, 1
  %r.2 = call ptr (ptr, ptr, ...) @PyErr_Format(ptr %error.2, ptr @not_array, ptr %name.2,
                                                i64 %position, i64 %count, ptr %type)
  ret ptr null
}

declare i32 @PyType_IsSubtype(ptr, ptr)
declare ptr @PyErr_Format(ptr, ptr, ...)
declare void @Py_IncRef(ptr)
@_Py_NoneStruct = external global i8
"""

_PARALLEL_FOR = """
%job = type { ptr, ptr, i64, i64 }   ; fn, ctx, n, chunks

@tj_rt_pool_for = global ptr null       ; numba_parallel_for, once the pool runs
@tj_rt_pool_threads = global ptr null   ; numba's get_num_threads
@tj_rt_pool_start = global ptr null     ; void(): starts the pool (Python, `_start_pool`)

define void @tj_rt_parallel_for(ptr %fn, ptr %ctx, i64 %n, i64 %chunks) {
entry:
  %job = alloca %job
  %args = alloca ptr
  %dims = alloca i64
  %steps = alloca i64
  store ptr %fn, ptr %job
  %ctx.at = getelementptr %job, ptr %job, i32 0, i32 1
  store ptr %ctx, ptr %ctx.at
  %n.at = getelementptr %job, ptr %job, i32 0, i32 2
  store i64 %n, ptr %n.at
  %many = icmp sgt i64 %chunks, 1
  %chunks.1 = select i1 %many, i64 %chunks, i64 1
  %chunks.at = getelementptr %job, ptr %job, i32 0, i32 3
  store i64 %chunks.1, ptr %chunks.at
  br i1 %many, label %pool, label %here
pool:
  %pool.0 = load atomic ptr, ptr @tj_rt_pool_for acquire, align 8
  %running = icmp ne ptr %pool.0, null
  br i1 %running, label %budget, label %start
start:
  %start.fn = load atomic ptr, ptr @tj_rt_pool_start acquire, align 8
  call void %start.fn()
  %pool.1 = load atomic ptr, ptr @tj_rt_pool_for acquire, align 8
  %started = icmp ne ptr %pool.1, null
  br i1 %started, label %budget, label %here
budget:
  %pool.for = phi ptr [%pool.0, %pool], [%pool.1, %start]
  %get.threads = load atomic ptr, ptr @tj_rt_pool_threads acquire, align 8
  %own = call i32 %get.threads()
  %own.64 = sext i32 %own to i64
  %fewer = icmp slt i64 %own.64, %chunks
  %threads = select i1 %fewer, i64 %own.64, i64 %chunks
  %threaded = icmp sgt i64 %threads, 1
  br i1 %threaded, label %pooled, label %here
pooled:
  store ptr %job, ptr %args
  store i64 %chunks, ptr %dims
  store i64 1, ptr %steps
  %threads.32 = trunc i64 %threads to i32
  call void %pool.for(ptr @tj_rt_kernel, ptr %args, ptr %dims, ptr %steps, ptr %job,
                  i64 0, i64 1, i32 %threads.32)
  ret void
here:
  call void @tj_rt_chunks(ptr %job, i64 0, i64 %chunks.1)
  ret void
}

define internal void @tj_rt_kernel(ptr %args, ptr %dims, ptr %steps, ptr %job) {
entry:
  %at = load ptr, ptr %args
  %at.int = ptrtoint ptr %at to i64
  %job.int = ptrtoint ptr %job to i64
  %first = sub i64 %at.int, %job.int
  %count = load i64, ptr %dims
  call void @tj_rt_chunks(ptr %job, i64 %first, i64 %count)
  ret void
}

; chunks first .. first+count-1 of the job, one after the other
define internal void @tj_rt_chunks(ptr %job, i64 %first, i64 %count) {
entry:
  %fn = load ptr, ptr %job
  %ctx.at = getelementptr %job, ptr %job, i32 0, i32 1
  %ctx = load ptr, ptr %ctx.at
  %n.at = getelementptr %job, ptr %job, i32 0, i32 2
  %n = load i64, ptr %n.at
  %chunks.at = getelementptr %job, ptr %job, i32 0, i32 3
  %chunks = load i64, ptr %chunks.at
  %end = add i64 %first, %count
  %empty = icmp sle i64 %count, 0
  br i1 %empty, label %done, label %chunk
chunk:
  %c = phi i64 [%first, %entry], [%c.next, %chunk]
  %c.next = add i64 %c, 1
  %lo = call i64 @tj_rt_bound(i64 %c, i64 %n, i64 %chunks)
  %hi = call i64 @tj_rt_bound(i64 %c.next, i64 %n, i64 %chunks)
  call void %fn(ptr %ctx, i64 %c, i64 %lo, i64 %hi)
  %more = icmp slt i64 %c.next, %end
  br i1 %more, label %chunk, label %done
done:
  ret void
}

; c*n//chunks without overflow: c*(n//chunks) + c*(n%chunks)//chunks
define internal i64 @tj_rt_bound(i64 %c, i64 %n, i64 %chunks) {
  %q = udiv i64 %n, %chunks
  %r = urem i64 %n, %chunks
  %whole = mul i64 %c, %q
  %part.n = mul i64 %c, %r
  %part = udiv i64 %part.n, %chunks
  %bound = add i64 %whole, %part
  ret i64 %bound
}
"""


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
_pool = False
_pool_failed = False


def ensure(parallel: bool = False) -> Runtime:
    """The runtime module, loaded on the first call in a process (compiled on the first in a
    machine: a few milliseconds each); `parallel`: also start numba's thread pool now (imports
    numba), as the first call of `tj_rt_parallel_for` with more than one chunk does."""
    global _runtime, _pool
    if _runtime is not None and (_pool or not parallel):
        return _runtime
    with _lock:
        if _runtime is None:
            _runtime = _compile()
        if parallel and not _pool:
            _start_pool(_runtime)
            _pool = True
    return _runtime


def _compile() -> Runtime:
    _check_layout()
    api = ctypes.pythonapi
    for name in ("PyType_IsSubtype", "PyErr_Format", "Py_IncRef"):
        llvm.add_symbol(name, ctypes.cast(getattr(api, name), ctypes.c_void_p).value)
    llvm.add_symbol("_Py_NoneStruct", id(None))
    ir = source()
    obj, _ = jit.cached_bytes("runtime", ir, lambda: _object(ir))
    code = jit.Program(obj, EXPORTS)
    symbols = {"tj_rt_parallel_for": code.address("tj_rt_parallel_for")}
    for name, address in symbols.items():
        llvm.add_symbol(name, address)
    runtime = Runtime(code, code.address("tj_rt_call"), symbols)
    _set(runtime, "tj_rt_pool_start", ctypes.cast(_pool_wanted, ctypes.c_void_p).value)
    return runtime


def _object(ir: str) -> bytes:
    """The runtime's object code: no IR passes (it is a few dozen instructions, written as
    they should run), the host's instruction selection."""
    module = jit.parse(ir, llvm.create_context())
    machine = jit.target_machine()
    module.triple, module.data_layout = machine.triple, str(machine.target_data)
    return machine.emit_object(module)


def _check_layout() -> None:
    """The offsets tj_rt_call reads, checked on an array (a build of CPython or numpy that lays
    its objects out otherwise is refused here, not crashed on)."""
    a = np.empty(1)
    at = [ctypes.c_void_p.from_address(id(a) + offset).value for offset in (OB_TYPE, ARRAY_DATA)]
    if at != [id(np.ndarray), a.ctypes.data]:
        raise RuntimeError(f"tapejit's LLVM call path expects an ndarray's type at offset "
                           f"{OB_TYPE} and its data pointer at {ARRAY_DATA}: not so in this "
                           f"build of Python and numpy (use TAPEJIT_CODEGEN=numba)")


def source() -> str:
    """The runtime module's IR text."""
    texts = "".join(f'@{name} = private unnamed_addr constant [{len(text) + 1} x i8] '
                    f'c"{text.decode()}\\00"\n' for name, text in _TEXTS.items())
    values = {f"W_{word.upper()}": k for k, word in enumerate(_WORDS)}
    values.update(ARRAY_DATA=ARRAY_DATA, OB_TYPE=OB_TYPE)
    return texts + string.Template(_CALL).substitute(values) + _PARALLEL_FOR


def _start_pool(runtime: Runtime) -> None:
    """Point tj_rt_parallel_for at numba's pool (started here, as numba's first prange would)."""
    import numba
    numba.get_num_threads()         # launches the threading layer, registers its symbols
    found = {name: llvm.address_of_symbol(name)
             for name in ("numba_parallel_for", "get_num_threads")}
    if not all(found.values()):
        raise RuntimeError(f"numba's threading layer exported no {found}")
    _set(runtime, "tj_rt_pool_threads", found["get_num_threads"])
    _set(runtime, "tj_rt_pool_for", found["numba_parallel_for"])       # the gate, last


def _set(runtime: Runtime, variable: str, value: int) -> None:
    ctypes.c_void_p.from_address(runtime.code.address(variable)).value = value


@ctypes.CFUNCTYPE(None)
def _pool_wanted() -> None:
    """Called by tj_rt_parallel_for, with the GIL, while the pool is not running and a call
    asks for more than one chunk (a budget above one: threads.py has imported numba by then).
    Never raises into the caller: a pool that cannot start leaves the chunks on one thread."""
    global _pool_failed
    if _pool_failed:
        return
    try:
        ensure(parallel=True)
    except Exception as err:    # noqa: BLE001  (anything numba's threading layer raises)
        _pool_failed = True
        warn_at_user(f"tapejit's parallel loops run on one thread: numba's thread pool did "
                     f"not start ({type(err).__name__}: {err})")


jit.add_external("tj_rt_parallel_for", lambda: ensure().symbols["tj_rt_parallel_for"])


class _Context(np.ndarray):
    """A bound program's words (`W_*`), holding what must live as long as its function."""


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_void_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_void_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = (ctypes.c_void_p, ctypes.py_object, ctypes.py_object)


def bind(entry: int, table: np.ndarray, sizes: np.ndarray, count: int,
         name: str = "tj_entry", keep: object = None) -> Callable[..., None]:
    """A builtin function `call(*arrays)`: stores `arrays[k]`'s data pointer into `table[k]`
    for k < count (the slots after them were filled by the caller), then calls
    `entry(table, sizes)`; raises TypeError unless it is given `count` numpy arrays.
    `name` names it in errors; `keep` (the program's code) lives as long as it."""
    _check(entry, table, sizes, count)
    runtime = ensure()
    label = ctypes.create_string_buffer(name.encode())
    method = _MethodDef(ctypes.addressof(label), runtime.trampoline, METH_FASTCALL, None)
    context = np.zeros(len(_WORDS), np.int64).view(_Context)
    words = {W_ENTRY: entry, W_TABLE: table.ctypes.data, W_SIZES: sizes.ctypes.data,
             W_COUNT: count, W_NDARRAY: id(np.ndarray), W_ERROR: id(TypeError),
             W_NAME: ctypes.addressof(label)}
    for k, value in words.items():
        context[k] = value
    context.keep = (table, sizes, label, method, keep, runtime)
    return _new_function(ctypes.addressof(method), context, None)


def _check(entry: int, table: np.ndarray, sizes: np.ndarray, count: int) -> None:
    if isinstance(entry, bool) or not isinstance(entry, int) or entry <= 0:
        raise ValueError(f"bind: entry {entry!r} must be the address of the program's entry")
    for what, a in (("table", table), ("sizes", sizes)):
        if not (isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1
                and a.flags.c_contiguous and a.flags.writeable):
            raise ValueError(f"bind: {what} must be a writeable 1-d C-contiguous int64 array, "
                             f"got {type(a).__name__} {getattr(a, 'dtype', '')}")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= len(table):
        raise ValueError(f"bind: count {count!r} must be an int in [0, {len(table)}] "
                         f"(the table's length)")
