"""Library kernels for the llvm generator: the scalar functions generated loops call (vector
math, special functions, random bits, libm's) and matrix products, as LLVM functions that
jit.py links into each module that declares them, where LLVM inlines and vectorises them, or
(large kernels called at many places) calls them by address.

    kernel = scalar_kernel("tj_vmath.exp(a0)", (np.dtype("f8"),))    # -> Kernel
    kernel.declaration      # "declare double @tj_lib_...(double)", for the module's text
    product = matmul(np.dtype("f8"))                                  # -> Kernel

A scalar kernel is `def kernel(a0, ...): return <call>`, with the names generated modules
read (math, np and store.MODULES: tj_vmath, tj_special, tj_threefry, ...), compiled by numba
(njit, error_model="numpy") once per machine. Its LLVM IR (the function and everything it
calls, numba's final module) gets a C-ABI wrapper named `symbol`, marked alwaysinline; every
other definition is made internal and what the wrapper does not reach is dropped: the bitcode
jit.py inlines. A kernel of more than called_kernels.INLINE_LIMIT instructions is also built
into object code with vector variants (called_kernels.py), loaded into the process, and its
declaration names the variants: jit.py inlines it where a module calls it at few places and
calls it elsewhere. Both are kept on disk (jit.cached_bytes, folder `lib`: sealed, per host CPU
and versions), so a new process loads them without importing numba (one calling numba's C
helpers, as math.gamma does, imports numba's package when loaded, never its compiler). A call
that needs numba's memory manager or Python is refused (JitError). Registers hold bool as i1:
a kernel's bool parameters and result are i1 (the wrapper converts numba's i8). A kernel that
raises inside numba (none of the library's scalar functions do) returns an unspecified value.

`matmul(dtype)` is hand-written IR, linked as the scalar kernels are (no call through a
pointer, and no numba): `void(ptr a, ptr b, ptr out, i64 m, i64 n, i64 k, i1 ta, i1 tb,
i64 threads)` computes out[m, n] = op(a) @ op(b) as codegen/blas.py's `matmul` does, with
BLAS `gemm` by address (numpy's own OpenBLAS, 64-bit integers, which `import numpy` loaded:
`threads.numpy_blas`; else scipy's, the one numba calls) and the same cut of a large product
into blocks (blas.GRAIN, blas.SIDE), run by runtime.py's `tj_rt_parallel_for`.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import json
import math
import threading
from typing import Callable, NamedTuple

import llvmlite.binding as llvm
import numpy as np

from ... import threads
from ...disk import store
from .. import calls, scalar  # noqa: F401  (they name generated code's modules in MODULES)
from . import called_kernels, jit

_lock = threading.Lock()
_kernels: dict[str, "Kernel"] = {}
_INTS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
GRAIN, SIDE = 1 << 21, 32       # codegen/blas.py's: a block's multiply-adds, rows (columns)
PARALLEL_FOR = "tj_rt_parallel_for"
_RUNTIMES = ("NRT_", "Py", "_Py")     # numba's memory manager, Python: no kernel needs them


class Kernel(NamedTuple):
    symbol: str                     # "tj_lib_<hash of call and argtypes>", "tj_lib_matmul_f8"
    restype: np.dtype               # what numba inferred (None for matmul: it returns nothing)
    declaration: str                # the `declare` lines a module calling it holds
    argtypes_ir: tuple[str, ...]    # LLVM types of the parameters (bool: i1)
    restype_ir: str


def ir_type(dtype: np.dtype) -> str:
    """The LLVM type of a `dtype` value in a register (bool: i1)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "i1"
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return "float" if dtype.itemsize == 4 else "double"
    if dtype.kind in "iu":
        return _INTS[dtype.itemsize]
    raise jit.JitError(f"library kernels take and return bools, ints and float32/float64, "
                       f"not {dtype}")


def _kernel(symbol: str, restype: np.dtype | None, args: tuple[str, ...], ret: str,
            declaration: str | None = None) -> Kernel:
    """A kernel's record: `declaration` a called kernel's (called_kernels.py), else plain."""
    plain = f"declare {ret} @{symbol}({', '.join(args)})"
    return Kernel(symbol, restype, declaration or plain, args, ret)


