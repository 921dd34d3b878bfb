"""Code for the eqns a loop nest does not absorb (fusion barriers): matrix products (BLAS),
reshapes, gathers, scatters, cumulative ops, products and arg-reductions.

Everything is written as explicit loops over C-contiguous arrays plus `np.empty`, `np.zeros`,
`np.full`, `reshape` and `np.dot`: numba compiles those quickly, while its generic
`np.transpose(x, axes)` and slice assignment cost seconds of compile time each (measured). Ops that act along one
axis view their operand as a (before, axis, after) array.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..dims import Dim
from ..ir import Atom, Eqn, Var
from ..ops.linalg import free_axes
from .. import cache
from .writer import Sizes, Writer, dtype_code, scalar

# generated code's name for codegen/blas.py (imported when a program loads)
BLAS = "tj_blas"
cache.MODULES.update({BLAS: "tapejit.codegen.blas"})


def matmul_call(w: Writer, a: tuple[str, bool], b: tuple[str, bool], out: str,
                sizes: Sizes, macs: int) -> None:
    """Write the statement computing `out` from operands given as (expression, transposed):
    BLAS, on as many of the call's threads as the product has work for (blas.py `parts`).
    `macs`: its multiply-adds at the traced sizes (the program's largest decides whether its
    calls run in a thread window, threads.py)."""
    w.module.largest_product = max(w.module.largest_product, macs)  # type: ignore[attr-defined]
    w.line(f"{BLAS}.matmul({a[0]}, {b[0]}, {out}, {a[1]}, {b[1]}, {sizes.threads()})")


# (writer, eqn, input names, output name (a list of names for an op with multiple results), sizes)
Emitter = Callable[[Writer, Eqn, list[str], Any, Sizes], None]
EMITTERS: dict[str, Emitter] = {}
FRESH: set[str] = set()    # ops whose code returns new arrays, never views of its inputs


def emitter(name: str, fresh: bool = False) -> Callable[[Emitter], Emitter]:
    def register(fn: Emitter) -> Emitter:
        EMITTERS[name] = fn
        if fresh:
            FRESH.add(name)
        return fn
    return register


def emit(w: Writer, eqn: Eqn, ins: list[str], out: Any, sizes: Sizes) -> None:
    if eqn.op not in EMITTERS:
        raise NotImplementedError(f"the numba backend has no code for op {eqn.op}")
    EMITTERS[eqn.op](w, eqn, ins, out, sizes)


def loops(w: Writer, extents: list[str], prefix: str) -> int:
    """Open a loop nest `for <prefix>0 in range(e0): ...`; returns how many to close. Every
    step uses its own names: numba's SSA reconstruction is slow on reused variables."""
    for d, extent in enumerate(extents):
        w.line(f"for {prefix}{d} in range({extent}):")
        w.indent()
    return len(extents)


def close(w: Writer, depth: int) -> None:
    for _ in range(depth):
        w.dedent()


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


def _three(shape: tuple[Dim, ...], axis: int, sizes: Sizes) -> str:
    """(before, axis, after) sizes of `shape` around `axis`."""
    return (f"({sizes.product(shape[:axis])}, {sizes(shape[axis])}, "
            f"{sizes.product(shape[axis + 1:])})")


def permuted(w: Writer, src: str, atom: Var, perm: tuple[int, ...], dst: str,
             sizes: Sizes) -> str:
    """A C-contiguous copy of `src` (the array of `atom`) with its axes in the order `perm`
    (or `src` itself)."""
    aval, dims = atom.aval, sizes.of(atom)
    if tuple(perm) == tuple(range(aval.ndim)):
        return src
    shape = tuple(dims[p] for p in perm)
    w.line(f"{dst} = np.empty({sizes.shape(shape)}, {dtype_code(aval.dtype)})")
    depth = loops(w, [sizes(n) for n in shape], f"{dst}_j")
    read = ", ".join(f"{dst}_j{perm.index(k)}" for k in range(aval.ndim))
    write = ", ".join(f"{dst}_j{d}" for d in range(aval.ndim))
    w.line(f"{dst}[{write}] = {src}[{read}]")
    close(w, depth)
    return dst


