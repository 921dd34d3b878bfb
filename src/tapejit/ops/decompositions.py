"""The primitives of np.linalg: solve, slogdet, cholesky, eigh, svd, qr and pinv.

Each acts on the last two axes of its operands and maps over the leading (batch) axes, which
every operand shares. numpy_api/decompositions.py builds inv, det, lstsq, matrix_power, the
matrix norms, ... from them. They compute what numpy computes, so the interpreter (numpy) and
compiled code (numba's LAPACK-backed np.linalg) agree:
- cholesky and eigh read the lower triangle only; their VJPs are the derivative of that
  function, so a cotangent lives in the lower triangle (for a matrix built symmetric, b + b.T,
  the chain rule gives the gradient of JAX's symmetrized rule);
- a singular `a` makes solve raise LinAlgError; a matrix that is not positive definite makes
  cholesky raise it; slogdet of a singular matrix is (0, -inf);
- at repeated eigenvalues eigh's VJP divides by zero (JAX: 1/(w_j - w_i) off the diagonal, so a
  cotangent of the eigenvectors gives inf/nan); svd's leaves the terms of equal singular values
  out (JAX zeroes 1/(s_j^2 - s_i^2) where the difference is 0);
- qr takes matrices with at least as many rows as columns (numpy_api splits a wide one);
- pinv has its own rule (Golub and Pereyra's derivative, as JAX's custom rule), exact where the
  rank does not change, also at repeated singular values where the svd's rule would divide by 0.

CPU code calls codegen/lapack.py's function of the op's name (numba's LAPACK-backed np.linalg
on each matrix of a stack, compiled once into the cache) through `Kit.lapack`; the CUDA backend
runs these ops on the host.
"""
from __future__ import annotations

import numpy as np

from ..avals import Aval
from ..errors import DtypeError, ShapeError, UnsupportedOperationError
from . import HOST, Kind, defop
from . import axes as _axes
from .elementwise import eq, select
from .layout import broadcast_in_dim, slice_, transpose, with_batch
from .linalg import dot_general


# ---- helpers: matrices with batch axes, written with traced ops -------------------------------
def mT(x):
    """The transpose of each matrix."""
    nb = x.ndim - 2
    return transpose(x, perm=tuple(range(nb)) + (nb + 1, nb))


def mm(a, b):
    """The product of each pair of matrices."""
    nb = a.ndim - 2
    return dot_general(a, b, contract=((nb + 1,), (nb,)), batch=(tuple(range(nb)),) * 2)


def _identity(x):
    """The identity matrix for each matrix of `x`'s batch, in `x`'s dtype."""
    nb = x.ndim - 2
    return broadcast_in_dim(np.eye(x.shape[-1], dtype=x.dtype), shape=x.shape, dims=(nb, nb + 1))


def _leading(x, k: int, axis: int):
    """The first k rows (axis -2) or columns (axis -1) of each matrix."""
    limit = list(x.shape)
    limit[axis] = k
    return slice_(x, start=(0,) * x.ndim, limit=tuple(limit), step=(1,) * x.ndim)


def _per_row(v, n: int):
    """Vectors (..., k) as matrices (..., k, n) holding v_i in row i."""
    nb = v.ndim - 1
    return broadcast_in_dim(v, shape=v.shape + (n,), dims=tuple(range(nb + 1)))


def _per_column(v, n: int):
    """Vectors (..., k) as matrices (..., n, k) holding v_j in column j."""
    nb = v.ndim - 1
    return broadcast_in_dim(v, shape=v.shape[:nb] + (n, v.shape[-1]),
                            dims=tuple(range(nb)) + (nb + 1,))


def _diag(v):
    """Vectors (..., n) as diagonal matrices."""
    n = v.shape[-1]
    return _per_row(v, n) * np.eye(n).astype(v.dtype)


def _half_diagonal(x):
    """The weights of the lower triangle with half the diagonal: 1 below it, 1/2 on it, 0
    above, for `x`'s matrices."""
    n = x.shape[-1]
    return (np.tri(n) - 0.5 * np.eye(n)).astype(x.dtype)


def _lower(g):
    """The cotangent of a function of the lower triangle of `a` (cholesky, eigh), given `g`,
    its cotangent as a function of the symmetric matrix: g + g.T below the diagonal, g on it."""
    return (g + mT(g)) * _half_diagonal(g)


