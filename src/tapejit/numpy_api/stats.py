"""scipy.stats on traced arrays: its distributions' methods, where scipy is importable.

scipy's methods convert their arguments with np.asarray, which a tracer cannot pass. Once
scipy.stats is imported (tapejit does not import it: checked when a trace opens), tapejit
replaces the public methods of its distribution classes (rv_continuous, rv_discrete, their
frozen distributions, multivariate_normal's and dirichlet's and theirs) by wrappers: a call
with a traced argument runs the rule of `RULES` for the distribution's class and the method
(stats_univariate.py, stats_multivariate.py), any other call scipy's method. A method or a
distribution without a rule raises UnsupportedOperationError naming it and what is supported,
at the user's line. The classes change, so `from scipy.stats import norm` before tapejit was
imported works too, and so do frozen distributions (`norm(0, s).logpdf(x)`), made inside or
outside the traced function. The module's function `entropy` is routed as scipy.special's
functions are (special.route): in the namespace.
"""
from __future__ import annotations

import functools
import inspect
import math
import sys
from typing import Any, Callable

import numpy as np

from ..errors import (UnsupportedAttributeError, UnsupportedOperationError, at_source,
                      user_error, user_source)
from ..guards import ON_FIRST_OPEN
from ..trace import Tracer
from . import asarray, cast

# (distribution class, method) -> rule(dist, *args, **kwargs), once scipy.stats is imported
RULES: dict[tuple[type, str], Callable[..., Any]] = {}
_NAMES: dict[type, str] = {}        # distribution class -> its name in scipy.stats
_METHODS = ("logpdf pdf logpmf pmf cdf logcdf sf logsf ppf isf rvs stats entropy moment median "
            "mean var std cov interval expect nnlf support fit marginal").split()
_WHY = {"ppf": "an inverse distribution function", "isf": "an inverse distribution function",
        "rvs": "random draws: use tj.random with a key passed in"}


def _traced(*groups: Any) -> bool:
    return any(isinstance(v, Tracer) for group in groups for v in group)


def _name(dist: Any) -> str:
    return _NAMES.get(type(dist)) or getattr(dist, "name", type(dist).__name__)


def _unsupported(dist: Any, method: str, error: type = UnsupportedOperationError) -> Exception:
    name = _name(dist)
    mine = sorted(m for (cls, m) in RULES if cls is type(dist))
    if mine:
        why = f" (it needs {_WHY[method]})" if method in _WHY else ""
        told = f"scipy.stats.{name}.{method} is not supported on traced arrays{why}.\n" \
               f"  Supported for {name}: {', '.join(mine)}"
    else:
        told = f"scipy.stats.{name} is not supported on traced arrays.\n  Supported: " + \
               ", ".join(sorted(set(_NAMES.values())))
    return error(at_source(told + "\n  Compute it outside the traced function, or write its "
                           "formula with numpy and scipy.special", user_source()))


def _rule(dist: Any, method: str) -> Callable[..., Any]:
    rule = RULES.get((type(dist), method))
    if rule is None:
        raise _unsupported(dist, method)
    return rule


def _routed(original: Callable[..., Any], method: str) -> Callable[..., Any]:
    """A distribution's method: the rule when an argument is traced, scipy's otherwise."""
    @functools.wraps(original)
    def routed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _traced(args, kwargs.values()):
            return _rule(self, method)(self, *args, **kwargs)
        return original(self, *args, **kwargs)
    routed._tapejit = True      # type: ignore[attr-defined]
    return routed


