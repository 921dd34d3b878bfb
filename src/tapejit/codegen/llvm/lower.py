"""The loop language to LLVM IR: the entry function of a module codegen/cpu.py writes for
numba, lowered without numba.

The entry becomes `void @tj_entry(ptr %args, ptr %S)`. `args` holds one data pointer per array
slot, in this order (`Lowered`): the inputs and constants, then the arrays allocated
at the function's top level (`np.empty`/`zeros`/`full` there: the caller allocates them, fresh
for each call where an output is made of them, else once), then the workspace `W`. Every array
is C-contiguous; its lengths are known up front as Python expressions over `S` (the
generator's shapes), so the caller can allocate and LLVM sees small fixed lengths as numbers.
Slots of `S` that the program never writes (all but the index checks' status slots) are read
once, at the function's start.

Locals live in stack slots that LLVM promotes to registers. A `numba.prange` loop becomes a
function of its own run in chunks on numba's thread pool (`tj_rt_parallel_for`, runtime.py);
the values its body reads travel in a context of 8-byte cells, and a local it sums into
(`acc = acc + x`, the only reduction the generator lets a parallel loop make into a scalar) is
summed per chunk and the partial sums added in chunk order afterwards.
"""
from __future__ import annotations

import ast
import re
from typing import NamedTuple

from .body import Body, Shaped
from .emit import Array, Frame, Function, NotCovered
from ..writer import ENTRY

ENTRY_SYMBOL = "tj_entry"
_DECLARATIONS = ("declare ptr @malloc(i64)", "declare void @free(ptr)",
                 "declare void @tj_rt_parallel_for(ptr, ptr, i64, i64)")


class Lowered(NamedTuple):
    ir: str
    inputs: int                      # args[0:inputs]: the entry's array parameters
    frames: tuple[Frame, ...]        # then the fresh frames, then the others
    workspace: int                   # then the workspace arrays
    outputs: tuple[tuple[str, int], ...]   # per output: ("input", k) or ("frame", k)
    parts: tuple[str, ...] = ()      # `ir` as modules to compile apart (on threads): the
                                     # entry's, then one per parallel loop's chunk function
    kernels: tuple[tuple, ...] = ()  # the kernels it uses: ("scalar", call, dtypes) or
                                     # ("array", call, kinds); those its code calls by address
                                     # load before it, all before its full tier compiles


class _Module:
    def __init__(self, status: int | None, threads: int | None) -> None:
        self.functions: list[str] = []
        self.declarations: set[str] = set(_DECLARATIONS)
        self.mutable = set() if status is None else {status, status + 1, status + 2}
        self.threads = threads
        self.frames: list[Frame] = []
        self.frame_roots: list[str] = []
        self.workspace: set[int] = set()
        self.nests = 0
        self.metadata = 0           # metadata numbers used so far (scopes.py)
        self.defs: dict[str, ast.FunctionDef] = {}   # the module's other functions
        self.defined: dict = {}     # (name, argument kinds) -> (symbol, output layout)
        self.kernels: dict[str, tuple] = {}   # symbol -> the request that made it (`Lowered`)


def lower(source: str, inputs: Shaped, workspace: Shaped, status: int | None,
          threads: int | None) -> Lowered:
    """The module for `source` (codegen/cpu.py's, for a tape whose entry parameters, and the
    workspace arrays, have the shapes and dtypes given); `status` and `threads`: the first
    index-check status slot and the threads slot of `S`, where the program has them."""
    tree = ast.parse(source)
    module = _Module(status, threads)
    module.defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    entry = module.defs.pop(ENTRY)
    body = Body(module, Function(ENTRY_SYMBOL, "ptr %args, ptr %S"), "%S",
                statements=entry.body)
    body.workspace = workspace
    params = [a.arg for a in entry.args.args][:-2]          # ..., S, W
    for k, (name, (shape, dtype)) in enumerate(zip(params, inputs)):
        ptr = body.fn.early(f"load ptr, ptr {body.fn.early(f'getelementptr ptr, ptr %args, i64 {k}')}")
        body.env[name] = Array(ptr, dtype, body.dims(ast.parse(shape, mode="eval").body), name)
        body.given.add(name)
    statements = entry.body
    if not statements or not isinstance(statements[-1], ast.Return):
        raise NotCovered("an entry without a final return")
    body.block(statements[:-1])
    outputs = _outputs(body, statements[-1], params)
    body.finish()
    module.functions.append(body.fn.text())
    return _finish(module, len(params), outputs)


