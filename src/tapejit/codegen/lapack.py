"""np.linalg for generated code: one small cached function per decomposition, shared by every
program.

numba compiles its LAPACK-backed np.linalg functions into every function that calls them,
about a second of LLVM work per program that uses one (measured: the gradient of a 3x3
inverse, 15 ops, took 1.5 s to compile). Generated code calls `tj_lapack.eigh(a, w, v)` instead:
each function here runs numba's np.linalg on each matrix of a stack (C-contiguous, the batch
axis first) and copies the results into the arrays it is given (operands, then outputs, then
options), with loops. They are compiled
once per dtype into numba's cache, like blas.py: a new program only types a call to one.
Generated code reads this module as `tj_lapack` (`calls.Kit.lapack`).

numba's np.linalg raises numpy's LinAlgError where numpy does (a singular matrix to solve, one
not positive definite) and also for a matrix holding inf or NaN, where numpy's solve, slogdet, qr
and eigh return NaN: here such a matrix gets NaN results (all NaN, where numpy may keep some
entries finite), so that compiled code does not raise where the interpreter returns NaN. svd and
pinv raise for it, as numpy does ("SVD did not converge").
"""
from __future__ import annotations

import sys

import numba
import numpy as np

from ..disk import store
from ..ops.triangular import SINGULAR_TRIANGLE


@numba.njit(cache=True)
def _put(dst, src):
    """dst[...] = src for matrices (numba's results may be Fortran-ordered)."""
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = src[i, j]


@numba.njit(cache=True)
def _put_vector(dst, src):
    for i in range(src.shape[0]):
        dst[i] = src[i]


@numba.njit(cache=True)
def _finite(a):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if not np.isfinite(a[i, j]):
                return False
    return True


@numba.njit(cache=True)
def solve(a, b, x):
    for k in range(a.shape[0]):
        if _finite(a[k]) and _finite(b[k]):
            _put(x[k], np.linalg.solve(a[k], b[k]))
        else:
            x[k] = np.nan


@numba.njit(cache=True)
def slogdet(a, sign, logdet):
    for k in range(a.shape[0]):
        if _finite(a[k]):
            sign[k], logdet[k] = np.linalg.slogdet(a[k])
        else:
            sign[k], logdet[k] = np.nan, np.nan


@numba.njit(cache=True)
def cholesky(a, lower):
    for k in range(a.shape[0]):
        _put(lower[k], np.linalg.cholesky(a[k]))


@numba.njit(cache=True)
def eigh(a, w, v):
    for k in range(a.shape[0]):
        if _finite(a[k]):
            values, vectors = np.linalg.eigh(a[k])
            _put_vector(w[k], values)
            _put(v[k], vectors)
        else:
            w[k], v[k] = np.nan, np.nan


@numba.njit(cache=True)
def svd(a, u, s, vt, full_matrices):
    for k in range(a.shape[0]):
        left, values, right = np.linalg.svd(a[k], full_matrices)
        _put(u[k], left)
        _put_vector(s[k], values)
        _put(vt[k], right)


@numba.njit(cache=True)
def qr(a, q, r):
    for k in range(a.shape[0]):
        if _finite(a[k]):
            left, right = np.linalg.qr(a[k])
            _put(q[k], left)
            _put(r[k], right)
        else:
            q[k], r[k] = np.nan, np.nan


@numba.njit(cache=True)
def pinv(a, p, rcond):
    for k in range(a.shape[0]):
        _put(p[k], np.linalg.pinv(a[k], rcond))



@numba.njit(cache=True)
def triangular_solve(a, b, x, lower, transpose, unit_diagonal):
    """x = op(t)^-1 b, t the lower (upper) triangle of a, op(t) = t^T with `transpose`, its
    diagonal 1 with `unit_diagonal`: substitution, row by row (ops/triangular.py)."""
    n, m = b.shape[1], b.shape[2]
    forward = lower != transpose           # op(t) is lower triangular: rows from the first
    for k in range(a.shape[0]):
        for step in range(n):
            i = step if forward else n - 1 - step
            first, last = (0, i) if forward else (i + 1, n)
            for c in range(m):
                x[k, i, c] = b[k, i, c]
            for j in range(first, last):
                t = a[k, j, i] if transpose else a[k, i, j]
                for c in range(m):
                    x[k, i, c] -= t * x[k, j, c]
            if not unit_diagonal:
                if a[k, i, i] == 0:
                    raise np.linalg.LinAlgError(SINGULAR_TRIANGLE)
                for c in range(m):
                    x[k, i, c] /= a[k, i, i]


@numba.njit(cache=True)
def lu(a, factors, pivots):
    """LU factorization with partial pivoting, LAPACK's getrf without blocks: row k swaps with
    row pivots[k] (the first of largest magnitude), then L (unit diagonal, below) and U."""
    n = a.shape[1]
    for k in range(a.shape[0]):
        f = factors[k]
        _put(f, a[k])
        for col in range(n):
            p = col
            for i in range(col + 1, n):
                if abs(f[i, col]) > abs(f[p, col]):
                    p = i
            pivots[k, col] = p
            for j in range(n):
                f[col, j], f[p, j] = f[p, j], f[col, j]
            if f[col, col] != 0:
                inverse = 1 / f[col, col]
                for i in range(col + 1, n):
                    f[i, col] *= inverse
            for i in range(col + 1, n):
                for j in range(col + 1, n):
                    f[i, j] -= f[i, col] * f[col, j]


@numba.njit(cache=True)
def lu_pivots_to_permutation(pivots, perm):
    """The permutation LAPACK's row swaps make: rows `perm` of a are the rows of L U."""
    for k in range(pivots.shape[0]):
        for i in range(perm.shape[1]):
            perm[k, i] = i
        for i in range(pivots.shape[1]):
            p = pivots[k, i]
            perm[k, i], perm[k, p] = perm[k, p], perm[k, i]


store.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
