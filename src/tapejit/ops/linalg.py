"""dot_general: the one contraction primitive (matmul, dot, tensordot, einsum lower to it).

`contract=((lhs axes), (rhs axes))` are summed over pairwise; `batch=((lhs axes), (rhs axes))`
are shared. The output axes are: batch axes, then lhs free axes, then rhs free axes (each in
increasing order). The VJP of each side is another dot_general followed by a transpose.
"""
from __future__ import annotations

import math

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError
from . import Kind, defop
from . import axes as _axes
from .layout import shifted, transpose


def free_axes(ndim: int, contract: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in range(ndim) if d not in contract and d not in batch)


def _dot_shape(lhs: Aval, rhs: Aval, *, contract, batch) -> Aval:
    (lc, rc), (lb, rb) = contract, batch
    ok = (len(lc) == len(rc) and len(lb) == len(rb)
          and all(0 <= a < lhs.ndim for a in lc + lb) and all(0 <= a < rhs.ndim for a in rc + rb)
          and len(set(lc + lb)) == len(lc + lb) and len(set(rc + rb)) == len(rc + rb)
          and all(lhs.shape[a] == rhs.shape[b] for a, b in zip(lc + lb, rc + rb)))
    if not ok:
        raise ShapeError(f"dot_general: shapes {lhs} and {rhs} do not fit "
                         f"contract={contract} batch={batch}")
    if lhs.dtype != rhs.dtype:
        raise DtypeError(f"dot_general: operands have different dtypes {lhs} and {rhs}")
    shape = (tuple(lhs.shape[a] for a in lb)
             + tuple(lhs.shape[a] for a in free_axes(lhs.ndim, lc, lb))
             + tuple(rhs.shape[a] for a in free_axes(rhs.ndim, rc, rb)))
    return Aval(shape, lhs.dtype)


def _dot_impl(lhs, rhs, *, contract, batch):
    (lc, rc), (lb, rb) = contract, batch
    if not lb and lc == (lhs.ndim - 1,) and rc == (0,) and rhs.ndim <= 2:
        return np.dot(lhs, rhs)                            # plain matrix product: BLAS
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lsub = [next(letters) for _ in range(lhs.ndim)]
    rsub = [next(letters) for _ in range(rhs.ndim)]
    for a, b in zip(lc + lb, rc + rb):
        rsub[b] = lsub[a]
    out = ([lsub[a] for a in lb] + [lsub[a] for a in free_axes(lhs.ndim, lc, lb)]
           + [rsub[a] for a in free_axes(rhs.ndim, rc, rb)])
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}"
    return np.einsum(spec, lhs, rhs, optimize=True).astype(lhs.dtype, copy=False)


def _side_vjp(ct, other, own_ndim, own_c, own_b, other_c, other_b, other_first):
    """Cotangent of one operand: contract ct with the other operand over the other's free
    axes, then transpose the result into this operand's axis order. Of the two operand
    orders, the one needing no transpose is used when there is one (x.T @ ct, not
    (ct.T @ x).T)."""
    nb = len(own_b)
    own_free = free_axes(own_ndim, own_c, own_b)
    other_free = free_axes(other.ndim, other_c, other_b)
    # ct axes: batch, lhs free, rhs free; the other operand's free axes sit in one of the groups
    n_lhs_free = len(own_free) if not other_first else len(other_free)
    other_group = (tuple(range(nb + n_lhs_free, ct.ndim)) if not other_first
                   else tuple(range(nb, nb + n_lhs_free)))
    contracted = [own_c[other_c.index(r)] for r in sorted(other_c)]
    # ct first: batch, this operand's free axes, then the other's contracted axes
    ct_first = list(own_b) + list(own_free) + contracted
    # other first: batch, the other's contracted axes, then this operand's free axes
    other_first_order = list(own_b) + contracted + list(own_free)
    if other_first_order == list(range(own_ndim)) != ct_first:
        return dot_general(other, ct, contract=(other_free, other_group),
                           batch=(tuple(other_b), tuple(range(nb))))
    result = dot_general(ct, other, contract=(other_group, other_free),
                         batch=(tuple(range(nb)), tuple(other_b)))
    return transpose(result, perm=tuple(ct_first.index(d) for d in range(own_ndim)))


