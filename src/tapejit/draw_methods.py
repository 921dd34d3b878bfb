"""What each numpy random method offered inside a traced function draws (draws.py records
them): the numpy call that makes its numbers, and the traced arithmetic numpy does on them
(`rs.normal(mu, s, n)`: `rs.standard_normal(n)`, then `mu + s * z`). `take(call, args, shape,
dtype)` is `Recording.take` for the recorder called: a tracer of the numbers that
`generator.<call>(*args)` makes on each call. A draw whose numbers depend on a traced value
(integer bounds, `choice`'s probabilities) is refused: it could not be made before the call.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .errors import ArgumentError, RandomnessError, at_source, user_source
from .trace import Tracer, lift


def _size(size: Any) -> tuple[int, ...]:
    if size is None:
        return ()
    return tuple(size) if isinstance(size, (tuple, list)) else (size,)


def _normal(call: str) -> Callable[..., Any]:
    def normal(take: Any, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        shape = np.broadcast_shapes(np.shape(loc), np.shape(scale)) if size is None \
            else _size(size)
        return loc + scale * take(call, (shape,), shape, np.float64)
    return normal


def _uniform(call: str) -> Callable[..., Any]:
    def uniform(take: Any, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        shape = np.broadcast_shapes(np.shape(low), np.shape(high)) if size is None \
            else _size(size)
        return low + (high - low) * take(call, (shape,), shape, np.float64)
    return uniform


def _concrete(what: str, *values: Any) -> None:
    if any(isinstance(v, Tracer) for v in values):
        raise RandomnessError(at_source(
            f"{what} of a numpy draw are traced values here: numpy's numbers depend on them, "
            f"so the draw cannot be made before the call. Pass them as numbers, or draw with "
            f"tj.random from a key passed in.", user_source()))


def _randint(call: str) -> Callable[..., Any]:
    def randint(take: Any, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
                endpoint: bool = False) -> Any:
        _concrete("the bounds", low, high)
        lo, hi = (0, low) if high is None else (low, high)
        if np.any(np.asarray(hi) + endpoint <= np.asarray(lo)):
            raise ArgumentError(at_source(f"randint/integers: low >= high ({lo!r} >= {hi!r} "
                                          f"with high exclusive), as numpy says", user_source()))
        args = (low, high, size, dtype) + ((endpoint,) if call == "integers" else ())
        return take(call, args, _size(size), dtype)
    return randint


def _choice(take: Any, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
    _concrete("the probabilities", p)
    items = None if np.ndim(a) == 0 and not isinstance(a, Tracer) else lift(a)
    n = int(a) if items is None else items.shape[0]
    index = take("choice", (n, size, replace, p), _size(size), np.int64)
    return index if items is None else items[index]


def _permutation(take: Any, x: Any, axis: int = 0) -> Any:
    if np.ndim(x) == 0 and not isinstance(x, Tracer):
        return take("permutation", (int(x),), (int(x),), np.int64)
    items = lift(x)
    n = items.shape[axis]
    return np.take(items, take("permutation", (n,), (n,), np.int64), axis=axis)


LEGACY: dict[str, Callable[..., Any]] = {
    "randn": lambda take, *shape: take("randn", shape, shape, np.float64),
    "rand": lambda take, *shape: take("rand", shape, shape, np.float64),
    "standard_normal": lambda take, size=None: take("standard_normal", (size,), _size(size),
                                                    np.float64),
    "random_sample": lambda take, size=None: take("random_sample", (size,), _size(size),
                                                  np.float64),
    "normal": _normal("standard_normal"), "uniform": _uniform("random_sample"),
    "randint": _randint("randint"), "choice": _choice,
    "permutation": lambda take, x: _permutation(take, x),
}
LEGACY["random"] = LEGACY["random_sample"]
GENERATOR: dict[str, Callable[..., Any]] = {
    "standard_normal": lambda take, size=None, dtype=np.float64: take(
        "standard_normal", (size, dtype), _size(size), dtype),
    "random": lambda take, size=None, dtype=np.float64: take("random", (size, dtype),
                                                             _size(size), dtype),
    "normal": _normal("standard_normal"), "uniform": _uniform("random"), "choice": _choice,
    "permutation": _permutation, "integers": _randint("integers"),
}
