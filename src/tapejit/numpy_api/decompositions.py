"""np.linalg's matrix functions -> the primitives of ops/decompositions.py: inv solve det slogdet
cholesky eigh eigvalsh svd qr pinv lstsq matrix_power norm cond matrix_rank multi_dot (and
numpy 2's vector_norm matrix_norm svdvals), on stacks of matrices (the last two axes) as numpy
does. Integer matrices are converted to float64; results are numpy's named tuples (EighResult,
SVDResult, ...). Where numpy's answer would depend on the values (the length of lstsq's
residuals), or is not unique (qr's complete Q of a tall matrix), the rule says so in its
docstring or raises UnsupportedOperationError naming the alternative."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..errors import DtypeError, ShapeError, UnsupportedOperationError, at_source, user_source
from ..ops import decompositions as D
from ..ops import layout as L
from ..trace import Tracer
from . import asarray, cast, implements, lift, normalize_axis, reject
from .reductions import max as _max, min as _min, sum as _sum
from .shape import broadcast_to_shape, concatenate, in_common_dtype, moveaxis, reshape, swapaxes

_RESULTS: dict[Any, Any] = {}


def _result(fn: Any, values: tuple) -> tuple:
    """`values` as the named tuple numpy's `fn` returns (numpy >= 2), else a tuple."""
    if fn not in _RESULTS:
        _RESULTS[fn] = type(fn(np.eye(2)))
    cls = _RESULTS[fn]
    return cls(*values) if hasattr(cls, "_fields") else tuple(values)


def _fail(error: type, message: str) -> None:
    raise error(at_source(message, user_source()))


def _matrices(a: Any, what: str, square: bool = False, instead: str = "") -> Any:
    """`a` as float matrices (integers become float64), checked: at least 2 axes, square."""
    a = asarray(a)
    if a.dtype.kind in "biu":
        a = cast(a, np.dtype(np.float64))
    if a.dtype not in (np.float32, np.float64):
        _fail(DtypeError, f"numpy.linalg.{what}: arrays of {a.dtype} are not supported on "
                          "traced arrays: convert to float32 or float64")
    if a.ndim < 2:
        _fail(ShapeError, f"numpy.linalg.{what}: needs a matrix or a stack of matrices (at "
                          f"least 2 axes), got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        _fail(ShapeError, f"numpy.linalg.{what}: the last two axes must be square, got shape "
                          f"{a.shape}{instead}")
    return a


def _eye_like(a: Any) -> Any:
    """An identity matrix for each matrix of `a` (one n x n constant, broadcast)."""
    n, nb = a.shape[-1], a.ndim - 2
    return L.broadcast_in_dim(lift(np.eye(n, dtype=a.dtype)), shape=a.shape, dims=(nb, nb + 1))


_NON_SQUARE = ": for a non-square matrix use numpy.linalg.pinv or numpy.linalg.lstsq"


@implements(np.linalg.inv)
def inv(a: Any) -> Any:
    a = _matrices(a, "inv", square=True, instead=_NON_SQUARE)
    return D.solve(lift(a), _eye_like(a))


@implements(np.linalg.solve)
def solve(a: Any, b: Any) -> Any:
    """b of one axis is a vector; else a stack of matrices whose batch axes broadcast with a's
    (numpy 2's rule)."""
    a, b = in_common_dtype([a, b], "numpy.linalg.solve")
    a = _matrices(a, "solve", square=True, instead=_NON_SQUARE)
    vector = b.ndim == 1
    b = _matrices(reshape(b, b.shape + (1,)) if vector else b, "solve")
    if b.dtype != a.dtype:
        b = cast(b, a.dtype)
    n = a.shape[-1]
    if b.shape[-2] != n:
        _fail(ShapeError, f"numpy.linalg.solve: a of shape {a.shape} and b of shape "
                          f"{b.shape[:-1] if vector else b.shape} do not fit: b needs {n} rows")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    x = D.solve(lift(broadcast_to_shape(a, batch + a.shape[-2:], "numpy.linalg.solve")),
                lift(broadcast_to_shape(b, batch + b.shape[-2:], "numpy.linalg.solve")))
    return reshape(x, x.shape[:-1]) if vector else x


