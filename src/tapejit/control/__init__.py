"""Control flow on traced values: `where`, `cond`, `switch`, `fori_loop`, `scan`,
`while_loop` and `checkpoint` (the primitives are in primitives.py, their numba code in code.py).

Each traces the user's functions once into closed sub-tapes (values they capture become inputs
of the eqn) and records one eqn, so a loop's trace and its compile time do not grow with its
number of steps; the numba backend runs it as a real loop. Carries and operands are pytrees of
arrays; a body must return a carry of the same structure, shapes and dtypes as its input.
Called outside any trace they run at once on numpy (the same primitives, interpreted).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from .. import batching
from ..avals import Aval, aval_of
from ..errors import (ArgumentError, DtypeError, ShapeError, at_source, require_callable,
                      user_source)
from ..pytree import TreeDef, flatten, unflatten
from ..trace import Tracer
from . import batching_rules
from . import primitives as C

batching.install_mapper(batching_rules.mapper(C.scan))   # ops without a batching rule: a scan

__all__ = ["where", "cond", "switch", "fori_loop", "scan", "while_loop", "checkpoint"]


def where(condition: Any, x: Any, y: Any) -> Any:
    """`np.where(condition, x, y)`: both sides are computed, and selected element by element."""
    return np.where(condition, x, y)


def _leaves(tree: Any, what: str) -> tuple[list[Any], TreeDef, list[Aval]]:
    leaves, td = flatten(tree)
    values, avals = [], []
    for leaf in leaves:
        if not isinstance(leaf, Tracer):
            leaf = np.asarray(leaf)
            if leaf.dtype == object:
                raise ArgumentError(at_source(f"{what}: {type(leaf).__name__} is not an array "
                                              f"or a number", user_source()))
        values.append(leaf)
        avals.append(leaf.aval if isinstance(leaf, Tracer) else aval_of(leaf))
    return values, td, avals


def _fit(leaves: Sequence[Any], avals: Sequence[Aval], what: str, src: Any) -> list[Any]:
    """Output leaves checked against (and Python numbers converted to) the expected avals."""
    out = []
    for leaf, aval in zip(leaves, avals):
        if not isinstance(leaf, Tracer):
            leaf = np.asarray(leaf, aval.dtype)
        got = leaf.aval if isinstance(leaf, Tracer) else aval_of(leaf)
        if got != aval:
            kind = DtypeError if got.shape == aval.shape else ShapeError
            raise kind(at_source(f"{what} returns {got} where {aval} is expected: a carry "
                                 f"keeps its shape and dtype (convert with .astype)", src))
        out.append(leaf)
    return out


def _structure(td: TreeDef, expected: TreeDef, what: str, src: Any) -> None:
    if td != expected:
        raise ShapeError(at_source(f"{what} returns the structure {td}, but {expected} is "
                                   f"expected", src))


def _n_steps(lower: Any, upper: Any) -> tuple[Any, int | None]:
    """The trip count (an i64) and, when both bounds are concrete, the static length."""
    if not isinstance(lower, Tracer) and not isinstance(upper, Tracer):
        length = max(int(upper) - int(lower), 0)
        return np.int64(length), length
    return np.maximum(upper - lower, 0).astype(np.int64), None


def fori_loop(lower: Any, upper: Any, body: Callable[[Any, Any], Any], init: Any,
              checkpoints: int | str | None = None) -> Any:
    """`for i in range(lower, upper): val = body(i, val)`; returns `val`. The bounds may be
    traced (run-time) values: then the loop is reverse-differentiable once (not twice).
    `checkpoints` as for `scan`."""
    src = user_source()
    steps, length = _n_steps(lower, upper)
    leaves, td, avals = _leaves(init, "fori_loop init")
    start = lower.astype(np.int64) if isinstance(lower, Tracer) else np.int64(lower)
    index = Aval((), np.dtype(np.int64))

    def step(t: list[Any]) -> list[Any]:
        out, out_td = flatten(body(t[0], unflatten(td, t[1:])))
        _structure(out_td, td, "fori_loop's body", src)
        return [t[0] + 1] + _fit(out, avals, "fori_loop's body", src)

    tape, captured = C.close(step, [index] + avals)
    outs = C.scan(steps, start, *leaves, *captured, body=tape, n_carry=1 + len(leaves), n_xs=0,
                  length=length, reverse=False, checkpoints=_policy(checkpoints))
    return unflatten(td, list(outs[1:]))


def _policy(checkpoints: Any) -> Any:
    if checkpoints is None or checkpoints == "binomial":
        return checkpoints
    if isinstance(checkpoints, (int, np.integer)) and not isinstance(checkpoints, bool) \
            and checkpoints > 0:
        return int(checkpoints)
    raise ArgumentError(at_source(f"checkpoints={checkpoints!r}: use None (store every "
                                  f"carry), a number of snapshots k > 0, or \"binomial\"",
                                  user_source()))


def scan(f: Callable[[Any, Any], Any], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, checkpoints: int | str | None = None) -> tuple[Any, Any]:
    """`carry, y = f(carry, x)` for each x in `xs` (along the leading axis; `length` steps
    when xs is None); returns `(carry, ys)` with the ys stacked. `reverse` runs from the last
    step. `checkpoints`: the reverse sweep stores every carry (None), k snapshots and
    recomputes the rest segment by segment (k), or runs Revolve's binomial schedule on
    O(log n) snapshots ("binomial")."""
    src = user_source()
    leaves, td, avals = _leaves(init, "scan init")
    x_leaves, x_td, x_avals = _leaves(xs, "scan xs")
    lengths = {a.shape[0] if a.shape else None for a in x_avals}
    if None in lengths or len(lengths) > 1 or (length is not None and lengths - {length}):
        raise ShapeError(at_source(f"scan: xs need one common leading axis (and `length` "
                                   f"must match it); got {sorted(map(str, x_avals))} and "
                                   f"length={length}", src))
    length = next(iter(lengths)) if lengths else length
    if length is None:
        raise ArgumentError(at_source("scan: pass xs or a length", src))
    slices = [Aval(a.shape[1:], a.dtype) for a in x_avals]
    ys_td: list[TreeDef] = []

    def step(t: list[Any]) -> list[Any]:
        carry = unflatten(td, t[:len(leaves)])
        x = unflatten(x_td, t[len(leaves):]) if x_leaves or xs is not None else None
        result = f(carry, x)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ArgumentError(at_source("scan: f must return a pair (carry, y)", src))
        out, out_td = flatten(result[0])
        _structure(out_td, td, "scan's f", src)
        y_leaves, y_td = flatten(result[1])
        ys_td.append(y_td)
        return _fit(out, avals, "scan's f", src) + list(y_leaves)

    tape, captured = C.close(step, avals + slices)
    outs = C.scan(np.int64(length), *leaves, *x_leaves, *captured, body=tape,
                  n_carry=len(leaves), n_xs=len(x_leaves), length=int(length),
                  reverse=bool(reverse), checkpoints=_policy(checkpoints))
    return unflatten(td, list(outs[:len(leaves)])), unflatten(ys_td[0], list(outs[len(leaves):]))


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any],
               init: Any, checkpoints: int | str | None = None) -> Any:
    """`while cond_fun(val): val = body_fun(val)`; returns `val`. Reverse-differentiable: the
    reverse sweep replays the recorded number of steps (`checkpoints` as for `scan`)."""
    src = user_source()
    leaves, td, avals = _leaves(init, "while_loop init")

    def test(t: list[Any]) -> list[Any]:
        pred = cond_fun(unflatten(td, t))
        pred = pred if isinstance(pred, Tracer) else np.asarray(pred)
        if pred.shape != () or pred.dtype != np.bool_:
            raise DtypeError(at_source(f"while_loop: cond_fun must return a bool scalar, not "
                                       f"{pred.dtype}{list(pred.shape)}", src))
        return [pred]

    def step(t: list[Any]) -> list[Any]:
        out, out_td = flatten(body_fun(unflatten(td, t)))
        _structure(out_td, td, "while_loop's body_fun", src)
        return _fit(out, avals, "while_loop's body_fun", src)

    test_tape, test_captured = C.close(test, avals)
    body_tape, body_captured = C.close(step, avals)
    outs = C.while_(*leaves, *test_captured, *body_captured, cond=test_tape, body=body_tape,
                    n_cond=len(test_captured), checkpoints=_policy(checkpoints))
    return unflatten(td, list(outs[:-1]))


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """`branches[index](*operands)`, index clamped to the branches; every branch is traced
    and must return the same structure, shapes and dtypes."""
    src = user_source()
    if not branches:
        raise ArgumentError(at_source("switch needs at least one branch", src))
    leaves, td, avals = _leaves(tuple(operands), "switch operands")
    tapes, captured, out_tds = [], [], []
    for branch in branches:
        def run(t: list[Any], branch: Callable[..., Any] = branch) -> list[Any]:
            out, out_td = flatten(branch(*unflatten(td, t)))
            out_tds.append(out_td)
            return list(out)
        tape, got = C.close(run, avals)
        tapes.append(tape)
        captured.append(got)
    for k, (tape, out_td) in enumerate(zip(tapes, out_tds)):
        _structure(out_td, out_tds[0], f"branch {k}", src)
        expected = [o.aval for o in tapes[0].outvars]
        if [o.aval for o in tape.outvars] != expected:
            raise ShapeError(at_source(
                f"branch {k} returns {' '.join(str(o.aval) for o in tape.outvars)}, branch 0 "
                f"{' '.join(map(str, expected))}: every branch returns the same shapes and "
                f"dtypes", src))
    avals_of = [[C.value_aval(c) for c in got] for got in captured]
    padded = {f"branch{k}": C.pad_inputs(tape, len(avals), sum(avals_of[:k], []),
                                         sum(avals_of[k + 1:], []))
              for k, tape in enumerate(tapes)}
    index = index.astype(np.int64) if isinstance(index, Tracer) else np.int64(index)
    outs = C.cond(index, *leaves, *(c for g in captured for c in g), **padded)
    return unflatten(out_tds[0], list(outs))


def cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any],
         *operands: Any) -> Any:
    """`true_fn(*operands) if pred else false_fn(*operands)` for a traced bool scalar `pred`;
    both branches are traced, only one runs."""
    index = np.where(pred, 1, 0) if isinstance(pred, Tracer) else int(bool(pred))
    return switch(index, [false_fn, true_fn], *operands)


def checkpoint(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` whose intermediates are not stored for the reverse sweep: its VJP recomputes them
    (less memory, one more evaluation of `f`)."""
    require_callable(f, "tj.checkpoint")

    @functools.wraps(f)
    def remat(*args: Any) -> Any:
        leaves, td, avals = _leaves(args, f"checkpoint({getattr(f, '__name__', 'f')})")
        out_td: list[TreeDef] = []

        def run(t: list[Any]) -> list[Any]:
            out, otd = flatten(f(*unflatten(td, t)))
            out_td.append(otd)
            return list(out)

        tape, captured = C.close(run, avals)
        return unflatten(out_td[0], list(C.checkpoint(*leaves, *captured, body=tape)))
    return remat
