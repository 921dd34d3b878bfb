"""Kernels over whole arrays for the llvm generator: the functions of codegen/lapack.py
(`tj_lapack.cholesky`, ...) and codegen/sorting.py (`tj_sorting.sort`, ...), compiled by numba
once per machine and called by address.

    kernel = array_kernel("tj_lapack.cholesky", (("array", f8, 3), ("array", f8, 3)))
    kernel.declaration   # "declare i64 @tj_lib_...(ptr, i64, i64, i64, ptr, i64, i64, i64)"
    error = raised(code)  # the exception a call returning `code` != 0 raised inside numba

A kernel takes per array argument (C-contiguous) its data pointer and lengths, per scalar its
value (bool: i1), and returns 0, or where the numba function raised (LinAlgError: a matrix not
positive definite, a singular one, an SVD that does not converge) the address of numba's
description of the exception (its `excinfo`: the pickled class, arguments and place), from
which `raised` makes the same exception numba's own compile of the program raises (arguments
numba knows only at run time, which none of these functions' exceptions has, read RUN_TIME).

Unlike library.py's scalar kernels these need numba's memory manager (np.linalg allocates), so
they cannot be inlined: each is `def kernel(...)` building the arrays with numba.carray and
calling the function, compiled by numba (njit), with a C-ABI wrapper around numba's calling
convention; its object code is cached on disk (jit.cached_bytes, folder `lib`) and loaded into
the process's JIT once, where jit.py resolves the memory manager's functions (`NRT_*`) and
numba's LAPACK helpers (`numba_xxpotrf`, ...) from numba's C extensions. A process that loads
one imports numba's package (not its compiler: no njit compile, no CPU target).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib
import importlib.util
import pickle
import threading
from pathlib import Path

import llvmlite.ir
import numpy as np

from ...extensions import numba_helper
from . import jit
from .library import Kernel, ir_type

_lock = threading.Lock()
_kernels: dict[str, Kernel] = {}
_programs: dict[str, jit.Program] = {}     # loaded once, kept for the process's life
_MODULES = {"tj_lapack": "tapejit.codegen.lapack", "tj_sorting": "tapejit.codegen.sorting"}
UNKNOWN = 1                                # the code of a failure numba gave no excinfo for
RUN_TIME = "<a value known at run time>"    # in place of an exception's run-time argument

Kind = tuple          # ("array", dtype, ndim) or ("scalar", dtype)


class _ExcInfo(ctypes.Structure):
    """numba's excinfo_t (numba/core/callconv.py): {i8*, i32, i8*, i8*, i32}."""
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_int32),
                ("hash", ctypes.c_void_p), ("unwrap", ctypes.c_void_p),
                ("dynamic", ctypes.c_int32)]


def array_kernel(call: str, kinds: tuple[Kind, ...]) -> Kernel:
    """The kernel running `call` ("tj_lapack.cholesky", ...) on arguments of `kinds`, loaded
    into this process (from memory, the disk cache, or compiled by numba)."""
    module = call.partition(".")[0]
    if module not in _MODULES:
        raise jit.JitError(f"array kernels call {sorted(_MODULES)}'s functions, not {call}")
    kinds = tuple((k[0], np.dtype(k[1]), *k[2:]) for k in kinds)
    sources = [Path(importlib.util.find_spec(_MODULES[module]).origin).read_text(),
               Path(__file__).read_text()]
    text = "\0".join((call, repr([(k[0], k[1].str, *k[2:]) for k in kinds]), *sources))
    symbol = "tj_lib_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    with _lock:
        kernel = _kernels.get(symbol)
        if kernel is None:
            obj, _ = jit.cached_bytes("lib", text, lambda: _compile(call, kinds, symbol))
            program = _programs[symbol] = jit.Program(obj, (symbol,))
            jit.add_external(symbol, lambda: program.address(symbol))
            params = tuple(p for k in kinds for p in (
                ("ptr", *["i64"] * k[2]) if k[0] == "array" else (ir_type(k[1]),)))
            kernel = _kernels[symbol] = Kernel(
                symbol, np.dtype(np.int64), f"declare i64 @{symbol}({', '.join(params)})",
                params, "i64")
    return kernel


def raised(code: int) -> BaseException:
    """The exception of a kernel call that returned `code` (nonzero)."""
    info = None if code == UNKNOWN else _ExcInfo.from_address(code)
    if info is None or not info.data:
        return jit.JitError("a LAPACK or sorting kernel failed inside numba without saying "
                            "why; backend=\"interpret\" runs the program on numpy")
    # the kernel's own constant (numba's pickle of the class, arguments and place)
    exc, args, _ = pickle.loads(ctypes.string_at(info.data, info.size))  # noqa: S301
    if info.dynamic:      # arguments known at run time: placeholders here
        args = _run_time_values(info, args)
    return exc(*args)


