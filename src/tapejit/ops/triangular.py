"""The primitives of scipy.linalg's triangular solves and LU factorization: triangular_solve,
lu and lu_pivots_to_permutation.

- `triangular_solve[lower, transpose, unit_diagonal](a, b)`: x = op(t)^-1 b for each matrix
  pair of a stack, t the lower (upper) triangle of `a` (the other one is never read), op(t) =
  t^T with `transpose`, its diagonal taken as ones with `unit_diagonal`. A zero on the diagonal
  raises LinAlgError (scipy's solve_triangular does), NaN propagates.
- `lu(a) -> (lu, pivots)`: LAPACK's getrf, partial pivoting, for square matrices: `lu` holds
  L below the diagonal (its unit diagonal implied) and U on and above it, `pivots` (int32) the
  row swapped with row k at step k, as scipy.linalg.lu_factor returns them. A zero pivot is
  left in U (LAPACK's info > 0: scipy warns; solving with it divides by zero).
- `lu_pivots_to_permutation(pivots) -> perm` (int64): the rows of `a` in the order of L U,
  a[perm] = L U; not differentiable.

numpy_api/scipy_linalg.py builds cho_solve, lu_solve and the generalized eigh from these.
CPU code calls codegen/lapack.py's functions of the ops' names, substitution and getrf's loop
without blocks (numba has no triangular solve or LU of its own to call): compiled and
interpreted results agree to rounding, and agree with scipy's LAPACK to rounding (a pivot may
differ where two candidates tie to rounding). The CUDA backend runs them on the host.
"""
from __future__ import annotations

import math

import numpy as np

from ..avals import Aval, dtype_name
from ..errors import DtypeError, ShapeError
from . import HOST, Kind, defop, zero_vjp
from .decompositions import lapack_code, mT, map_leading, matrices, mm
from .elementwise import convert, eq
from .layout import broadcast_in_dim
from .sort import INDEX

SINGULAR_TRIANGLE = "singular matrix: a zero on the diagonal of a triangular matrix"
PIVOT = np.dtype(np.int32)


def _triangle_mask(n: int, lower: bool, strict: bool, dtype) -> np.ndarray:
    """1 on the triangle read (without the diagonal when `strict`), 0 elsewhere."""
    lower_mask = np.tri(n, k=-1 if strict else 0, dtype=dtype)
    return lower_mask if lower else lower_mask.T


# ---- triangular_solve --------------------------------------------------------------------------
def _triangular_solve_shape(a: Aval, b: Aval, **params) -> Aval:
    batch, n, _ = matrices("triangular_solve", a, square=True)
    if b.ndim != a.ndim or b.shape[:-1] != batch + (n,) or b.dtype != a.dtype:
        raise ShapeError(f"triangular_solve: right-hand sides {b} do not fit matrices {a}")
    return b


def _triangular_solve_impl(a, b, *, lower, transpose, unit_diagonal):
    t = np.swapaxes(a, -1, -2) if transpose else a
    n = a.shape[-1]
    diagonal = np.diagonal(t, axis1=-2, axis2=-1)
    if not unit_diagonal and np.any(diagonal == 0):
        raise np.linalg.LinAlgError(SINGULAR_TRIANGLE)
    forward = lower != transpose
    x = np.empty(b.shape, b.dtype)
    for i in range(n) if forward else range(n - 1, -1, -1):
        known = slice(0, i) if forward else slice(i + 1, n)
        row = b[..., i, :] - np.matmul(t[..., i:i + 1, known], x[..., known, :])[..., 0, :]
        x[..., i, :] = row if unit_diagonal else row / diagonal[..., i, None]
    return x


def _triangular_solve_vjp(ct, x, a, b, *, lower, transpose, unit_diagonal):
    # x = op(t)^-1 b: db = op(t)^-T ct, dt = -db x^T (transposed for op(t) = t^T), in t's
    # triangle
    ct_b = triangular_solve(a, ct, lower=lower, transpose=not transpose,
                            unit_diagonal=unit_diagonal)
    ct_t = -mm(x, mT(ct_b)) if transpose else -mm(ct_b, mT(x))
    return ct_t * _triangle_mask(a.shape[-1], lower, unit_diagonal, a.dtype), ct_b


# ---- lu -----------------------------------------------------------------------------------------
def _lu_shape(a: Aval) -> tuple[Aval, Aval]:
    batch, n, _ = matrices("lu", a, square=True)
    return a, Aval(batch + (n,), PIVOT)


