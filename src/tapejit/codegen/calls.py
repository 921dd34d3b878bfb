"""CPU code for the eqns a loop nest does not absorb (fusion barriers: matrix products,
reshapes, gathers, scatters, cumulative ops, products, arg-reductions, control flow).

Each such op's record holds its code (`Op.cpu`, called as `cpu(kit, eqn, ins, out)`): `ins`
are the names of its input arrays, `out` the name its output gets (a list of names for an op
with multiple results), and `kit` the `Kit` below, the vocabulary the op writes with. The op
modules never import code generation; they use what the kit offers.

Generated code uses explicit loops over C-contiguous arrays plus `np.empty`, `np.zeros`,
`np.full`, `reshape` and the cached functions of blas.py, lapack.py and sorting.py: numba
compiles those quickly, while its generic `np.transpose(x, axes)` and slice assignment cost
seconds of compile time each (measured).
"""
from __future__ import annotations

from typing import Any, Callable

from ..config import config
from ..dims import Dim
from ..disk import store
from ..ir import Atom, Eqn, Tape, Var
from ..ops import OPS
from .writer import Sizes, Writer, dtype_code, scalar

# generated code's names for codegen/blas.py, lapack.py and sorting.py (imported when a
# program loads)
BLAS, LAPACK, SORTING = "tj_blas", "tj_lapack", "tj_sorting"
store.MODULES.update({BLAS: "tapejit.codegen.blas", LAPACK: "tapejit.codegen.lapack",
                      SORTING: "tapejit.codegen.sorting"})