def _run_time_values(info: _ExcInfo, args: tuple) -> tuple:
    """`args` with each placeholder numba pickled for a value known at run time replaced by
    RUN_TIME (numba's function that boxes the values needs its environment, which the kernel
    does not have); frees the values and `info` (numba's memory manager allocated them)."""
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(numba_helper("NRT_Free"))
    free(info.hash)
    free(ctypes.addressof(info))
    return tuple(RUN_TIME if isinstance(a, llvmlite.ir.Value) else a for a in args)


def _source(call: str, kinds: tuple[Kind, ...]) -> str:
    """`def kernel(a0, a0_d0, ..., a1, ...)`: numba.carray views of the arrays, then `call`."""
    params, lines, args = [], [], []
    for i, kind in enumerate(kinds):
        params.append(f"a{i}")
        if kind[0] == "array":
            dims = [f"a{i}_d{d}" for d in range(kind[2])]
            params += dims
            lines.append(f"    x{i} = numba.carray(a{i}, ({''.join(d + ', ' for d in dims)}), "
                         f"T{i})")
        args.append(f"x{i}" if kind[0] == "array" else f"a{i}")
    return (f"def kernel({', '.join(params)}):\n" + "".join(line + "\n" for line in lines)
            + f"    {call}({', '.join(args)})\n    return 0\n")


def _compile(call: str, kinds: tuple[Kind, ...], symbol: str) -> bytes:
    """numba's compile of the kernel, wrapped (`_WRAPPER`), as object code."""
    import numba
    scope = {"numba": numba, "np": np}
    scope.update((name, importlib.import_module(path)) for name, path in _MODULES.items())
    scope.update((f"T{i}", k[1].type) for i, k in enumerate(kinds) if k[0] == "array")
    exec(compile(_source(call, kinds), f"<kernel {call}>", "exec"), scope)  # noqa: S102
    fn = numba.njit(scope["kernel"])
    signature = tuple(t for k in kinds for t in (
        (numba.types.voidptr, *[numba.int64] * k[2]) if k[0] == "array"
        else (numba.from_dtype(k[1]),)))
    try:
        fn.compile(signature)
    except numba.core.errors.NumbaError as err:
        raise jit.JitError(f"numba cannot compile the kernel {call} for {kinds}: {err}") from None
    result = fn.overloads[signature]
    models = result.target_context.data_model_manager
    theirs = [str(models[t].get_argument_type()) for t in signature]
    theirs = ["ptr" if t.endswith("*") else t for t in theirs]   # opaque pointers
    ours = [ir_type(np.dtype(np.int64)) if t == numba.int64 else
            "ptr" if t == numba.types.voidptr else ir_type(numba.np.numpy_support.as_dtype(t))
            for t in signature]
    return _object(result.library.get_llvm_str(),
                   _wrapper(symbol, result.fndesc.llvm_func_name, ours, theirs), symbol)


def _wrapper(symbol: str, target: str, ours: list[str], theirs: list[str]) -> str:
    """IR of `symbol`: calls numba's `target` and returns 0 or its excinfo's address."""
    params, lines, passed = [], [], ["ptr %out", "ptr %exc"]
    for i, (mine, its) in enumerate(zip(ours, theirs)):
        params.append(f"{mine} %a{i}")
        if mine != its:                         # bool: i1 here, i8 in numba's calls
            lines.append(f"  %c{i} = zext {mine} %a{i} to {its}")
        passed.append(f"{its} %{'c' if mine != its else 'a'}{i}")
    return "\n".join([
        f"define i64 @{symbol}({', '.join(params)}) {{",
        "  %out = alloca i64", "  %exc = alloca ptr", "  store ptr null, ptr %exc", *lines,
        f"  %status = call i32 @\"{target}\"({', '.join(passed)})",
        "  %failed = icmp ne i32 %status, 0", "  %info = load ptr, ptr %exc",
        "  %address = ptrtoint ptr %info to i64", "  %known = icmp ne i64 %address, 0",
        f"  %code = select i1 %known, i64 %address, i64 {UNKNOWN}",
        "  %result = select i1 %failed, i64 %code, i64 0", "  ret i64 %result", "}",
        f"declare i32 @\"{target}\"({', '.join(['ptr', 'ptr', *theirs])})", ""])


def _object(numba_ir: str, wrapper: str, symbol: str) -> bytes:
    """Object code of numba's module with `wrapper` linked in, `symbol` its only export (it
    calls numba's memory manager; Python's C API only where `raised` unpacks an exception)."""
    module = jit.numba_export(numba_ir, wrapper, (symbol,))
    return jit.target_machine().emit_object(module)
