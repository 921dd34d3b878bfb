"""Elementwise primitives: unary and binary math, comparisons, logic, select, convert.

All inputs of an elementwise op share one dtype (tracing inserts `convert` to get there) and
broadcast numpy-style; the output has the broadcast shape. Each VJP returns cotangents of the
output's (broadcast) shape: autodiff sums them back to each input's shape.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np

from ..avals import DTYPES_BY_NAME, Aval, broadcast_shapes, dtype_name
from ..errors import DtypeError
from . import ByKind, Kind, defop, zero_vjp

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


def unary(name: str, fn, scalar: str, vjp, **fields) -> object:
    """An elementwise op of one operand: numpy's `fn` (the ufunc it implements, unless
    `ufuncs` says otherwise; or the name of one in a module tapejit does not import,
    "scipy.special.erf"), the per-element `scalar` template."""
    return defop(name, Kind.ELEMENTWISE, _implementation(fn),
                 shape=_shape_rule(name, "same", 1), vjp=vjp, scalar=scalar,
                 **{"ufuncs": _ufuncs(fn), **fields})


def binary(name: str, fn, scalar: str, vjp, result: str = "same", **fields) -> object:
    """An elementwise op of two operands; `result="bool"` for comparisons and logic (whose
    operands numpy compares in their common dtype)."""
    promotion = "compare" if result == "bool" else "arith"
    return defop(name, Kind.ELEMENTWISE, _implementation(fn),
                 shape=_shape_rule(name, result, 2), vjp=vjp, scalar=scalar,
                 **{"ufuncs": _ufuncs(fn), "promotion": promotion, **fields})


def _ufuncs(fn) -> tuple:
    return (fn,) if isinstance(fn, (np.ufunc, str)) else ()


def _implementation(fn):
    return imported_later(fn) if isinstance(fn, str) else fn


def imported_later(name: str) -> Callable[..., Any]:
    """The function `module.function` of `name`, its module imported at its first call (a
    module `import tapejit` does not import: scipy.special takes 0.2-0.3 s)."""
    module, _, function = name.rpartition(".")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), function)(*args, **kwargs)
    call.__name__ = call.__qualname__ = function
    return call


SPECIAL_GLOBAL = "tj_special"   # generated CPU modules read codegen/special.py by this name
# numpy's float remainder (the divisor's sign) inline, for CUDA kernels that cannot call it
_REM = ("(math.fmod({0}, {1}) + {1} if math.fmod({0}, {1}) != 0 and "
        "(math.fmod({0}, {1}) < 0) != ({1} < 0) else math.fmod({0}, {1}))")


def _libdevice(name: str) -> ByKind:
    """CUDA's form of a float rounding function numpy provides: libdevice's `name` (cuda_math
    as `tjm`) for floats; integers are already whole."""
    return ByKind(f"tjm.{name}{{f}}({{0}})", "{0}")


def _like(mask, ct):
    """A bool mask converted to the dtype of `ct` (for gradient masks)."""
    return convert(mask, dtype=dtype_name(ct.dtype))


# ---- unary math ---------------------------------------------------------------------------
# `vmath`: with fast math, the CPU calls vmath.py's vectorised kernel of the op's name
neg = unary("neg", np.negative, "(-{0})", cheap=True,
            vjp=lambda ct, y, x: (-ct,))                                 # d(-x) = -dx
exp = unary("exp", np.exp, "math.exp({0})", vmath=True,
            vjp=lambda ct, y, x: (ct * y,))                              # d exp x = exp x dx
log = unary("log", np.log, "math.log({0})", vmath=True,
            vjp=lambda ct, y, x: (ct / x,))                              # d log x = dx / x
expm1 = unary("expm1", np.expm1, "math.expm1({0})", vmath=True,
              vjp=lambda ct, y, x: (ct * (y + 1),))                      # d expm1 x = e^x dx
log1p = unary("log1p", np.log1p, "math.log1p({0})", vmath=True,
              vjp=lambda ct, y, x: (ct / (x + 1),))                      # d log1p x = dx/(1+x)
sqrt = unary("sqrt", np.sqrt, "math.sqrt({0})",
             vjp=lambda ct, y, x: (ct * 0.5 / y,))                       # d sqrt x = dx/(2 sqrt x)
cbrt = unary("cbrt", np.cbrt, "np.cbrt({0})",
             cuda_scalar=ByKind("tjm.cbrt{f}({0})", "tjm.cbrt(np.float64({0}))"),
             vjp=lambda ct, y, x: (ct / (3 * y * y),))                   # d cbrt x = dx/(3 y^2)
sin = unary("sin", np.sin, "math.sin({0})", vmath=True,
            vjp=lambda ct, y, x: (ct * cos(x),))                         # d sin x = cos x dx
cos = unary("cos", np.cos, "math.cos({0})", vmath=True,
            vjp=lambda ct, y, x: (-ct * sin(x),))                        # d cos x = -sin x dx
tan = unary("tan", np.tan, "math.tan({0})",
            vjp=lambda ct, y, x: (ct * (1 + y * y),))                    # d tan x = (1+tan^2) dx
asin = unary("asin", np.arcsin, "math.asin({0})",
             vjp=lambda ct, y, x: (ct / sqrt(1 - x * x),))
acos = unary("acos", np.arccos, "math.acos({0})",
             vjp=lambda ct, y, x: (-ct / sqrt(1 - x * x),))
atan = unary("atan", np.arctan, "math.atan({0})",
             vjp=lambda ct, y, x: (ct / (1 + x * x),))
sinh = unary("sinh", np.sinh, "math.sinh({0})",
             vjp=lambda ct, y, x: (ct * cosh(x),))
cosh = unary("cosh", np.cosh, "math.cosh({0})",
             vjp=lambda ct, y, x: (ct * sinh(x),))
tanh = unary("tanh", np.tanh, "math.tanh({0})", vmath=True,
             vjp=lambda ct, y, x: (ct * (1 - y * y),))                   # d tanh = 1 - tanh^2
asinh = unary("asinh", np.arcsinh, "math.asinh({0})",
              vjp=lambda ct, y, x: (ct / sqrt(x * x + 1),))
acosh = unary("acosh", np.arccosh, "math.acosh({0})",
              vjp=lambda ct, y, x: (ct / (sqrt(x - 1) * sqrt(x + 1)),))
atanh = unary("atanh", np.arctanh, "math.atanh({0})",
              vjp=lambda ct, y, x: (ct / (1 - x * x),))
abs_ = unary("abs", np.abs, "abs({0})", cheap=True, ufuncs=(np.absolute, np.fabs),
             vjp=lambda ct, y, x: (ct * sign(x),))                       # d|x| = sign(x) dx
# piecewise-constant: zero gradient wherever defined
# (numba's np.sign of an unsigned int >= 2**(bits-1) gave its -1: 255 for a uint8 255)
sign = unary("sign", np.sign, lambda eqn: "{out}({0} > 0)" if eqn.ins[0].aval.dtype.kind == "u"
             else "np.sign({0})", zero_vjp, cuda_scalar=ByKind(            # NaN stays NaN
    "(({dtype}({0} > 0) - {dtype}({0} < 0)) if {0} == {0} else {0})",
    "({dtype}({0} > 0) - {dtype}({0} < 0))"))
floor = unary("floor", np.floor, "np.floor({0})", zero_vjp, cuda_scalar=_libdevice("floor"))
ceil = unary("ceil", np.ceil, "np.ceil({0})", zero_vjp, cuda_scalar=_libdevice("ceil"))
round_ = unary("round", np.round, "np.rint({0})", zero_vjp, cuda_scalar=_libdevice("rint"),
                ufuncs=(np.rint,))
trunc = unary("trunc", np.trunc, "np.trunc({0})", zero_vjp, cuda_scalar=_libdevice("trunc"))

# ---- binary math --------------------------------------------------------------------------
add = binary("add", np.add, "({0} + {1})", lambda ct, y, a, b: (ct, ct), cheap=True)
sub = binary("sub", np.subtract, "({0} - {1})", lambda ct, y, a, b: (ct, -ct), cheap=True)
mul = binary("mul", np.multiply, "({0} * {1})", lambda ct, y, a, b: (ct * b, ct * a),
             cheap=True)
div = binary("div", np.divide, "({0} / {1})",
             lambda ct, y, a, b: (ct / b, -ct * y / b))                  # d(a/b) = da/b - a db/b^2
def _one_at_zero(v):
    """v with its zeros replaced by 1."""
    return v + _like(eq(v, 0), v)


# d x^p = p x^(p-1) dx + log(x) x^p dp. Where p = 0 (x = 0) the exponent p - 1 (the log's
# argument) uses p = 1 (x = 1) instead: the term is zero there anyway (its factor p, resp. x^p
# or log 1, is 0), and no 0 * inf reaches first or second derivatives.
def _pow_vmath(eqn) -> bool:
    """A power by a constant -1, 0, 1 or 2 stays `**`, which LLVM rewrites exactly
    (x ** 2.0 -> x * x); others call the fast-math kernel."""
    exponent = getattr(eqn.ins[1], "value", None)      # a literal's value; None for a var
    return exponent is None or float(exponent) not in (-1.0, 0.0, 1.0, 2.0)


pow_ = binary("pow", np.power, "({0} ** {1})", lambda ct, y, x, p: (
    ct * p * pow_(x, _one_at_zero(p) - 1), ct * log(_one_at_zero(x)) * y), vmath=_pow_vmath)
atan2 = binary("atan2", np.arctan2, "math.atan2({0}, {1})", lambda ct, z, a, b: (
    ct * b / (a * a + b * b), -ct * a / (a * a + b * b)))                # atan2(a, b) = atan(a/b)
def _numpy_divmod(name: str):
    """The CPU template of `name` (floor_divide, remainder): numpy's algorithm in
    codegen/special.py for floats, which numba's np.floor_divide/np.remainder do not follow at
    infinities and signed zeros, and for signed integers, where numba's traps on the most
    negative int over -1 (a crash); numba's for unsigned integers."""
    templates = {"f": f"{SPECIAL_GLOBAL}.{name}({{0}}, {{1}})",
                 "i": f"{SPECIAL_GLOBAL}.int_{name}({{0}}, {{1}})"}
    return lambda eqn: templates.get(eqn.ins[0].aval.dtype.kind, f"np.{name}({{0}}, {{1}})")