def scalar_symbol(call: str, argtypes: tuple[np.dtype, ...]) -> str:
    """The symbol of `scalar_kernel(call, argtypes)` (its vector variants and body append
    `_v<width>` and `.one`: called_kernels.py)."""
    text = "\0".join((call, *(np.dtype(t).str for t in argtypes)))
    return "tj_lib_" + hashlib.sha256(text.encode()).hexdigest()[:24]


def scalar_kernel(call: str, argtypes: tuple[np.dtype, ...]) -> Kernel:
    """The kernel computing `call` (an expression over a0, a1, ...) for arguments of
    `argtypes`, registered with jit.py: from memory, the disk cache, or compiled by numba."""
    argtypes = tuple(np.dtype(t) for t in argtypes)
    text = "\0".join((call, *(t.str for t in argtypes)))
    symbol = scalar_symbol(call, argtypes)
    with _lock:
        kernel = _kernels.get(symbol)
        if kernel is None:
            payload, _ = jit.cached_bytes("lib", text, lambda: _compile(call, argtypes, symbol))
            head, _, code = payload.partition(b"\n")
            restype, declaration, size, split = json.loads(head)
            if declaration is not None:
                called_kernels.load(code[split:])
            jit.add_kernel(symbol, code[:split], None if declaration is None else size)
            kernel = _kernels[symbol] = _kernel(
                symbol, np.dtype(restype), tuple(map(ir_type, argtypes)),
                ir_type(np.dtype(restype)), declaration)
    return kernel


def _compile(call: str, argtypes: tuple[np.dtype, ...], symbol: str) -> bytes:
    """numba's compile of `call`: a JSON line [the result dtype's str, a called kernel's
    declaration or null, its size in instructions, the bitcode's length], then the bitcode
    programs inline, then a called kernel's object code."""
    restype, wrapped = _numba_kernel(call, argtypes)
    module = wrapped(symbol, "", (symbol,))
    size, bitcode = called_kernels.size(module), module.as_bitcode()
    obj, declaration = b"", None
    if size > called_kernels.INLINE_LIMIT:
        obj, declaration = called_kernels.build(wrapped, symbol, tuple(map(ir_type, argtypes)),
                                                ir_type(restype), called_kernels.widths(module))
    head = json.dumps([restype.str, declaration, size, len(bitcode)])
    return head.encode() + b"\n" + bitcode + obj


def _numba_kernel(call: str, argtypes: tuple[np.dtype, ...]
                  ) -> tuple[np.dtype, Callable[[str, str, tuple[str, ...]], llvm.ModuleRef]]:
    """(the result dtype, `wrapped(name, ir, exports)`: numba's module of `call` with its
    C-ABI wrapper `name` (alwaysinline) and IR text `ir` linked in, `exports` its exports)."""
    import numba
    names = ", ".join(f"a{i}" for i in range(len(argtypes)))
    scope = {"math": math, "np": np}
    scope.update((name, importlib.import_module(path)) for name, path in store.MODULES.items())
    exec(compile(f"def kernel({names}):\n    return {call}\n", f"<kernel {call}>", "exec"), scope)
    fn = numba.njit(error_model="numpy")(scope["kernel"])
    signature = tuple(numba.from_dtype(t) for t in argtypes)
    try:
        fn.compile(signature)
    except numba.core.errors.NumbaError as err:
        raise jit.JitError(f"numba cannot compile the kernel {call!r} for "
                           f"{[str(t) for t in argtypes]}: {err}") from None
    result = fn.overloads[signature]
    restype = numba.np.numpy_support.as_dtype(result.signature.return_type)
    models = result.target_context.data_model_manager
    numba_args = [str(models[t].get_argument_type()) for t in result.signature.args]
    numba_ret = str(models[result.signature.return_type].get_return_type())
    numba_ir, target = result.library.get_llvm_str(), result.fndesc.llvm_func_name

    def wrapped(name: str, ir: str, exports: tuple[str, ...]) -> llvm.ModuleRef:
        wrapper = _wrapper(name, target, argtypes, numba_args, restype, numba_ret) + ir
        return _extract(call, numba_ir, wrapper, exports, target)
    return restype, wrapped


