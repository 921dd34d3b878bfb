"""numpy ufuncs -> elementwise primitives, with numpy's dtype promotion.

A rule first finds the dtype numpy would compute in (asking numpy itself on empty arrays, with
Python scalars and scalar arguments left weak, as NEP 50 says), converts the operands to it,
then applies a primitive or a short composition of primitives.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..errors import DtypeError, UnsupportedOperationError, at_source, user_source
from ..ops import custom as C
from ..ops import OPS
from ..ops import elementwise as E
from ..trace import UFUNC_RULES, Tracer
from ..avals import dtype_name
from . import asarray, cast, dtype_of, implements
from .on_import import on_import

_WEAK_DUMMY = {"f": 0.0, "i": 0, "u": 0, "b": False}
_PYTHON_SCALARS = (bool, int, float)   # weak; numpy scalars (np.float64 subclasses float) are not
_PROMOTION: dict[tuple, np.dtype] = {}


def _dummy_key(x: Any) -> Any:
    if isinstance(x, Tracer):
        return ("weak", x.dtype.kind) if x.weak else x.dtype
    if type(x) in _PYTHON_SCALARS:
        return ("weak", np.dtype(type(x)).kind if not isinstance(x, bool) else "b")
    dtype = np.asarray(x).dtype
    if dtype.kind not in "biuf":
        raise DtypeError(at_source(f"tapejit does not support dtype {dtype}", user_source()))
    return dtype


def _dummy(key: Any) -> Any:
    if isinstance(key, tuple):
        return _WEAK_DUMMY[key[1]]
    return np.empty(0, key)


def compute_dtype(ufunc: np.ufunc, args: tuple, common: bool) -> np.dtype:
    """The dtype numpy computes `ufunc(*args)` in: its result dtype, or with `common` the
    common input dtype (for comparisons, whose result is bool)."""
    key = (ufunc, common, *map(_dummy_key, args))
    dtype = _PROMOTION.get(key)
    if dtype is None:
        dummies = [_dummy(k) for k in key[2:]]
        with np.errstate(all="ignore"):
            dtype = np.result_type(*dummies) if common else np.asarray(ufunc(*dummies)).dtype
        _PROMOTION[key] = dtype
    return dtype


def _is_weak(x: Any) -> bool:
    return (isinstance(x, Tracer) and x.weak) or type(x) in _PYTHON_SCALARS


def ufunc_rule(ufunc: np.ufunc, fn: Callable[..., Any], mode: str = "arith") -> None:
    """Register `fn` (on operands already in the compute dtype) as the lowering of `ufunc`.

    mode: "arith" computes in the result dtype; "compare" in the common dtype (bool result);
    "logic" on bools; "test" (isnan, ...) leaves the operand's dtype alone.
    """
    def rule(*args: Any) -> Any:
        if mode == "logic":
            operands = [x if dtype_of(x) == np.bool_ else E.ne(x, 0) for x in args]
        elif mode == "test":
            operands = list(args)
        else:
            dtype = compute_dtype(ufunc, args, common=(mode == "compare"))
            if dtype.kind not in "biuf":
                raise DtypeError(at_source(f"numpy.{ufunc.__name__}: dtype {dtype} is not "
                                           f"supported", user_source()))
            operands = [cast(x, dtype) for x in args]
        out = fn(*operands)
        if isinstance(out, Tracer) and all(map(_is_weak, args)):
            out.weak = True
        return out
    UFUNC_RULES[ufunc] = rule


LN2, LN10 = math.log(2.0), math.log(10.0)

# the ufuncs an elementwise op's record names (`ufuncs`) lower to it directly; one named
# "module.ufunc" once that module is imported
for _prim in OPS.values():
    for _uf in _prim.ufuncs:
        if isinstance(_uf, str):
            _module, _, _name = _uf.rpartition(".")
            on_import(_module, lambda m, n=_name, p=_prim: ufunc_rule(getattr(m, n), p,
                                                                       p.promotion))
        else:
            ufunc_rule(_uf, _prim, _prim.promotion)

# compositions; the comment gives the identity used
ufunc_rule(np.positive, lambda x: x)
ufunc_rule(np.conjugate, lambda x: x)                                  # real arrays only
ufunc_rule(np.square, lambda x: E.mul(x, x))
ufunc_rule(np.reciprocal, lambda x: E.div(1, x))
ufunc_rule(np.exp2, lambda x: E.pow_(2, x))                            # 2^x
ufunc_rule(np.log2, lambda x: E.div(E.log(x), LN2))
ufunc_rule(np.log10, lambda x: E.div(E.log(x), LN10))
ufunc_rule(np.deg2rad, lambda x: E.mul(x, math.pi / 180))
ufunc_rule(np.rad2deg, lambda x: E.mul(x, 180 / math.pi))
ufunc_rule(np.radians, lambda x: E.mul(x, math.pi / 180))             # = deg2rad
ufunc_rule(np.degrees, lambda x: E.mul(x, 180 / math.pi))             # = rad2deg


def _hypot(a: Any, b: Any) -> Any:
    """sqrt(a^2 + b^2) as the larger of |a|, |b| times sqrt(1 + ratio^2), so that no square
    overflows or underflows (hypot(1e200, 1e200) was inf); infinite where either is, NaN
    beside it included, as C's hypot."""
    x, y = E.abs_(a), E.abs_(b)
    big, small = E.max_(x, y), E.min_(x, y)
    ratio = E.div(small, E.select(E.eq(big, 0), 1, big))
    return E.select(E.or_(E.eq(x, math.inf), E.eq(y, math.inf)), math.inf,
                    E.mul(big, E.sqrt(E.add(1, E.mul(ratio, ratio)))))


