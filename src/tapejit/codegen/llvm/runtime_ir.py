"""The LLVM IR of the runtime module that runtime.py loads: the trampoline `tj_rt_call` and
`tj_rt_parallel_for` (runtime.py's docstring says what each does).

The trampoline reads CPython and numpy objects at fixed offsets (`OB_TYPE`, `ARRAY_DATA`),
which runtime.py checks on an array before loading the module, and a bound program's context,
an int64 array of the words `W_*`. Fresh arrays are made with numpy's `PyArray_NewFromDescr`
(slot `NEW_FROM_DESCR` of its C API table), each from a spec of three words: its dtype (the
descriptor), its number of axes and a pointer to its lengths.
"""
from __future__ import annotations

import ctypes
import string

# the context's words, read by tj_rt_call
WORDS = ("entry", "table", "sizes", "count", "ndarray", "error", "name", "fresh", "specs")
W_ENTRY, W_TABLE, W_SIZES, W_COUNT, W_NDARRAY, W_ERROR, W_NAME, W_FRESH, W_SPECS = \
    range(len(WORDS))
# CPython's object header ends with ob_type; numpy's PyArrayObject puts `data` right after it
OB_TYPE = object.__basicsize__ - ctypes.sizeof(ctypes.c_void_p)
ARRAY_DATA = object.__basicsize__
ARRAY_TYPE, NEW_FROM_DESCR = 2, 94      # slots of numpy's C API table (stable since numpy 1.0)

EXPORTS = ("tj_rt_call", "tj_rt_parallel_for", "tj_rt_pool_for", "tj_rt_pool_threads",
           "tj_rt_pool_start", "tj_rt_new_array")
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
  %fresh.at = getelementptr i64, ptr %words, i64 $W_FRESH
  %fresh = load i64, ptr %fresh.at
  %none.fresh = icmp eq i64 %fresh, 0
  br i1 %none.fresh, label %call, label %make
call:
  call void %program(ptr %table, ptr %sizes)
  call void @Py_IncRef(ptr @_Py_NoneStruct)
  ret ptr @_Py_NoneStruct
make:
  %specs.at = getelementptr i64, ptr %words, i64 $W_SPECS
  %specs = load ptr, ptr %specs.at
  %new.array = load ptr, ptr @tj_rt_new_array
  %made = call ptr @PyTuple_New(i64 %fresh)
  %no.tuple = icmp eq ptr %made, null
  br i1 %no.tuple, label %failed, label %new
new:
  %j = phi i64 [0, %make], [%j.next, %keep]
  %spec = mul i64 %j, 3
  %descr.at = getelementptr i64, ptr %specs, i64 %spec
  %descr = load ptr, ptr %descr.at
  %nd.at = getelementptr i64, ptr %descr.at, i64 1
  %nd.64 = load i64, ptr %nd.at
  %nd = trunc i64 %nd.64 to i32
  %dims.at = getelementptr i64, ptr %descr.at, i64 2
  %dims = load ptr, ptr %dims.at
  call void @Py_IncRef(ptr %descr)
  %array = call ptr %new.array(ptr %ndarray, ptr %descr, i32 %nd, ptr %dims, ptr null,
                               ptr null, i32 0, ptr null)
  %no.array = icmp eq ptr %array, null
  br i1 %no.array, label %undo, label %keep
keep:
  %set = call i32 @PyTuple_SetItem(ptr %made, i64 %j, ptr %array)
  %fresh.data.at = getelementptr i8, ptr %array, i64 $ARRAY_DATA
  %fresh.data = load ptr, ptr %fresh.data.at
  %fresh.k = add i64 %count, %j
  %fresh.slot = getelementptr ptr, ptr %table, i64 %fresh.k
  store ptr %fresh.data, ptr %fresh.slot
  %j.next = add i64 %j, 1
  %more.fresh = icmp ult i64 %j.next, %fresh
  br i1 %more.fresh, label %new, label %call.made
call.made:
  call void %program(ptr %table, ptr %sizes)
  ret ptr %made
undo:
  call void @Py_DecRef(ptr %made)
  br label %failed
failed:
  ret ptr null
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
declare void @Py_DecRef(ptr)
declare ptr @PyTuple_New(i64)
declare i32 @PyTuple_SetItem(ptr, i64, ptr)
@tj_rt_new_array = global ptr null      ; numpy's PyArray_NewFromDescr (C API slot 94)
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


def source() -> str:
    """The runtime module's IR text."""
    texts = "".join(f'@{name} = private unnamed_addr constant [{len(text) + 1} x i8] '
                    f'c"{text.decode()}\\00"\n' for name, text in _TEXTS.items())
    values = {f"W_{word.upper()}": k for k, word in enumerate(WORDS)}
    values.update(ARRAY_DATA=ARRAY_DATA, OB_TYPE=OB_TYPE)
    return texts + string.Template(_CALL).substitute(values) + _PARALLEL_FOR