def _lu_impl(a):
    n, count = a.shape[-1], math.prod(a.shape[:-2])
    factors = np.array(a, copy=True)
    pivots = np.empty(a.shape[:-1], PIVOT)
    for f, p in zip(factors.reshape((count, n, n)), pivots.reshape((count, n))):
        for col in range(n):
            p[col] = col + np.argmax(np.abs(f[col:, col]))
            f[[col, p[col]]] = f[[p[col], col]]
            if f[col, col] != 0:
                f[col + 1:, col] *= 1 / f[col, col]
            f[col + 1:, col + 1:] -= np.outer(f[col + 1:, col], f[col, col + 1:])
    return factors, pivots


def _lu_vjp(cts, outs, a):
    # a[perm] = l u; with f = l^-1 da[perm] u^-1: dl = l tril(f, -1), du = triu(f) u, so the
    # packed factors' cotangent c gives f's, tril(l^T tril(c, -1), -1) + triu(triu(c) u^T),
    # and da[perm] = l^-T (f's) u^-T (JAX's rule, transposed): da = p^T da[perm]
    ct, (factors, pivots) = cts[0], outs
    if ct is None:
        return (None,)
    n = a.shape[-1]
    strictly_lower = _triangle_mask(n, True, True, a.dtype)
    upper = _triangle_mask(n, False, False, a.dtype)
    l, u = factors * strictly_lower + np.eye(n, dtype=a.dtype), factors * upper
    ct_f = (mm(mT(l), ct * strictly_lower) * strictly_lower + mm(ct * upper, mT(u)) * upper)
    z = triangular_solve(factors, ct_f, lower=True, transpose=True, unit_diagonal=True)
    ct_permuted = mT(triangular_solve(factors, mT(z), lower=False, transpose=False,
                                      unit_diagonal=False))
    return (mm(mT(permutation_matrix(lu_pivots_to_permutation(pivots), a.dtype)),
               ct_permuted),)


def permutation_matrix(perm, dtype):
    """p with p @ x = x[perm] (rows; p^T @ y puts y's rows back): a product, not a gather,
    so the LLVM generator covers it (a 0 times an inf or NaN of x is NaN, though)."""
    n = perm.shape[-1]
    columns = broadcast_in_dim(np.arange(n), shape=perm.shape + (n,), dims=(perm.ndim,))
    rows = broadcast_in_dim(perm, shape=perm.shape + (n,), dims=tuple(range(perm.ndim)))
    return convert(eq(rows, columns), dtype=dtype_name(dtype))


# ---- lu_pivots_to_permutation --------------------------------------------------------------------
def _permutation_shape(pivots: Aval) -> Aval:
    if pivots.ndim < 1 or pivots.dtype.kind not in "iu":
        raise DtypeError(f"lu_pivots_to_permutation: needs integer pivots, got {pivots}")
    return Aval(pivots.shape, INDEX)


def _permutation_impl(pivots):
    n, count = pivots.shape[-1], math.prod(pivots.shape[:-1])
    perm = np.broadcast_to(np.arange(n, dtype=INDEX), pivots.shape).copy()
    for p, q in zip(perm.reshape((count, n)), pivots.reshape((count, n))):
        for i, j in enumerate(q):
            p[[i, j]] = p[[j, i]]
    return perm


# ---- the ops -----------------------------------------------------------------------------------
def _flags(eqn) -> list[str]:
    return [str(eqn.kw[name]) for name in ("lower", "transpose", "unit_diagonal")]


triangular_solve = defop("triangular_solve", Kind.LINALG, _triangular_solve_impl,
                         shape=_triangular_solve_shape, vjp=_triangular_solve_vjp,
                         batch=map_leading, cpu=lapack_code(_flags), cuda=HOST, fresh=True)
lu = defop("lu", Kind.LINALG, _lu_impl, shape=_lu_shape, vjp=_lu_vjp, multiple_results=True,
           batch=map_leading, cpu=lapack_code(), cuda=HOST, fresh=True)
lu_pivots_to_permutation = defop(
    "lu_pivots_to_permutation", Kind.LINALG, _permutation_impl, shape=_permutation_shape,
    vjp=zero_vjp, batch=map_leading, cpu=lapack_code(core=1), cuda=HOST, fresh=True)
