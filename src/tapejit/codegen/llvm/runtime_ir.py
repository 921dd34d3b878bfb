"""The LLVM IR of the trampoline `tj_rt_call` of the runtime module that runtime.py loads
(runtime.py's docstring says what it does; pool_ir.py holds the module's parallel loops).

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

EXPORTS = ("tj_rt_call", "tj_rt_new_array")
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
  call void @tj_rt_run(ptr %program, ptr %table, ptr %sizes)
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
  call void @tj_rt_run(ptr %program, ptr %table, ptr %sizes)
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

; a program's call, counted in @tj_rt_calls while it runs (the pool's threads spin long only then)
define internal void @tj_rt_run(ptr %program, ptr %table, ptr %sizes) {
  %before = atomicrmw add ptr @tj_rt_calls, i64 1 monotonic
  call void %program(ptr %table, ptr %sizes)
  %after = atomicrmw sub ptr @tj_rt_calls, i64 1 release
  ret void
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

def source() -> str:
    """The runtime module's IR text."""
    texts = "".join(f'@{name} = private unnamed_addr constant [{len(text) + 1} x i8] '
                    f'c"{text.decode()}\\00"\n' for name, text in _TEXTS.items())
    values = {f"W_{word.upper()}": k for k, word in enumerate(WORDS)}
    values.update(ARRAY_DATA=ARRAY_DATA, OB_TYPE=OB_TYPE)
    return texts + string.Template(_CALL).substitute(values)
