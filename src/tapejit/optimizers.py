"""Optimizers and learning-rate schedules over pytrees of arrays, written in plain numpy.

    opt = tj.optimizers.Adam(tj.optimizers.warmup(tj.optimizers.cosine_decay(1e-3, 900), 100))
    state = opt.init(params)                               # a dict pytree of arrays
    params, state = opt.update(grads, state, params)       # functional: returns new trees

    @tj.jit                                                # forward, reverse and update:
    def train_step(params, state, x, y):                   # one native call per step
        loss, grads = tj.value_and_grad(loss_fn)(params, x, y)
        params, state = opt.update(grads, state, params)
        return params, state, loss

Everything that changes at run time is a leaf of the state: the step count (which a schedule
reads), the hyperparameters (`state["hyper"]`, float64 0-d arrays: assign new values freely; a
schedule's numbers are there too, e.g. `state["hyper"]["learning_rate"]["steps"]`) and the
per-parameter slots (momentum, moments). So under `tj.jit` a schedule, a schedule of another
length or a new hyperparameter value never recompiles. What is fixed when the optimizer is made
is its structure: the kind of schedule, and which terms exist (momentum, weight decay or
clipping given as 0/None leave their slots and arithmetic out of the program). The update keeps
each parameter's dtype: float32 parameters get float32 arithmetic.

`opt.apply(grads, variables)` is the stateful form for `tj.Variable` (anything with `.numpy()`
and `.assign()`): the optimizer keeps the state for that list of variables.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from .errors import ArgumentError
from .pytree import flatten, leaf_paths, tree_map, unflatten

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "clip_by_global_norm",
           "global_norm", "constant", "step_decay", "cosine_decay", "warmup"]

Schedule = Callable[[Any], Any]      # one of the schedules below: step count (0 first) -> rate


# ---------------------------------------------------------------------------------------------
# schedules: frozen, numpy-only, so they run on a traced step count too


@dataclasses.dataclass(frozen=True)
class constant:
    """The same learning rate at every step."""

    value: float

    def __call__(self, step: Any) -> Any:
        return self.value


@dataclasses.dataclass(frozen=True)
class step_decay:
    """`value * factor ** floor(step / every)`: multiplied by `factor` every `every` steps."""

    value: float
    every: int
    factor: float = 0.1

    def __call__(self, step: Any) -> Any:
        return self.value * self.factor ** np.floor(step / self.every)


@dataclasses.dataclass(frozen=True)
class cosine_decay:
    """Half a cosine from `value` at step 0 to `final` at step `steps`, then `final`."""

    value: float
    steps: int
    final: float = 0.0

    def __call__(self, step: Any) -> Any:
        progress = np.minimum(step, self.steps) / self.steps
        return self.final + (self.value - self.final) * 0.5 * (1.0 + np.cos(math.pi * progress))


@dataclasses.dataclass(frozen=True)
class warmup:
    """A linear ramp over the first `steps` steps up to `schedule` (a number or a schedule),
    which then starts at its own step 0."""

    schedule: float | Schedule
    steps: int

    def __call__(self, step: Any) -> Any:
        ramp = np.minimum(1.0, (step + 1.0) / self.steps)
        after = np.maximum(step - self.steps, 0.0)
        inner = self.schedule(after) if callable(self.schedule) else self.schedule
        return ramp * inner


def _numbers(schedule: float | Schedule) -> Any:
    """A schedule's numbers as a dict pytree (a number as itself): they go into the state."""
    if not dataclasses.is_dataclass(schedule):
        if callable(schedule):
            raise ArgumentError(f"learning_rate: {schedule!r} is not a tj.optimizers schedule; "
                                f"use constant, step_decay, cosine_decay or warmup")
        return schedule
    return {f.name: _numbers(getattr(schedule, f.name)) for f in dataclasses.fields(schedule)}


def _evaluate(schedule: float | Schedule, numbers: Any, step: Any) -> Any:
    """The learning rate at `step` of `schedule` with its numbers taken from the state."""
    if not callable(schedule):
        return numbers
    return _rebuild(schedule, numbers)(step)


def _rebuild(schedule: Any, numbers: Any) -> Any:
    if not dataclasses.is_dataclass(schedule):
        return numbers
    return dataclasses.replace(schedule, **{k: _rebuild(getattr(schedule, k), v)
                                            for k, v in numbers.items()})


# ---------------------------------------------------------------------------------------------
# gradient clipping


def global_norm(tree: Any) -> Any:
    """The 2-norm of all leaves of `tree` together (float64)."""
    leaves, _ = flatten(tree)
    return np.sqrt(sum(np.sum(np.square(_like(leaf, np.float64(0.0)))) for leaf in leaves))


