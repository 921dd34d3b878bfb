"""What the CUDA code generators share: the program being generated (its size table, plan,
kernels and host driver), reading values inside a kernel, and small source helpers.
Part of codegen/cuda.py's backend (cuda_nest.py: loop nests; cuda_calls.py: barriers).
"""
from __future__ import annotations

from ..dims import Dims
from ..ir import Atom, Eqn, Lit, Tape, Var
from .cpu import fixed_symbols
from .plan import Plan, plan
from .scalar import cuda_scalar_expr as scalar_expr
from .schedule import steps
from .views import is_view, view_expr
from .writer import Sizes, Writer, dtype_code, literal, name_of, operand_parts, scalar

ENTRY = "run"
# numba keeps each kernel's compiled code beside the module, in <cache_root>/__pycache__
# (disk/store.py publishes a module's file once, so numba's stamp of it stays valid): a new process
# loads kernels it compiled before instead of compiling them again
KERNEL = "@cuda.jit(cache=True)"
_RESERVED = {"cuda", "tjm", "tjrt", "TPB", "TILE", ENTRY}


def var_name(var: Var) -> str:
    name = name_of(var)
    return f"{name}_" if name in _RESERVED else name


def device_plan(tape: Tape, program_steps: list) -> Plan:
    """The CPU plan with every value of a scalar domain in (device) memory as well."""
    p = plan(tape, program_steps)
    p.arrays |= p.scalar
    p.scalar = set()
    return p


class Generator:
    """State shared by the steps of one program; what an op's `cuda` code writes with
    (`cuda(g, number, eqn)`: the kernels it adds, the driver's lines, its reads)."""

    name = staticmethod(var_name)       # a value's name in generated code
    dtype = staticmethod(dtype_code)
    scalar = staticmethod(scalar)

    def __init__(self, tape: Tape, cublas: bool = False) -> None:
        self.cublas = cublas       # float matrix products call cuBLAS (cuda_support.gemm)
        dims = Dims(tape)
        self.sizes = Sizes(dims, fixed_symbols(tape, dims))   # as the CPU's: short rows known
        self.steps = steps(tape, self.sizes.names)
        self.plan = device_plan(tape, self.steps)
        self.kernels: list[str] = []
        self.driver = Writer()
        self.host: list[Eqn] = []

    def allocate(self, var: Var) -> None:
        self.driver.line(f"{var_name(var)} = tjrt.empty({self.sizes.shape(self.sizes.of(var))}, "
                         f"{dtype_code(var.aval.dtype)})")

    def add_kernel(self, name: str, params: list[str], body: list[str]) -> None:
        self.kernels += ["", "", KERNEL, f"def {name}({', '.join(params + ['S'])}):"]
        self.kernels += ["    " + line for line in body]

    def unravel(self, lines: list[str], flat: str, names: list[str],
                extents: list[str]) -> None:
        unravel(lines, flat, names, extents)

    def stored(self, atom: Atom) -> str | None:
        """The name of the device array holding `atom` as it is (None: a literal, or a value
        kernels recompute where they read it)."""
        if not isinstance(atom, Var):
            return None
        computed = self.plan.inline.get(atom.name) or self.plan.recomputed.get(atom.name)
        return var_name(atom) if computed is None or atom.name in self.plan.arrays else None

    def reads(self) -> "Reads":
        """Reads for a new kernel (its parameters are the arrays it reads)."""
        return Reads(self)

    def host_call(self, eqn: Eqn) -> None:
        """Run `eqn` on the host between kernels (cuda_support.host_call)."""
        args = [var_name(a) for a in eqn.ins if isinstance(a, Var)]
        names = "".join(var_name(o) + ", " for o in eqn.outs)
        self.driver.line(f"{names}= tjrt.host_call(t_E[{len(self.host)}], "
                         f"[{', '.join(args)}])")
        self.host.append(eqn)


def index(parts: list[str]) -> str:
    return ", ".join(parts) if parts else "0"     # a 0-d value is a 1-element array


def unravel(lines: list[str], flat: str, names: list[str], extents: list[str]) -> None:
    """Split the flat index `flat` into `names` over `extents` (C order)."""
    rest = flat
    for k in range(len(names) - 1, 0, -1):
        lines.append(f"{names[k]} = {rest} % {extents[k]}")
        lines.append(f"{flat}_{k} = {rest} // {extents[k]}")
        rest = f"{flat}_{k}"
    if names:
        lines.append(f"{names[0]} = {rest}")


class Reads:
    """Reading values inside a kernel: locals, literals, views and the plan's cheap values
    recomputed, arrays (which become the kernel's parameters)."""

    def __init__(self, g: Generator) -> None:
        self.g = g
        self.params: list[str] = []
        self.local: set[str] = set()

    def read(self, atom: Atom, parts: list[str]) -> str:
        if isinstance(atom, Lit):
            return literal(atom)
        if atom.name in self.local:
            return f"t_{var_name(atom)}"
        eqn = self.g.plan.inline.get(atom.name) or self.g.plan.recomputed.get(atom.name)
        if eqn is not None and atom.name not in self.g.plan.arrays:
            return self.recompute(eqn, parts)
        return self.array(atom, parts)

    def array(self, var: Var, parts: list[str]) -> str:
        name = var_name(var)
        if name not in self.params:
            self.params.append(name)
        return f"{name}[{index(parts)}]"

    def recompute(self, eqn: Eqn, here: list[str]) -> str:
        if is_view(eqn):
            return view_expr(eqn, lambda k, parts: self.read(eqn.ins[k], parts), self.g.sizes,
                             here)
        shape = eqn.outs[0].aval.shape
        return scalar_expr(eqn, [self.read(a, operand_parts(a.aval.shape, here, shape))
                                 for a in eqn.ins])


