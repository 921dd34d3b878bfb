"""Gradient transformations with optax's protocol: `init(params) -> state` and
`update(updates, state, params=None) -> (updates, state)`, where `params + updates` are the new
parameters (`apply_updates`). A `Transform` is one rule (clip, scale, a moment estimate, weight
decay); `chain` applies several in order, its state the tuple of theirs, as `optax.chain`.

A rule's state is a dict: its hyperparameters under "hyper" (float64 0-d arrays: run-time values
under `tj.jit`, so assigning a new one never recompiles), the step count "step" where the rule
reads one (0 at the first update), and its slots, trees like the parameters started at zero.
Every rule is plain numpy on each leaf, so it runs eagerly and inside a traced training step,
and keeps each leaf's dtype: float32 updates get float32 arithmetic.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import user_error
from ..pytree import TreeDef, difference, flatten, leaf_paths, tree_difference, tree_map, unflatten
from . import stateful
from .schedules import evaluate, numbers_of

__all__ = ["GradientTransformation", "Transform", "chain", "apply_updates", "global_norm",
           "clip_by_global_norm", "clip", "scale", "scale_by_schedule", "scale_by_learning_rate",
           "scale_by_adam", "scale_by_rms", "scale_by_rss", "trace", "add_decayed_weights"]


class GradientTransformation:
    """The protocol, `init` and `update`, and what every transformation builds on it: `step`
    (the functional step) and Keras's stateful `apply_gradients` / `apply` for `tj.Variable`s."""

    def init(self, params: Any) -> Any:
        raise NotImplementedError

    def update(self, updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        raise NotImplementedError

    def step(self, grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
        """One step: `(new_params, new_state)`, i.e. `update` then `apply_updates`."""
        updates, state = self.update(grads, state, params)
        return apply_updates(params, updates), state

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> None:
        """Keras's form: update each variable (`tj.Variable`, or anything with `.numpy()` and
        `.assign()`) in place with its gradient; a None gradient is skipped. The optimizer keeps
        each variable's state, made at its first update."""
        pairs = [tuple(pair) for pair in grads_and_vars]
        if any(len(pair) != 2 for pair in pairs):
            raise user_error(f"{type(self).__name__}.apply_gradients: give (gradient, "
                             f"variable) pairs, e.g. zip(grads, variables)")
        stateful.apply(self, [g for g, _ in pairs], [v for _, v in pairs], "apply_gradients")

    def apply(self, grads: Sequence[Any], variables: Sequence[Any]) -> None:
        """`apply_gradients(zip(grads, variables))` (Keras 3's `optimizer.apply`)."""
        grads, variables = list(grads), list(variables)
        if len(grads) != len(variables):
            raise user_error(f"{type(self).__name__}.apply: {len(grads)} gradients for "
                             f"{len(variables)} variables")
        stateful.apply(self, grads, variables, "apply")


def apply_updates(params: Any, updates: Any) -> Any:
    """`params + updates` leaf by leaf, each in its parameter's dtype (`optax.apply_updates`)."""
    (p_leaves, td), (u_leaves, _) = flatten(params), flatten(updates)
    why = tree_difference(params, updates, "the parameters", "the updates")
    if why:
        raise user_error(f"apply_updates: the updates do not match the parameters: {why}")
    return unflatten(td, [_like(p + u, p) for p, u in zip(p_leaves, u_leaves)])


def global_norm(tree: Any) -> Any:
    """The 2-norm of all leaves of `tree` together (float64)."""
    leaves, _ = flatten(tree)
    return np.sqrt(sum(np.sum(np.square(_like(leaf, np.float64(0.0)))) for leaf in leaves))


def _like(h: Any, x: Any) -> Any:
    """`h` (an array, a number, or a tracer) in the dtype of `x` (a Python float counts as
    float64)."""
    h = h if hasattr(h, "dtype") else np.float64(h)
    dtype = getattr(x, "dtype", h.dtype)
    return h if h.dtype == dtype else h.astype(dtype)


def check_hyper(owner: str, hyper: dict[str, Any], signed: Sequence[str] = ()) -> None:
    """Every hyperparameter (a schedule's numbers included) a number, >= 0 unless `signed`."""
    for key, value in hyper.items():
        for path, leaf in zip(leaf_paths(value, key), flatten(value)[0]):
            if not isinstance(leaf, (int, float, np.floating, np.integer)) or (
                    leaf < 0 and key not in signed):
                kind = "a number" if key in signed else "a number >= 0"
                raise user_error(f"{owner}: {path} must be {kind}, got {leaf!r}")


# ---------------------------------------------------------------------------------------------
# rules sharing one state dict


class Rules(GradientTransformation):
    """Rules applied in order, sharing one state dict: "step" (if `counts`), "hyper" (every
    rule's hyperparameters, under the state names `rules` gives) and every rule's slots.

    The update runs leaf by leaf, each leaf through all the rules (and in `step` into its
    parameter), so a compiled step computes each parameter's update in one fused loop; only a
    rule that reads all the updates (`reads_updates`: clipping by global norm) waits for the
    rules before it to finish every leaf."""

    rules: list[tuple["Transform", dict[str, str]]]   # (rule, its hyper name -> the state's)
    counts: bool

    def init(self, params: Any) -> dict[str, Any]:
        """The state for `params`: step count, hyperparameters, and zeroed slots."""
        for leaf in flatten(params)[0]:
            if np.asarray(leaf).dtype.kind != "f":
                raise user_error(f"{type(self).__name__}.init: parameters must be float "
                                 f"arrays, got dtype {np.asarray(leaf).dtype}")
        state: dict[str, Any] = {"step": np.zeros(())} if self.counts else {}
        state["hyper"] = {names.get(k, k): tree_map(lambda v: np.asarray(v, np.float64), v)
                          for rule, names in self.rules for k, v in rule.hyper.items()}
        for rule, _ in self.rules:
            for slot in rule.slots:
                state[slot] = tree_map(lambda p: np.zeros_like(np.asarray(p)), params)
        return state

    def update(self, updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        """`(updates, new_state)`: the updates to add to the parameters (`apply_updates`)."""
        return self._run(updates, state, params, add=False)

    def step(self, grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
        """One step: `(new_params, new_state)`, i.e. `update` then `apply_updates`."""
        return self._run(grads, state, params, add=True)

    def _run(self, updates: Any, state: Any, params: Any, add: bool) -> tuple[Any, Any]:
        name = type(self).__name__
        if not isinstance(state, dict) or "hyper" not in state:
            raise user_error(f"{name}.update: the state must be what {name}.init(params) "
                             f"returned, got {type(state).__name__}")
        leaves, td = flatten(updates)
        ps = None
        if params is not None:
            ps = flatten(params)[0]
            why = tree_difference(params, updates, "the parameters", "the gradients")
            if why:
                raise user_error(f"{name}.update: the gradients do not match the parameters: "
                                 f"{why}")
        step, new_state = state.get("step"), dict(state)
        stages: list[list] = []
        for rule, names in self.rules:
            if rule.reads_updates or not stages:
                stages.append([])
            stages[-1].append((rule, {k: state["hyper"][names.get(k, k)] for k in rule.hyper}))
        for k, stage in enumerate(stages):
            leaves = self._stage(stage, leaves, ps, td, state, new_state, step,
                                 add and k == len(stages) - 1)
        if step is not None:
            new_state["step"] = step + 1.0
        return unflatten(td, leaves), new_state

    @staticmethod
    def _stage(stage: list, us: list, ps: list | None, td: TreeDef, state: dict,
               new_state: dict, step: Any, add: bool) -> list:
        """Rules that need nothing of each other's results but their own leaf, leaf by leaf
        (the first may read all of `us`); with `add`, each result added to its parameter."""
        rules = [(rule, rule._scalars(hyper, step, us), rule._applies(ps, td),
                  [flatten(state[s])[0] for s in rule.slots]) for rule, hyper in stage]
        out: list = []
        new_slots: list[list[list]] = [[[] for _ in rule.slots] for rule, *_ in rules]
        for i, u in enumerate(us):
            p = None if ps is None else ps[i]
            for (rule, scalars, applies, slots), new in zip(rules, new_slots):
                leaf_slots = tuple(s[i] for s in slots)
                if applies is None or applies[i]:
                    u, leaf_slots = rule._leaf(u, p, leaf_slots,
                                               {k: _like(v, u) for k, v in scalars.items()})
                for lst, s in zip(new, leaf_slots):
                    lst.append(s)
            out.append(_like(p + u, p) if add else u)
        for (rule, *_), new in zip(rules, new_slots):
            new_state.update((s, unflatten(td, leaves)) for s, leaves in zip(rule.slots, new))
        return out


class Transform(Rules):
    """One rule. A subclass names its `slots`, whether it `counts` steps, and writes `_leaf`
    (the new update and slots of one leaf), `_scalars` (what all leaves share) and, to skip
    leaves, `_applies`."""

    slots: tuple[str, ...] = ()
    counts = False
    reads_updates = False             # `_scalars` reads all the updates
    signed: tuple[str, ...] = ()      # hyperparameters that may be negative

    def __init__(self, **hyper: Any) -> None:
        check_hyper(type(self).__name__, hyper, self.signed)
        self.hyper = hyper

    @property
    def rules(self) -> list[tuple["Transform", dict[str, str]]]:     # type: ignore[override]
        return [(self, {})]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.hyper.items())})"

    def _scalars(self, hyper: dict[str, Any], step: Any, us: list) -> dict[str, Any]:
        """The 0-d values every leaf's rule reads (float64; each leaf gets them in its dtype).
        `us`, all the updates, only for a rule that `reads_updates`."""
        return dict(hyper)

    def _applies(self, ps: list | None, td: TreeDef) -> list[bool] | None:
        """Which leaves the rule changes (None: all)."""
        return None

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        raise NotImplementedError


class chain(GradientTransformation):
    """Transformations applied in order; the state is the tuple of theirs (`optax.chain`)."""

    def __init__(self, *transforms: Any) -> None:
        for t in transforms:
            if not (callable(getattr(t, "init", None)) and callable(getattr(t, "update", None))):
                raise user_error(f"chain: {t!r} is not a gradient transformation (an object "
                                 f"with init and update), e.g. tj.optimizers.scale(-0.1)")
        self.transforms = transforms

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.transforms))})"

    def init(self, params: Any) -> tuple:
        return tuple(t.init(params) for t in self.transforms)

    def update(self, updates: Any, state: Any, params: Any = None) -> tuple[Any, tuple]:
        if not isinstance(state, tuple) or len(state) != len(self.transforms):
            raise user_error(f"chain.update: the state must be what init(params) returned, "
                             f"a tuple of {len(self.transforms)} states")
        new_state = []
        for t, s in zip(self.transforms, state):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)


