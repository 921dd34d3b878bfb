"""Finite-difference checks shared by the test suite.

`check_grads(f, args)` compares tapejit's reverse-mode gradient of a scalar function with a
central difference along a random direction (float64): the directional derivative
<grad f(x), d> must match (f(x + h d) - f(x - h d)) / 2h. `check_vjp` does the same for
vector outputs with a random output cotangent.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

import tapejit as tj
from tapejit.pytree import flatten, unflatten


def _perturb(args: Sequence[Any], direction: list[np.ndarray], h: float, argnums: Sequence[int]):
    out = list(args)
    for k, i in enumerate(argnums):
        leaves, td = flatten(args[i])
        d_leaves = flatten(direction[k])[0]
        out[i] = unflatten(td, [np.asarray(x) + h * d for x, d in zip(leaves, d_leaves)])
    return out


def _random_like(tree: Any, rng: np.random.Generator) -> Any:
    leaves, td = flatten(tree)
    return unflatten(td, [rng.standard_normal(np.shape(x)) for x in leaves])


def _dot(a: Any, b: Any) -> float:
    return float(sum(np.sum(np.asarray(x, np.float64) * np.asarray(y, np.float64))
                     for x, y in zip(flatten(a)[0], flatten(b)[0])))


def numerical_directional(f: Callable[..., Any], args: Sequence[Any], direction: list,
                          argnums: Sequence[int], h: float = 1e-6) -> float:
    plus = f(*_perturb(args, direction, h, argnums))
    minus = f(*_perturb(args, direction, -h, argnums))
    return float((np.asarray(plus, np.float64) - np.asarray(minus, np.float64)) / (2 * h))


def check_grads(f: Callable[..., Any], args: Sequence[Any], argnums: Sequence[int] = (0,),
                rtol: float = 1e-5, atol: float = 1e-7, seed: int = 0, h: float = 1e-6) -> None:
    """Assert tapejit's gradient of scalar `f` matches central differences (float64)."""
    rng = np.random.default_rng(seed)
    grads = tj.grad(f, argnums=tuple(argnums))(*args)
    direction = [_random_like(args[i], rng) for i in argnums]
    analytic = sum(_dot(g, d) for g, d in zip(grads, direction))
    numeric = numerical_directional(f, args, direction, argnums, h)
    assert np.isclose(analytic, numeric, rtol=rtol, atol=atol), (
        f"gradient mismatch: reverse mode gives {analytic!r}, finite differences {numeric!r}")


def check_vjp(f: Callable[..., Any], args: Sequence[Any], rtol: float = 1e-5,
              atol: float = 1e-7, seed: int = 0, h: float = 1e-6) -> None:
    """Assert tapejit's VJP of `f` (any output structure) matches central differences."""
    rng = np.random.default_rng(seed)
    out, vjp_fn = tj.vjp(f, *args)
    ct = _random_like(out, rng)
    cts = vjp_fn(ct)
    argnums = list(range(len(args)))
    direction = [_random_like(a, rng) for a in args]
    analytic = sum(_dot(c, d) for c, d in zip(cts, direction))

    def projected(*xs: Any) -> float:
        return _dot(f(*xs), ct)

    numeric = numerical_directional(projected, args, direction, argnums, h)
    assert np.isclose(analytic, numeric, rtol=rtol, atol=atol), (
        f"vjp mismatch: reverse mode gives {analytic!r}, finite differences {numeric!r}")