ufunc_rule(np.hypot, _hypot)


def _log_sum_exp(a: Any, b: Any, exp: Callable[[Any], Any], expm1: Callable[[Any], Any]
                 ) -> tuple[Any, Any]:
    """`(m, t)` with log(exp(a) + exp(b)) = m + log1p(t), for `exp` = e^x or 2^x.

    m = max(a, b) is a constant to differentiation (stop_gradient): the sum does not depend on
    it, so every derivative of m + log1p(t) is exact, also at a tie a == b, where max's and
    abs's derivatives are not. t = exp(a - m) + exp(b - m) - 1 is computed from the larger
    operand's expm1 (exactly 0) plus the other's exp, so no precision is lost when it is tiny.
    An infinite or NaN m is replaced by 0 (no inf - inf; the result is then +-inf or NaN)."""
    m = E.max_(a, b)
    m = C.stop_gradient(E.select(E.lt(E.abs_(m), math.inf), m, 0))
    da, db = E.sub(a, m), E.sub(b, m)
    t = E.select(E.ge(a, b), E.add(expm1(da), exp(db)), E.add(exp(da), expm1(db)))
    return m, t


def _logaddexp(a: Any, b: Any) -> Any:
    m, t = _log_sum_exp(a, b, E.exp, E.expm1)
    return E.add(m, E.log1p(t))


def _logaddexp2(a: Any, b: Any) -> Any:
    m, t = _log_sum_exp(a, b, lambda d: E.pow_(2, d),       # (exp(d ln 2): 150 ulp at d=-750)
                        lambda d: E.expm1(E.mul(d, LN2)))
    return E.add(m, E.div(E.log1p(t), LN2))


ufunc_rule(np.logaddexp, _logaddexp)
ufunc_rule(np.logaddexp2, _logaddexp2)
# heaviside(x, h0) = 0 below 0, h0 at 0, 1 above: piecewise constant, zero gradient in x
ufunc_rule(np.heaviside, lambda x, h0: E.select(E.lt(x, 0), 0, E.select(E.gt(x, 0), 1, h0)))
# fmax/fmin ignore a NaN operand
ufunc_rule(np.fmax, lambda a, b: E.select(E.ne(b, b), a, E.select(E.ne(a, a), b, E.max_(a, b))))
ufunc_rule(np.fmin, lambda a, b: E.select(E.ne(b, b), a, E.select(E.ne(a, a), b, E.min_(a, b))))


def _float_test(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """isnan & co: floats are tested, integers never are NaN or infinite."""
    def test(x: Any) -> Any:
        return fn(x) if x.dtype.kind == "f" else E.ne(x, x)
    return test


ufunc_rule(np.isnan, _float_test(lambda x: E.ne(x, x)), "test")
ufunc_rule(np.isinf, _float_test(lambda x: E.eq(E.abs_(x), math.inf)), "test")
ufunc_rule(np.isfinite, lambda x: E.lt(E.abs_(x), math.inf) if x.dtype.kind == "f"
           else E.eq(x, x), "test")

ufunc_rule(np.signbit, lambda x: E.signbit(x) if x.dtype.kind == "f" else
           E.lt(x, 0) if x.dtype.kind == "i" else E.ne(x, x), "test")
ufunc_rule(np.divmod, lambda a, b: (E.floor_div(a, b), E.rem(a, b)))


def _modf(x: Any) -> tuple[Any, Any]:
    """(fraction, integral part): x - trunc(x), with x's sign (-0.0 for -2.0) and 0 for an
    infinity, as numpy; the fraction's derivative is 1 (x - trunc(x)'s, the sign a constant:
    subtracting the +0.0 of d - d keeps a -0.0)."""
    whole = E.trunc(x)
    d = E.select(E.eq(E.abs_(x), math.inf), 0, E.sub(x, whole))
    signed = C.stop_gradient(E.copysign(d, x))
    return E.sub(signed, E.sub(C.stop_gradient(d), d)), whole


ufunc_rule(np.modf, _modf)


def _bool_only(name: str, prim: Callable[..., Any]) -> Callable[..., Any]:
    def rule(*args: Any) -> Any:
        if any(dtype_of(a) != np.bool_ for a in args):
            raise UnsupportedOperationError(at_source(
                f"numpy.{name} on integers is not supported on traced arrays "
                f"(on bool masks it is logical and/or/xor/not)", user_source()))
        return prim(*args)
    return rule


for _uf, _prim in {np.bitwise_and: E.and_, np.bitwise_or: E.or_, np.bitwise_xor: E.xor,
                   np.invert: E.not_}.items():
    UFUNC_RULES[_uf] = _bool_only(_uf.__name__, _prim)


# real arrays only (tapejit has no complex dtype): the real part is x, the imaginary part 0
implements(np.real)(lambda x: asarray(x))
implements(np.imag)(lambda x: np.zeros_like(x))
Tracer.imag = property(lambda x: np.zeros_like(x))
Tracer.conj = Tracer.conjugate = lambda x: x


@implements(np.sinc)
def sinc(x: Any) -> Any:
    """sin(pi x) / (pi x), and 1 at x = 0 (where the quotient is evaluated at x = 1 instead, so
    no 0/0 reaches the value or its derivatives; the derivative there is 0)."""
    x = asarray(x)
    x = cast(x, compute_dtype(np.sin, (x,), common=False))
    zero = E.eq(x, 0)
    safe = E.mul(E.add(x, E.convert(zero, dtype=dtype_name(x.dtype))), math.pi)
    return E.select(zero, 1, E.div(E.sin(safe), safe))
