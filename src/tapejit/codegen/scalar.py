"""Scalar code templates of the elementwise ops, for code running inside a loop body.

`{0}`, `{1}`, ... are the operands' scalar expressions. numba compiles with
error_model="numpy", so division by zero and domain errors give inf/NaN as in numpy.
With fast math on (the default; `TAPEJIT_FAST_MATH=0` turns it off), the float64 and float32
transcendentals and powers in `VMATH_OPS` call the branch-free kernels of vmath.py, which
vectorise, instead of libm: `tj_vmath.exp` for float64, `tj_vmath.exp_f32` for float32 (float32
operands, computed in float64 and rounded once); generated modules read that module as the
global `tj_vmath`.
"""
from __future__ import annotations

import numpy as np

from .. import cache
from ..avals import DTYPES_BY_NAME
from ..config import config
from ..ir import Eqn, Lit
from .writer import dtype_code

VMATH = "tj_vmath"
cache.MODULES[VMATH] = "tapejit.codegen.vmath"
VMATH_OPS = frozenset({"exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "pow"})
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)

TEMPLATES = {
    "neg": "(-{0})", "exp": "math.exp({0})", "log": "math.log({0})", "expm1": "math.expm1({0})",
    "log1p": "math.log1p({0})", "sqrt": "math.sqrt({0})", "cbrt": "np.cbrt({0})",
    "sin": "math.sin({0})", "cos": "math.cos({0})", "tan": "math.tan({0})",
    "asin": "math.asin({0})", "acos": "math.acos({0})", "atan": "math.atan({0})",
    "sinh": "math.sinh({0})", "cosh": "math.cosh({0})", "tanh": "math.tanh({0})",
    "asinh": "math.asinh({0})", "acosh": "math.acosh({0})", "atanh": "math.atanh({0})",
    "abs": "abs({0})", "sign": "np.sign({0})", "floor": "np.floor({0})", "ceil": "np.ceil({0})",
    "round": "np.rint({0})", "trunc": "np.trunc({0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "pow": "({0} ** {1})", "atan2": "math.atan2({0}, {1})", "rem": "np.remainder({0}, {1})",
    "floor_div": "np.floor_divide({0}, {1})", "max": "np.maximum({0}, {1})",
    "min": "np.minimum({0}, {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})",
    "and": "({0} and {1})", "or": "({0} or {1})", "xor": "({0} != {1})", "not": "(not {0})",
    "select": "({1} if {0} else {2})",
}


def scalar_expr(eqn: Eqn, operands: list[str]) -> str:
    if eqn.op == "convert":
        target = DTYPES_BY_NAME[eqn.kw["dtype"]]
        if target.kind == "b":
            return f"({operands[0]} != 0)"
        return f"{dtype_code(target)}({operands[0]})"
    if _vmath(eqn):
        suffix = "_f32" if eqn.outs[0].aval.dtype == _F32 else ""
        return f"{VMATH}.{eqn.op}{suffix}({', '.join(operands)})"
    return TEMPLATES[eqn.op].format(*operands)


def _vmath(eqn: Eqn) -> bool:
    """Whether `eqn` calls vmath.py: a float64/float32 op of VMATH_OPS, fast math on. A power
    by a constant -1, 0, 1 or 2 stays `**`, which LLVM rewrites exactly (x ** 2.0 -> x * x)."""
    if eqn.op not in VMATH_OPS or eqn.outs[0].aval.dtype not in (_F64, _F32):
        return False
    exponent = eqn.ins[1] if eqn.op == "pow" else None
    if isinstance(exponent, Lit) and float(exponent.value) in (-1.0, 0.0, 1.0, 2.0):
        return False
    return config().fast_math