def _wrapper(symbol: str, target: str, argtypes: tuple[np.dtype, ...], numba_args: list[str],
             restype: np.dtype, numba_ret: str) -> str:
    """IR text of `symbol`, calling numba's `target` (status, result pointer, exception slot)."""
    params, lines, passed = [], [], ["ptr %out", "ptr %exc"]
    for i, (dtype, theirs) in enumerate(zip(argtypes, numba_args)):
        ours = ir_type(dtype)
        params.append(f"{ours} %a{i}")
        if ours != theirs:                      # bool: i1 here, i8 in numba's calls
            lines.append(f"  %c{i} = zext {ours} %a{i} to {theirs}")
        passed.append(f"{theirs} %{'c' if ours != theirs else 'a'}{i}")
    ret = ir_type(restype)
    back = (f"  %r = icmp ne {numba_ret} %v, 0\n  ret i1 %r" if ret != numba_ret
            else f"  ret {ret} %v")
    return "\n".join([
        f"define {ret} @{symbol}({', '.join(params)}) #0 {{",
        f"  %out = alloca {numba_ret}", "  %exc = alloca ptr", *lines,
        f"  %status = call i32 @\"{target}\"({', '.join(passed)})",
        f"  %v = load {numba_ret}, ptr %out", back, "}",
        f"declare i32 @\"{target}\"({', '.join(['ptr', 'ptr', *numba_args])})",
        "attributes #0 = { alwaysinline nounwind }", ""])


def _extract(call: str, numba_ir: str, wrapper: str, exports: tuple[str, ...],
             target: str) -> llvm.ModuleRef:
    """numba's module with `wrapper` linked in, `exports` its only exports; raises JitError
    where what is left calls numba's memory manager or Python (a kernel stands alone: it
    calls libm's functions or numba's C helpers at most)."""
    module = jit.numba_export(numba_ir, wrapper, exports, inline=target)
    runtime = [f.name for f in (*module.functions, *module.global_variables)
               if f.is_declaration and f.name.startswith(_RUNTIMES)]
    if runtime:
        raise jit.JitError(f"the kernel {call!r} calls numba's memory manager or Python "
                           f"({', '.join(runtime)}): it cannot be a library kernel")
    return module


# ---- matrix products ----------------------------------------------------------------------

def _blas_address(routine: str) -> int:
    """The address of BLAS `routine` (Fortran-style: every argument by pointer): numpy's
    (`scipy_dgemm_64_`) where `threads.numpy_blas` finds it, else scipy's."""
    numpy_blas = threads.numpy_blas()
    if numpy_blas is not None:
        return int(ctypes.cast(getattr(numpy_blas, f"scipy_{routine}_64_"), ctypes.c_void_p).value)
    capsule = ctypes.py_object(threads.scipy_blas().__pyx_capi__[routine])
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = (
        ctypes.c_char_p, [ctypes.py_object])
    api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = (
        ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p])
    return int(api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule)))


for _routine in ("dgemm", "sgemm"):
    jit.add_external(f"tj_blas_{_routine}", functools.partial(_blas_address, _routine))


def matmul_symbol(dtype: np.dtype) -> str:
    """The product kernel's name for `dtype`'s operands ("tj_lib_matmul_f8")."""
    return f"tj_lib_matmul_{np.dtype(dtype).str[1:]}"