def _frozen_routed(original: Callable[..., Any], method: str,
                   parts: Callable[[Any], tuple]) -> Callable[..., Any]:
    """A frozen distribution's method of x: `parts(frozen)` is (distribution, its arguments,
    its keyword arguments)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def routed(self: Any, *args: Any, **kwargs: Any) -> Any:
        dist, params, keywords = parts(self)
        if not _traced(args, kwargs.values(), params, keywords.values()):
            return original(self, *args, **kwargs)
        rule = _rule(dist, method)
        quantiles = list(signature.bind(self, *args, **kwargs).arguments.values())[1:]
        return rule(dist, *quantiles, *params, **keywords)
    routed._tapejit = True      # type: ignore[attr-defined]
    return routed


class TracedFrozen:
    """A multivariate distribution frozen with traced parameters (scipy's frozen classes
    check their values): its supported methods of x."""

    def __init__(self, dist: Any, args: tuple, kwargs: dict) -> None:
        self.dist, self.args = dist, args
        self.kwargs = {k: v for k, v in kwargs.items() if k != "seed"}

    def __getattr__(self, method: str) -> Any:
        if method.startswith("__") or (type(self.dist), method) not in RULES:
            raise _unsupported(self.dist, method, UnsupportedAttributeError)
        rule = RULES[type(self.dist), method]
        return lambda x: rule(self.dist, x, *self.args, **self.kwargs)


def _call_routed(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def routed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _traced(args, kwargs.values()):
            return TracedFrozen(self, args, kwargs)
        return original(self, *args, **kwargs)
    routed._tapejit = True      # type: ignore[attr-defined]
    return routed


def _patch(cls: type, make: Callable[[Callable[..., Any], str], Callable[..., Any]],
           names: list[str]) -> None:
    """Replace `cls`'s own methods `names` by `make(scipy's method, name)`."""
    for name in names:
        original = cls.__dict__.get(name)
        if getattr(original, "_tapejit", False):     # (tapejit imported again: scipy's own)
            original = original.__wrapped__
        if inspect.isfunction(original):
            setattr(cls, name, make(original, name))


def _register(st: Any) -> None:
    """RULES and _NAMES for scipy.stats' distributions."""
    from . import stats_multivariate as M, stats_univariate as U     # (2 ms: with scipy only)
    for name, family in U.FAMILIES.items():
        cls = type(getattr(st, name))
        _NAMES[cls] = name
        RULES.update({(cls, m): rule for m, rule in U.rules(family).items()})
    mvn, dirichlet = type(st.multivariate_normal), type(st.dirichlet)
    _NAMES.update({mvn: "multivariate_normal", dirichlet: "dirichlet"})
    RULES.update({(mvn, "logpdf"): M.mvn_logpdf, (mvn, "pdf"): M.mvn_pdf,
                  (dirichlet, "logpdf"): M.dirichlet_logpdf, (dirichlet, "pdf"): M.dirichlet_pdf})


def entropy(pk: Any, qk: Any = None, base: Any = None, axis: Any = 0, *,
            nan_policy: str = "propagate", keepdims: bool = False) -> Any:
    """scipy's: the entropy of pk (or the relative entropy to qk), each normalized to sum 1
    along `axis`, in nats (or in `base`)."""
    import scipy.special as sc
    if nan_policy != "propagate":
        raise UnsupportedOperationError(at_source(
            f"scipy.stats.entropy: nan_policy={nan_policy!r} is not supported on traced arrays "
            f"(NaN propagates)", user_source()))
    if base is not None and base <= 0:
        raise user_error("scipy.stats.entropy: `base` must be a positive number or `None`.")
    if axis is None:
        pk, qk, axis = np.ravel(pk), None if qk is None else np.ravel(qk), 0
    pk = asarray(pk)
    pk = cast(pk, np.promote_types(pk.dtype, np.float64) if pk.dtype.kind != "f" else pk.dtype)
    pk = pk / np.sum(pk, axis=axis, keepdims=True)
    if qk is None:
        vec = sc.entr(pk)
    else:
        pk, qk = np.broadcast_arrays(pk, qk)
        vec = sc.rel_entr(pk, qk / np.sum(qk, axis=axis, keepdims=True))
    s = np.sum(vec, axis=axis, keepdims=keepdims)
    return s if base is None else s / math.log(base)


def install() -> None:
    """Route scipy.stats' methods through RULES, once scipy.stats is imported."""
    st = sys.modules.get("scipy.stats")
    if RULES or st is None:
        return
    from scipy.stats import _distn_infrastructure as di, _multivariate as mv
    from .special import route
    route(st, "entropy", entropy)
    _register(st)
    for cls in (di.rv_generic, di.rv_continuous, di.rv_discrete, type(st.multivariate_normal),
                type(st.dirichlet)):
        _patch(cls, _routed, _METHODS)
    for cls in (type(st.multivariate_normal), type(st.dirichlet)):
        _patch(cls, lambda original, name: _call_routed(original), ["__call__"])
    univariate = lambda f: (f.dist, f.args, f.kwds)
    for cls in (di.rv_frozen, di.rv_continuous_frozen, di.rv_discrete_frozen):
        _patch(cls, lambda o, name: _frozen_routed(o, name, univariate), _METHODS)
    _patch(mv.multivariate_normal_frozen, lambda o, name: _frozen_routed(
        o, name, lambda f: (f._dist, (f.mean, f.cov_object, f.allow_singular), {})), _METHODS)
    _patch(mv.dirichlet_frozen, lambda o, name: _frozen_routed(
        o, name, lambda f: (f._dist, (f.alpha,), {})), _METHODS)


ON_FIRST_OPEN.append(install)
install()