@implements(np.linalg.slogdet)
def slogdet(a: Any) -> Any:
    """(sign, log|det a|): (0, -inf) for a singular matrix."""
    return _result(np.linalg.slogdet, D.slogdet(lift(_matrices(a, "slogdet", square=True))))


@implements(np.linalg.det)
def det(a: Any) -> Any:
    sign, logdet = D.slogdet(lift(_matrices(a, "det", square=True)))
    return sign * np.exp(logdet)


@implements(np.linalg.cholesky)
def cholesky(a: Any, /, *, upper: bool = False) -> Any:
    """L (or U = L^T with upper=True, from the upper triangle, as numpy)."""
    a = lift(_matrices(a, "cholesky", square=True))
    return swapaxes(D.cholesky(swapaxes(a, -1, -2)), -1, -2) if upper else D.cholesky(a)


def _triangle(a: Any, uplo: str, what: str) -> Any:
    """The matrices whose lower triangle holds the triangle `uplo` of a's."""
    a = lift(_matrices(a, what, square=True))
    if uplo not in ("L", "U"):
        _fail(ValueError, f"numpy.linalg.{what}: UPLO must be 'L' or 'U', not {uplo!r}")
    return swapaxes(a, -1, -2) if uplo == "U" else a


@implements(np.linalg.eigh)
def eigh(a: Any, UPLO: str = "L") -> Any:
    return _result(np.linalg.eigh, D.eigh(_triangle(a, UPLO, "eigh")))


@implements(np.linalg.eigvalsh)
def eigvalsh(a: Any, UPLO: str = "L") -> Any:
    return D.eigh(_triangle(a, UPLO, "eigvalsh"))[0]


@implements(np.linalg.svd)
def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> Any:
    """u, s, vh; with full_matrices the square u and vh of a non-square matrix have no
    gradient (their extra columns are not unique): pass full_matrices=False."""
    a = lift(_matrices(a, "svd"))
    if hermitian:
        _fail(UnsupportedOperationError, "numpy.linalg.svd(hermitian=True) is not supported on "
                                         "traced arrays: use numpy.linalg.eigh")
    full = bool(full_matrices) and compute_uv and a.shape[-1] != a.shape[-2]
    u, s, vh = D.svd(a, full_matrices=full)
    return _result(np.linalg.svd, (u, s, vh)) if compute_uv else s


@implements(np.linalg.qr)
def qr(a: Any, mode: str = "reduced") -> Any:
    """Modes 'reduced' and 'r', and 'complete' where it is 'reduced' (rows <= columns). A
    wide matrix [x | y] is q r of x, then r = [r_x | q^T y]."""
    a = lift(_matrices(a, "qr"))
    m, n = a.shape[-2:]
    if mode not in ("reduced", "r") and not (mode == "complete" and m <= n):
        _fail(UnsupportedOperationError, f"numpy.linalg.qr(mode={mode!r}) of shape {a.shape} "
                                         "is not supported on traced arrays: use mode='reduced'")
    if m >= n:
        q, r = D.qr(a)
    else:
        q, r = D.qr(a[..., :m])
        r = concatenate([r, np.matmul(swapaxes(q, -1, -2), a[..., m:])], axis=-1)
    return r if mode == "r" else _result(np.linalg.qr, (q, r))


def _cutoff(rcond: Any, what: str) -> float:
    if isinstance(rcond, Tracer) or np.ndim(rcond) != 0:
        _fail(UnsupportedOperationError, f"numpy.linalg.{what}: rcond must be one number known "
                                         "when tracing (not an array or a traced value)")
    return float(rcond)


@implements(np.linalg.pinv)
def pinv(a: Any, rcond: Any = None, hermitian: bool = False, *, rtol: Any = np._NoValue) -> Any:
    """Singular values up to rcond times the largest count as 0 (numpy's default 1e-15)."""
    a = lift(_matrices(a, "pinv"))
    if hermitian:
        _fail(UnsupportedOperationError, "numpy.linalg.pinv(hermitian=True) is not supported "
                                         "on traced arrays: leave hermitian=False")
    if rcond is None:
        rcond = (1e-15 if rtol is np._NoValue else
                 max(a.shape[-2:]) * np.finfo(a.dtype).eps if rtol is None else rtol)
    return D.pinv(a, rcond=_cutoff(rcond, "pinv"))