@functools.cache
def matmul(dtype: np.dtype) -> Kernel:
    """The matrix product kernel of float64 or float32 operands (the module docstring)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise jit.JitError(f"matmul kernels multiply float64 or float32 matrices, not {dtype}")
    code = dtype.str[1:]
    symbol = matmul_symbol(dtype)
    text = _MATMUL.format(S=symbol, T=ir_type(dtype), size=dtype.itemsize, grain=GRAIN,
                          I=_blas_int(), ints=_gemm_ints(),
                          side=SIDE, gemm=f"tj_blas_{'d' if code == 'f8' else 's'}gemm",
                          parallel_for=PARALLEL_FOR)
    jit.add_kernel(symbol, jit.parse(text, llvm.create_context()).as_bitcode())
    args = ("ptr", "ptr", "ptr", "i64", "i64", "i64", "i1", "i1", "i64")
    return _kernel(symbol, None, args, "void")


def _blas_int() -> str:
    """BLAS's integers: numpy's OpenBLAS takes 64 bits, scipy's 32."""
    return "i64" if threads.numpy_blas() is not None else "i32"


def _gemm_ints() -> str:
    """The IR storing gemm's integer arguments in `%dims`, one slot each, in gemm's order
    (slot pointer, the i64 it holds: the transposed product's m, n, k and leading sizes)."""
    kind = _blas_int()
    cast = "bitcast" if kind == "i64" else "trunc"
    lines = []
    for k, (slot, value) in enumerate((("pm", "n"), ("pn", "m"), ("pk", "k"), ("pla", "ldb"),
                                       ("plb", "lda"), ("plc", "ldc"))):
        lines += [f"  %{slot} = getelementptr {kind}, ptr %dims, i64 {k}",
                  f"  %{value}.b = {cast} i64 %{value} to {kind}",
                  f"  store {kind} %{value}.b, ptr %{slot}"]
    return "\n".join(lines)


