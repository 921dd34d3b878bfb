"""Calls of codegen/lapack.py's and codegen/sorting.py's functions (`tj_lapack.cholesky(a, l)`,
`tj_sorting.sort(x, values, indices)`, ...) as LLVM IR: each is a call of an array kernel
(array_kernels.py: numba's compile of the function, once per machine, called by address).

A kernel returns nonzero where the function raised inside numba (np.linalg's LinAlgError). The
entry then records the code in the index checks' status slots of `S` (codegen/calls.py gives a
program calling these functions its slots): `S[status] = -1`, `S[status + 1] = code`, unless an
index check failed first; frees what it allocated and returns at once. The caller
(compile.py `Compiled.out_of_bounds`) raises `raised(code)`: the exception numba's compile
of the program raises, with numba's message.

Covered in the entry function only, outside parallel loops; elsewhere (a loop body or branch
that is a function of its own) the program falls back to numba.
"""
from __future__ import annotations

import ast
from typing import Any

from .array_kernels import array_kernel, raised  # noqa: F401  (raised: compile.py's)
from .emit import Array, NotCovered, Scalar

MODULES = ("tj_lapack", "tj_sorting")
FAILED = -1          # S[status] after a failed call (index checks write their number, >= 1)


def is_library_call(node: ast.expr) -> bool:
    """Whether `node` calls a function of lapack.py or sorting.py."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        isinstance(node.func.value, ast.Name) and node.func.value.id in MODULES


def library_call(body: Any, node: ast.Call) -> None:
    """Lower the statement `node` (`tj_lapack.f(...)` / `tj_sorting.f(...)`) in `body`."""
    if not body.top or body.in_nest or not body.module.mutable:
        raise NotCovered(f"{ast.unparse(node.func)} outside the entry function, or without "
                         f"status slots")
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
    kernel = array_kernel(ast.unparse(node.func), tuple(kinds))
    body.module.declarations.add(kernel.declaration)
    _return_on_failure(body, body.call_kernel(kernel, parts))


def _return_on_failure(body: Any, code: Scalar) -> None:
    """Where `code` is nonzero: record it in the status slots, free, return."""
    f, status = body.fn, min(body.module.mutable)
    failed, ok = f.label("library_failed"), f.label("library_ok")
    f.cond_branch(f.op(f"icmp ne i64 {code.ref}, 0"), failed, ok)
    f.start(failed)
    first = f.op(f"icmp eq i64 {body.size(status).ref}, 0")
    for slot, value in ((status, FAILED), (status + 1, code.ref)):
        at = f.op(f"getelementptr i64, ptr {body.sizes_ptr}, i64 {slot}")
        now = body.size(slot)
        f.do(f"store i64 {f.op(f'select i1 {first}, i64 {value}, i64 {now.ref}')}, ptr {at}")
    for _, _, allocated in body.loops:
        for ptr in allocated:
            f.do(f"call void @free(ptr {ptr})")
    body.finish()
    f.do("ret void")
    f.terminated = True
    f.start(ok)
