"""Elementwise primitives: unary and binary math, comparisons, logic, select, convert.

All inputs of an elementwise op share one dtype (tracing inserts `convert` to get there) and
broadcast numpy-style; the output has the broadcast shape. Each VJP returns cotangents of the
output's (broadcast) shape: autodiff sums them back to each input's shape.
"""
from __future__ import annotations

import numpy as np

from ..avals import DTYPES_BY_NAME, Aval, broadcast_shapes, dtype_name
from ..errors import DtypeError
from . import Kind, defop, zero_vjp

BOOL = np.dtype(np.bool_)


def _shape_rule(name: str, result: str, arity: int):
    """Shape rule: broadcast shapes; inputs share a dtype; result "same" dtype or "bool"."""
    def rule(*avals: Aval) -> Aval:
        if len(avals) != arity:
            raise TypeError(f"{name} takes {arity} operand(s), got {len(avals)}")
        dtypes = {a.dtype for a in avals}
        if len(dtypes) != 1:
            raise DtypeError(f"{name}: operands have different dtypes "
                             f"{', '.join(str(a) for a in avals)}")
        shape = broadcast_shapes(name, *(a.shape for a in avals))
        return Aval(shape, BOOL if result == "bool" else avals[0].dtype)
    return rule


def unary(name: str, fn, vjp) -> object:
    return defop(name, Kind.ELEMENTWISE, fn, shape=_shape_rule(name, "same", 1), vjp=vjp)


def binary(name: str, fn, vjp, result: str = "same") -> object:
    return defop(name, Kind.ELEMENTWISE, fn, shape=_shape_rule(name, result, 2), vjp=vjp)


def _like(mask, ct):
    """A bool mask converted to the dtype of `ct` (for gradient masks)."""
    return convert(mask, dtype=dtype_name(ct.dtype))


# ---- unary math ---------------------------------------------------------------------------
neg = unary("neg", np.negative, lambda ct, y, x: (-ct,))                 # d(-x) = -dx
exp = unary("exp", np.exp, lambda ct, y, x: (ct * y,))                   # d exp x = exp x dx
log = unary("log", np.log, lambda ct, y, x: (ct / x,))                   # d log x = dx / x
expm1 = unary("expm1", np.expm1, lambda ct, y, x: (ct * (y + 1),))       # d expm1 x = e^x dx
log1p = unary("log1p", np.log1p, lambda ct, y, x: (ct / (x + 1),))       # d log1p x = dx/(1+x)
sqrt = unary("sqrt", np.sqrt, lambda ct, y, x: (ct * 0.5 / y,))          # d sqrt x = dx/(2 sqrt x)
cbrt = unary("cbrt", np.cbrt, lambda ct, y, x: (ct / (3 * y * y),))      # d cbrt x = dx/(3 y^2)
sin = unary("sin", np.sin, lambda ct, y, x: (ct * cos(x),))              # d sin x = cos x dx
cos = unary("cos", np.cos, lambda ct, y, x: (-ct * sin(x),))             # d cos x = -sin x dx
tan = unary("tan", np.tan, lambda ct, y, x: (ct * (1 + y * y),))         # d tan x = (1+tan^2) dx
asin = unary("asin", np.arcsin, lambda ct, y, x: (ct / sqrt(1 - x * x),))
acos = unary("acos", np.arccos, lambda ct, y, x: (-ct / sqrt(1 - x * x),))
atan = unary("atan", np.arctan, lambda ct, y, x: (ct / (1 + x * x),))
sinh = unary("sinh", np.sinh, lambda ct, y, x: (ct * cosh(x),))
cosh = unary("cosh", np.cosh, lambda ct, y, x: (ct * sinh(x),))
tanh = unary("tanh", np.tanh, lambda ct, y, x: (ct * (1 - y * y),))      # d tanh = 1 - tanh^2
asinh = unary("asinh", np.arcsinh, lambda ct, y, x: (ct / sqrt(x * x + 1),))
acosh = unary("acosh", np.arccosh, lambda ct, y, x: (ct / (sqrt(x - 1) * sqrt(x + 1)),))
atanh = unary("atanh", np.arctanh, lambda ct, y, x: (ct / (1 - x * x),))
abs_ = unary("abs", np.abs, lambda ct, y, x: (ct * sign(x),))            # d|x| = sign(x) dx
# piecewise-constant: zero gradient wherever defined
sign = unary("sign", np.sign, zero_vjp)
floor = unary("floor", np.floor, zero_vjp)
ceil = unary("ceil", np.ceil, zero_vjp)
round_ = unary("round", np.round, zero_vjp)
trunc = unary("trunc", np.trunc, zero_vjp)

