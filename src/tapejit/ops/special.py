"""scipy.special's elementwise functions as primitives: erf, erfc, erfinv, gamma, lgamma
(gammaln), polygamma (digamma is polygamma[n=0]), expit, ndtr, log_ndtr, xlogy, xlog1py.

Defined where scipy is installed (scipy is optional): each implements scipy's ufunc, which the
interpreter runs and which numpy_api/math.py lowers to it (the record's `ufuncs`, by name:
`import tapejit` does not import scipy.special, 0.2-0.3 s; `sc.erf` here calls scipy's once
it is imported, and the ufuncs' rules are registered when it is: numpy_api/on_import.py). Compiled
code calls libm's erf, erfc and lgamma (libdevice's on CUDA) and, for the others,
codegen/special.py's scalar functions (generated CPU modules read it as the global
`tj_special`, CUDA kernels as cuda_math's `tjm`), computed in float64 and rounded once for
float32 operands. Each VJP is written in these ops, so every order of derivative is there:
digamma's derivative is polygamma[n=1], and so on.
"""
from __future__ import annotations

import importlib.util
import math
from typing import Any, Callable

import numpy as np

from . import Kind, defop
from .elementwise import (SPECIAL_GLOBAL, _shape_rule, binary, eq, exp, imported_later, log,
                          log1p, select, unary)


class _Lazily:
    """scipy.special's functions, each imported at its first call: `sc.gammaln(x)`."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return imported_later(f"scipy.special.{name}")


sc = _Lazily() if importlib.util.find_spec("scipy") is not None else None

CPU_GLOBAL = SPECIAL_GLOBAL   # generated CPU modules read codegen/special.py by this name
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _in_float64(name: str, *params: str) -> dict:
    """The scalar templates calling `name` of codegen/special.py: on the CPU as `tj_special`,
    in CUDA kernels as `tjm` (cuda_math.py); float32 operands in float64, rounded once."""
    args = "".join(f"{p}, " for p in params) + "float({0})"
    return {"scalar": f"{{out}}({CPU_GLOBAL}.{name}({args}))",
            "cuda_scalar": f"{{out}}(tjm.{name}({args}))"}


def _polygamma_impl(x, *, n: int):
    out = sc.digamma(x) if n == 0 else sc.polygamma(n, x)
    return np.asarray(out).astype(x.dtype, copy=False)


_UNARY = _shape_rule("polygamma", "same", 1)


def _polygamma_shape(x, *, n: int):
    if not (isinstance(n, int) and n >= 0):
        raise ValueError(f"polygamma: the order n must be an int >= 0, got {n!r}")
    return _UNARY(x)


def _polygamma_templates(eqn) -> dict:
    return _in_float64("polygamma", str(eqn.kw["n"]))


if sc is not None:
    erf = unary("erf", "scipy.special.erf", "math.erf({0})",
                vjp=lambda ct, y, x: (ct * TWO_OVER_SQRT_PI * exp(-x * x),))
    erfc = unary("erfc", "scipy.special.erfc", "math.erfc({0})",
                 vjp=lambda ct, y, x: (-ct * TWO_OVER_SQRT_PI * exp(-x * x),))
    # d erfinv y = sqrt(pi)/2 e^(x^2) dy, x = erfinv y
    erfinv = unary("erfinv", "scipy.special.erfinv", _in_float64("erfinv")["scalar"],
                   cuda_scalar="tjm.erfinv{f}({0})",
                   vjp=lambda ct, x, y: (ct * SQRT_PI_OVER_2 * exp(x * x),))
    # d log|Gamma x| = psi x dx; scipy's value at -inf is -inf (libm's is inf)
    lgamma = unary("lgamma", "scipy.special.gammaln",
                   "(-math.inf if {0} == -math.inf else math.lgamma({0}))",
                   vjp=lambda ct, y, x: (ct * polygamma(x, n=0),))
    # d Gamma x = Gamma x psi x dx
    gamma = unary("gamma", "scipy.special.gamma", "math.gamma({0})",
                  vjp=lambda ct, y, x: (ct * y * polygamma(x, n=0),))
    # psi^(n) x, the n-th derivative of digamma = d log Gamma x / dx: d psi^(n) = psi^(n+1) dx
    polygamma = defop(
        "polygamma", Kind.ELEMENTWISE, _polygamma_impl, shape=_polygamma_shape,
        scalar=lambda eqn: _polygamma_templates(eqn)["scalar"],
        cuda_scalar=lambda eqn: _polygamma_templates(eqn)["cuda_scalar"],
        vjp=lambda ct, y, x, *, n: (ct * polygamma(x, n=n + 1),))
    expit = unary("expit", "scipy.special.expit", "({out}(1) / ({out}(1) + math.exp(-{0})))",
                  vjp=lambda ct, y, x: (ct * y * (1 - y),))          # d s = s (1 - s) dx
    ndtr = unary("ndtr", "scipy.special.ndtr", **_in_float64("ndtr"),             # d Phi = phi dx
                 vjp=lambda ct, y, x: (ct * INV_SQRT_2PI * exp(x * x * -0.5),))
    log_ndtr = unary("log_ndtr", "scipy.special.log_ndtr", **_in_float64("log_ndtr"),  # d log Phi = phi/Phi
                     vjp=lambda ct, y, x: (ct * INV_SQRT_2PI * exp(x * x * -0.5 - y),))
    # x log y, and 0 where x = 0 (y not NaN). d/dx = log y (as JAX, also at x = 0); d/dy = x/y,
    # and 0 where x = 0, where the function is 0 for every y (JAX and torch give 0/0 = NaN)
    xlogy = binary("xlogy", "scipy.special.xlogy",
                   "({out}(0) if {0} == 0 and {1} == {1} else {0} * math.log({1}))",
                   lambda ct, z, x, y: (ct * log(y), ct * x / select(eq(x, 0), 1, y)))
    xlog1py = binary("xlog1py", "scipy.special.xlog1py",
                     "({out}(0) if {0} == 0 and {1} == {1} else {0} * math.log1p({1}))",
                     lambda ct, z, x, y: (ct * log1p(y), ct * x / select(eq(x, 0), 1, 1 + y)))
