"""Leaving early where something failed at run time: a library call (library_calls.py) or an
allocation (arrays.py, parallel.py) that got no memory.

A failure is recorded in the status slots of `S` (the index checks' three, lower.py gives every
lowered program them): `S[status] = number`, `S[status + 1] = value`, unless a slot is set
already (`tj_rt_alloc` records its own: alloc_ir.py). The function then returns at once
through its cleanup block, which frees what it holds (one block per function, reading what to
free from stack slots: with a block per check, hmm_em's gradient had 2.4x its IR). Each
caller of a function that may fail (it, or one it calls, makes a library call or allocates)
leaves too where a slot is set after the call, and so does the entry after a parallel loop
whose chunks may fail (each chunk leaves at once; the others run to their end). After the
call, Python (compile.py `Compiled.recorded_error`) raises the failure's error.
"""
from __future__ import annotations

import ast
from typing import Any

from .emit import Scalar, allocates

LIBRARY = -1         # S[status] after a failed library call (index checks write theirs, >= 1)
MEMORY = -2          # ... after a failed allocation; S[status + 1]: the bytes asked for
MODULES = ("tj_lapack", "tj_sorting")    # what library calls call (codegen/lapack.py, sorting.py)


def is_library_call(node: ast.AST) -> bool:
    """Whether `node` calls a function of lapack.py or sorting.py."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        isinstance(node.func.value, ast.Name) and node.func.value.id in MODULES


def leave_where(body: Any, cond: str, failure: tuple[int, Scalar] | None = None) -> None:
    """Where `cond`: record `failure` (its number and value; none: it is recorded already)
    and leave through the function's cleanup block (ownership.py `finish`: it frees what the
    function holds then, read from slots, so one block serves every check)."""
    f = body.fn
    body.module.fails = True
    if body.cleanup is None:
        body.cleanup = f.label("cleanup")
    stay = f.label("ok")
    if failure is None:
        f.cond_branch(cond, body.cleanup, stay)
        f.start(stay)
        return
    leave, status = f.label("failed"), min(body.module.mutable)
    f.cond_branch(cond, leave, stay)
    f.start(leave)
    first = f.op(f"icmp eq i64 {body.size(status).ref}, 0")
    for slot, value in ((status, str(failure[0])), (status + 1, failure[1].ref)):
        at = f.op(f"getelementptr i64, ptr {body.sizes_ptr}, i64 {slot}")
        now = body.size(slot).ref
        f.do(f"store i64 {f.op(f'select i1 {first}, i64 {value}, i64 {now}')}, ptr {at}")
    f.branch(body.cleanup)
    f.start(stay)


def allocate(body: Any, nbytes: Scalar) -> str:
    """`tj_rt_alloc(nbytes)`, leaving where it gets no memory (it recorded the failure)."""
    f, status = body.fn, min(body.module.mutable)
    at = f.op(f"getelementptr i64, ptr {body.sizes_ptr}, i64 {status}")
    ptr = f.op(f"call ptr @tj_rt_alloc(i64 {nbytes.ref}, ptr {at})")
    leave_where(body, f.op(f"icmp eq ptr {ptr}, null"))
    return ptr


def leave_if_set(body: Any) -> None:
    """Where a status slot is set (a callee failed, or an index check did): leave."""
    status = body.size(min(body.module.mutable))
    leave_where(body, body.fn.op(f"icmp ne i64 {status.ref}, 0"))


def return_if_failed(body: Any, node: ast.Call) -> None:
    """After a call of module function `node.func`: where it may fail and a status slot is
    set, leave (the callee wrote no outputs: its cleanup marked them not owned)."""
    if may_fail(body.module, node):
        leave_if_set(body)


def may_fail(module: Any, node: ast.AST) -> bool:
    """Whether code `node` (a call of a module function, a parallel loop) makes a library call
    or allocates, or calls a module function that does (known once per function: a call
    site of each asked again, and hmm_em's 165 walked their callees' trees for 0.5 s)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name not in module.may_fail:
            fn = module.defs.get(name)
            module.may_fail[name] = False       # (a recursive call adds nothing)
            module.may_fail[name] = fn is not None and any(may_fail(module, n)
                                                           for n in fn.body)
        return module.may_fail[name]
    return any(is_library_call(n) or allocates(n) or
               (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                and n.func.id in module.defs and may_fail(module, n))
               for n in ast.walk(node))
