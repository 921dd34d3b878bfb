"""numpy's statistics of traced arrays: cov, corrcoef, bincount, digitize, as numpy defines
them. Where numpy's result depends on the values (bincount's length, the direction of
digitize's bins), the program is guarded on them."""
from __future__ import annotations

import operator
import warnings
from typing import Any

import numpy as np

from ..errors import DtypeError, UnsupportedOperationError, at_source, user_error, user_source
from ..ops import index as I
from ..ops import layout as L
from . import asarray, cast, implements, lift
from .rearrange import flip
from .shape import concatenate, reshape


@implements(np.cov)
def cov(m: Any, y: Any = None, rowvar: bool = True, bias: bool = False, ddof: Any = None,
        fweights: Any = None, aweights: Any = None, *, dtype: Any = None) -> Any:
    """numpy's estimate: each row a variable (each column with rowvar=False; y's rows are more
    of them), centred by its mean, X X^T / (observations - ddof), ddof 1 unless `bias`."""
    if fweights is not None or aweights is not None:
        raise UnsupportedOperationError(at_source(
            "numpy.cov: fweights= and aweights= are not supported on traced arrays; scale the "
            "centred observations by the square roots of the weights instead", user_source()))
    given = [asarray(v) for v in ((m,) if y is None else (m, y))]
    for name, v in zip("my", given):
        if v.ndim > 2:
            raise user_error(f"numpy.cov: {name} has more than 2 dimensions")
    dtype = np.dtype(dtype or np.result_type(*(v.dtype for v in given), np.float64))
    rows = [cast(v, dtype) if v.ndim == 2 else reshape(cast(v, dtype), (1, -1)) for v in given]
    x = rows[0] if rowvar or given[0].ndim == 1 else rows[0].T    # (numpy: m by its ndim,
    if x.shape[0] == 0:
        return np.zeros((0, 0))
    if y is not None:
        x = concatenate([x, rows[1] if rowvar or rows[1].shape[0] == 1 else rows[1].T],
                        axis=0)                                    # y by its rows)
    dof = x.shape[1] - ((0 if bias else 1) if ddof is None else operator.index(ddof))
    if dof <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=3)
    x = x - np.mean(x, axis=1, keepdims=True)
    return np.squeeze(np.matmul(x, x.T) * (1.0 / dof if dof > 0 else np.inf))


@implements(np.corrcoef)
def corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Any:
    """cov scaled by the standard deviations, clipped to [-1, 1] (numpy's)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    deviation = np.sqrt(np.diagonal(c))
    return np.clip(c / deviation[:, None] / deviation[None, :], -1, 1)


@implements(np.bincount)
def bincount(x: Any, weights: Any = None, minlength: Any = 0) -> Any:
    """How often each value of the non-negative ints `x` occurs (int64), or the sum of its
    `weights` (float64, as numpy's), for 0 to max(x) at least: max(x) and min(x) >= 0 are
    values of the call, so the program is guarded on them (one program while they hold)."""
    x = asarray(x)
    if x.ndim != 1 or x.dtype.kind not in "biu":
        raise DtypeError(at_source(f"numpy.bincount: x must be 1-d non-negative integers, got "
                                   f"{x.dtype} of shape {x.shape}", user_source()))
    if operator.index(minlength) < 0:
        raise user_error("numpy.bincount: 'minlength' must not be negative")
    if not x.shape[0]:
        return np.zeros(operator.index(minlength), np.int64)     # (numpy's, weights or not)
    if int(np.min(x)) < 0:
        raise user_error("numpy.bincount: 'list' argument must have no negative elements")
    length = max(int(np.max(x)) + 1, operator.index(minlength))
    if weights is None:
        weights = L.broadcast_in_dim(np.ones((), np.int64), shape=x.shape, dims=())
    elif np.shape(weights) == x.shape:
        weights = cast(asarray(weights), np.dtype(np.float64))
    else:
        raise user_error(f"numpy.bincount: the weights ({np.shape(weights)}) and list "
                         f"({x.shape}) don't have the same length")
    zeros = L.broadcast_in_dim(np.zeros((), weights.dtype), shape=(length,), dims=())
    return I.scatter_add(lift(zeros), cast(x, np.dtype(np.int64)), lift(weights), axis=0)


@implements(np.digitize)
def digitize(x: Any, bins: Any, right: bool = False) -> Any:
    """The bin of each x: numpy's searchsorted in increasing bins (side "left" with `right`),
    counted from the end in decreasing ones (which way traced bins go is a value of the call:
    the program is guarded on it)."""
    bins = asarray(bins)
    if bins.ndim != 1:
        raise user_error("numpy.digitize: bins must be one-dimensional")
    side = "left" if right else "right"
    if bins.shape[0] < 2 or bool(np.all(bins[1:] >= bins[:-1])):
        return np.searchsorted(bins, x, side=side)
    if not bool(np.all(bins[1:] <= bins[:-1])):
        raise user_error("numpy.digitize: bins must be monotonically increasing or decreasing")
    return bins.shape[0] - np.searchsorted(flip(bins, 0), x, side=side)