def _outputs(body: Body, node: ast.Return, params: list[str]) -> list[tuple[str, int]]:
    """Per output of the entry: ("input", k) or ("frame", k); an array no frame holds (a
    loop's carry, a call's result) is copied into a new fresh frame."""
    if not isinstance(node.value, ast.Tuple):
        raise NotCovered("a return that is not a tuple")
    module, result = body.module, []
    for elt in node.value.elts:
        value = body.value(elt)
        if not isinstance(value, Array):
            raise NotCovered("a scalar output of the entry")
        if value.root in params:
            result.append(("input", params.index(value.root)))
            continue
        if value.root not in module.frame_roots:
            if not all(d.sym for d in value.dims):
                raise NotCovered(f"output {ast.unparse(elt)}: its shape is not known up front")
            copy = body.new_array(value.dims, value.dtype, f"out{len(result)}_copy")
            body.copy(value, copy)
            value = copy
        k = module.frame_roots.index(value.root)
        module.frames[k].fresh = True
        result.append(("frame", k))
    return result


def _finish(module: _Module, inputs: int, outputs: list[tuple[str, int]]) -> Lowered:
    """Number the slots (fresh frames first) and write the module text."""
    order = sorted(range(len(module.frames)), key=lambda k: not module.frames[k].fresh)
    position = {k: inputs + n for n, k in enumerate(order)}
    first_w = inputs + len(module.frames)
    def numbered(text: str) -> str:
        text = re.sub(r"@@F(\d+)@@", lambda m: str(position[int(m.group(1))]), text)
        return re.sub(r"@@W(\d+)@@", lambda m: str(first_w + int(m.group(1))), text)
    head = "\n".join(sorted(module.declarations)) + "\n\n"
    text = numbered(head + "\n\n".join(module.functions))
    parts = tuple(numbered(head + part) for part in _parts(module.functions))
    frames = tuple(module.frames[k] for k in order)
    renumber = {k: n for n, k in enumerate(order)}
    outs = tuple((kind, renumber[k] if kind == "frame" else k) for kind, k in outputs)
    workspace = max(module.workspace) + 1 if module.workspace else 0
    kernels = tuple(made for _, made in sorted(module.kernels.items()))
    return Lowered(text + "\n", inputs, frames, workspace, outs, parts, kernels)


_NEST = "tj_nest"


def _parts(functions: list[str]) -> list[str]:
    """The functions as modules that compile apart: the entry with the functions it calls;
    each parallel loop's chunk function (exported) with those it calls (internal copies). The
    entry's module declares the chunk functions it hands to the runtime."""
    named = {re.search(r"@(\w+)\(", f).group(1): f for f in functions}   # type: ignore
    nests = [n for n in named if n.startswith(_NEST)]
    if not nests:
        return ["\n\n".join(functions)]

    def closure(name: str) -> list[str]:
        found, todo = [], [name]
        while todo:
            n = todo.pop()
            if n not in found:
                found.append(n)
                todo += [m for m in re.findall(r"@(tj_fn\d+)\b", named[n]) if m in named]
        return found
    declare = [f"declare void @{n}(ptr, i64, i64, i64)" for n in nests]
    entry = [named[n] for n in closure(ENTRY_SYMBOL)]
    parts = ["\n".join(declare) + "\n\n" + "\n\n".join(entry)]
    for nest in nests:
        own = named[nest].replace(f"define internal void @{nest}(", f"define void @{nest}(", 1)
        parts.append("\n\n".join([own] + [named[n] for n in closure(nest)[1:]]))
    return parts


