"""Calls of codegen/lapack.py's and codegen/sorting.py's functions (`tj_lapack.cholesky(a, l)`,
`tj_sorting.sort(x, values, indices)`, ...) as LLVM IR: each is a call of an array kernel
(array_kernels.py: numba's compile of the function, once per machine, called by address).

A kernel returns nonzero where the function raised inside numba (np.linalg's LinAlgError): the
lowered function then records the code and leaves (failures.py: `S[status] = LIBRARY`,
`S[status + 1] = code`), and Python raises `raised(code)`: the exception numba's compile of the
program raises, with numba's message. Not in parallel loops (numba compiles such a program).
"""
from __future__ import annotations

import ast
from typing import Any

from .array_kernels import array_kernel, raised  # noqa: F401  (raised: compile.py's)
from .emit import Array, NotCovered, Scalar
from .failures import LIBRARY, leave_where
from .jit import JitError


def library_call(body: Any, node: ast.Call) -> None:
    """Lower the statement `node` (`tj_lapack.f(...)` / `tj_sorting.f(...)`) in `body`."""
    if body.in_nest:
        raise NotCovered(f"{ast.unparse(node.func)} in a parallel loop")
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
    leave_where(body, body.fn.op(f"icmp ne i64 {code.ref}, 0"), (LIBRARY, code))
