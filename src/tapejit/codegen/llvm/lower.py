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
function of its own run in chunks on the runtime's thread pool (`tj_rt_parallel_for`,
runtime.py); the values its body reads travel in a context of 8-byte cells, and a local it
sums into (`acc = acc + x`, the only reduction the generator lets a parallel loop make into a
scalar) is summed per chunk and the partial sums added in chunk order afterwards.
"""
from __future__ import annotations

import ast
import functools
import os
import re
from typing import NamedTuple

import llvmlite.binding as llvm

from .body import Body, Shaped
from .emit import Array, Frame, Function, NotCovered
from . import jit
from .jit import NEST, PART
from ..writer import ENTRY

ENTRY_SYMBOL = "tj_entry"
_DECLARATIONS = ("declare noalias ptr @tj_rt_alloc(i64, ptr)", "declare void @tj_rt_free(ptr)",
                 "declare void @tj_rt_parallel_for(ptr, ptr, i64, i64)")


class Lowered(NamedTuple):
    ir: str
    inputs: int                      # args[0:inputs]: the entry's array parameters
    frames: tuple[Frame, ...]        # then the fresh frames, then the others
    workspace: int                   # then the workspace arrays
    outputs: tuple[tuple[str, int], ...]   # per output: ("input", k) or ("frame", k)
    parts: tuple[str, ...] = ()      # `ir` as modules to compile apart (on threads): the
                                     # entry's, then one per parallel loop's chunk function
    kernels: tuple[tuple, ...] = ()  # the kernels it uses: ("scalar", call, dtypes),
                                     # ("array", call, kinds) or ("matmul", dtype, ()); those
                                     # its code calls by address load before it, all before
                                     # its full tier compiles
    fails: bool = False              # whether its code may record a failure (failures.py)


class _Module:
    def __init__(self, status: int, threads: int | None) -> None:
        self.functions: list[str] = []
        self.declarations: set[str] = set(_DECLARATIONS)
        self.mutable = {status, status + 1, status + 2}
        self.fails = False          # whether its code may record a failure (failures.py)
        self.threads = threads
        self.frames: list[Frame] = []
        self.frame_roots: list[str] = []
        self.workspace: set[int] = set()
        self.nests = 0
        self.metadata = 0           # metadata numbers used so far (scopes.py)
        self.defs: dict[str, ast.FunctionDef] = {}   # the module's other functions
        self.may_fail: dict[str, bool] = {}   # function -> whether it may fail (failures.py)
        self.defined: dict = {}     # (name, argument kinds) -> (symbol, output layout)
        self.kernels: dict[str, tuple] = {}   # symbol -> the request that made it (`Lowered`)


def lower(source: str, inputs: Shaped, workspace: Shaped, status: int,
          threads: int | None) -> Lowered:
    """The module for `source` (codegen/cpu.py's, for a tape whose entry parameters, and the
    workspace arrays, have the shapes and dtypes given); `status`: the first of the three
    status slots of `S` (the index checks', or three after the generator's: compile.py);
    `threads`: the threads slot, where the program has one."""
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
    functions = module.functions
    features = strided_features()
    if features is not None and all(made[0] != "scalar" for made in module.kernels.values()):
        functions = [_with_features(f, features) for f in functions]
    text = numbered(head + "\n\n".join(functions))
    parts = tuple(numbered(head + part) for part in _parts(functions))
    frames = tuple(module.frames[k] for k in order)
    renumber = {k: n for n, k in enumerate(order)}
    outs = tuple((kind, renumber[k] if kind == "frame" else k) for kind, k in outputs)
    workspace = max(module.workspace) + 1 if module.workspace else 0
    kernels = tuple(made for _, made in sorted(module.kernels.items()))
    return Lowered(text + "\n", inputs, frames, workspace, outs, parts, kernels, module.fails)


@functools.cache
def strided_features() -> str | None:
    """The host's features for a program that calls no math kernel, where gathers and
    scatters are slower than the scalar or shuffled code LLVM would write instead (AMD's Zen
    cores: an all-pairs Lennard-Jones gradient took 7.0 ms with them, 4.9 ms without); None
    elsewhere. Every function of the program gets them or none does: LLVM inlines a function
    only into one with the same features."""
    name, features = jit.host()
    if not name.startswith("znver") or llvm.llvm_version_info < (17,) \
            or os.environ.get("NUMBA_CPU_FEATURES") is not None:
        return None
    return features + ",+prefer-no-gather,+prefer-no-scatter"


def _with_features(function: str, features: str) -> str:
    header, brace, rest = function.partition(" {\n")
    return f'{header} "target-features"="{features}"{brace}{rest}'


# the entry's module past this many lines of IR is cut into modules of about this size, which
# compile at once on threads (program.py): HIPS autograd's hmm_em gradient, 150,000 lines in
# 107 functions, took LLVM 20 s in one module on a 2-core machine
PART_LINES = 30_000
_CALL = re.compile(r"@(tj_fn\d+)\b")


def _parts(functions: list[str]) -> list[str]:
    """The functions as modules that compile apart: the entry with the functions it calls;
    each parallel loop's chunk function (exported) with those it calls (internal copies). The
    entry's module declares the chunk functions it hands to the runtime. Where the entry's
    module would pass PART_LINES, the functions the entry calls move to modules of about
    that size (`_groups`: exported as `tj_part_...`, with internal copies of those they call,
    declaring the chunk functions they hand to the runtime), which the entry's module
    declares."""
    named = {re.search(r"@(\w+)\(", f).group(1): f for f in functions}   # type: ignore

    def closure(name: str) -> list[str]:
        found, todo = [], [name]
        while todo:
            n = todo.pop()
            if n not in found:
                found.append(n)
                todo += [m for m in _CALL.findall(named[n]) if m in named]
        return found
    nests = [n for n in named if n.startswith(NEST)]
    lines = {n: f.count("\n") + 1 for n, f in named.items()}
    entry = closure(ENTRY_SYMBOL)
    moved = sorted(set(_CALL.findall(named[ENTRY_SYMBOL])) & set(named)) \
        if sum(lines[n] for n in entry) > PART_LINES else []
    if not nests and not moved:
        return ["\n\n".join(functions)]
    chunks = "\n".join(f"declare void @{n}(ptr, i64, i64, i64)" for n in nests)
    declare = "\n".join([chunks] + [_declaration(named[n], _part(n)) for n in moved])
    kept = [ENTRY_SYMBOL] if moved else entry          # (the entry calls only those moved)
    parts = [declare + "\n\n" + "\n\n".join(_calling_parts(named[n], moved) for n in kept)]
    for group in _groups(moved, {n: closure(n) for n in moved}, lines):
        parts.append("\n\n".join([chunks] + [_exported(named[n], n, _part(n)) for n in group[0]]
                                   + [named[n] for n in group[1]]))
    for nest in nests:
        parts.append("\n\n".join([_exported(named[nest], nest, nest)]
                                   + [named[n] for n in closure(nest)[1:]]))
    return parts


def _groups(moved: list[str], closures: dict[str, list[str]], lines: dict[str, int],
            ) -> list[tuple[list[str], list[str]]]:
    """The moved functions in modules of about PART_LINES lines, each (largest first) to the
    module of fewest: per module, (the functions exported, the internal copies of those they
    call)."""
    size = {n: sum(lines[m] for m in closures[n]) for n in moved}
    modules: list[tuple[list[str], set[str], list[int]]] = [
        ([], set(), [0]) for _ in range(max(1, -(-sum(size.values()) // PART_LINES)))]
    for n in sorted(moved, key=lambda n: -size[n]):
        exported, copies, total = min(modules, key=lambda m: m[2][0])
        exported.append(n)
        copies.update(closures[n][1:])
        total[0] += size[n]
    return [(exported, sorted(copies)) for exported, copies, _ in modules if exported]


def _part(name: str) -> str:
    return PART + name.removeprefix("tj_")


def _declaration(function: str, name: str) -> str:
    """The declaration of `function`'s definition (IR text) under `name`."""
    result, params = re.match(r"define internal (\S+) @\w+\(([^)]*)\)", function).groups()
    types = re.sub(r" %[\w.]+", "", params)
    return f"declare {result} @{name}({types})"


def _exported(function: str, name: str, new: str) -> str:
    """`function` (IR text) defined as `new`, visible to the program's other modules."""
    return re.sub(rf"^define internal (\S+) @{name}\(", rf"define \1 @{new}(", function,
                  count=1, flags=re.M)


def _calling_parts(function: str, moved: list[str]) -> str:
    """`function` (IR text) calling the moved functions by their exported names."""
    if not moved:
        return function
    names = set(moved)
    return _CALL.sub(lambda m: "@" + (_part(m.group(1)) if m.group(1) in names
                                      else m.group(1)), function)