def _inverse_gaps(d, zero_at_ties: bool):
    """1 / d off the diagonal and 0 on it; where an off-diagonal d is 0, inf, or 0 with
    `zero_at_ties`."""
    eye = np.eye(d.shape[-1], dtype=bool)
    inverse = 1 / select(eye, 1, d)
    return select(eye, 0, select(eq(d, 0), 0, inverse) if zero_at_ties else inverse)


# ---- shape rules -----------------------------------------------------------------------------
def matrices(name: str, a: Aval, square: bool = False) -> tuple[tuple[int, ...], int, int]:
    """(batch shape, rows, columns) of a stack of float matrices."""
    if a.ndim < 2:
        raise ShapeError(f"{name}: needs matrices (at least 2 axes), got {a}")
    if a.dtype not in (np.float32, np.float64):
        raise DtypeError(f"{name}: needs float32 or float64 matrices, got {a}")
    *batch, m, n = a.shape
    if square and m != n:
        raise ShapeError(f"{name}: needs square matrices, got {a}")
    return tuple(batch), m, n


def _solve_shape(a: Aval, b: Aval) -> Aval:
    batch, n, _ = matrices("solve", a, square=True)
    if b.ndim != a.ndim or b.shape[:-1] != batch + (n,) or b.dtype != a.dtype:
        raise ShapeError(f"solve: right-hand sides {b} do not fit matrices {a}")
    return b


def _slogdet_shape(a: Aval) -> tuple[Aval, Aval]:
    batch, _, _ = matrices("slogdet", a, square=True)
    return Aval(batch, a.dtype), Aval(batch, a.dtype)


def _cholesky_shape(a: Aval) -> Aval:
    matrices("cholesky", a, square=True)
    return a


def _eigh_shape(a: Aval) -> tuple[Aval, Aval]:
    batch, n, _ = matrices("eigh", a, square=True)
    return Aval(batch + (n,), a.dtype), a


def _svd_shape(a: Aval, *, full_matrices: bool) -> tuple[Aval, Aval, Aval]:
    batch, m, n = matrices("svd", a)
    k = min(m, n)
    return (Aval(batch + (m, m if full_matrices else k), a.dtype), Aval(batch + (k,), a.dtype),
            Aval(batch + (n if full_matrices else k, n), a.dtype))


def _qr_shape(a: Aval) -> tuple[Aval, Aval]:
    batch, m, n = matrices("qr", a)
    if m < n:
        raise ShapeError(f"qr: needs at least as many rows as columns, got {a}")
    return a, Aval(batch + (n, n), a.dtype)


def _pinv_shape(a: Aval, *, rcond: float) -> Aval:
    batch, m, n = matrices("pinv", a)
    return Aval(batch + (n, m), a.dtype)


# ---- VJPs ------------------------------------------------------------------------------------
def _solve_vjp(ct, x, a, b):
    # x = a^-1 b: db = a^-T ct, da = -(a^-T ct) x^T
    ct_b = solve(mT(a), ct)
    return -mm(ct_b, mT(x)), ct_b


def _slogdet_vjp(cts, outs, a):
    # d log|det a| = tr(a^-1 da); the sign is piecewise constant
    ct = cts[1]
    if ct is None:
        return (None,)
    scaled = broadcast_in_dim(ct, shape=a.shape, dims=tuple(range(ct.ndim)))
    return (solve(mT(a), scaled * np.eye(a.shape[-1]).astype(a.dtype)),)


def _cholesky_vjp(ct, l, a):
    # dl = l phi(l^-1 da l^-T), phi: the lower triangle with half the diagonal (Murray 2016)
    l_inv = solve(l, _identity(l))
    return (_lower(mm(mm(mT(l_inv), mm(mT(l), ct) * _half_diagonal(l)), l_inv)),)


def _eigh_vjp(cts, outs, a):
    # dw = diag(v^T da v), dv = v (f o (v^T da v)), f_ij = 1 / (w_j - w_i) off the diagonal
    (ct_w, ct_v), (w, v) = cts, outs
    terms = [] if ct_w is None else [_diag(ct_w)]
    if ct_v is not None:
        n = w.shape[-1]
        gaps = _per_column(w, n) - _per_row(w, n)        # w_j - w_i at [i, j]
        terms.append(_inverse_gaps(gaps, zero_at_ties=False) * mm(mT(v), ct_v))
    return (_lower(mm(mm(v, sum(terms[1:], terms[0])), mT(v))),)


