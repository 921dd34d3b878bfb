"""scipy.special's regularized incomplete gamma and beta functions as primitives: gammainc
P(a, x), gammaincc Q(a, x) = 1 - P(a, x), betainc I_x(a, b) and Student's t distribution
function stdtr(df, t) (an incomplete beta function), where scipy is importable.

The interpreter runs scipy's ufuncs; compiled code calls codegen/special_incomplete.py's
scalar functions (generated CPU modules read it as the global `tj_incomplete`, CUDA kernels
reach them through cuda_math's `tjm`), in float64, rounded once for float32 operands.
Derivatives: in x (t) exactly, the densities x^(a-1) e^-x / Gamma(a), x^(a-1) (1-x)^(b-1) /
B(a, b) and t's, written in ops, so every order is there. In a, b and df there is no rule
(JAX has none for betainc either): a gradient that needs one raises
UnsupportedOperationError naming the function, the argument and the fix (a `NoDerivative`),
never a silent zero.
"""
from __future__ import annotations

from . import Kind, NoDerivative, defop
from .elementwise import _shape_rule, and_, exp, ge, le, select
from .elementwise import log, log1p
from .special import lgamma, sc, xlog1py, xlogy

LOG_PI = 1.1447298858494002

CPU_GLOBAL = "tj_incomplete"   # generated CPU modules read codegen/special_incomplete.py by it


def _in_float64(name: str, arity: int) -> dict:
    """The scalar templates calling `name`: float32 operands in float64, rounded once."""
    args = ", ".join(f"float({{{k}}})" for k in range(arity))
    return {"scalar": f"{{out}}({CPU_GLOBAL}.{name}({args}))",
            "cuda_scalar": f"{{out}}(tjm.{name}({args}))", "ufuncs": (f"scipy.special.{name}",)}


def _no_derivative(function: str, argument: str) -> NoDerivative:
    return NoDerivative(
        f"scipy.special.{function}: tapejit has no derivative with respect to {argument} "
        f"(only with respect to x).\n  Hold {argument} constant (pass it as a non-"
        f"differentiated argument, or wrap it in tj.stop_gradient), or differentiate "
        f"{function} in {argument} by finite differences")


def _gamma_density(a, x):
    """x^(a-1) e^-x / Gamma(a), 0 outside x >= 0."""
    density = exp(xlogy(a - 1, x) - x - lgamma(a))
    return select(ge(x, 0), density, 0)


def _beta_density(a, b, x):
    """x^(a-1) (1-x)^(b-1) / B(a, b), 0 outside [0, 1]."""
    log_density = xlogy(a - 1, x) + xlog1py(b - 1, -x) - (lgamma(a) + lgamma(b) - lgamma(a + b))
    return select(and_(ge(x, 0), le(x, 1)), exp(log_density), 0)


def _t_density(df, t):
    """Student's t density (df finite)."""
    half = 0.5 * df
    return exp(lgamma(half + 0.5) - lgamma(half) - 0.5 * (log(df) + LOG_PI)
               - (half + 0.5) * log1p(t * t / df))


if sc is not None:
    gammainc = defop(                                           # dP/dx = the gamma density
        "gammainc", Kind.ELEMENTWISE, sc.gammainc, shape=_shape_rule("gammainc", "same", 2),
        vjp=lambda ct, y, a, x: (_no_derivative("gammainc", "a"), ct * _gamma_density(a, x)),
        **_in_float64("gammainc", 2))
    gammaincc = defop(                                          # dQ/dx = -the gamma density
        "gammaincc", Kind.ELEMENTWISE, sc.gammaincc, shape=_shape_rule("gammaincc", "same", 2),
        vjp=lambda ct, y, a, x: (_no_derivative("gammaincc", "a"), -ct * _gamma_density(a, x)),
        **_in_float64("gammaincc", 2))
    betainc = defop(                                            # dI/dx = the beta density
        "betainc", Kind.ELEMENTWISE, sc.betainc, shape=_shape_rule("betainc", "same", 3),
        vjp=lambda ct, y, a, b, x: (_no_derivative("betainc", "a"),
                                    _no_derivative("betainc", "b"),
                                    ct * _beta_density(a, b, x)),
        **_in_float64("betainc", 3))
    stdtr = defop(                                              # d/dt = t's density
        "stdtr", Kind.ELEMENTWISE, sc.stdtr, shape=_shape_rule("stdtr", "same", 2),
        vjp=lambda ct, y, df, t: (_no_derivative("stdtr", "df"), ct * _t_density(df, t)),
        **_in_float64("stdtr", 2))