@implements(np.linalg.lstsq)
def lstsq(a: Any, b: Any, rcond: Any = None) -> Any:
    """(x, residuals, rank, s), x = pinv(a) b. The residuals are the sums of squares whenever
    a has more rows than columns; numpy gives an empty array when such an a is also rank
    deficient (the rank is known only when the program runs)."""
    a, b = in_common_dtype([a, b], "numpy.linalg.lstsq")
    a = lift(_matrices(a, "lstsq"))
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        _fail(ShapeError, f"numpy.linalg.lstsq: a of shape {a.shape} and b of shape {b.shape} "
                          "do not fit: a must be a matrix, b a vector or a matrix with as "
                          "many rows")
    b = cast(b, a.dtype)
    m, n = a.shape
    if rcond is None:
        rcond = np.finfo(a.dtype).eps * max(m, n)
    x = np.matmul(D.pinv(a, rcond=_cutoff(rcond, "lstsq")), b)
    s = D.svd(a, full_matrices=False)[1]
    rank = _sum(s > rcond * _max(s), dtype=np.int32)
    if m > n:
        residual = b - np.matmul(a, x)
        residuals = reshape(_sum(residual * residual, axis=0), (-1,))
    else:
        residuals = np.zeros((0,), a.dtype)
    return x, residuals, rank, s


