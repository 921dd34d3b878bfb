"""The architecture's rules, checked: every op's record is complete, nothing outside ops/
switches on op names, and the modules import in one direction without cycles.

- Registry: every op runs on the CPU (an elementwise template, a loop-nest view or reduction,
  a fused group, or a barrier's `cpu` emitter) and on CUDA (the same nest forms, a `cuda`
  emitter, or `HOST`: run on the host between kernels), and every op batches: by its kind or
  a `batch` rule; only user code (custom_vjp functions, njit kernels) and control flow are
  `MAPPED` (run in a compiled loop over the batch axis).
- Op names: outside `ops/`, no op-name string literal decides anything: not in a comparison
  with an eqn's `.op`, an `Eqn(...)`, an `OPS[...]` lookup, a registering decorator, or a table
  (a set, tuple, list or dict display) of op names. Code names an op through its object
  (`L.transpose.name`).
- Layers: the import graph of `tapejit` (function-level imports included; those under
  `if TYPE_CHECKING:` excluded) has no cycle, and no module imports a module of a higher layer
  (`LAYERS`, bottom first); docs/how-it-works.md lists the same layers, and the library never
  imports the tools wing (`tapejit.tools`), not even at run time.
- Size: no module over `MODULE_LINES` lines but the named exceptions, held to their size.
"""
from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

import tapejit  # noqa: F401  (registers every op)
from tapejit.ops import HOST, MAPPED, OPS, Kind

SRC = pathlib.Path(tapejit.__file__).parent
LAYER_DOC = pathlib.Path(__file__).parents[1] / "docs" / "how-it-works.md"

# bottom first; a module imports only modules of its own layer or below
LAYERS = [
    ("base", ["errors", "avals", "config", "pytree", "pages", "extensions", "threads", "ir",
              "disk", "parse", "garbage"]),
    ("ops", ["ops"]),
    ("tracing", ["trace", "recording", "typecheck", "interpret", "dims", "numpy_api", "guards",
                 "random"]),
    ("autodiff", ["autodiff", "batching", "derived_tapes"]),
    ("passes", ["passes"]),
    ("codegen", ["codegen"]),
    ("control flow", ["control", "custom", "integrate"]),
    ("compile", ["program_text", "backends", "compile", "cuda_support"]),
    ("draws", ["draws", "draw_methods"]),
    ("transforms", ["transforms"]),
    ("public", ["api", "jacobians", "split", "vmap", "tape_sweeps", "checkify", "explain",
                "variables", "eager", "optimizers", "gradient_tape", "dask", "__init__"]),
    ("tools", ["tools", "__main__"]),
]
TOOLS = len(LAYERS) - 1

# string displays that coincide with op names but are not about ops: (module, first element)
NOT_OP_TABLES = {
    ("variables", "lt"): "Python's comparison operators, for Variable's dunder methods",
    ("operators", "lt"): "Python's comparison operators, for Tracer's dunder methods",
    ("expr", "eq"): "Python's comparison operators, as LLVM's icmp conditions",
}


# ---- registry ---------------------------------------------------------------------------------
def _runs_in_nests(op) -> bool:
    """Elementwise, always a view, a fusible reduction, or a fused group."""
    return (op.kind in (Kind.ELEMENTWISE, Kind.FUSED) or op.reduction is not None
            or (op.view is not None and op.view.applies is None))


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_cpu_code(name):
    op = OPS[name]
    if op.kind is Kind.ELEMENTWISE:
        assert op.scalar is not None, f"elementwise op {name} has no `scalar` template"
    else:
        assert _runs_in_nests(op) or callable(op.cpu), (
            f"op {name} neither runs in loop nests nor has a `cpu` emitter")


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_cuda_code_or_runs_on_the_host(name):
    op = OPS[name]
    assert _runs_in_nests(op) or callable(op.cuda) or op.cuda == HOST, (
        f"op {name} has no `cuda` emitter and is not declared cuda=HOST")


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_batches(name):
    op = OPS[name]
    if op.kind in (Kind.CALL, Kind.CONTROL):
        assert callable(op.batch) or op.batch == MAPPED, (
            f"op {name} has no batching rule and is not declared batch=MAPPED")
    else:
        assert op.kind is Kind.ELEMENTWISE or callable(op.batch), (
            f"op {name} has no batching rule (only user code and control flow run in a "
            f"compiled loop over the batch axis, batch=MAPPED)")