@emitter("dim_size", fresh=True)
def _dim_size(w, eqn, ins, out, sizes):
    dtype = eqn.outs[0].aval.dtype
    count = sizes(math.prod(eqn.kw["sizes"]))
    w.line(f"{out} = np.empty((), {dtype_code(dtype)})")
    w.line(f"{out}[()] = {count}")


@emitter("reshape")
def _reshape(w, eqn, ins, out, sizes):
    w.line(f"{out} = {ins[0]}.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")


def eqn_macs(eqn: Eqn) -> int:
    """The multiply-adds of a dot_general at its traced sizes."""
    lhs, (lc, _) = eqn.ins[0].aval, eqn.kw["contract"]
    return math.prod(eqn.outs[0].aval.shape) * math.prod(lhs.shape[a] for a in lc)


def blas_operands(eqn: Eqn, ins: list[str]) -> tuple[tuple[str, bool], ...] | None:
    """The operands `(matrix, transposed)` when `eqn` is one BLAS product of two float
    matrices (a transposed operand is read in place, where a copy loop measured 3.5 ms of an
    MLP's 1797x256 gradient product, against 4 ms for the product itself)."""
    (lc, rc), (lb, _) = eqn.kw["contract"], eqn.kw["batch"]
    lhs, rhs = eqn.ins[0].aval, eqn.ins[1].aval
    if lb or eqn.outs[0].aval.dtype.kind != "f" or \
            (lhs.ndim, rhs.ndim, len(lc), len(rc)) != (2, 2, 1, 1):
        return None
    return (ins[0], lc != (1,)), (ins[1], rc != (0,))


def _matrix(w: Writer, src: str, atom: Var, rows: tuple[int, ...], cols: tuple[int, ...],
            dst: str, extents: tuple[str, str], sizes: Sizes) -> tuple[str, bool]:
    """`src` as the matrix of its axes `rows` by its axes `cols`, as (matrix, transposed): a
    reshape when its memory holds them in that order, the transpose of one when in the other
    (BLAS reads it in place: a (10000, 25, 10) GMM cotangent contracted over its first axis
    is not copied), else a copy (each reshape call site costs numba ~50 ms of compile time:
    only where needed)."""
    order, ndim = rows + cols, atom.aval.ndim
    if order != tuple(range(ndim)) and cols + rows == tuple(range(ndim)):
        if (len(rows), len(cols)) == (1, 1):
            return src, True
        return f"{src}.reshape(({extents[1]}, {extents[0]}))", True
    src = permuted(w, src, atom, order, dst, sizes)
    if (len(rows), len(cols)) == (1, 1):
        return src, False
    return f"{src}.reshape(({extents[0]}, {extents[1]}))", False