def _svd_vjp(cts, outs, a, *, full_matrices):
    # Townsend 2016 (JAX's rule, transposed): with f_ij = 1 / (s_j^2 - s_i^2),
    # da = u (f o (u^T cu - cu^T u) s + s f o (v^T cv - cv^T v) + diag(cs)) v^T
    #      + (1 - u u^T) cu s^-1 v^T + u s^-1 cv^T (1 - v v^T)
    (ct_u, ct_s, ct_vt), (u, s, vt) = cts, outs
    m, n = a.shape[-2:]
    if full_matrices and m != n and (ct_u is not None or ct_vt is not None):
        raise UnsupportedOperationError(
            f"svd: no gradient through u and vh with full_matrices=True for {m}x{n} "
            "matrices (their extra columns are not unique): pass full_matrices=False")
    k = s.shape[-1]
    if full_matrices and m != n:        # only s has a cotangent: the first k columns serve
        u, vt = _leading(u, k, -1), _leading(vt, k, -2)
    rows, cols = _per_row(s, k), _per_column(s, k)   # s_i, s_j at [i, j]
    f = _inverse_gaps(cols * cols - rows * rows, zero_at_ties=True)
    terms = [] if ct_s is None else [_diag(ct_s)]
    if ct_u is not None:
        ut_cu = mm(mT(u), ct_u)
        terms.append(f * (ut_cu - mT(ut_cu)) * cols)
    if ct_vt is not None:
        vt_cv = mm(vt, mT(ct_vt))
        terms.append(rows * f * (vt_cv - mT(vt_cv)))
    ct_a = mm(mm(u, sum(terms[1:], terms[0])), vt)
    if ct_u is not None and m > n:
        scaled = ct_u / _per_column(s, m)
        ct_a = ct_a + mm(scaled - mm(u, mm(mT(u), scaled)), vt)
    if ct_vt is not None and n > m:
        scaled = mT(ct_vt) / _per_column(s, n)
        ct_a = ct_a + mm(u, mT(scaled - mm(mT(vt), mm(vt, scaled))))
    return (ct_a,)


def _qr_vjp(cts, outs, a):
    # dq = q (o - b) + c, dr = (b - o) r, with c = da r^-1, b = q^T c, o = tril(b, -1) -
    # tril(b, -1)^T (JAX's rule); transposed: da = (cq + q sym(m)) r^-T, m = r cr^T - q^T cq,
    # sym(m) the symmetric matrix of m's upper triangle
    (ct_q, ct_r), (q, r) = cts, outs
    terms = [] if ct_r is None else [mm(ct_r, mT(r))]
    if ct_q is not None:
        terms.append(-mm(mT(q), ct_q))
    m = sum(terms[1:], terms[0])
    y = mm(q, select(~np.tri(r.shape[-1], k=-1, dtype=bool), m, mT(m)))
    if ct_q is not None:
        y = y + ct_q
    return (mT(solve(r, mT(y))),)


def _pinv_vjp(ct, p, a, *, rcond):
    # Golub and Pereyra 1973: dp = -p da p + p p^T da^T (1 - a p) + (1 - p a) da^T p^T p
    pt, ctt = mT(p), mT(ct)
    x = mm(ctt, mm(p, pt))
    y = mm(mm(pt, p), ctt)
    return (x - mm(a, mm(p, x)) + y - mm(mm(y, p), a) - mm(mm(pt, ct), pt),)


# ---- batching and axes -----------------------------------------------------------------------
def map_leading(bind, xs, flags, **params):
    """The op maps over leading axes: an operand without the batch axis is broadcast to it."""
    return bind(*with_batch(bind, xs, flags), **params)


def _solve_axes(ins, out, **params):
    """a x = b: shared batch axes; a's rows are b's, x's rows a's columns, x's columns b's."""
    nb = len(out) - 2
    return ([[(_axes.OUT, d), (0, d), (1, d)] for d in range(nb)]
            + [[(0, nb), (1, nb)], [(_axes.OUT, nb), (0, nb + 1)],
               [(_axes.OUT, nb + 1), (1, nb + 1)]])