def clip_by_global_norm(grads: Any, max_norm: Any) -> Any:
    """`grads` scaled by `min(1, max_norm / global_norm(grads))`: their direction is kept and
    their global norm is at most `max_norm`."""
    norm = global_norm(grads)
    scale = np.minimum(1.0, max_norm / np.maximum(norm, 1e-30))
    return tree_map(lambda g: g * _like(scale, g), grads)


def _like(h: Any, x: Any) -> Any:
    """`h` (an array, a number, or a tracer) in the dtype of `x` (a Python float counts as
    float64)."""
    h = h if hasattr(h, "dtype") else np.float64(h)
    dtype = getattr(x, "dtype", h.dtype)
    return h if h.dtype == dtype else h.astype(dtype)


# ---------------------------------------------------------------------------------------------
# the optimizers


class Optimizer:
    """The update rule shared by every optimizer: schedule, clipping, weight decay, per-leaf
    arithmetic. A subclass names its `slots` (trees like the parameters, started at zero) and
    writes `_leaf`, the update of one parameter array."""

    slots: tuple[str, ...] = ()
    decoupled = False          # weight decay: False adds wd*p to the gradient; True (AdamW)
    #                            subtracts lr*wd*p from the parameter

    def __init__(self, learning_rate: float | Schedule, *, weight_decay: float = 0.0,
                 clip_norm: float | None = None, **hyper: float) -> None:
        self.learning_rate = learning_rate
        self.hyper: dict[str, Any] = {"learning_rate": _numbers(learning_rate)}
        if weight_decay:
            self.hyper["weight_decay"] = weight_decay
        if clip_norm is not None:
            self.hyper["clip_norm"] = clip_norm
        self.hyper.update(hyper)
        for name, value in zip(leaf_paths(self.hyper, ""), flatten(self.hyper)[0]):
            if not isinstance(value, (int, float, np.floating, np.integer)) or value < 0:
                raise ArgumentError(f"{type(self).__name__}: {name.lstrip('_')} must be a "
                                    f"number >= 0, got {value!r}")
        self._variables: dict[tuple[int, ...], tuple[list[Any], dict]] = {}

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v!r}" for k, v in self.hyper.items() if k != "learning_rate")
        return f"{type(self).__name__}(learning_rate={self.learning_rate!r}, {hyper})"

    def init(self, params: Any) -> dict[str, Any]:
        """The state for `params`: step count, hyperparameters, and zeroed slots."""
        for leaf in flatten(params)[0]:
            if np.asarray(leaf).dtype.kind != "f":
                raise ArgumentError(f"{type(self).__name__}.init: parameters must be float "
                                    f"arrays, got dtype {np.asarray(leaf).dtype}")
        state: dict[str, Any] = {
            "step": np.zeros(()),
            "hyper": tree_map(lambda v: np.asarray(v, np.float64), self.hyper)}
        for slot in self.slots:
            state[slot] = tree_map(lambda p: np.zeros_like(np.asarray(p)), params)
        return state

    def update(self, grads: Any, state: dict[str, Any], params: Any) -> tuple[Any, dict]:
        """One step: `(new_params, new_state)`. Works eagerly and inside `tj.jit`."""
        hyper, step = state["hyper"], state["step"]
        if "clip_norm" in hyper:
            grads = clip_by_global_norm(grads, hyper["clip_norm"])
        h = {k: v for k, v in hyper.items() if k != "learning_rate"}
        h["learning_rate"] = _evaluate(self.learning_rate, hyper["learning_rate"], step)
        h.update(self._scalars(step, hyper))
        p_leaves, td = flatten(params)
        g_leaves, g_td = flatten(grads)
        if g_td != td:
            raise ArgumentError(f"{type(self).__name__}.update: the gradients have structure "
                                f"{g_td}, but the parameters have structure {td}")
        slot_leaves = [flatten(state[s])[0] for s in self.slots]
        new_p, new_slots = [], [[] for _ in self.slots]
        for i, (p, g) in enumerate(zip(p_leaves, g_leaves)):
            hp = {k: _like(v, p) for k, v in h.items()}
            if "weight_decay" in hp and not self.decoupled:
                g = g + hp["weight_decay"] * p
            p2, slots = self._leaf(p, g, tuple(s[i] for s in slot_leaves), hp)
            if "weight_decay" in hp and self.decoupled:
                p2 = p2 - hp["learning_rate"] * hp["weight_decay"] * p
            new_p.append(p2)
            for out, s in zip(new_slots, slots):
                out.append(s)
        new_state = dict(state, step=step + 1.0)
        for slot, leaves in zip(self.slots, new_slots):
            new_state[slot] = unflatten(td, leaves)
        return unflatten(td, new_p), new_state

    def _scalars(self, step: Any, hyper: dict[str, Any]) -> dict[str, Any]:
        """Per-step scalars shared by every leaf (Adam: the bias corrections)."""
        return {}

    def _leaf(self, p: Any, g: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        raise NotImplementedError

    def apply(self, grads: Sequence[Any], variables: Sequence[Any]) -> None:
        """Update `variables` (objects with `.numpy()` and `.assign(value)`, e.g. tj.Variable)
        in place with `grads` (one array per variable); the optimizer keeps their state."""
        variables, grads = list(variables), list(grads)
        if len(grads) != len(variables):
            raise ArgumentError(f"{type(self).__name__}.apply: {len(grads)} gradients for "
                                f"{len(variables)} variables")
        key = tuple(id(v) for v in variables)
        params = [np.asarray(v.numpy()) for v in variables]
        if key not in self._variables:            # the list keeps the ids from being reused
            self._variables[key] = (variables, self.init(params))
        new, state = self.update(grads, self._variables[key][1], params)
        self._variables[key] = (variables, state)
        for v, value in zip(variables, new):
            v.assign(value)


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and L2 weight decay
    (PyTorch's formulation: `v = momentum*v + g; p -= lr*v`, or `p -= lr*(g + momentum*v)`)."""

    def __init__(self, learning_rate: float | Schedule, momentum: float = 0.0,
                 nesterov: bool = False, **kwargs: Any) -> None:
        if nesterov and not momentum:
            raise ArgumentError("SGD: nesterov=True needs a momentum > 0")
        extra = {"momentum": momentum} if momentum else {}
        super().__init__(learning_rate, **kwargs, **extra)
        self.nesterov = nesterov
        self.slots = ("velocity",) if momentum else ()

    def _leaf(self, p: Any, g: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        if not slots:
            return p - h["learning_rate"] * g, ()
        v = h["momentum"] * slots[0] + g
        step = g + h["momentum"] * v if self.nesterov else v
        return p - h["learning_rate"] * step, (v,)


class Adam(Optimizer):
    """Adam (Kingma & Ba), with bias correction; `weight_decay` is L2 added to the gradient."""

    slots = ("m", "v")

    def __init__(self, learning_rate: float | Schedule = 1e-3, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8, **kwargs: Any) -> None:
        super().__init__(learning_rate, b1=b1, b2=b2, eps=eps, **kwargs)

    def _scalars(self, step: Any, hyper: dict[str, Any]) -> dict[str, Any]:
        t = step + 1.0
        return {"c1": 1.0 / (1.0 - hyper["b1"] ** t), "c2": 1.0 / (1.0 - hyper["b2"] ** t)}

    def _leaf(self, p: Any, g: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        m = h["b1"] * slots[0] + (1.0 - h["b1"]) * g
        v = h["b2"] * slots[1] + (1.0 - h["b2"]) * (g * g)
        step = (m * h["c1"]) / (np.sqrt(v * h["c2"]) + h["eps"])
        return p - h["learning_rate"] * step, (m, v)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): `p -= lr*wd*p` besides the
    Adam step."""

    decoupled = True

    def __init__(self, learning_rate: float | Schedule = 1e-3, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-2,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, b1, b2, eps, weight_decay=weight_decay, **kwargs)


class RMSprop(Optimizer):
    """RMSprop: `s = alpha*s + (1-alpha)*g**2; p -= lr*g/(sqrt(s) + eps)` (PyTorch's
    defaults)."""

    slots = ("square_avg",)

    def __init__(self, learning_rate: float | Schedule = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, **kwargs: Any) -> None:
        super().__init__(learning_rate, alpha=alpha, eps=eps, **kwargs)

    def _leaf(self, p: Any, g: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        s = h["alpha"] * slots[0] + (1.0 - h["alpha"]) * (g * g)
        return p - h["learning_rate"] * g / (np.sqrt(s) + h["eps"]), (s,)


class Adagrad(Optimizer):
    """Adagrad: `s += g**2; p -= lr*g/(sqrt(s) + eps)`."""

    slots = ("sum_sq",)

    def __init__(self, learning_rate: float | Schedule = 1e-2, eps: float = 1e-10,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, eps=eps, **kwargs)

    def _leaf(self, p: Any, g: Any, slots: tuple, h: dict[str, Any]) -> tuple[Any, tuple]:
        s = slots[0] + g * g
        return p - h["learning_rate"] * g / (np.sqrt(s) + h["eps"]), (s,)