# ---- binary math --------------------------------------------------------------------------
add = binary("add", np.add, lambda ct, y, a, b: (ct, ct))
sub = binary("sub", np.subtract, lambda ct, y, a, b: (ct, -ct))
mul = binary("mul", np.multiply, lambda ct, y, a, b: (ct * b, ct * a))
div = binary("div", np.divide, lambda ct, y, a, b: (ct / b, -ct * y / b))  # d(a/b) = da/b - a db/b^2
def _one_at_zero(v):
    """v with its zeros replaced by 1."""
    return v + _like(eq(v, 0), v)


# d x^p = p x^(p-1) dx + log(x) x^p dp. Where p = 0 (x = 0) the exponent p - 1 (the log's
# argument) uses p = 1 (x = 1) instead: the term is zero there anyway (its factor p, resp. x^p
# or log 1, is 0), and no 0 * inf reaches first or second derivatives.
pow_ = binary("pow", np.power, lambda ct, y, x, p: (
    ct * p * pow_(x, _one_at_zero(p) - 1), ct * log(_one_at_zero(x)) * y))
atan2 = binary("atan2", np.arctan2, lambda ct, z, a, b: (
    ct * b / (a * a + b * b), -ct * a / (a * a + b * b)))                # atan2(a, b) = atan(a/b)
rem = binary("rem", np.remainder, lambda ct, y, a, b: (ct, -ct * floor(a / b)))  # a - b floor(a/b)
floor_div = binary("floor_div", np.floor_divide, zero_vjp)


def _max_vjp(ct, y, a, b):
    # the larger input gets the gradient; ties split it evenly (so clip/logaddexp are symmetric)
    wa = _like(gt(a, b), ct) + _like(eq(a, b), ct) * 0.5
    return ct * wa, ct * (1 - wa)


def _min_vjp(ct, y, a, b):
    wa = _like(lt(a, b), ct) + _like(eq(a, b), ct) * 0.5
    return ct * wa, ct * (1 - wa)


max_ = binary("max", np.maximum, _max_vjp)
min_ = binary("min", np.minimum, _min_vjp)

# ---- comparisons and logic: bool results, not differentiated ------------------------------
lt = binary("lt", np.less, zero_vjp, "bool")
le = binary("le", np.less_equal, zero_vjp, "bool")
gt = binary("gt", np.greater, zero_vjp, "bool")
ge = binary("ge", np.greater_equal, zero_vjp, "bool")
eq = binary("eq", np.equal, zero_vjp, "bool")
ne = binary("ne", np.not_equal, zero_vjp, "bool")
and_ = binary("and", np.logical_and, zero_vjp, "bool")
or_ = binary("or", np.logical_or, zero_vjp, "bool")
xor = binary("xor", np.logical_xor, zero_vjp, "bool")
not_ = unary("not", np.logical_not, zero_vjp)


# ---- select and convert ---------------------------------------------------------------------
def _select_shape(pred: Aval, a: Aval, b: Aval) -> Aval:
    if pred.dtype != BOOL:
        raise DtypeError(f"select: the condition must be bool, got {pred}")
    if a.dtype != b.dtype:
        raise DtypeError(f"select: branches have different dtypes {a} and {b}")
    return Aval(broadcast_shapes("select", pred.shape, a.shape, b.shape), a.dtype)


select = defop("select", Kind.ELEMENTWISE, np.where, shape=_select_shape,
               vjp=lambda ct, y, p, a, b: (None, select(p, ct, 0), select(p, 0, ct)))


def _convert_impl(x, *, dtype: str):
    return np.asarray(x).astype(DTYPES_BY_NAME[dtype])


def _convert_vjp(ct, y, x, *, dtype: str):
    # only float -> float conversions carry a gradient
    if x.dtype.kind != "f" or y.dtype.kind != "f":
        return (None,)
    return (convert(ct, dtype=dtype_name(x.dtype)),)


convert = defop("convert", Kind.ELEMENTWISE, _convert_impl,
                shape=lambda x, *, dtype: Aval(x.shape, DTYPES_BY_NAME[dtype]),
                vjp=_convert_vjp)