@implements(np.linalg.matrix_power)
def matrix_power(a: Any, n: Any) -> Any:
    """Products of squares of a (numpy's order of products); a's inverse for n < 0."""
    n = operator.index(n)
    a = asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        _fail(ShapeError, f"numpy.linalg.matrix_power: needs square matrices in the last two "
                          f"axes, got shape {a.shape}")
    if n == 0:
        return broadcast_to_shape(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    if n < 0:
        a, n = inv(a), -n
    if n == 3:
        return np.matmul(np.matmul(a, a), a)
    result, power = None, a
    while n:
        n, bit = divmod(n, 2)
        if bit:
            result = power if result is None else np.matmul(result, power)
        if n:
            power = np.matmul(power, power)
    return result


# ---- norms -----------------------------------------------------------------------------------
@implements(np.linalg.norm)
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """Vector norms (ord None/2, 1, inf, -inf, 0, any other number) over one axis, matrix
    norms (None/'fro', 'nuc', 2, -2, 1, -1, inf, -inf) over two, as numpy."""
    x = asarray(x)
    if x.dtype.kind != "f":
        x = cast(x, np.dtype(np.float64))
    if axis is None:
        if ord is None:
            return np.sqrt(_sum(x * x, keepdims=keepdims))
        if x.ndim not in (1, 2):
            _fail(ValueError, f"numpy.linalg.norm: improper number of dimensions to norm "
                              f"(shape {x.shape} with ord={ord!r} needs axis=)")
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(normalize_axis(a, x.ndim, "numpy.linalg.norm") for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) != 2 or axes[0] == axes[1]:
        _fail(ValueError, f"numpy.linalg.norm: axis={axis!r} names neither one axis (a vector "
                          "norm) nor two different axes (a matrix norm)")
    out = _matrix_norm(x, ord, axes)
    if keepdims:
        out = reshape(out, tuple(1 if d in axes else k for d, k in enumerate(x.shape)))
    return out


def _vector_norm(x: Any, ord: Any, axis: tuple[int, ...], keepdims: bool) -> Any:
    """The norm of the vectors along `axis` (their elements, when several axes)."""
    if ord is None or ord == 2:
        return np.sqrt(_sum(x * x, axis=axis, keepdims=keepdims))
    if isinstance(ord, str) or not isinstance(ord, (int, float, np.number)):
        _fail(ValueError, f"numpy.linalg.norm: invalid norm order {ord!r} for vectors")
    if ord == np.inf:
        return _max(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return _min(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        return _sum(cast(x != 0, x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _sum(np.abs(x), axis=axis, keepdims=keepdims)
    return _sum(np.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


def _matrix_norm(x: Any, ord: Any, axes: tuple[int, int]) -> Any:
    rows, cols = axes
    if ord in (None, "fro"):
        return np.sqrt(_sum(x * x, axis=axes))
    if ord in ("nuc", 2, -2):
        s = D.svd(lift(moveaxis(x, axes, (-2, -1))), full_matrices=False)[1]
        return (_sum if ord == "nuc" else _max if ord == 2 else _min)(s, axis=-1)
    if ord in (1, -1, np.inf, -np.inf):
        summed, kept = (rows, cols) if ord in (1, -1) else (cols, rows)
        extremum = _max if ord > 0 else _min
        return extremum(_sum(np.abs(x), axis=summed), axis=kept - (kept > summed))
    _fail(ValueError, f"numpy.linalg.norm: invalid norm order {ord!r} for matrices")


if hasattr(np.linalg, "vector_norm"):      # numpy 2's array-API names
    @implements(np.linalg.vector_norm)
    def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
        x = asarray(x)
        if x.dtype.kind != "f":
            x = cast(x, np.dtype(np.float64))
        axes = tuple(range(x.ndim)) if axis is None else (
            (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis))
        axes = tuple(normalize_axis(a, x.ndim, "numpy.linalg.vector_norm") for a in axes)
        return _vector_norm(x, ord, axes, keepdims)

    @implements(np.linalg.matrix_norm)
    def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
        return norm(x, ord, axis=(-2, -1), keepdims=keepdims)

    @implements(np.linalg.svdvals)
    def svdvals(x: Any, /) -> Any:
        return svd(x, compute_uv=False)


@implements(np.linalg.cond)
def cond(x: Any, p: Any = None) -> Any:
    """s_max / s_min (p None, 2; -2 its inverse), else norm(x, p) norm(inv(x), p); NaN becomes
    inf unless x holds NaN, as numpy. A singular x raises LinAlgError for the p that invert it
    (numpy gives inf)."""
    x = _matrices(x, "cond")
    if p is None or p in (2, -2):
        s = svd(x, compute_uv=False)
        big, small = s[..., 0], s[..., -1]
        ratio = small / big if p == -2 else big / small
    else:
        ratio = norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1))
    return np.where(np.isnan(ratio) & ~np.any(np.isnan(x), axis=(-2, -1)), np.inf, ratio)


@implements(np.linalg.matrix_rank)
def matrix_rank(a: Any, tol: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Any:
    """The number of singular values (|eigenvalues| with hermitian=True) above tol, by default
    the largest times rtol (max(rows, columns) times the dtype's eps); an integer, not
    differentiated."""
    a = asarray(a)
    if a.ndim < 2:
        return cast(np.any(a != 0), np.dtype(np.intp))
    a = _matrices(a, "matrix_rank")
    s = np.abs(eigvalsh(a)) if hermitian else svd(a, compute_uv=False)
    if tol is None:
        scale = max(a.shape[-2:]) * np.finfo(a.dtype).eps if rtol is None else rtol
        tol = _max(s, axis=-1, keepdims=True) * scale
    else:
        tol = reshape(asarray(tol), np.shape(tol) + (1,))
    return _sum(s > tol, axis=-1, dtype=np.intp)


@implements(np.linalg.multi_dot)
def multi_dot(arrays: Any, *, out: Any = None) -> Any:
    """The product of a chain of matrices (the first and last may be vectors), in the order
    of fewest multiplications, as numpy chooses it."""
    reject("numpy.linalg.multi_dot", out=out)
    arrays = [asarray(x) for x in arrays]
    if len(arrays) < 2:
        _fail(ValueError, "numpy.linalg.multi_dot: expecting at least two arrays")
    first, last = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first:
        arrays[0] = reshape(arrays[0], (1, -1))
    if last:
        arrays[-1] = reshape(arrays[-1], (-1, 1))
    result = _chain(arrays, _order([x.shape[0] for x in arrays] + [arrays[-1].shape[1]]),
                    0, len(arrays) - 1)
    return reshape(result, result.shape[int(first):result.ndim - int(last)])


def _order(dims: list[int]) -> list[list[int]]:
    """split[i][j]: where the cheapest product of matrices i..j splits (dynamic programming
    over the chain's dimensions)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j], split[i][j] = min(
                (cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k)
                for k in range(i, j))
    return split


def _chain(arrays: list[Any], split: list[list[int]], i: int, j: int) -> Any:
    if i == j:
        return arrays[i]
    k = split[i][j]
    return np.matmul(_chain(arrays, split, i, k), _chain(arrays, split, k + 1, j))
