"""The named optimizers: SGD, Adam, AdamW, RMSprop, Adagrad, each a fixed sequence of the rules
in gradient_transforms.py sharing one state dict (`Rules`):

    clip_by_global_norm(clip_norm)   if clip_norm is given
    add_decayed_weights(wd, mask)    L2 weight decay, if weight_decay (AdamW: after the rule)
    the optimizer's rule             trace / scale_by_adam / scale_by_rms / scale_by_rss
    scale_by_learning_rate(lr)       a number or a schedule

so `SGD(lr, momentum=m)` computes what `chain(trace(m), scale_by_learning_rate(lr))` does, with
one flat state: `step`, `hyper` (the optimizer's own argument names: `momentum`, `alpha`,
`clip_norm`) and the slots. Terms given as 0/None are left out of the state and the program.
"""
from __future__ import annotations

from typing import Any

from ..errors import user_error
from .schedules import Schedule, numbers_of
from .gradient_transforms import (Rules, Transform, add_decayed_weights, check_hyper,
                                  clip_by_global_norm, scale_by_adam, scale_by_learning_rate,
                                  scale_by_rms, scale_by_rss, trace)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


class Optimizer(Rules):
    """What every named optimizer shares: the learning rate, clipping and weight decay around
    its own rule (`_rule`, given its hyperparameters)."""

    decoupled = False          # weight decay: False adds wd*p to the gradient before the rule;
    #                            True (AdamW) adds it to the rule's direction
    counts = True

    def __init__(self, learning_rate: float | Schedule, *, weight_decay: float = 0.0,
                 clip_norm: float | None = None, mask: Any = None, **hyper: float) -> None:
        name = type(self).__name__
        self.learning_rate = learning_rate
        self.hyper: dict[str, Any] = {"learning_rate": numbers_of(learning_rate,
                                                                  "learning_rate")}
        if weight_decay:
            self.hyper["weight_decay"] = weight_decay
        if clip_norm is not None:
            self.hyper["clip_norm"] = clip_norm
        self.hyper.update(hyper)
        check_hyper(name, self.hyper)
        if mask is not None and not weight_decay:
            raise user_error(f"{name}: mask= picks the parameters weight decay applies to, "
                             f"but weight_decay is 0")
        decay = ([(add_decayed_weights(weight_decay, mask), {})] if weight_decay else [])
        self.rules = (
            ([(clip_by_global_norm(clip_norm), {"max_norm": "clip_norm"})]
             if clip_norm is not None else [])
            + ([] if self.decoupled else decay) + self._rule(self.hyper)
            + (decay if self.decoupled else [])
            + [(scale_by_learning_rate(learning_rate), {})])

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v!r}" for k, v in self.hyper.items() if k != "learning_rate")
        return f"{type(self).__name__}(learning_rate={self.learning_rate!r}, {hyper})"

    def _rule(self, h: dict[str, Any]) -> list[tuple[Transform, dict[str, str]]]:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and L2 weight decay
    (PyTorch's formulation: `v = momentum*v + g; p -= lr*v`, or `p -= lr*(g + momentum*v)`)."""

    def __init__(self, learning_rate: float | Schedule, momentum: float = 0.0,
                 nesterov: bool = False, **kwargs: Any) -> None:
        if nesterov and not momentum:
            raise user_error("SGD: nesterov=True needs a momentum > 0")
        self.nesterov = nesterov
        super().__init__(learning_rate, **kwargs, **({"momentum": momentum} if momentum else {}))

    def _rule(self, h: dict[str, Any]) -> list[tuple[Transform, dict[str, str]]]:
        if "momentum" not in h:
            return []
        return [(trace(h["momentum"], self.nesterov), {"decay": "momentum"})]


class Adam(Optimizer):
    """Adam (Kingma & Ba), with bias correction; `weight_decay` is L2 added to the gradient."""

    def __init__(self, learning_rate: float | Schedule = 1e-3, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8, **kwargs: Any) -> None:
        super().__init__(learning_rate, b1=b1, b2=b2, eps=eps, **kwargs)

    def _rule(self, h: dict[str, Any]) -> list[tuple[Transform, dict[str, str]]]:
        return [(scale_by_adam(h["b1"], h["b2"], h["eps"]), {})]


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): `p -= lr*wd*p` besides the
    Adam step; `mask` picks the parameters it applies to (e.g. not the biases)."""

    decoupled = True

    def __init__(self, learning_rate: float | Schedule = 1e-3, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-2,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, b1, b2, eps, weight_decay=weight_decay, **kwargs)


class RMSprop(Optimizer):
    """RMSprop: `s = alpha*s + (1-alpha)*g**2; p -= lr*g/(sqrt(s) + eps)` (PyTorch's
    defaults)."""

    def __init__(self, learning_rate: float | Schedule = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, **kwargs: Any) -> None:
        super().__init__(learning_rate, alpha=alpha, eps=eps, **kwargs)

    def _rule(self, h: dict[str, Any]) -> list[tuple[Transform, dict[str, str]]]:
        return [(scale_by_rms(h["alpha"], h["eps"]), {"decay": "alpha"})]


class Adagrad(Optimizer):
    """Adagrad: `s += g**2; p -= lr*g/(sqrt(s) + eps)`."""

    def __init__(self, learning_rate: float | Schedule = 1e-2, eps: float = 1e-10,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, eps=eps, **kwargs)

    def _rule(self, h: dict[str, Any]) -> list[tuple[Transform, dict[str, str]]]:
        return [(scale_by_rss(h["eps"]), {})]