def _dot_vjp(ct, y, lhs, rhs, *, contract, batch):
    (lc, rc), (lb, rb) = contract, batch
    return (_side_vjp(ct, rhs, lhs.ndim, lc, lb, rc, rb, other_first=False),
            _side_vjp(ct, lhs, rhs.ndim, rc, rb, lc, lb, other_first=True))


def _dot_batch(bind, xs, flags, *, contract, batch):
    # both batched: one more batch axis; one batched: its batch axis is a free axis, moved to
    # the front of the result (after the batch axes come lhs's free axes, then rhs's)
    (lc, rc), (lb, rb) = contract, batch
    if all(flags):
        return bind(*xs, contract=(shifted(lc), shifted(rc)),
                    batch=((0,) + shifted(lb), (0,) + shifted(rb)))
    if flags[0]:
        out = bind(*xs, contract=(shifted(lc), tuple(rc)), batch=(shifted(lb), tuple(rb)))
        where = len(lb)                        # the first free axis of lhs
    else:
        out = bind(*xs, contract=(tuple(lc), shifted(rc)), batch=(tuple(lb), shifted(rb)))
        where = np.ndim(xs[0]) - len(lc)       # batch dims, lhs free, then rhs's first free
    if where == 0:
        return out
    return transpose(out, perm=(where,) + tuple(d for d in range(np.ndim(out)) if d != where))


# ---- code: BLAS on the CPU, kernels on CUDA --------------------------------------------------
def _macs(eqn) -> int:
    """The multiply-adds of a dot_general at its traced sizes."""
    lhs, (lc, _) = eqn.ins[0].aval, eqn.kw["contract"]
    return math.prod(eqn.outs[0].aval.shape) * math.prod(lhs.shape[a] for a in lc)


def _matrix(k, src: str, atom, rows: tuple[int, ...], cols: tuple[int, ...], dst: str,
            extents: tuple[str, str]) -> tuple[str, bool]:
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
    src = k.permuted(src, atom, order, dst)
    if (len(rows), len(cols)) == (1, 1):
        return src, False
    return f"{src}.reshape(({extents[0]}, {extents[1]}))", False