def _pinv_axes(ins, out, **params):
    """Each matrix transposed in shape: shared batch axes, rows and columns swapped."""
    nb = len(out) - 2
    return ([[(_axes.OUT, d), (0, d)] for d in range(nb)]
            + [[(_axes.OUT, nb), (0, nb + 1)], [(_axes.OUT, nb + 1), (0, nb)]])


# ---- CPU code: codegen/lapack.py's function of the op, on the stack of matrices -------------
def lapack_code(params=lambda eqn: [], core: int = 2):
    """CPU code calling lapack.py's function named after the op on the operands and the
    outputs as stacks (batch, rows, columns), then the op's `params(eqn)`; the first operand
    has `core` axes past the batch axes (2: matrices, 1: vectors)."""
    def code(k, eqn, ins, out):
        outs = out if isinstance(out, list) else [out]
        sizes, nb = k.sizes, eqn.ins[0].aval.ndim - core
        count = sizes.product(sizes.of(eqn.ins[0])[:nb])
        args = []
        for name, atom in zip(ins, eqn.ins):
            args.append(_stack(k, name, sizes.of(atom)[nb:], count, nb == 1))
        for name, var in zip(outs, eqn.outs):     # a 0-d result: a scalar, from an array
            array, dims = name if var.aval.shape else f"{name}_a", sizes.of(var)
            k.line(f"{array} = np.empty({sizes.shape(dims or (1,))}, "
                   f"{k.dtype(var.aval.dtype)})")
            args.append(_stack(k, array, dims[nb:], count, nb == 1))
        k.lapack(eqn.op, args + params(eqn))
        for name, var in zip(outs, eqn.outs):
            if not var.aval.shape:
                k.line(f"{name} = {name}_a[0]")
    return code


def _stack(k, name: str, tail, count: str, stacked: bool) -> str:
    """An array as a stack: its batch axes as one (a reshape unless there is one already)."""
    if stacked:
        return name
    return f"{name}.reshape(({count}, {''.join(k.sizes(n) + ', ' for n in tail)}))"


# ---- the ops ---------------------------------------------------------------------------------
solve = defop("solve", Kind.LINALG, np.linalg.solve, shape=_solve_shape, vjp=_solve_vjp,
              axes=_solve_axes, batch=map_leading, cpu=lapack_code(), cuda=HOST, fresh=True)
slogdet = defop("slogdet", Kind.LINALG,
                lambda a: tuple(np.asarray(r) for r in np.linalg.slogdet(a)),
                shape=_slogdet_shape, vjp=_slogdet_vjp, multiple_results=True, batch=map_leading,
                cpu=lapack_code(), cuda=HOST, fresh=True)
cholesky = defop("cholesky", Kind.LINALG, np.linalg.cholesky, shape=_cholesky_shape,
                 vjp=_cholesky_vjp, axes=_axes.same, batch=map_leading, cpu=lapack_code(),
                 cuda=HOST, fresh=True)
eigh = defop("eigh", Kind.LINALG, lambda a: tuple(np.linalg.eigh(a)), shape=_eigh_shape,
             vjp=_eigh_vjp, multiple_results=True, batch=map_leading,
             cpu=lapack_code(), cuda=HOST, fresh=True)
svd = defop("svd", Kind.LINALG,
            lambda a, *, full_matrices: tuple(np.linalg.svd(a, full_matrices=full_matrices)),
            shape=_svd_shape, vjp=_svd_vjp, multiple_results=True, batch=map_leading,
            cpu=lapack_code(lambda e: [str(e.kw["full_matrices"])]), cuda=HOST, fresh=True)
qr = defop("qr", Kind.LINALG, lambda a: tuple(np.linalg.qr(a)), shape=_qr_shape, vjp=_qr_vjp,
           multiple_results=True, batch=map_leading, cpu=lapack_code(), cuda=HOST, fresh=True)
pinv = defop("pinv", Kind.LINALG, lambda a, *, rcond: np.linalg.pinv(a, rcond=rcond),
             shape=_pinv_shape, vjp=_pinv_vjp, axes=_pinv_axes, batch=map_leading,
             cpu=lapack_code(lambda e: [repr(e.kw["rcond"])]), cuda=HOST, fresh=True)