rem = binary("rem", np.remainder, _numpy_divmod("remainder"),
             lambda ct, y, a, b: (ct, -ct * floor(a / b)),               # a - b floor(a/b)
             cuda_scalar=ByKind(_REM, "({0} % {1})"))
floor_div = binary("floor_div", np.floor_divide, _numpy_divmod("floor_divide"), zero_vjp,
                   cuda_scalar=ByKind("({0} / {1} if {1} == 0 else tjm.rint{f}(({0} - "
                                      + _REM + ") / {1}))", "({0} // {1})"))
# C's fmod (the dividend's sign, exact): numba's np.fmod for floats; for integers, whose
# numba's is not numpy's (-7 fmod 2 gave 1), codegen/special.py's (0 for a divisor 0 or -1)
_FMOD_INT = ("(0 * {0} if {1} == 0 or {1} == -1 else ({0} % {1}) - {1} if ({0} % {1}) != 0 "
             "and (({0} % {1}) < 0) != ({0} < 0) else ({0} % {1}))")
fmod = binary("fmod", np.fmod, lambda eqn: "np.fmod({0}, {1})" if eqn.ins[0].aval.dtype.kind
              == "f" else f"{SPECIAL_GLOBAL}.fmod({{0}}, {{1}})",
              lambda ct, y, a, b: (ct, -ct * trunc(a / b)),               # a - b trunc(a/b)
              cuda_scalar=ByKind("math.fmod({0}, {1})", _FMOD_INT))

