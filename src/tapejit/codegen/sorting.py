"""Sorting for generated code: small cached functions shared by every program.

numba's `np.argsort(kind="mergesort")` costs about 2 s of compile time per dtype in each
function that uses it (measured), so generated code calls `tj_sorting.sort(x, values,
indices)` instead: each function here is compiled once per dtype into numba's cache, like
lapack.py's, and a new program only types a call to it. Operands are C-contiguous (before,
axis, after) views; results are written into the arrays given. Generated code reads this
module as `tj_sorting` (`calls.Kit.sorting`).

The order is numpy's: ascending, NaN last, equal elements (and -0.0, 0.0) in their first order
(numba's mergesort is stable and puts NaN last, as numpy's stable sort does).
"""
from __future__ import annotations

import sys

import numba
import numpy as np

from ..disk import store


@numba.njit(cache=True)
def sort(x, values, indices):
    """Each line x[i, :, j] sorted: its values and the permutation that sorts it."""
    line = np.empty(x.shape[1], x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[2]):
            for k in range(x.shape[1]):
                line[k] = x[i, k, j]
            order = np.argsort(line, kind="mergesort")
            for k in range(x.shape[1]):
                indices[i, k, j] = order[k]
                values[i, k, j] = line[order[k]]


@numba.njit(cache=True)
def _before(x, y):
    """x sorts before y in numpy's order (NaN last)."""
    return x < y or (y != y and x == x)


@numba.njit(cache=True)
def searchsorted(a, v, out, right):
    """Where each v[i] goes into the sorted `a`: before its equals, or after them (`right`)."""
    for i in range(v.shape[0]):
        lo, hi = 0, a.shape[0]
        while lo < hi:
            mid = (lo + hi) // 2
            if (not _before(v[i], a[mid])) if right else _before(a[mid], v[i]):
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo


store.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
