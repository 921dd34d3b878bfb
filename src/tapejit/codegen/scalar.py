"""The per-element expressions of elementwise ops inside loop bodies, and the identity and
combining expression of reductions, from their op records.

`{0}`, `{1}`, ... are the operands' scalar expressions, `{out}` the result dtype's
constructor. numba compiles with error_model="numpy", so division by zero and domain errors
give inf/NaN as in numpy. With fast math on (the default; `TAPEJIT_FAST_MATH=0` turns it off),
float64 and float32 ops whose record sets `vmath` call the branch-free kernels of vmath.py,
which vectorise, instead of libm: `tj_vmath.exp` for float64, `tj_vmath.exp_f32` for float32
(float32 operands, computed in float64 and rounded once); generated modules read that module
as the global `tj_vmath`. CUDA kernels use the record's `cuda_scalar` where it is given (the
numpy ufuncs kernels cannot call replaced: cuda_math's libdevice functions, inline forms of
numpy's float sign, remainder and floor division), never vmath.
"""
from __future__ import annotations

import numpy as np

from ..config import config
from ..disk import store
from ..ir import Eqn
from ..ops import OPS, ByKind
from ..ops.random import CPU_GLOBAL
from ..ops.special import CPU_GLOBAL as SPECIAL
from ..ops.special_incomplete import CPU_GLOBAL as INCOMPLETE
from .writer import dtype_code, scalar

VMATH = "tj_vmath"
store.MODULES[VMATH] = "tapejit.codegen.vmath"
store.MODULES[CPU_GLOBAL] = "tapejit.codegen.threefry"    # random bits (ops/random.py)
store.MODULES[SPECIAL] = "tapejit.codegen.special"       # digamma, erfinv, ... (ops/special.py)
store.MODULES[INCOMPLETE] = "tapejit.codegen.special_incomplete"   # gammainc, betainc, ...
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def scalar_expr(eqn: Eqn, operands: list[str]) -> str:
    """The CPU's expression of elementwise `eqn` on `operands`."""
    if _vmath(eqn):
        suffix = "_f32" if eqn.outs[0].aval.dtype == _F32 else ""
        return f"{VMATH}.{eqn.op}{suffix}({', '.join(operands)})"
    return _format(eqn, OPS[eqn.op].scalar, operands)


def cuda_scalar_expr(eqn: Eqn, operands: list[str]) -> str:
    """A CUDA kernel's expression of elementwise `eqn` on `operands`."""
    op = OPS[eqn.op]
    template = op.scalar if op.cuda_scalar is None else op.cuda_scalar
    if isinstance(template, ByKind):
        dtype = eqn.ins[0].aval.dtype
        template = template.floats if dtype.kind == "f" else template.others
    return _format(eqn, template, operands)


def _format(eqn: Eqn, template, operands: list[str]) -> str:
    if callable(template):
        template = template(eqn)
    dtype = eqn.ins[0].aval.dtype
    return template.format(*operands, out=dtype_code(eqn.outs[0].aval.dtype),
                           dtype=dtype_code(dtype), f="f" if dtype == _F32 else "")


def _vmath(eqn: Eqn) -> bool:
    """Whether `eqn` calls vmath.py: a float64/float32 op whose record asks for it, fast math
    on."""
    vmath = OPS[eqn.op].vmath
    if not vmath or eqn.outs[0].aval.dtype not in (_F64, _F32):
        return False
    return (vmath is True or vmath(eqn)) and config().fast_math


def combine_of(eqn: Eqn) -> str:
    """How reduction `eqn` combines two partial results `{0}`, `{1}` (its op's record)."""
    reduction = OPS[eqn.op].reduction
    bools = eqn.outs[0].aval.dtype.kind == "b" and reduction.bool_combine
    return reduction.bool_combine if bools else reduction.combine


def reduction_init(eqn: Eqn) -> str:
    """The identity of reduction `eqn` in its dtype: an infinite one is the dtype's extreme."""
    dtype = eqn.outs[0].aval.dtype
    value = OPS[eqn.op].reduction.identity
    if dtype.kind in "iu" and value != 0:
        value = np.iinfo(dtype).min if value < 0 else np.iinfo(dtype).max
    if dtype.kind == "b":
        value = value > 0
    return scalar(value, dtype)