# |a| with b's sign bit (C's copysign, exact; -0.0 and NaN's signs count): d/da is abs's,
# sign(a) (0 at 0), times b's sign; b only chooses
copysign = binary("copysign", np.copysign, "np.copysign({0}, {1})",
                  lambda ct, y, a, b: (ct * sign(a) * copysign(1.0, b), None),
                  cuda_scalar="math.copysign({0}, {1})")
# the sign bit of a float (-0.0 and -NaN have it), a bool (np.signbit of ints: numpy_api/math.py)
signbit = defop("signbit", Kind.ELEMENTWISE, np.signbit, shape=_shape_rule("signbit", "bool", 1),
                vjp=zero_vjp, scalar="np.signbit({0})",
                cuda_scalar="(math.copysign(1.0, {0}) < 0)")


def _max_vjp(ct, y, a, b):
    # the larger input gets the gradient; ties split it evenly (so clip/logaddexp are symmetric)
    wa = _like(gt(a, b), ct) + _like(eq(a, b), ct) * 0.5
    return ct * wa, ct * (1 - wa)


def _min_vjp(ct, y, a, b):
    wa = _like(lt(a, b), ct) + _like(eq(a, b), ct) * 0.5
    return ct * wa, ct * (1 - wa)


max_ = binary("max", np.maximum, "np.maximum({0}, {1})", _max_vjp, cheap=True)
min_ = binary("min", np.minimum, "np.minimum({0}, {1})", _min_vjp, cheap=True)