class Kit:
    """What an op's `cpu` code writes with: source lines, the size table, and the idioms of
    generated code (loop nests, copies with permuted axes, BLAS products, LAPACK's
    decompositions, sub-tape calls)."""

    dtype = staticmethod(dtype_code)    # `np.float64` ... for a dtype
    scalar = staticmethod(scalar)       # a typed scalar literal

    def __init__(self, w: Writer, sizes: Sizes, allocate: Callable[[Var], None]) -> None:
        self.w, self.sizes, self._allocate = w, sizes, allocate
        self._stores = 0

    def line(self, text: str) -> None:
        self.w.line(text)

    def indent(self) -> None:
        self.w.indent()

    def dedent(self) -> None:
        self.w.dedent()

    def allocate(self, var: Var) -> None:
        """Give `var` its array: a dead one's buffer, the workspace's, or a new one."""
        self._allocate(var)

    def function(self, tape: Tape, stem: str = "body") -> str:
        """The name of the module's function computing `tape` (0-d values as scalars)."""
        return self.w.module.function(tape, stem)  # type: ignore[attr-defined]

    def helper(self, name: str, source: str) -> str:
        """A fixed function of the module (its source without the decorator), added once."""
        return self.w.module.helper(name, source)  # type: ignore[attr-defined]

    def loops(self, extents: list[str], prefix: str) -> int:
        """Open a loop nest `for <prefix>0 in range(e0): ...`; returns how many to close.
        Every step uses its own names: numba's SSA reconstruction is slow on reused
        variables."""
        for d, extent in enumerate(extents):
            self.line(f"for {prefix}{d} in range({extent}):")
            self.indent()
        return len(extents)

    def close(self, depth: int) -> None:
        for _ in range(depth):
            self.dedent()

    def index_check(self, eqn: Eqn, index: str, size: str, axis: int,
                    reported: str | None = None) -> None:
        """Inside a loop, before `index` (a local) is used to read or write along an axis of
        length `size`: if it is outside [0, size), record the failure in the status slots of
        `S` (the call's first one: the caller raises IndexOutOfBoundsError naming `eqn`'s op,
        its line, `axis` and `reported`, by default `index`) and skip to the next iteration,
        so the index never touches memory. Nothing with TAPEJIT_BOUNDSCHECK=0."""
        if not config().boundscheck:
            return
        module = self.w.module  # type: ignore[attr-defined]
        number, slot = module.check(eqn, axis), self.sizes.status()
        self.line(f"if {index} < 0 or {index} >= {size}:    # out of range: recorded, skipped")
        self.line(f"    if S[{slot}] == 0:")
        self.line(f"        S[{slot}], S[{slot + 1}], S[{slot + 2}] = "
                  f"{number}, {reported or index}, {size}")
        self.line("    continue")

    def index_failed(self) -> str | None:
        """An expression true once an index check of this call failed (None: the program has
        none so far): a while loop ends on it, since the values a skipped read left undefined
        may decide its condition."""
        slot = self.sizes.status_slot()
        return None if slot is None else f"S[{slot}] != 0"

    def store(self, dst: str, slot: str, src: str, shape: tuple[Dim | int, ...]) -> None:
        """`dst[slot] = src` for `src` of `shape` (a stack's entry), as a loop nest: numba's
        slice assignment costs about 2 s of compile time in each process (measured)."""
        if not shape:
            self.line(f"{dst}[{slot}] = {src}")
            return
        self._stores += 1
        j = f"{dst}_s{self._stores}_"
        depth = self.loops([self.sizes(n) for n in shape], j)
        at = ", ".join(f"{j}{d}" for d in range(len(shape)))
        self.line(f"{dst}[{slot}, {at}] = {src}[{at}]")
        self.close(depth)

    def extents(self, shape: tuple[Dim, ...], axis: int) -> list[str]:
        """The (before, axis, after) sizes of `shape` around `axis`, as expressions: ops that
        act along one axis view their operand as such an array."""
        sizes = self.sizes
        return [sizes.product(shape[:axis]), sizes(shape[axis]), sizes.product(shape[axis + 1:])]

    def three(self, shape: tuple[Dim, ...], axis: int) -> str:
        """`extents` as a shape tuple."""
        return f"({', '.join(self.extents(shape, axis))})"

    def permuted(self, src: str, atom: Var, perm: tuple[int, ...], dst: str) -> str:
        """A C-contiguous copy of `src` (the array of `atom`) with its axes in the order
        `perm` (or `src` itself)."""
        aval, dims = atom.aval, self.sizes.of(atom)
        if tuple(perm) == tuple(range(aval.ndim)):
            return src
        shape = tuple(dims[p] for p in perm)
        self.line(f"{dst} = np.empty({self.sizes.shape(shape)}, {dtype_code(aval.dtype)})")
        depth = self.loops([self.sizes(n) for n in shape], f"{dst}_j")
        read = ", ".join(f"{dst}_j{perm.index(k)}" for k in range(aval.ndim))
        write = ", ".join(f"{dst}_j{d}" for d in range(aval.ndim))
        self.line(f"{dst}[{write}] = {src}[{read}]")
        self.close(depth)
        return dst

    def matmul(self, a: tuple[str, bool], b: tuple[str, bool], out: str, macs: int) -> None:
        """Write the statement computing `out` from operands given as (expression,
        transposed): BLAS, on as many of the call's threads as the product has work for
        (blas.py `parts`). `macs`: its multiply-adds at the traced sizes (the program's
        largest decides whether its calls run in a thread window, threads.py)."""
        module = self.w.module  # type: ignore[attr-defined]
        module.largest_product = max(module.largest_product, macs)
        self.line(f"{BLAS}.matmul({a[0]}, {b[0]}, {out}, {a[1]}, {b[1]}, "
                  f"{self.sizes.threads()})")

    def lapack(self, function: str, args: list[str]) -> None:
        """Write a call of codegen/lapack.py's `function` (np.linalg on each matrix of a
        stack, into the output arrays given). The program gets status slots: tapejit's
        LLVM lowering records a failure there (codegen/llvm/library_calls.py)."""
        self.sizes.status()
        self.line(f"{LAPACK}.{function}({', '.join(args)})")

    def sorting(self, function: str, args: list[str]) -> None:
        """Write a call of codegen/sorting.py's `function` (a stable sort of each line, a
        binary search), writing into the output arrays given; status slots as `lapack`)."""
        self.sizes.status()
        self.line(f"{SORTING}.{function}({', '.join(args)})")


def emit(kit: Kit, eqn: Eqn, ins: list[str], out: Any) -> None:
    """Write the code of barrier `eqn` (its record's `cpu`)."""
    code = OPS[eqn.op].cpu
    if code is None:
        raise NotImplementedError(f"the numba backend has no code for op {eqn.op}")
    code(kit, eqn, ins, out)


def filled(w: Writer, name: str, atom: Atom, value: str, sizes: Sizes) -> None:
    """`name` = an array shaped as `atom` filled with `value` (np.zeros / np.full: a fill loop
    costs numba about 150 ms of compile time, these a few ms once their overload is
    compiled)."""
    aval = atom.aval
    shape, dtype = sizes.shape(sizes.of(atom)), dtype_code(aval.dtype)
    if not aval.shape:
        w.line(f"{name} = np.empty((), {dtype})")
        w.line(f"{name}[()] = {value}")
    elif value in ("0", "0.0", "False") or value.endswith(("(0)", "(0.0)")):
        w.line(f"{name} = np.zeros({shape}, {dtype})")
    else:
        w.line(f"{name} = np.full({shape}, {value}, {dtype})")
