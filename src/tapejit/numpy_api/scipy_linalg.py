"""scipy.linalg on traced arrays, where scipy is installed: solve_triangular, cholesky,
cho_factor, cho_solve, lu_factor, lu_solve, solve, inv, det, expm, block_diag and eigh, as GP
and Kalman-filter code calls them, lowered to the primitives of ops/decompositions.py and
ops/triangular.py (and expm to products and a solve).

scipy's functions convert their arguments with np.asarray, which a tracer cannot pass. tapejit
does not import scipy.linalg (a few tens of ms): when it is imported, before or after tapejit,
tapejit replaces these names in the `scipy.linalg` namespace by wrappers that run the rule
here when an argument is traced and scipy's function otherwise (on_import.py catches the
import; `install` patches). A name taken from scipy.linalg before tapejit was imported stays scipy's
own function. Arrays follow scipy's batch rule: matrices in the last two axes, `b` a vector
when it has one axis, else matrices; batch axes broadcast. The other triangle of a matrix read
by one triangle is never read; `check_finite` and `overwrite_*` are accepted and ignored.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable, NoReturn

import numpy as np

from ..errors import ArgumentError, DtypeError, ShapeError, UnsupportedOperationError
from ..errors import at_source, user_source
from ..ops import decompositions as D
from ..ops import triangular as T
from ..trace import Tracer
from . import asarray, cast, lift
from .on_import import on_import
from .shape import broadcast_to_shape, in_common_dtype, reshape, swapaxes

_TRANS = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}
_STRUCTURES = {None: "gen", "gen": "gen", "general": "gen", "sym": "sym", "symmetric": "sym",
               "her": "sym", "hermitian": "sym", "pos": "pos", "positive definite": "pos",
               "diagonal": "diagonal", "tridiagonal": "tridiagonal", "banded": "gen",
               "upper triangular": "upper", "lower triangular": "lower"}


def _fail(error: type, message: str) -> NoReturn:
    raise error(at_source(f"scipy.linalg.{message}", user_source()))


def _floats(a: Any, what: str) -> Any:
    """`a` in a float dtype: integers and bools become float64, as in scipy."""
    a = asarray(a)
    if a.dtype.kind in "biu":
        return cast(a, np.dtype(np.float64))
    if a.dtype not in (np.float32, np.float64):
        _fail(DtypeError, f"{what}: arrays of {a.dtype} are not supported on traced arrays: "
                          "convert to float32 or float64")
    return a


def _square(a: Any, what: str) -> Any:
    """Float matrices, square in the last two axes."""
    a = _floats(a, what)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        _fail(ShapeError, f"{what}: expected a square matrix (or a stack of them in the last "
                          f"two axes), got shape {a.shape}")
    return a


def _operands(a: Any, b: Any, what: str) -> tuple[Any, Any, bool]:
    """(a, b as matrices, whether b was a vector): float, in one dtype, batch axes broadcast."""
    a, b = in_common_dtype([a, b], f"scipy.linalg.{what}")
    a, b = _square(a, what), _floats(b, what)
    vector = b.ndim == 1
    if b.ndim == 0 or (b.shape[0] if vector else b.shape[-2]) != a.shape[-1]:
        _fail(ShapeError, f"{what}: a of shape {a.shape} and b of shape {b.shape} do not fit: "
                          f"b needs {a.shape[-1]} rows (a vector, or matrices in its last two "
                          "axes)")
    b = reshape(b, b.shape + (1,)) if vector else b
    batch = _batch_shape(what, a, b)
    a = broadcast_to_shape(a, batch + a.shape[-2:], f"scipy.linalg.{what}")
    b = broadcast_to_shape(b, batch + b.shape[-2:], f"scipy.linalg.{what}")
    return lift(a), lift(b), vector


def _batch_shape(what: str, *arrays: Any) -> tuple[int, ...]:
    """The broadcast batch shape of matrices `arrays` (scipy's rule)."""
    try:
        return np.broadcast_shapes(*(x.shape[:-2] for x in arrays))
    except ValueError:
        _fail(ShapeError, f"{what}: the batch axes of shapes {[x.shape for x in arrays]} do "
                          "not broadcast")


def _solved(x: Any, vector: bool) -> Any:
    return reshape(x, x.shape[:-1]) if vector else x


def _trisolve(a: Any, b: Any, lower: bool, transpose: bool = False, unit: bool = False) -> Any:
    return T.triangular_solve(a, b, lower=bool(lower), transpose=transpose,
                              unit_diagonal=bool(unit))


def _triangle_of(a: Any, lower: bool) -> Any:
    """Matrices whose lower triangle is a's triangle `lower` names (D's ops read the lower)."""
    return a if lower else swapaxes(a, -1, -2)


def _symmetric(a: Any, lower: bool) -> Any:
    """The symmetric matrices of a's triangle `lower` names (the other one is not read)."""
    n = a.shape[-1]
    t = _triangle_of(a, lower)
    below = np.where(np.tri(n, dtype=bool), t, 0)
    return below + swapaxes(np.where(np.tri(n, k=-1, dtype=bool), t, 0), -1, -2)


# ---- triangular solves and Cholesky ----------------------------------------------------------
def solve_triangular(a: Any, b: Any, trans: Any = 0, lower: bool = False,
                     unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True) -> Any:
    """op(a) x = b, a's lower (upper) triangle, op(a) = a^T for trans 1, 'T', 2 or 'C'."""
    if isinstance(trans, Tracer) or trans not in _TRANS:
        _fail(ArgumentError, f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', "
                             f"got {trans!r}")
    a, b, vector = _operands(a, b, "solve_triangular")
    return _solved(_trisolve(a, b, lower, _TRANS[trans], unit_diagonal), vector)


def cholesky(a: Any, lower: bool = False, overwrite_a: bool = False,
             check_finite: bool = True) -> Any:
    """U with a = U^T U from a's upper triangle (scipy's default), or L from the lower one."""
    a = lift(_square(a, "cholesky"))
    return D.cholesky(a) if lower else swapaxes(D.cholesky(swapaxes(a, -1, -2)), -1, -2)


def cho_factor(a: Any, lower: bool = False, overwrite_a: bool = False,
               check_finite: bool = True) -> tuple[Any, bool]:
    """(c, lower): c is cholesky(a, lower), zeros in the other triangle (scipy leaves a's
    entries there, which cho_solve does not read)."""
    return cholesky(a, lower), bool(lower)


def cho_solve(c_and_lower: Any, b: Any, overwrite_b: bool = False,
              check_finite: bool = True) -> Any:
    """x with a x = b, a = c c^T (lower) or c^T c."""
    c, lower = c_and_lower
    c, b, vector = _operands(c, b, "cho_solve")
    y = _trisolve(c, b, lower, transpose=not lower)
    return _solved(_trisolve(c, y, lower, transpose=bool(lower)), vector)


# ---- LU --------------------------------------------------------------------------------------
def lu_factor(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> tuple[Any, Any]:
    """(lu, piv) of square matrices, as scipy's (LAPACK's getrf): not for rectangular ones on
    traced arrays."""
    a = _floats(a, "lu_factor")
    if a.ndim >= 2 and a.shape[-1] != a.shape[-2]:
        _fail(UnsupportedOperationError, f"lu_factor: a rectangular matrix (shape {a.shape}) is "
                                         "not supported on traced arrays, only square ones")
    return tuple(T.lu(lift(_square(a, "lu_factor"))))


def lu_solve(lu_and_piv: Any, b: Any, trans: Any = 0, overwrite_b: bool = False,
             check_finite: bool = True) -> Any:
    """x with a x = b (trans 0) or a^T x = b (1, 2), a = P L U as lu_factor gives it."""
    factors, pivots = lu_and_piv
    if isinstance(trans, Tracer) or trans not in (0, 1, 2):
        _fail(ArgumentError, f"lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    factors, b, vector = _operands(factors, b, "lu_solve")
    pivots = asarray(pivots)
    if pivots.dtype.kind not in "iu" or pivots.shape[-1:] != factors.shape[-1:]:
        _fail(ShapeError, f"lu_solve: piv must hold {factors.shape[-1]} integer pivots per "
                          f"matrix (as lu_factor returns them), got {pivots.dtype} of shape "
                          f"{pivots.shape}")
    pivots = broadcast_to_shape(pivots, factors.shape[:-1], "scipy.linalg.lu_solve")
    p = T.permutation_matrix(T.lu_pivots_to_permutation(lift(pivots)), factors.dtype)
    if trans == 0:                                          # l u x = p b
        y = _trisolve(factors, np.matmul(p, b), True, unit=True)
        return _solved(_trisolve(factors, y, False), vector)
    y = _trisolve(factors, _trisolve(factors, b, False, transpose=True), True, True, True)
    return _solved(np.matmul(swapaxes(p, -1, -2), y), vector)   # a^T = u^T l^T p


# ---- solve, inv, det ------------------------------------------------------------------------
def _structure(assume_a: Any, what: str) -> str:
    if not isinstance(assume_a, (str, type(None))) or assume_a not in _STRUCTURES:
        _fail(ArgumentError, f"{what}: {assume_a!r} is not a recognized matrix structure "
                             f"(assume_a: one of {', '.join(k for k in _STRUCTURES if k)})")
    return _STRUCTURES[assume_a]


def _solve(a: Any, b: Any, structure: str, lower: bool, transposed: bool) -> Any:
    """x with a x = b (a^T x = b when `transposed`), a read as `structure` says."""
    if structure in ("upper", "lower"):
        return _trisolve(a, b, structure == "lower", transposed)
    if structure == "diagonal":
        return b / np.diagonal(a, axis1=-2, axis2=-1)[..., None]
    if structure == "pos":
        c = D.cholesky(_triangle_of(a, lower))
        return _trisolve(c, _trisolve(c, b, True), True, transpose=True)
    if structure == "sym":
        return D.solve(_symmetric(a, lower), b)
    if structure == "tridiagonal":
        n = a.shape[-1]
        a = np.where(np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= 1, a, 0)
    return D.solve(swapaxes(a, -1, -2) if transposed else a, b)


def solve(a: Any, b: Any, lower: bool = False, overwrite_a: bool = False,
          overwrite_b: bool = False, check_finite: bool = True, assume_a: Any = None,
          transposed: bool = False) -> Any:
    """x with a x = b, for assume_a 'gen' (and None, 'banded': a general solve), 'sym',
    'her', 'pos' (Cholesky), 'diagonal', 'tridiagonal', 'upper/lower triangular'."""
    structure = _structure(assume_a, "solve")
    a, b, vector = _operands(a, b, "solve")
    return _solved(_solve(a, b, structure, lower, transposed), vector)


def inv(a: Any, overwrite_a: bool = False, check_finite: bool = True, *, assume_a: Any = None,
        lower: bool = False) -> Any:
    structure = _structure(assume_a, "inv")
    a = lift(_square(a, "inv"))
    eye = broadcast_to_shape(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return _solve(a, lift(eye), structure, lower, False)


def det(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> Any:
    sign, logdet = D.slogdet(lift(_square(a, "det")))
    return sign * np.exp(logdet)


# ---- eigh ------------------------------------------------------------------------------------
def eigh(a: Any, b: Any = None, *, lower: bool = True, eigvals_only: bool = False,
         overwrite_a: bool = False, overwrite_b: bool = False, type: int = 1,
         check_finite: bool = True, subset_by_index: Any = None, subset_by_value: Any = None,
         driver: Any = None) -> Any:
    """w (ascending) and v, of a's triangle `lower` names; with b, of the generalized problem
    (type 1: a v = w b v, 2: a b v = w v, 3: b a v = w v; v^T b v = 1, for 3 v^T b^-1 v =
    1), reduced with b's
    Cholesky factor l to the standard one of l^-1 a l^-T (types 2, 3: l^T a l)."""
    if subset_by_value is not None or type not in (1, 2, 3):
        _fail(UnsupportedOperationError, "eigh: subset_by_value (the count would depend on the "
                                         "values) and type other than 1, 2, 3 are not supported "
                                         "on traced arrays: use subset_by_index")
    if b is None:
        w, v = D.eigh(lift(_triangle_of(_square(a, "eigh"), lower)))
    else:
        a, b = in_common_dtype([a, b], "scipy.linalg.eigh")
        a, b = _square(a, "eigh"), _square(b, "eigh")
        if a.shape[-1] != b.shape[-1]:
            _fail(ShapeError, f"eigh: a of shape {a.shape} and b of shape {b.shape} differ")
        batch = _batch_shape("eigh", a, b)
        a, b = (lift(broadcast_to_shape(x, batch + x.shape[-2:])) for x in (a, b))
        w, v = _generalized(_symmetric(a, lower), D.cholesky(_triangle_of(b, lower)), type)
    if subset_by_index is not None:
        first, last = (int(i) for i in subset_by_index)
        w, v = w[..., first:last + 1], v[..., first:last + 1]
    return w if eigvals_only else (w, v)


def _generalized(a: Any, l: Any, kind: int) -> tuple[Any, Any]:
    if kind == 1:
        c = _trisolve(l, swapaxes(_trisolve(l, a, True), -1, -2), True)
    else:
        c = np.matmul(np.matmul(swapaxes(l, -1, -2), a), l)
    w, u = D.eigh(c)
    return w, np.matmul(l, u) if kind == 3 else _trisolve(l, u, True, transpose=True)


# ---- expm, block_diag ------------------------------------------------------------------------
# Higham (2005)'s scaling and squaring with the [13/13] Pade approximant: exp(a) = r(a / 2^s)
# ^ (2^s), s the fewest halvings that bring a's 1-norm under THETA_13
PADE_13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
           129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
           40840800., 960960., 16380., 182., 1.)
THETA_13 = 5.371920351148152
MAX_SQUARINGS = 16      # as JAX's default: a 1-norm above THETA_13 * 2^16 gives NaN


def _pade_13(a: Any) -> Any:
    """r(a) = (v - u)^-1 (v + u), u the odd part of the approximant's numerator, v the even."""
    b = PADE_13
    eye = broadcast_to_shape(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    a2 = np.matmul(a, a)
    a4 = np.matmul(a2, a2)
    a6 = np.matmul(a4, a2)
    u = np.matmul(a, np.matmul(a6, b[13] * a6 + b[11] * a4 + b[9] * a2)
                  + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = np.matmul(a6, b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 \
        + b[2] * a2 + b[0] * eye
    return D.solve(lift(v - u), lift(v + u))


def expm(A: Any) -> Any:
    """The matrix exponential (of each matrix of a stack), differentiable through the
    approximant's products and solve; s is chosen per matrix, MAX_SQUARINGS squarings run
    (each kept where s asks for it)."""
    a = lift(_square(A, "expm"))
    if a.shape[-1] == 0:
        return a
    norm = np.max(np.sum(np.abs(a), axis=-2), axis=-1)[..., None, None]
    limits = THETA_13 * 2.0 ** np.arange(MAX_SQUARINGS)
    s = np.sum(norm > limits, axis=-1, keepdims=True)
    r = _pade_13(a * np.power(0.5, cast(s, a.dtype)))
    for i in range(MAX_SQUARINGS):
        r = np.where(s > i, np.matmul(r, r), r)
    return np.where(norm > THETA_13 * 2.0 ** MAX_SQUARINGS, np.nan, r)


def block_diag(*arrs: Any) -> Any:
    """The block-diagonal matrix of arrays of at most two axes (a vector is one row, a number
    a 1x1 block), in their common dtype."""
    blocks = []
    for x in in_common_dtype(list(arrs), "scipy.linalg.block_diag"):
        if x.ndim > 2:
            _fail(UnsupportedOperationError, f"block_diag: arrays of more than two axes (shape "
                                             f"{x.shape}) are not supported on traced arrays")
        blocks.append(reshape(x, (1,) * (2 - x.ndim) + x.shape))
    width, done, rows = sum(x.shape[1] for x in blocks), 0, []
    for x in blocks:
        rows.append(np.pad(x, ((0, 0), (done, width - done - x.shape[1]))))
        done += x.shape[1]
    return np.concatenate(rows, axis=0)


RULES: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (solve_triangular, cholesky, cho_factor, cho_solve, lu_factor,
                            lu_solve, solve, inv, det, eigh, expm, block_diag)}


# ---- routing scipy.linalg's names ------------------------------------------------------------
def _traced(values: Any) -> bool:
    """Whether a value, or one in a tuple or list of them ((c, lower), block_diag's), is
    traced."""
    return any(isinstance(v, Tracer) or (isinstance(v, (tuple, list)) and _traced(v))
               for v in values)


def _routed(original: Callable[..., Any], rule: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if _traced(args) or _traced(kwargs.values()):
            return rule(*args, **kwargs)
        return original(*args, **kwargs)
    routed._tapejit = True      # type: ignore[attr-defined]
    return routed


def install(linalg: ModuleType) -> None:
    """Route scipy.linalg's names through RULES, once scipy.linalg is imported (once)."""
    for name, rule in RULES.items():
        original = getattr(linalg, name, None)
        if original is not None and not getattr(original, "_tapejit", False):
            setattr(linalg, name, _routed(original, rule))


on_import("scipy.linalg", install)
