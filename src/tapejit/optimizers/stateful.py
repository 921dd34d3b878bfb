"""Keras's stateful form of an optimizer: `opt.apply_gradients(zip(grads, variables))` updates
variables (`tj.Variable`, or anything with `.numpy()` and `.assign(value)`) in place.

The optimizer keeps one state for every variable it has updated: `init` of a dict of their
values, keyed by each variable's identity. A call takes the part for its variables (the slots'
entries for them; the shared step count and hyperparameters whole), runs the functional `step`
on it with the parameters keyed by variable name (what a weight-decay mask function sees), and
writes it back; a variable seen for the first time gets its slots from `init` then. So the step
count counts calls, as Keras's `iterations`, and clipping by global norm sees all of a call's
gradients together.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import user_error


class VariableStates:
    """An optimizer's variables (by key, in first-use order) and their state."""

    def __init__(self) -> None:
        self.variables: dict[str, Any] = {}      # also keeps each id from being reused
        self.state: Any = None


def apply(opt: Any, grads: list[Any], variables: list[Any], method: str) -> None:
    """Update `variables` in place with `grads` (None: skipped) by `opt`'s rule."""
    owner = f"{type(opt).__name__}.{method}"
    pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
    if not pairs:
        raise user_error(f"{owner}: no gradients (all are None): does the loss depend on "
                         f"the variables?")
    keys = [f"v{id(v)}" for _, v in pairs]
    if len(set(keys)) != len(keys):
        raise user_error(f"{owner}: a variable appears twice; add its gradients first")
    for g, v in pairs:
        if not (callable(getattr(v, "numpy", None)) and callable(getattr(v, "assign", None))):
            raise user_error(f"{owner}: {v!r} is not a variable (tj.Variable, or an object "
                             f"with .numpy() and .assign())")
        if np.shape(g) != np.shape(v.numpy()):
            raise user_error(f"{owner}: a gradient of shape {np.shape(g)} for the variable "
                             f"{getattr(v, 'name', '')} of shape {np.shape(v.numpy())}")
    book = opt.__dict__.setdefault("_variable_states", VariableStates())
    new = {k: np.asarray(v.numpy()) for k, (_, v) in zip(keys, pairs) if k not in book.variables}
    if new:
        fresh = opt.init(new)
        book.state = fresh if book.state is None else _merge(book.state, fresh, tuple(
            book.variables), lambda old, _: old)
        book.variables.update((k, v) for k, (_, v) in zip(keys, pairs) if k in new)
    every, names = tuple(book.variables), _names([v for _, v in pairs], keys)
    params = {n: np.asarray(v.numpy()) for n, (_, v) in zip(names, pairs)}
    part = _select(book.state, every, dict(zip(names, keys)))
    new_params, part = opt.step({n: np.asarray(g) for n, (g, _) in zip(names, pairs)}, part,
                                params)
    book.state = _merge(book.state, part, every, lambda _, new: new, dict(zip(names, keys)))
    for n, (_, v) in zip(names, pairs):
        v.assign(new_params[n])


def _names(variables: list[Any], keys: list[str]) -> list[str]:
    """The variables' names, if each has its own; else their keys."""
    names = [getattr(v, "name", None) for v in variables]
    unique = all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
    return names if unique else keys


def _select(state: Any, every: tuple[str, ...], keys: dict[str, str]) -> Any:
    """`state` with each per-variable dict (keyed by `every`) cut down to `keys` (a name ->
    key dict), keyed by the names."""
    if isinstance(state, dict):
        if set(state) == set(every):   # (pytrees sort a dict's keys)
            return {n: state[k] for n, k in keys.items()}
        return {k: _select(v, every, keys) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return _rebuild(state, [_select(v, every, keys) for v in state])
    return state


def _merge(old: Any, new: Any, every: tuple[str, ...], shared: Callable[[Any, Any], Any],
           keys: dict[str, str] | None = None) -> Any:
    """`old` (per-variable dicts keyed by `every`) with `new`'s per-variable entries written in
    (keyed by the names of `keys`, a name -> key dict, or by the keys themselves); every other
    leaf is `shared(old_leaf, new_leaf)`."""
    if isinstance(old, dict):
        if set(old) == set(every):
            return {**old, **{(keys or {}).get(n, n): value for n, value in new.items()}}
        return {k: _merge(v, new[k], every, shared, keys) for k, v in old.items()}
    if isinstance(old, (tuple, list)):
        return _rebuild(old, [_merge(a, b, every, shared, keys) for a, b in zip(old, new)])
    return shared(old, new)


def _rebuild(like: Any, items: list[Any]) -> Any:
    if isinstance(like, list):
        return items
    return type(like)(*items) if hasattr(type(like), "_fields") else tuple(items)