# ---------------------------------------------------------------------------------------------
# the rules


class clip_by_global_norm(Transform):
    """Scales all updates by `min(1, max_norm / global_norm(updates))`: their direction is kept
    and their global norm is at most `max_norm`."""

    reads_updates = True

    def __init__(self, max_norm: float) -> None:
        super().__init__(max_norm=max_norm)

    def _scalars(self, hyper: dict[str, Any], step: Any, us: list) -> dict[str, Any]:
        return {"factor": np.minimum(1.0, hyper["max_norm"] / np.maximum(global_norm(us),
                                                                         1e-30))}

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        return u * h["factor"], ()


class clip(Transform):
    """Clips each update element to `[-max_delta, max_delta]`."""

    def __init__(self, max_delta: float) -> None:
        super().__init__(max_delta=max_delta)

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        return np.minimum(np.maximum(u, -h["max_delta"]), h["max_delta"]), ()


class scale(Transform):
    """`updates * step_size` (a number: `scale(-0.1)` is gradient descent with rate 0.1)."""

    key, sign = "step_size", 1.0
    signed = ("step_size",)

    def __init__(self, step_size: Any) -> None:
        self._check_kind(step_size)
        self.schedule = step_size
        super().__init__(**{self.key: numbers_of(step_size, self.key)})

    def _check_kind(self, step_size: Any) -> None:
        if callable(step_size):
            raise user_error("scale: step_size must be a number; for a schedule use "
                             "scale_by_schedule")

    @property
    def counts(self) -> bool:       # type: ignore[override]
        return callable(self.schedule)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.schedule!r})"

    def _scalars(self, hyper: dict[str, Any], step: Any, us: list) -> dict[str, Any]:
        return {"factor": self.sign * evaluate(self.schedule, hyper[self.key], step)}

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        return u * h["factor"], ()


