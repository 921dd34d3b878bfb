"""Calls of codegen/lapack.py's and codegen/sorting.py's functions (`tj_lapack.cholesky(a, l)`,
`tj_sorting.sort(x, values, indices)`, ...) as LLVM IR: each is a call of an array kernel
(array_kernels.py: numba's compile of the function, once per machine, called by address).

A kernel returns nonzero where the function raised inside numba (np.linalg's LinAlgError). The
lowered function then records the code in the index checks' status slots of `S` (codegen/calls.py gives a
program calling these functions its slots): `S[status] = -1`, `S[status + 1] = code`, unless an
index check failed first; frees what it owns and returns at once. After the call, Python
(compile.py `Compiled.out_of_bounds`) raises `raised(code)`: the exception numba's compile
of the program raises, with numba's message.

In a function of the module (a loop's body, a branch: functions.py) a failed call returns at
once too, and so does each caller after calling a function that makes library calls, where a
status slot is set. Not in parallel loops (numba compiles such a program).
"""
from __future__ import annotations

import ast
from typing import Any

from .array_kernels import array_kernel, raised  # noqa: F401  (raised: compile.py's)
from .emit import Array, NotCovered, Scalar
from .jit import JitError

MODULES = ("tj_lapack", "tj_sorting")
FAILED = -1          # S[status] after a failed call (index checks write their number, >= 1)


def is_library_call(node: ast.expr) -> bool:
    """Whether `node` calls a function of lapack.py or sorting.py."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        isinstance(node.func.value, ast.Name) and node.func.value.id in MODULES


def library_call(body: Any, node: ast.Call) -> None:
    """Lower the statement `node` (`tj_lapack.f(...)` / `tj_sorting.f(...)`) in `body`."""
    if body.in_nest or not body.module.mutable:
        raise NotCovered(f"{ast.unparse(node.func)} in a parallel loop, or without status slots")
    kinds, parts = [], []
    for arg in node.args:
        if body._is_array(arg):
            array: Array = body.array(arg)
            kinds.append(("array", array.dtype, len(array.dims)))
            parts += [array.ptr, *array.dims]
        else:
            value: Scalar = body.scalar(arg)
            kinds.append(("scalar", value.dtype))
            parts.append(value)
    try:
        kernel = array_kernel(ast.unparse(node.func), tuple(kinds))
    except JitError as err:       # numba cannot compile it (float16, ...): numba's path decides
        raise NotCovered(f"a kernel for {ast.unparse(node.func)}: {err}") from None
    body.module.declarations.add(kernel.declaration)
    body.module.kernels[kernel.symbol] = ("array", ast.unparse(node.func),
                                          tuple((k[0], k[1].str, *k[2:]) for k in kinds))
    code = body.call_kernel(kernel, parts)
    _leave_where(body, body.fn.op(f"icmp ne i64 {code.ref}, 0"), code=code)


def return_if_failed(body: Any, node: ast.Call, results: Any) -> None:
    """After `results = f(...)`, a call of a module function that makes library calls: where
    a status slot is set (a library call failed and `f` returned at once, or an index check
    failed), free and return; `results` were not written: left alone."""
    if body.module.mutable and _may_fail(body.module, node.func.id):
        status = body.size(min(body.module.mutable))
        _leave_where(body, body.fn.op(f"icmp ne i64 {status.ref}, 0"), skip=results)


def _may_fail(module: Any, name: str) -> bool:
    """Whether module function `name`, or one it calls, makes a library call (known once per
    function: a call site of each asked again, and hmm_em's 165 walked their callees' trees
    for 0.5 s)."""
    if name not in module.may_fail:
        module.may_fail[name] = _makes_library_calls(module, name)
    return module.may_fail[name]


def _makes_library_calls(module: Any, name: str) -> bool:
    seen, todo = set(), [name]
    while todo:
        fn = module.defs.get(todo.pop())
        if fn is None or fn.name in seen:
            continue
        seen.add(fn.name)
        for node in ast.walk(fn):
            if is_library_call(node):
                return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
    return False


def _leave_where(body: Any, cond: str, code: Scalar | None = None, skip: Any = None) -> None:
    """Where `cond`: record a failed call's `code` (unless a slot is set already), free what
    the function owns (but call site `skip`'s results) and return."""
    f, status = body.fn, min(body.module.mutable)
    leave, stay = f.label("library_failed"), f.label("library_ok")
    f.cond_branch(cond, leave, stay)
    f.start(leave)
    if code is not None:
        first = f.op(f"icmp eq i64 {body.size(status).ref}, 0")
        for slot, value in ((status, FAILED), (status + 1, code.ref)):
            at = f.op(f"getelementptr i64, ptr {body.sizes_ptr}, i64 {slot}")
            now = body.size(slot).ref
            f.do(f"store i64 {f.op(f'select i1 {first}, i64 {value}, i64 {now}')}, ptr {at}")
    for _, _, allocated in body.loops:
        for ptr in allocated:
            f.do(f"call void @tj_rt_free(ptr {ptr})")
    body.free_owned(skip)
    f.do("ret void")
    f.terminated = True
    f.start(stay)
