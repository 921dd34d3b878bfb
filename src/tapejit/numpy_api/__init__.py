"""numpy -> primitives: how each supported numpy function, ufunc and method lowers to the IR.

The rules run at trace time on tracers (and on the constants mixed with them). They implement
numpy's semantics: dtype promotion (NEP 50: Python scalars are weak), broadcasting, `axis` and
`keepdims`, negative axes. Modules, each importing only this package and those before it:
math (ufuncs), operators (Python's operators on tracers), shape (layout functions), rearrange
(tile, flip, roll, rot90), reductions (and the reducing ufunc methods), indexing
(getitem/setitem), writes (np.add.at, x.flat, out=), gathers (take, repeat, pad), linalg
(contractions), decompositions (np.linalg's matrix functions and norms), creation (np.array of
traced values, np.full, np.linspace, np.meshgrid), numeric (interp, convolve, gradient, ...:
compositions of the above), polynomial (polyval, polyfit, ...), statistics (cov, bincount,
...), sorting (sort, median, quantile, searchsorted, unique).
Each registers its rules with `implements`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..avals import dtype_name
from ..errors import DtypeError, ShapeError, UnsupportedOperationError, at_source, user_source
from ..ops import elementwise as E
from ..trace import FUNCTION_RULES, Tracer, lift  # noqa: F401  (lift: the rules import it here)


_UFUNC_BASED = {"clip", "round", "around"}   # their out= casts as a ufunc's (numpy's same_kind;
                                            # the reductions' out= casts anyhow, as numpy's)


def implements(*funcs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a rule as the lowering of numpy functions (looked up by __array_function__);
    a call given `out=` (a traced array, or one a constructor made in the function) is the
    rule's result written into it, as `out[...] = result`."""
    def register(rule: Callable[..., Any]) -> Callable[..., Any]:
        def writing(*args: Any, out: Any = None, **kwargs: Any) -> Any:
            result = rule(*args, **kwargs)
            if out is None:
                return result
            target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
            return written(f"numpy.{funcs[0].__name__}", target, result,
                           funcs[0].__name__ in _UFUNC_BASED)
        code = getattr(rule, "__code__", None)
        takes_out = code is not None and "out" in code.co_varnames[:code.co_argcount
                                                                   + code.co_kwonlyargcount]
        for f in funcs:
            FUNCTION_RULES[f] = writing if takes_out else rule
        return rule
    return register


def written(what: str, target: Any, result: Any, same_kind: bool) -> Any:
    """`target[...] = result` for an out= argument (a traced array, or one a constructor made
    in the function, which restarts the trace), checked as numpy checks it: the result's
    shape, and with `same_kind` (a ufunc's out=) numpy's casting rule."""
    if not isinstance(target, (np.ndarray, Tracer)) or target.shape != np.shape(result):
        raise ShapeError(at_source(f"{what}: out= must be an array of the result's shape "
                                   f"{np.shape(result)}", user_source()))
    if same_kind and not np.can_cast(dtype_of(result), target.dtype, "same_kind"):
        raise DtypeError(at_source(f"{what}: its {dtype_of(result)} result cannot be written "
                                   f"into the {target.dtype} out= (numpy's same_kind casting)",
                                   user_source()))
    target[...] = result
    return target


def dtype_of(x: Any) -> np.dtype:
    if isinstance(x, Tracer):
        return x.dtype
    return np.dtype(np.bool_) if isinstance(x, bool) else np.asarray(x).dtype


def asarray(x: Any) -> Any:
    """A tracer stays a tracer; anything else becomes a numpy constant."""
    return x if isinstance(x, Tracer) else np.asarray(x)


def cast(x: Any, dtype: np.dtype) -> Any:
    """`x` in `dtype`: a convert op for tracers, a numpy conversion for constants."""
    if isinstance(x, Tracer):
        return x if x.dtype == dtype else E.convert(x, dtype=dtype_name(dtype))
    if isinstance(x, (bool, int, float)):
        return dtype.type(x)
    return np.asarray(x).astype(dtype)


def normalize_axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(at_source(f"{what}: axis {axis} is out of bounds for an array of "
                                   f"dimension {ndim}", user_source()))
    return int(axis) % max(ndim, 1)


def normalize_axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    """`axis=None | int | tuple` as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = tuple(sorted(normalize_axis(int(a), ndim, what) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{what}: repeated axis in {axis}")
    return out


def reject(what: str, **given: Any) -> None:
    """Raise for keyword arguments that tapejit does not support (when not left at default)."""
    for name, value in given.items():
        if value is not None and value is not np._NoValue:
            raise UnsupportedOperationError(at_source(
                f"{what}: the argument {name}= is not supported on traced arrays",
                user_source()))


from . import math, operators, shape, rearrange, reductions, indexing, writes  # noqa: E402,F401
from . import gathers  # noqa: E402,F401
from . import linalg, decompositions  # noqa: E402,F401
from . import creation, numeric, polynomial, statistics  # noqa: E402,F401
from . import sorting  # noqa: E402,F401
from . import special  # noqa: E402,F401  (scipy.special, where scipy is importable)
from . import stats  # noqa: E402,F401  (scipy.stats, once scipy is imported)
from . import scipy_linalg  # noqa: E402,F401  (scipy.linalg, once scipy.linalg is imported)
