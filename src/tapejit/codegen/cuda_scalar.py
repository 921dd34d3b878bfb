"""Per-element code of the CUDA kernels: scalar.py's templates in their libm form (never the
CPU's vectorised fast-math kernels), with the numpy ufuncs kernels cannot call replaced:
floor, ceil, rint, trunc and cbrt by cuda_math's (libdevice on a GPU), numpy's float sign,
remainder and floor division by inline expressions with numpy's semantics.
"""
from __future__ import annotations

import numpy as np

from ..ir import Eqn
from .scalar import TEMPLATES
from .scalar import scalar_expr as cpu_scalar_expr
from .writer import dtype_code

# templates whose CPU form calls a numpy ufunc: floats call cuda_math (float32: the `f` names)
_FLOAT_CALLS = {"cbrt": "cbrt", "floor": "floor", "ceil": "ceil", "round": "rint",
                "trunc": "trunc"}
# numpy's float sign (NaN kept), remainder (the divisor's sign) and floor division, inline
_REM = ("(math.fmod({0}, {1}) + {1} if math.fmod({0}, {1}) != 0 and "
        "(math.fmod({0}, {1}) < 0) != ({1} < 0) else math.fmod({0}, {1}))")
_FLOAT_TEMPLATES = {
    "sign": "(({dtype}({0} > 0) - {dtype}({0} < 0)) if {0} == {0} else {0})",
    "rem": _REM,
    "floor_div": "({0} / {1} if {1} == 0 else tjm.rint{f}(({0} - " + _REM + ") / {1}))",
}
_INT_TEMPLATES = {"sign": "({dtype}({0} > 0) - {dtype}({0} < 0))", "rem": "({0} % {1})",
                  "floor_div": "({0} // {1})", "floor": "{0}", "ceil": "{0}", "round": "{0}",
                  "trunc": "{0}", "cbrt": "tjm.cbrt(np.float64({0}))"}


def scalar_expr(eqn: Eqn, operands: list[str]) -> str:
    """The CPU template of an elementwise op in its libm form, with the numpy ufuncs kernels
    cannot call replaced (scalar.scalar_expr would pick vmath under TAPEJIT_FAST_MATH)."""
    op = eqn.op
    if op == "convert":                 # one form on every target
        return cpu_scalar_expr(eqn, operands)
    if op not in _FLOAT_CALLS and op not in _FLOAT_TEMPLATES:
        return TEMPLATES[op].format(*operands)
    dtype = eqn.ins[0].aval.dtype
    if dtype.kind != "f":
        return _INT_TEMPLATES[op].format(*operands, dtype=dtype_code(dtype))
    f = "f" if dtype == np.float32 else ""
    if op in _FLOAT_TEMPLATES:
        return _FLOAT_TEMPLATES[op].format(*operands, dtype=dtype_code(dtype), f=f)
    return f"tjm.{_FLOAT_CALLS[op]}{f}({operands[0]})"