# ---- comparisons and logic: bool results, not differentiated ------------------------------
lt = binary("lt", np.less, "({0} < {1})", zero_vjp, "bool", cheap=True)
le = binary("le", np.less_equal, "({0} <= {1})", zero_vjp, "bool", cheap=True)
gt = binary("gt", np.greater, "({0} > {1})", zero_vjp, "bool", cheap=True)
ge = binary("ge", np.greater_equal, "({0} >= {1})", zero_vjp, "bool", cheap=True)
eq = binary("eq", np.equal, "({0} == {1})", zero_vjp, "bool", cheap=True)
ne = binary("ne", np.not_equal, "({0} != {1})", zero_vjp, "bool", cheap=True)
and_ = binary("and", np.logical_and, "({0} and {1})", zero_vjp, "bool", promotion="logic")
or_ = binary("or", np.logical_or, "({0} or {1})", zero_vjp, "bool", promotion="logic")
xor = binary("xor", np.logical_xor, "({0} != {1})", zero_vjp, "bool", promotion="logic")
not_ = unary("not", np.logical_not, "(not {0})", zero_vjp, promotion="logic")


# ---- select and convert ---------------------------------------------------------------------
def _select_shape(pred: Aval, a: Aval, b: Aval) -> Aval:
    if pred.dtype != BOOL:
        raise DtypeError(f"select: the condition must be bool, got {pred}")
    if a.dtype != b.dtype:
        raise DtypeError(f"select: branches have different dtypes {a} and {b}")
    return Aval(broadcast_shapes("select", pred.shape, a.shape, b.shape), a.dtype)


select = defop("select", Kind.ELEMENTWISE, np.where, shape=_select_shape,
               scalar="({1} if {0} else {2})", cheap=True,
               vjp=lambda ct, y, p, a, b: (None, select(p, ct, 0), select(p, 0, ct)))


def _convert_impl(x, *, dtype: str):
    return np.asarray(x).astype(DTYPES_BY_NAME[dtype])


def _convert_vjp(ct, y, x, *, dtype: str):
    # only float -> float conversions carry a gradient
    if x.dtype.kind != "f" or y.dtype.kind != "f":
        return (None,)
    return (convert(ct, dtype=dtype_name(x.dtype)),)


def _convert_scalar(eqn) -> str:
    """To bool: nonzero; else the result dtype's constructor (`{out}`)."""
    return "({0} != 0)" if DTYPES_BY_NAME[eqn.kw["dtype"]].kind == "b" else "{out}({0})"


convert = defop("convert", Kind.ELEMENTWISE, _convert_impl,
                shape=lambda x, *, dtype: Aval(x.shape, DTYPES_BY_NAME[dtype]),
                vjp=_convert_vjp, scalar=_convert_scalar, cheap=True)