@emitter("dot_general", fresh=True)
def _dot_general(w, eqn, ins, out, sizes):
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    lhs, rhs, dtype = eqn.ins[0].aval, eqn.ins[1].aval, eqn.outs[0].aval.dtype
    ld, rd = sizes.of(eqn.ins[0]), sizes.of(eqn.ins[1])
    lf, rf = free_axes(lhs.ndim, lc, lb), free_axes(rhs.ndim, rc, rb)
    b, m = sizes.product(ld[a] for a in lb), sizes.product(ld[a] for a in lf)
    k, n = sizes.product(ld[a] for a in lc), sizes.product(rd[a] for a in rf)
    shape = sizes.shape(sizes.of(eqn.outs[0]))
    if not lb and dtype.kind == "f":   # one BLAS call
        lhs2 = _matrix(w, ins[0], eqn.ins[0], lf, tuple(lc), f"{out}_lhs", (m, k), sizes)
        rhs2 = _matrix(w, ins[1], eqn.ins[1], tuple(rc), rf, f"{out}_rhs", (k, n), sizes)
        flat = len(lf) == len(rf) == 1
        result = out if flat else f"{out}_m"
        w.line(f"{result} = np.empty(({m}, {n}), {dtype_code(dtype)})")
        matmul_call(w, lhs2, rhs2, result, sizes, eqn_macs(eqn))
        if not flat:
            w.line(f"{out} = {result}.reshape({shape})")
        return
    a = permuted(w, ins[0], eqn.ins[0], tuple(lb) + lf + tuple(lc), f"{out}_lhs", sizes)
    c = permuted(w, ins[1], eqn.ins[1], tuple(rb) + tuple(rc) + rf, f"{out}_rhs", sizes)
    w.line(f"{out}_a = {a}.reshape(({b}, {m}, {k}))")
    w.line(f"{out}_b = {c}.reshape(({b}, {k}, {n}))")
    w.line(f"{out}_c = np.empty(({b}, {m}, {n}), {dtype_code(dtype)})")
    jb, jm, jn, jk, acc = (f"{out}_{t}" for t in ("jb", "jm", "jn", "jk", "acc"))
    w.line(f"for {jb} in range({b}):")
    if dtype.kind == "f":
        w.indent()
        matmul_call(w, (f"{out}_a[{jb}]", False), (f"{out}_b[{jb}]", False), f"{out}_c[{jb}]",
                    sizes, eqn_macs(eqn) // max(1, math.prod(lhs.shape[a] for a in lb)))
        w.dedent()
    else:  # BLAS has no integer product
        w.line(f"    for {jm} in range({m}):")
        w.line(f"        for {jn} in range({n}):")
        w.line(f"            {acc} = {scalar(0, dtype)}")
        w.line(f"            for {jk} in range({k}):")
        w.line(f"                {acc} += {out}_a[{jb}, {jm}, {jk}] * {out}_b[{jb}, {jk}, {jn}]")
        w.line(f"            {out}_c[{jb}, {jm}, {jn}] = {acc}")
    w.line(f"{out} = {out}_c.reshape({shape})")


@emitter("take", fresh=True)
def _take(w, eqn, ins, out, sizes):
    x = eqn.ins[0].aval
    axis = eqn.kw["axis"]
    w.line(f"{out}_x = {ins[0]}.reshape({_three(sizes.of(eqn.ins[0]), axis, sizes)})")
    w.line(f"{out}_i = {ins[1]}.reshape(({sizes.product(sizes.of(eqn.ins[1]))},))")
    w.line(f"{out}_o = np.empty(({out}_x.shape[0], {out}_i.shape[0], {out}_x.shape[2]), "
           f"{dtype_code(x.dtype)})")
    depth = loops(w, [f"{out}_x.shape[0]", f"{out}_i.shape[0]", f"{out}_x.shape[2]"], f"{out}_j")
    j0, j1, j2 = (f"{out}_j{d}" for d in range(3))
    w.line(f"{out}_o[{j0}, {j1}, {j2}] = {out}_x[{j0}, {out}_i[{j1}], {j2}]")
    close(w, depth)
    w.line(f"{out} = {out}_o.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")


@emitter("scatter_add", fresh=True)
def _scatter_add(w, eqn, ins, out, sizes):
    x = sizes.of(eqn.ins[0])
    m = sizes.product(sizes.of(eqn.ins[1]))
    w.line(f"{out}_o = {ins[0]}.reshape({_three(x, eqn.kw['axis'], sizes)}).copy()")
    w.line(f"{out}_i = {ins[1]}.reshape(({m},))")
    w.line(f"{out}_u = {ins[2]}.reshape(({out}_o.shape[0], {m}, {out}_o.shape[2]))")
    depth = loops(w, [f"{out}_o.shape[0]", m, f"{out}_o.shape[2]"], f"{out}_j")
    j0, j1, j2 = (f"{out}_j{d}" for d in range(3))
    w.line(f"{out}_o[{j0}, {out}_i[{j1}], {j2}] += {out}_u[{j0}, {j1}, {j2}]")
    close(w, depth)
    w.line(f"{out} = {out}_o.reshape({sizes.shape(x)})")


def _along_axis(w: Writer, eqn: Eqn, ins: list[str], out: str, sizes: Sizes, init: str,
                step: list[str], reverse: bool, running: bool) -> None:
    """A scan (`running`) or a reduction along one axis of the (before, axis, after) view.
    `step` is a template updating `{acc}` from `{v}`, the element at position `{k}`."""
    j0, j1, k, acc, v = (f"{out}_{t}" for t in ("j0", "j1", "k", "acc", "v"))
    w.line(f"{out}_x = {ins[0]}.reshape({_three(sizes.of(eqn.ins[0]), eqn.kw['axis'], sizes)})")
    kept = f"{out}_x.shape[0], {out}_x.shape[1], {out}_x.shape[2]" if running else \
        f"{out}_x.shape[0], {out}_x.shape[2]"
    w.line(f"{out}_o = np.empty(({kept}), {dtype_code(eqn.outs[0].aval.dtype)})")
    depth = loops(w, [f"{out}_x.shape[0]", f"{out}_x.shape[2]"], f"{out}_j")
    w.line(f"{acc} = {init}")
    order = f"range({out}_x.shape[1] - 1, -1, -1)" if reverse else f"range({out}_x.shape[1])"
    w.line(f"for {k} in {order}:")
    w.indent()
    w.line(f"{v} = {out}_x[{j0}, {k}, {j1}]")
    for line in step:
        w.line(line.format(acc=acc, v=v, k=k, best=f"{out}_best"))
    if running:
        w.line(f"{out}_o[{j0}, {k}, {j1}] = {acc}")
    w.dedent()
    if not running:
        w.line(f"{out}_o[{j0}, {j1}] = {acc}")
    close(w, depth)
    w.line(f"{out} = {out}_o.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")


@emitter("cumsum", fresh=True)
def _cumsum(w, eqn, ins, out, sizes):
    _along_axis(w, eqn, ins, out, sizes, scalar(0, eqn.outs[0].aval.dtype),
                ["{acc} = {acc} + {v}"], eqn.kw["reverse"], True)


@emitter("cumprod", fresh=True)
def _cumprod(w, eqn, ins, out, sizes):
    _along_axis(w, eqn, ins, out, sizes, scalar(1, eqn.outs[0].aval.dtype),
                ["{acc} = {acc} * {v}"], eqn.kw["reverse"], True)


def _arg(w: Writer, eqn: Eqn, ins: list[str], out: str, sizes: Sizes, better: str) -> None:
    # the first extremal index; the first NaN wins, as in numpy
    w.line(f"{out}_best = {scalar(0, eqn.ins[0].aval.dtype)}")
    _along_axis(w, eqn, ins, out, sizes, "-1", [
        "if {acc} < 0 or ({best} == {best} and ({v} != {v} or {v} %s {best})):" % better,
        "    {acc} = {k}",
        "    {best} = {v}"], False, False)


@emitter("argmax", fresh=True)
def _argmax(w, eqn, ins, out, sizes):
    _arg(w, eqn, ins, out, sizes, ">")


@emitter("argmin", fresh=True)
def _argmin(w, eqn, ins, out, sizes):
    _arg(w, eqn, ins, out, sizes, "<")


@emitter("reduce_prod", fresh=True)
def _reduce_prod(w, eqn, ins, out, sizes):
    x, dtype = eqn.ins[0].aval, eqn.outs[0].aval.dtype
    axes = eqn.kw["axes"]
    kept = tuple(d for d in range(x.ndim) if d not in axes)
    xd = sizes.of(eqn.ins[0])
    k, r = sizes.product(xd[d] for d in kept), sizes.product(xd[d] for d in axes)
    src = permuted(w, ins[0], eqn.ins[0], kept + tuple(axes), f"{out}_t", sizes)
    w.line(f"{out}_x = {src}.reshape(({k}, {r}))")
    w.line(f"{out}_o = np.empty(({k},), {dtype_code(dtype)})")
    j0, j1, acc = f"{out}_j0", f"{out}_j1", f"{out}_acc"
    w.line(f"for {j0} in range({k}):")
    w.line(f"    {acc} = {scalar(1, dtype)}")
    w.line(f"    for {j1} in range({r}):")
    w.line(f"        {acc} = {acc} * {out}_x[{j0}, {j1}]")
    w.line(f"    {out}_o[{j0}] = {acc}")
    w.line(f"{out} = {out}_o.reshape({sizes.shape(sizes.of(eqn.outs[0]))})")