# out[m, n] = op(a) @ op(b), row-major; BLAS is column-major, so it computes
# out^T = op(b)^T @ op(a)^T: b is its first operand, each with its own transpose flag
_MATMUL = """
%{S}.ctx = type {{ ptr, ptr, ptr, i64, i64, i64, i1, i1, i64 }}
declare void @{gemm}(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)
declare void @{parallel_for}(ptr, ptr, i64, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i64 @llvm.smin.i64(i64, i64)
declare i64 @llvm.smax.i64(i64, i64)

define internal void @{S}.gemm(i1 %ta, i1 %tb, i64 %m, i64 %n, i64 %k, ptr %a, i64 %lda,
                               ptr %b, i64 %ldb, ptr %c, i64 %ldc) {{
  %transa = alloca i8
  %transb = alloca i8
  %dims = alloca [6 x {I}]
  %alpha = alloca {T}
  %beta = alloca {T}
  %fa = select i1 %tb, i8 116, i8 110
  store i8 %fa, ptr %transa
  %fb = select i1 %ta, i8 116, i8 110
  store i8 %fb, ptr %transb
{ints}
  store {T} 1.0, ptr %alpha
  store {T} 0.0, ptr %beta
  call void @{gemm}(ptr %transa, ptr %transb, ptr %pm, ptr %pn, ptr %pk, ptr %alpha, ptr %b,
                    ptr %pla, ptr %a, ptr %plb, ptr %beta, ptr %c, ptr %plc)
  ret void
}}

define internal void @{S}.block(ptr %ctx, i64 %chunk, i64 %lo, i64 %hi) {{
entry:
  %a = load ptr, ptr %ctx
  %pb = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 1
  %b = load ptr, ptr %pb
  %po = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 2
  %out = load ptr, ptr %po
  %pm = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 3
  %m = load i64, ptr %pm
  %pn = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 4
  %n = load i64, ptr %pn
  %pk = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 5
  %k = load i64, ptr %pk
  %pta = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 6
  %ta = load i1, ptr %pta
  %ptb = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 7
  %tb = load i1, ptr %ptb
  %pc = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 8
  %count = load i64, ptr %pc
  %lda = select i1 %ta, i64 %m, i64 %k
  %ldb = select i1 %tb, i64 %k, i64 %n
  %rows = icmp sge i64 %m, %n
  %side = select i1 %rows, i64 %m, i64 %n
  %any = icmp slt i64 %lo, %hi
  br i1 %any, label %loop, label %done
loop:
  %p = phi i64 [ %lo, %entry ], [ %next, %step ]
  %next = add i64 %p, 1
  %x0 = mul i64 %side, %p
  %start = sdiv i64 %x0, %count
  %x1 = mul i64 %side, %next
  %end = sdiv i64 %x1, %count
  %len = sub i64 %end, %start
  br i1 %rows, label %by_rows, label %by_columns
by_rows:                                ; rows start:end of out and of op(a)
  %ra = mul i64 %start, %lda
  %aoff = select i1 %ta, i64 %start, i64 %ra
  %a1 = getelementptr {T}, ptr %a, i64 %aoff
  %coff = mul i64 %start, %n
  %c1 = getelementptr {T}, ptr %out, i64 %coff
  call void @{S}.gemm(i1 %ta, i1 %tb, i64 %len, i64 %n, i64 %k, ptr %a1, i64 %lda,
                      ptr %b, i64 %ldb, ptr %c1, i64 %n)
  br label %step
by_columns:                             ; columns start:end of out and of op(b)
  %rb = mul i64 %start, %ldb
  %boff = select i1 %tb, i64 %rb, i64 %start
  %b2 = getelementptr {T}, ptr %b, i64 %boff
  %c2 = getelementptr {T}, ptr %out, i64 %start
  call void @{S}.gemm(i1 %ta, i1 %tb, i64 %m, i64 %len, i64 %k, ptr %a, i64 %lda,
                      ptr %b2, i64 %ldb, ptr %c2, i64 %n)
  br label %step
step:
  %more = icmp slt i64 %next, %hi
  br i1 %more, label %loop, label %done
done:
  ret void
}}

define void @{S}(ptr %a, ptr %b, ptr %out, i64 %m, i64 %n, i64 %k, i1 %ta, i1 %tb,
                 i64 %threads) {{
entry:
  %mn = mul i64 %m, %n
  %none = icmp eq i64 %mn, 0
  %nok = icmp eq i64 %k, 0
  %empty = or i1 %none, %nok
  br i1 %empty, label %zero, label %work
zero:
  %bytes = mul i64 %mn, {size}
  call void @llvm.memset.p0.i64(ptr %out, i8 0, i64 %bytes, i1 false)
  ret void
work:                                   ; count = max(1, min(threads, mnk / grain, side / 32))
  %mnk = mul i64 %mn, %k
  %by_work = sdiv i64 %mnk, {grain}
  %longer = call i64 @llvm.smax.i64(i64 %m, i64 %n)
  %by_side = sdiv i64 %longer, {side}
  %c0 = call i64 @llvm.smin.i64(i64 %threads, i64 %by_work)
  %c1 = call i64 @llvm.smin.i64(i64 %c0, i64 %by_side)
  %count = call i64 @llvm.smax.i64(i64 %c1, i64 1)
  %split = icmp sgt i64 %count, 1
  br i1 %split, label %blocks, label %single
single:
  %lda = select i1 %ta, i64 %m, i64 %k
  %ldb = select i1 %tb, i64 %k, i64 %n
  call void @{S}.gemm(i1 %ta, i1 %tb, i64 %m, i64 %n, i64 %k, ptr %a, i64 %lda,
                      ptr %b, i64 %ldb, ptr %out, i64 %n)
  ret void
blocks:
  %ctx = alloca %{S}.ctx
  store ptr %a, ptr %ctx
  %pb = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 1
  store ptr %b, ptr %pb
  %po = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 2
  store ptr %out, ptr %po
  %pm = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 3
  store i64 %m, ptr %pm
  %pn = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 4
  store i64 %n, ptr %pn
  %pk = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 5
  store i64 %k, ptr %pk
  %pta = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 6
  store i1 %ta, ptr %pta
  %ptb = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 7
  store i1 %tb, ptr %ptb
  %pc = getelementptr %{S}.ctx, ptr %ctx, i32 0, i32 8
  store i64 %count, ptr %pc
  call void @{parallel_for}(ptr @{S}.block, ptr %ctx, i64 %count, i64 %count)
  ret void
}}
"""
