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

from .. import cache


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


cache.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