# ---- op names ---------------------------------------------------------------------------------
def _module_files():
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(parts), path


def _op_names(node: ast.AST) -> list[str]:
    """The op-name string constants of `node` itself or of its elements (a display)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in OPS]


def _decisions(module: str, tree: ast.AST):
    """(line, op name) of each op-name literal that decides something (module docstring)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "op" for s in sides):
                for side in sides:
                    yield from ((node.lineno, n) for n in _op_names(side))
        elif isinstance(node, ast.Call):
            # an eqn built by name, or a registration by name (`@emitter("scan")`)
            called = getattr(node.func, "id", getattr(node.func, "attr", ""))
            registering = node.args and all(isinstance(a, ast.Constant) for a in node.args)
            for arg in node.args[:1] if called == "Eqn" else node.args if registering else ():
                yield from ((node.lineno, n) for n in _op_names(arg))
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "OPS":
            yield from ((node.lineno, n) for n in _op_names(node.slice))
        elif isinstance(node, (ast.Set, ast.Tuple, ast.List, ast.Dict)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            names = [i.value for i in items if isinstance(i, ast.Constant)]
            if len(names) >= 2 and len(names) == len(items) and all(n in OPS for n in names) \
                    and (module, names[0]) not in NOT_OP_TABLES:
                yield node.lineno, names[0]


def test_no_op_name_decides_anything_outside_ops():
    found = []
    for module, path in _module_files():
        if module.startswith("ops."):
            continue
        for line, name in _decisions(module.split(".")[-1], ast.parse(path.read_text())):
            found.append(f"{path.relative_to(SRC.parent)}:{line}: {name!r}")
    assert not found, ("op names decide things outside ops/ (read the op's record, or name "
                       "the op through its object):\n" + "\n".join(sorted(set(found))))



# ---- the tracer's interface -----------------------------------------------------------------
def _private_tracer_reads(tree: ast.AST):
    """Lines reading a `_var` or `_trace` field of anything but `self`, or importing the
    trace stack (`_stack`: the open traces are `trace.open_traces`)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ("_var", "_trace")
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
            yield node.lineno
        if isinstance(node, ast.ImportFrom) and any(a.name == "_stack" for a in node.names):
            yield node.lineno


def test_only_trace_reads_a_tracers_fields():
    found = [f"{path.relative_to(SRC.parent)}:{line}" for module, path in _module_files()
             if module != "trace" for line in _private_tracer_reads(ast.parse(path.read_text()))]
    assert not found, ("a tracer's fields read outside trace.py (use trace.var_of / "
                       "trace.trace_of):\n" + "\n".join(found))

# ---- module size ------------------------------------------------------------------------------
MODULE_LINES = 400            # a module with one job reads in one sitting
OVERSIZED = {                 # modules over it, each held to its size until split: why it is
    "codegen.vmath": (709, "every branch-free math kernel (exp, log, sin, tanh, pow; f64, f32) "
                           "in one table the generator links: split by function family"),
    "trace": (509, "Tracer and Trace, one object model: numpy's protocols, values read under "
                   "guards, views written back (recording and operators are split out)"),
    "codegen.cpu": (660, "the numba CPU generator: loop nests, reductions and views emitted by "
                         "one walker: split the emitters from the walk"),
    "tools.statement_templates": (540, "the fuzzer's statement templates, one method each: a "
                                       "table, read one template at a time"),
    "codegen.llvm.jit": (460, "IR to object code to machine code, and the object code's disk "
                              "cache: split the cache out"),
    "disk.store": (423, "the disk cache of generated modules (layout, publish, load, list, "
                        "clear): split listing and clearing out"),
    "control.primitives": (420, "the five control-flow primitives' records (scan, while, cond, "
                                "checkpoint, loop_grad): one module per primitive"),
    "optimizers.gradient_transforms": (413, "optax's protocol, chain and every rule, one small "
                                            "class each: split the rules from the protocol"),
    "dask": (409, "data-parallel steps, ensembles and worker setup on Dask: split the two "
                  "entry points"),
}


def test_no_module_grows_past_its_budget():
    sizes = {module.removesuffix(".__init__"): len(path.read_text().splitlines())
             for module, path in _module_files()}
    over = {m: n for m, n in sizes.items() if n > OVERSIZED.get(m, (MODULE_LINES,))[0]}
    assert not over, (f"modules past their budget (lines; {MODULE_LINES}, or the size an "
                      f"oversized one had): {over}: split one job out rather than grow it")
    shrunk = {m: sizes.get(m) for m, (n, _) in OVERSIZED.items() if sizes.get(m, 0) < n}
    assert not shrunk, f"lower OVERSIZED to the new sizes (or drop those under budget): {shrunk}"


# ---- layers -----------------------------------------------------------------------------------
def _imports(module: str, path: pathlib.Path) -> set[str]:
    """The tapejit modules `module` imports, at any level, outside `if TYPE_CHECKING:`."""
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    package = [p for p in package if p != "__init__"]
    known = {m for m, _ in _module_files()}
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{prefix}.{alias.name}".lstrip(".")
                found.add(target if target in known or f"{target}.__init__" in known
                          else prefix)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tapejit"):
            prefix = node.module[len("tapejit."):] if node.module != "tapejit" else ""
            for alias in node.names:
                target = f"{prefix}.{alias.name}".lstrip(".")
                found.add(target if target in known or f"{target}.__init__" in known
                          else prefix)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    own = module[:-len(".__init__")] if module.endswith(".__init__") else module
    return {t for t in found if t and t != own and not own.startswith(t + ".")}


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in _module_files():
        name = module[:-len(".__init__")] if module.endswith(".__init__") else module
        graph[name] = _imports(module, path)
    return graph


def _layer(module: str) -> int:
    """The layer of `module`: the one naming it, else the one naming its package."""
    for name in (module, module.split(".")[0]):
        for k, (_, members) in enumerate(LAYERS):
            if name in members:
                return k
    raise AssertionError(f"module {module} is in no layer of LAYERS: add it")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_catch_what_they_look_for():
    source = ('if eqn.op == "scan":\n    pass\n'
              'e = Eqn("add", (), (), ())\n'
              'rule = OPS["mul"]\n'
              'table = {"exp", "log"}\n'
              'ok = eqn.op == L.transpose.name\n')
    assert [name for _, name in _decisions("m", ast.parse(source))] == \
        ["scan", "add", "mul", "exp"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    reads = "t = x._var\nu = self._trace\nv = f(y)._trace\n"
    assert list(_private_tracer_reads(ast.parse(reads))) == [1, 3]


def test_imports_go_down_the_layers():
    upward = [f"{m} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})"
              for m, targets in sorted(_graph().items()) if m != "__init__"
              for t in sorted(targets) if _layer(t) > _layer(m)]
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def _written_layers() -> list[tuple[str, list[str]]]:
    """The layers of how-it-works.md's "The layers" list: (name, its modules), bottom first."""
    section = LAYER_DOC.read_text().split("\n## The layers\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. \*\*(.+?)\*\* \(([^)]*)\)", section, re.M)
    return [(name, re.findall(r"`([^`]+)`", members)) for name, members in items]


def test_the_layers_are_written_where_a_reader_finds_them():
    written, checked = _written_layers(), [(name, members) for name, members in LAYERS]
    assert written == checked, (f"docs/how-it-works.md's \"The layers\" list differs from "
                                f"LAYERS: write\n{checked}\nthere (it has\n{written})")


def test_the_library_never_imports_the_tools_wing():
    static = [f"{m} imports {t}" for m, targets in sorted(_graph().items())
              if _layer(m) != TOOLS for t in sorted(targets) if _layer(t) == TOOLS]
    assert not static, "the library imports the tools wing:\n" + "\n".join(static)
    code = ("import sys, tapejit; "
            "print(sorted(m for m in sys.modules if m.startswith('tapejit.tools')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]", f"import tapejit loads the tools wing: {loaded}"
