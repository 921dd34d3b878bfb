"""Learning-rate schedules: frozen dataclasses of numbers, evaluated with numpy on a step count
(0 for the first update) that may be traced. Their numbers go into an optimizer's state
(`numbers_of`), and a traced update rebuilds the schedule from the state (`evaluate`): under
`tj.jit` another schedule length or peak is another run-time value, never a recompile.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from ..errors import user_error

__all__ = ["constant", "step_decay", "cosine_decay", "warmup"]

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


def numbers_of(schedule: float | Schedule, name: str) -> Any:
    """A schedule's numbers as a dict pytree (a number as itself): they go into the state.
    `name` (the argument, e.g. learning_rate) is for the error message."""
    if not dataclasses.is_dataclass(schedule):
        if callable(schedule):
            raise user_error(f"{name}: {schedule!r} is not a tj.optimizers schedule; "
                             f"use constant, step_decay, cosine_decay or warmup")
        return schedule
    return {f.name: numbers_of(getattr(schedule, f.name), name)
            for f in dataclasses.fields(schedule)}


def evaluate(schedule: float | Schedule, numbers: Any, step: Any) -> Any:
    """The value at `step` of `schedule` (or a number) with its numbers taken from the state."""
    if not callable(schedule):
        return numbers
    return _rebuild(schedule, numbers)(step)


def _rebuild(schedule: Any, numbers: Any) -> Any:
    if not dataclasses.is_dataclass(schedule):
        return numbers
    return dataclasses.replace(schedule, **{k: _rebuild(getattr(schedule, k), v)
                                            for k, v in numbers.items()})