def _dot_cpu(k, eqn, ins, out):
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    lhs, rhs, dtype = eqn.ins[0].aval, eqn.ins[1].aval, eqn.outs[0].aval.dtype
    if not lb and dtype.kind == "f" and (lhs.ndim, rhs.ndim, len(lc)) == (2, 2, 1):
        # one BLAS product of two matrices, into a dead buffer or the workspace; a transposed
        # operand is read in place (a copy loop measured 3.5 ms of an MLP's 1797x256 gradient
        # product, against 4 ms for the product itself)
        k.allocate(eqn.outs[0])
        k.matmul((ins[0], lc != (1,)), (ins[1], rc != (0,)), out, _macs(eqn))
        return
    sizes = k.sizes
    ld, rd = sizes.of(eqn.ins[0]), sizes.of(eqn.ins[1])
    lf, rf = free_axes(lhs.ndim, lc, lb), free_axes(rhs.ndim, rc, rb)
    b, m = sizes.product(ld[a] for a in lb), sizes.product(ld[a] for a in lf)
    n_k, n = sizes.product(ld[a] for a in lc), sizes.product(rd[a] for a in rf)
    shape = sizes.shape(sizes.of(eqn.outs[0]))
    if not lb and dtype.kind == "f":   # one BLAS call
        lhs2 = _matrix(k, ins[0], eqn.ins[0], lf, tuple(lc), f"{out}_lhs", (m, n_k))
        rhs2 = _matrix(k, ins[1], eqn.ins[1], tuple(rc), rf, f"{out}_rhs", (n_k, n))
        k.allocate(eqn.outs[0])
        result = out if len(lf) == len(rf) == 1 else f"{out}_m"
        if result != out:
            k.line(f"{result} = {out}.reshape(({m}, {n}))")
        k.matmul(lhs2, rhs2, result, _macs(eqn))
        return
    a = k.permuted(ins[0], eqn.ins[0], tuple(lb) + lf + tuple(lc), f"{out}_lhs")
    c = k.permuted(ins[1], eqn.ins[1], tuple(rb) + tuple(rc) + rf, f"{out}_rhs")
    k.line(f"{out}_a = {a}.reshape(({b}, {m}, {n_k}))")
    k.line(f"{out}_b = {c}.reshape(({b}, {n_k}, {n}))")
    k.line(f"{out}_c = np.empty(({b}, {m}, {n}), {k.dtype(dtype)})")
    jb, jm, jn, jk, acc = (f"{out}_{t}" for t in ("jb", "jm", "jn", "jk", "acc"))
    k.line(f"for {jb} in range({b}):")
    if dtype.kind == "f":
        k.indent()
        k.matmul((f"{out}_a[{jb}]", False), (f"{out}_b[{jb}]", False), f"{out}_c[{jb}]",
                 _macs(eqn) // max(1, math.prod(lhs.shape[a] for a in lb)))
        k.dedent()
    else:  # BLAS has no integer product
        k.line(f"    for {jm} in range({m}):")
        k.line(f"        for {jn} in range({n}):")
        k.line(f"            {acc} = {k.scalar(0, dtype)}")
        k.line(f"            for {jk} in range({n_k}):")
        k.line(f"                {acc} += {out}_a[{jb}, {jm}, {jk}] * {out}_b[{jb}, {jk}, {jn}]")
        k.line(f"            {out}_c[{jb}, {jm}, {jn}] = {acc}")
    k.line(f"{out} = {out}_c.reshape({shape})")


def _dot_cublas(g, eqn) -> bool:
    """A float product of matrices (or of stacks of them, the batch axis first) as one cuBLAS
    call on the operands' device arrays, an operand contracted over its rows passed as
    transposed; False where it is not one, or an operand has no array (kernels compute it
    where they read it)."""
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    lhs, rhs, out = eqn.ins[0].aval, eqn.ins[1].aval, eqn.outs[0]
    nb = len(lb)
    if (out.aval.dtype not in (np.float32, np.float64) or lhs.dtype != out.aval.dtype
            or rhs.dtype != out.aval.dtype or nb > 1 or lb != rb or lb != tuple(range(nb))
            or lhs.ndim != nb + 2 or rhs.ndim != nb + 2 or len(lc) != 1):
        return False
    a, b = g.stored(eqn.ins[0]), g.stored(eqn.ins[1])
    if a is None or b is None:
        return False
    g.allocate(out)
    g.driver.line(f"tjrt.gemm({a}, {b}, {g.name(out)}, {lc[0] == nb}, {rc[0] == nb + 1})")
    return True


def _dot_cuda(g, number, eqn):
    """A matrix product: with cuBLAS where `g.cublas` and it is one GEMM (`_dot_cublas`), else
    a kernel: a plain one (one row, one column, one contracted axis, either operand possibly
    transposed) in shared-memory tiles, any other as one thread per output element with a loop
    over the contracted axes."""
    if g.cublas and _dot_cublas(g, eqn):
        return
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    lhs, rhs, out = eqn.ins[0], eqn.ins[1], eqn.outs[0]
    lf, rf = free_axes(lhs.aval.ndim, lc, lb), free_axes(rhs.aval.ndim, rc, rb)
    k = g.reads()

    def reads(o: list[str], lhs_c: list[str], rhs_c: list[str]) -> tuple[str, str]:
        def parts(axes_b, axes_f, axes_c, ndim, offset, c):
            return [o[axes_b.index(a)] if a in axes_b else
                    o[offset + axes_f.index(a)] if a in axes_f else c[axes_c.index(a)]
                    for a in range(ndim)]
        return (k.read(lhs, parts(lb, lf, lc, lhs.aval.ndim, len(lb), lhs_c)),
                k.read(rhs, parts(rb, rf, rc, rhs.aval.ndim, len(lb) + len(lf), rhs_c)))

    g.allocate(out)
    name = f"t_k{number}"
    if not lb and len(lf) == len(rf) == len(lc) == 1 and out.aval.dtype.kind == "f":
        m, n = g.sizes(lhs.aval.shape[lf[0]]), g.sizes(rhs.aval.shape[rf[0]])
        body = _tiled(g, reads, k.array(out, ["t_row", "t_col"]), m, n,
                      g.sizes(lhs.aval.shape[lc[0]]), out.aval.dtype)
        g.add_kernel(name, k.params, body)
        g.driver.line(f"{name}[(tjrt.tiles({n}), tjrt.tiles({m})), (TILE, TILE)]"
                      f"({', '.join(k.params + ['t_Sd'])})")
        return
    shape = out.aval.shape
    o = [f"t_o{d}" for d in range(len(shape))]
    c = [f"t_c{d}" for d in range(len(lc))]
    a, b = reads(o, c, c)
    size = g.sizes.product(shape)
    inner: list[str] = []
    g.unravel(inner, "t_f", o, [g.sizes(n) for n in shape])
    inner.append(f"t_acc = {g.scalar(0, out.aval.dtype)}")
    for depth, (index, axis) in enumerate(zip(c, lc)):
        inner.append("    " * depth + f"for {index} in range({g.sizes(lhs.aval.shape[axis])}):")
    inner.append("    " * len(c) + f"t_acc += {a} * {b}")
    inner.append(f"{k.array(out, o)} = t_acc")
    g.add_kernel(name, k.params, [f"for t_f in range(cuda.grid(1), {size}, cuda.gridsize(1)):"]
                 + ["    " + line for line in inner])
    g.driver.line(f"{name}[tjrt.blocks({size}), TPB]({', '.join(k.params + ['t_Sd'])})")


def _tiled(g, reads, target: str, m: str, n: str, size_k: str, dtype: np.dtype) -> list[str]:
    """The body of a tiled product kernel: block (x, y) computes the TILE x TILE tile of
    output columns x, rows y; each step stages a tile of each operand in shared memory."""
    zero = g.scalar(0, dtype)
    a, b = reads(["t_row", "t_col"], ["t_ka"], ["t_kb"])
    return [f"t_sa = cuda.shared.array((TILE, TILE), {g.dtype(dtype)})",
            f"t_sb = cuda.shared.array((TILE, TILE), {g.dtype(dtype)})",
            "t_tx, t_ty = cuda.threadIdx.x, cuda.threadIdx.y",
            "t_row = cuda.blockIdx.y * TILE + t_ty",
            "t_col = cuda.blockIdx.x * TILE + t_tx",
            f"t_acc = {zero}",
            f"for t_t in range(0, {size_k}, TILE):",
            "    t_ka, t_kb = t_t + t_tx, t_t + t_ty",
            f"    t_sa[t_ty, t_tx] = {a} if t_row < {m} and t_ka < {size_k} else {zero}",
            f"    t_sb[t_ty, t_tx] = {b} if t_kb < {size_k} and t_col < {n} else {zero}",
            "    cuda.syncthreads()",
            "    for t_j in range(TILE):",
            "        t_acc += t_sa[t_ty, t_j] * t_sb[t_j, t_tx]",
            "    cuda.syncthreads()",
            f"if t_row < {m} and t_col < {n}:",
            f"    {target} = t_acc"]


dot_general = defop("dot_general", Kind.LINALG, _dot_impl, shape=_dot_shape, vjp=_dot_vjp,
                    axes=_axes.contracted, batch=_dot_batch, cpu=_dot_cpu, cuda=_dot_cuda,
                    fresh=True)