class scale_by_schedule(scale):
    """`updates * schedule(step)`, a tj.optimizers schedule of the step count (0 first)."""

    def _check_kind(self, step_size: Any) -> None:
        if not callable(step_size):
            raise user_error("scale_by_schedule: give a schedule (e.g. tj.optimizers."
                             "cosine_decay(0.1, 1000)); for a number use scale")


class scale_by_learning_rate(scale):
    """`updates * -learning_rate` (a number or a schedule): the last rule of a descent."""

    key, sign = "learning_rate", -1.0
    signed = ()

    def _check_kind(self, step_size: Any) -> None:
        pass


class scale_by_adam(Transform):
    """Adam's direction (Kingma & Ba): bias-corrected moments, `m̂ / (sqrt(v̂) + eps)`."""

    slots = ("m", "v")
    counts = True

    def __init__(self, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> None:
        super().__init__(b1=b1, b2=b2, eps=eps)

    def _scalars(self, hyper: dict[str, Any], step: Any, us: list) -> dict[str, Any]:
        t = step + 1.0
        return dict(hyper, c1=1.0 / (1.0 - hyper["b1"] ** t), c2=1.0 / (1.0 - hyper["b2"] ** t))

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        m = h["b1"] * slots[0] + (1.0 - h["b1"]) * u
        v = h["b2"] * slots[1] + (1.0 - h["b2"]) * (u * u)
        return (m * h["c1"]) / (np.sqrt(v * h["c2"]) + h["eps"]), (m, v)


class scale_by_rms(Transform):
    """RMSprop's direction: `s = decay*s + (1-decay)*u²; u / (sqrt(s) + eps)`."""

    slots = ("square_avg",)

    def __init__(self, decay: float = 0.9, eps: float = 1e-8) -> None:
        super().__init__(decay=decay, eps=eps)

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        s = h["decay"] * slots[0] + (1.0 - h["decay"]) * (u * u)
        return u / (np.sqrt(s) + h["eps"]), (s,)


class scale_by_rss(Transform):
    """Adagrad's direction: `s += u²; u / (sqrt(s) + eps)` (the root of the sum of squares)."""

    slots = ("sum_sq",)

    def __init__(self, eps: float = 1e-10) -> None:
        super().__init__(eps=eps)

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        s = slots[0] + u * u
        return u / (np.sqrt(s) + h["eps"]), (s,)


class trace(Transform):
    """Momentum: `v = decay*v + u`, then `v` (or Nesterov's `u + decay*v`)."""

    slots = ("velocity",)

    def __init__(self, decay: float, nesterov: bool = False) -> None:
        super().__init__(decay=decay)
        self.nesterov = nesterov

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        v = h["decay"] * slots[0] + u
        return (u + h["decay"] * v if self.nesterov else v), (v,)


class add_decayed_weights(Transform):
    """`updates + weight_decay * params`, for the parameters `mask` selects: a tree of bools
    like the parameters, or a function params -> such a tree (None: all)."""

    def __init__(self, weight_decay: float = 0.0,
                 mask: Any | Callable[[Any], Any] = None) -> None:
        super().__init__(weight_decay=weight_decay)
        self.mask = mask

    def _leaf(self, u: Any, p: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        return u + h["weight_decay"] * p, ()

    def _applies(self, ps: list | None, td: TreeDef) -> list[bool] | None:
        if ps is None:
            raise user_error("add_decayed_weights: weight decay needs the parameters: "
                             "update(grads, state, params)")
        if self.mask is None:
            return None
        tree = self.mask(unflatten(td, ps)) if callable(self.mask) else self.mask
        leaves, m_td = flatten(tree)
        if m_td != td:
            raise user_error(f"add_decayed_weights: the mask has structure {m_td}, but the "
                             f"parameters have structure {td} "
                             f"({difference(td, m_td, 'the parameters', 'the mask')}): give "
                             f"one bool per parameter array (or a function params -> such a "
                             f"tree)")
        for leaf in leaves:
            if not isinstance(leaf, (bool, np.bool_)):
                raise user_error(f"add_decayed_weights: a mask holds Python bools (fixed "
                                 f"when a step is traced), got {leaf!r}")
        return [bool(leaf) for leaf in leaves]
