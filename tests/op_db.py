"""The op table of the tests: test metadata as data (like PyTorch's OpInfo).

One `Row` per primitive of `tapejit.ops.OPS` (`prim=`: the traced tape must contain it) and one
or more rows per supported numpy ufunc, function, Tracer method and operator (`covers=`).
A row gives a numpy expression on its inputs, the input shapes to try (0-d and broadcasting
pairs included), the input domain (away from kinks and poles), the dtypes, whether it is
differentiable, whether its second derivative is checked, and tolerances. test_ops.py drives
the checks (forward vs numpy, finite differences, float32, second order, typecheck/print/parse)
and fails when an op or a supported numpy function has no row.

Integer and boolean constants (indices, masks, exponents) are closed over, so every input of
`fn` is a float array that the checks may perturb.
"""
from __future__ import annotations

import dataclasses
import warnings
import zlib
from typing import Any, Callable, Sequence

import numba
import numpy as np

import tapejit as tj
from tapejit.ops import elementwise as E
from tapejit.ops import index as I
from tapejit.ops import layout as L
from tapejit.ops import linalg as LA
from tapejit.ops import random as RB
from tapejit.ops import reduce as R
from tapejit.ops import sort as ST
from tapejit.ops import triangular as TR

F64, F32 = "float64", "float32"


@dataclasses.dataclass(frozen=True)
class Domain:
    """Uniform on (lo, hi); with `both_signs`, on (-hi, -lo) U (lo, hi)."""
    lo: float
    hi: float
    both_signs: bool = False

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        x = rng.uniform(self.lo, self.hi, size=shape)
        return x * rng.choice([-1.0, 1.0], size=shape) if self.both_signs else x


REAL = Domain(-2.0, 2.0)
POS = Domain(0.5, 2.0)
NONZERO = Domain(0.5, 2.0, both_signs=True)
UNIT = Domain(-0.9, 0.9)

UNARY_SHAPES = (((),), ((5,),), ((2, 3),))
# broadcasts whose different axes have equal lengths (a (3,) row against a (3, 1) column)
BINARY_SHAPES = (((), ()), ((4,), ()), ((), (3,)), ((3, 3), (3,)), ((2, 1), (1, 3)),
                 ((3, 1), (3,)))
MATRIX = (((3, 4),),)
CUBE = (((2, 3, 4),),)


@dataclasses.dataclass(frozen=True)
class Row:
    name: str                                   # the test id
    fn: Callable[..., Any]                      # a numpy expression on float inputs
    shapes: Sequence[Sequence[tuple[int, ...]]] = UNARY_SHAPES   # per sample, one per input
    domain: Domain | Sequence[Domain] = REAL    # one for all inputs, or one per input
    dtypes: tuple[str, ...] = (F64, F32)
    diff: bool = True                           # False: every input's gradient must be zero
    grad2: bool = False                         # check the second derivative (elementwise)
    rtol: float = 1e-5
    atol: float = 1e-7
    h: float = 1e-6                             # finite-difference step
    f32_rtol: float = 2e-3                      # float32 vs float64 gradients
    covers: tuple[Any, ...] = ()                # ufuncs, functions, "method:x", "operator:__x__"
    prim: str | None = None                     # the primitive this row is the row of
    ref: Callable[..., Any] | None = None       # numpy reference when `fn` is not numpy code
    distinct: bool = False                      # all input elements well apart (max/min, sort)
    args: Callable[[np.random.Generator], list] | None = None   # fixed inputs (special cases)
    expect_grad: Callable[..., Sequence[np.ndarray]] | None = None  # (ct, *args) -> grads
    int_fn: Callable[..., Any] | None = None    # an integer-input variant: forward check only

    def samples(self, dtype: str) -> list[list[np.ndarray]]:
        """The inputs to try, deterministic per row name and dtype."""
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        if self.args is not None:
            return [[np.asarray(a, dtype) for a in self.args(rng)]]
        out = []
        for shapes in self.shapes:
            domains = (self.domain if isinstance(self.domain, (list, tuple))
                       else [self.domain] * len(shapes))
            if self.distinct:
                out.append(_distinct(rng, shapes, domains[0], dtype))
            else:
                out.append([d.sample(rng, s).astype(dtype) for d, s in zip(domains, shapes)])
        return out


def _distinct(rng: np.random.Generator, shapes, domain: Domain, dtype: str) -> list:
    """Inputs whose elements, across all inputs, are pairwise at least a spacing apart."""
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    n = sum(sizes)
    pool = domain.lo + (domain.hi - domain.lo) * (rng.permutation(n) + 0.3
                                                  + 0.4 * rng.random(n)) / n
    parts = np.split(pool, np.cumsum(sizes)[:-1])
    return [p.reshape(s).astype(dtype) for p, s in zip(parts, shapes)]


ROWS: list[Row] = []


def row(name: str, fn: Callable[..., Any], **kw: Any) -> None:
    ROWS.append(Row(name, fn, **kw))


# ---- elementwise: one row per ufunc, one per primitive ----------------------------------------
# (ufunc, primitive or None, domain(s), differentiable)
UNARY = [
    (np.negative, E.neg, REAL, True), (np.exp, E.exp, REAL, True), (np.log, E.log, POS, True),
    (np.expm1, E.expm1, REAL, True), (np.log1p, E.log1p, Domain(-0.5, 2.0), True),
    (np.sqrt, E.sqrt, POS, True), (np.cbrt, E.cbrt, NONZERO, True), (np.sin, E.sin, REAL, True),
    (np.cos, E.cos, REAL, True), (np.tan, E.tan, Domain(-1.2, 1.2), True),
    (np.arcsin, E.asin, UNIT, True), (np.arccos, E.acos, UNIT, True),
    (np.arctan, E.atan, REAL, True), (np.sinh, E.sinh, REAL, True),
    (np.cosh, E.cosh, REAL, True), (np.tanh, E.tanh, REAL, True),
    (np.arcsinh, E.asinh, REAL, True), (np.arccosh, E.acosh, Domain(1.2, 3.0), True),
    (np.arctanh, E.atanh, UNIT, True), (np.absolute, E.abs_, NONZERO, True),
    (np.fabs, None, NONZERO, True), (np.sign, E.sign, NONZERO, False),
    (np.floor, E.floor, REAL, False), (np.ceil, E.ceil, REAL, False),
    (np.rint, E.round_, REAL, False), (np.trunc, E.trunc, REAL, False),
    (np.positive, None, REAL, True), (np.conjugate, None, REAL, True),
    (np.square, None, REAL, True), (np.reciprocal, None, NONZERO, True),
    (np.exp2, None, REAL, True), (np.log2, None, POS, True), (np.log10, None, POS, True),
    (np.deg2rad, None, REAL, True), (np.rad2deg, None, REAL, True),
    (np.radians, None, REAL, True), (np.degrees, None, REAL, True),
]
BINARY = [
    (np.add, E.add, REAL, True), (np.subtract, E.sub, REAL, True),
    (np.multiply, E.mul, REAL, True), (np.divide, E.div, [REAL, NONZERO], True),
    (np.power, E.pow_, [POS, REAL], True), (np.arctan2, E.atan2, [NONZERO, REAL], True),
    (np.remainder, E.rem, [Domain(0.1, 5.0), Domain(0.7, 2.0)], True),
    (np.floor_divide, E.floor_div, [Domain(0.1, 5.0), Domain(0.7, 2.0)], False),
    (np.fmod, E.fmod, [Domain(0.1, 5.0, both_signs=True), Domain(0.7, 2.0, both_signs=True)],
     True),
    (np.hypot, None, NONZERO, True), (np.logaddexp, None, REAL, True),
    (np.logaddexp2, None, REAL, True),
]
DISTINCT_BINARY = [(np.maximum, E.max_), (np.minimum, E.min_), (np.fmax, None), (np.fmin, None)]
COMPARE = [(np.less, E.lt), (np.less_equal, E.le), (np.greater, E.gt),
           (np.greater_equal, E.ge), (np.equal, E.eq), (np.not_equal, E.ne)]

for _uf, _prim, _dom, _diff in UNARY:
    row(_uf.__name__, _uf, domain=_dom, diff=_diff, grad2=_diff, covers=(_uf,), int_fn=_uf)
    if _prim is not None:
        row(f"prim_{_prim.name}", _prim, domain=_dom, diff=_diff, grad2=_diff,
            prim=_prim.name, ref=_uf)
for _uf, _prim, _dom, _diff in BINARY:
    row(_uf.__name__, _uf, shapes=BINARY_SHAPES, domain=_dom, diff=_diff, grad2=_diff,
        covers=(_uf,), int_fn=None if _uf is np.power else _uf)
    if _prim is not None:
        row(f"prim_{_prim.name}", _prim, shapes=BINARY_SHAPES, domain=_dom, diff=_diff,
            grad2=_diff, prim=_prim.name, ref=_uf)
for _uf, _prim in DISTINCT_BINARY:
    row(_uf.__name__, _uf, shapes=BINARY_SHAPES, distinct=True, grad2=True, covers=(_uf,),
        int_fn=_uf)
    if _prim is not None:
        row(f"prim_{_prim.name}", _prim, shapes=BINARY_SHAPES, distinct=True, grad2=True,
            prim=_prim.name, ref=_uf)
for _uf, _prim in COMPARE:
    row(_uf.__name__, _uf, shapes=BINARY_SHAPES, diff=False, covers=(_uf,),
        int_fn=_uf)
    row(f"prim_{_prim.name}", _prim, shapes=BINARY_SHAPES, diff=False, prim=_prim.name, ref=_uf)
# equality of floats is rare at random: compare on values with ties
row("equal_ties", lambda a, b: np.equal(np.round(a), np.round(b)), shapes=BINARY_SHAPES,
    diff=False, covers=(np.equal, np.not_equal))

# logic ops take bools: masks made from float inputs
_LOGIC = [(np.logical_and, E.and_), (np.logical_or, E.or_), (np.logical_xor, E.xor)]
for _uf, _prim in _LOGIC:
    row(_uf.__name__, lambda a, b, _uf=_uf: _uf(a, b > 0), shapes=BINARY_SHAPES,
        domain=NONZERO, diff=False, covers=(_uf,))
    row(f"prim_{_prim.name}", lambda a, b, _p=_prim: _p(a > 0, b > 0.5), shapes=BINARY_SHAPES,
        diff=False, prim=_prim.name,
        ref=lambda a, b, _uf=_uf: _uf(a > 0, b > 0.5))
row("logical_not", lambda x: np.logical_not(x), domain=NONZERO, diff=False,
    covers=(np.logical_not,))
row("prim_not", lambda x: E.not_(x > 0), diff=False, prim="not",
    ref=lambda x: np.logical_not(x > 0))
for _uf in (np.bitwise_and, np.bitwise_or, np.bitwise_xor):
    row(_uf.__name__, lambda a, b, _uf=_uf: _uf(a > 0, b < 0.5), shapes=BINARY_SHAPES,
        diff=False, covers=(_uf,))
row("invert", lambda x: np.invert(x > 0), diff=False, covers=(np.invert, "operator:__invert__"))
row("isnan", lambda x: np.isnan(np.log(x)), domain=Domain(-1, 2), diff=False,
    covers=(np.isnan,))
row("isinf", lambda x: np.isinf(1 / np.round(x)), diff=False, covers=(np.isinf,))
row("isfinite", lambda x: np.isfinite(np.log(x)), domain=Domain(-1, 2), diff=False,
    covers=(np.isfinite,))
row("isnan_int", lambda x: np.isnan(np.argmax(x, axis=-1)), shapes=MATRIX, diff=False,
    covers=(np.isnan,))

row("heaviside", lambda x, h: np.heaviside(np.round(x), h), shapes=BINARY_SHAPES,
    covers=(np.heaviside,), int_fn=np.heaviside)
row("heaviside_zero_grad", lambda x: np.heaviside(x, 0.5) * x, domain=NONZERO)
row("sinc", np.sinc, grad2=True, covers=(np.sinc,))
row("sinc_at_zero", np.sinc, args=lambda rng: [np.array([0.0, 0.5, -1.0])],
    expect_grad=lambda ct, x: [ct * np.array([0.0, -4 / np.pi, 1.0])])

# pow: scalar exponents, x = 0, p = 0
row("pow_scalar_exp", lambda x: x ** 3, grad2=True, covers=("operator:__pow__",))
row("pow_half", lambda x: x ** 0.5, domain=POS, grad2=True, covers=("operator:__pow__",))
row("pow_neg_int", lambda x: x ** -2, domain=NONZERO, grad2=True)
row("rpow_scalar_base", lambda x: 2.0 ** x, grad2=True, covers=("operator:__rpow__",))
row("pow_array_exp", lambda x, p: x ** p, shapes=BINARY_SHAPES, domain=[POS, REAL],
    grad2=True, covers=("operator:__pow__",))
row("pow_x_zero", lambda x: x ** np.array([2.0, 3.0, 1.0, 0.0]),
    args=lambda rng: [np.array([0.0, 0.0, 0.0, 0.0])], grad2=True)
row("pow_x_zero_mixed", lambda x: x ** np.array([2.0, 3.0, 1.0, 0.0, 2.5]),
    args=lambda rng: [np.array([0.0, 0.0, 0.0, 0.0, 1.5])], grad2=True)
row("pow_x_zero_traced_p", lambda x, p: x ** p,        # finite differences would leave x >= 0
    args=lambda rng: [np.array([0.0, 0.0, 1.3]), np.array([2.0, 3.0, 1.7])],
    expect_grad=lambda ct, x, p: [ct * p * x ** (p - 1), ct * np.log(np.where(x, x, 1)) * x ** p])
row("pow_p_zero", lambda x, p: x ** (p * 0), shapes=BINARY_SHAPES, domain=[POS, REAL])

# select and convert
row("prim_select", lambda p, a, b: E.select(p > 0, a, b),
    shapes=(((), (), ()), ((3,), (3,), ()), ((2, 3), (3,), (2, 1))),
    domain=[NONZERO, REAL, REAL], prim="select", grad2=True,
    ref=lambda p, a, b: np.where(p > 0, a, b))
# a float32 round trip: finite differences need a step well above float32's resolution
F32_FD = {"h": 1e-2, "rtol": 1e-4, "atol": 1e-5, "f32_rtol": 1e-2}
row("prim_convert_f32", lambda x: E.convert(x, dtype="f32") * 2, prim="convert",
    ref=lambda x: x.astype(np.float32) * np.float32(2), **F32_FD)
row("prim_convert_int", lambda x: E.convert(x * 3, dtype="i64"), prim="convert", diff=False,
    ref=lambda x: (x * 3).astype(np.int64))

# ---- operators -----------------------------------------------------------------------------
OPERATOR_ROWS = [
    ("add", lambda a, b: a + b, REAL), ("radd", lambda a: 1.5 + a, REAL),
    ("sub", lambda a, b: a - b, REAL), ("rsub", lambda a: 1.5 - a, REAL),
    ("mul", lambda a, b: a * b, REAL), ("rmul", lambda a: 1.5 * a, REAL),
    ("truediv", lambda a, b: a / b, NONZERO), ("rtruediv", lambda a: 1.5 / a, NONZERO),
    ("mod", lambda a, b: a % b, POS), ("rmod", lambda a: 5.3 % a, POS),
]
for _name, _fn, _dom in OPERATOR_ROWS:
    _two = _fn.__code__.co_argcount == 2
    row(f"op_{_name}", _fn, shapes=BINARY_SHAPES if _two else UNARY_SHAPES, domain=_dom,
        grad2=True, covers=(f"operator:__{_name}__",))
row("op_floordiv", lambda a, b: a // b, shapes=BINARY_SHAPES, domain=POS, diff=False,
    covers=("operator:__floordiv__",))
row("op_rfloordiv", lambda a: 5.3 // a, domain=POS, diff=False,
    covers=("operator:__rfloordiv__",))
row("op_rpow_array", lambda a: np.array([1.5, 2.0, 0.5]) ** a, shapes=(((3,),), ((2, 3),)),
    grad2=True, covers=("operator:__rpow__",))
for _name, _fn in [("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b),
                   ("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b),
                   ("eq", lambda a, b: a == np.round(b)), ("ne", lambda a, b: a != np.round(b))]:
    row(f"op_{_name}", _fn, shapes=BINARY_SHAPES, diff=False, covers=(f"operator:__{_name}__",))
for _name, _fn in [("and", lambda a, b: (a > 0) & (b > 0)), ("or", lambda a, b: (a > 0) | (b > 0)),
                   ("xor", lambda a, b: (a > 0) ^ (b > 0))]:
    row(f"op_{_name}", _fn, shapes=BINARY_SHAPES, diff=False,
        covers=(f"operator:__{_name}__",))
for _name, _fn in [("rand", lambda a: True & (a > 0)), ("ror", lambda a: False | (a > 0)),
                   ("rxor", lambda a: True ^ (a > 0)),
                                  ("and_array", lambda a: np.array([True, False, True]) & (a > 0))]:
    row(f"op_{_name}", _fn, shapes=(((3,),),), diff=False,
        covers=(f"operator:__{_name.split('_')[0]}__",))
row("op_neg", lambda a: -a, grad2=True, covers=("operator:__neg__",))
row("op_pos", lambda a: +a, grad2=True, covers=("operator:__pos__",))
row("op_abs", lambda a: abs(a), domain=NONZERO, grad2=True, covers=("operator:__abs__",))
row("op_matmul", lambda a, b: a @ b, shapes=(((2, 3), (3, 4)), ((3,), (3, 2)), ((2, 3), (3,))),
    covers=("operator:__matmul__",))
row("op_rmatmul", lambda b: [[1.0, 2.0, 0.5]] @ b, shapes=(((3, 2),), ((3,),)),
    covers=("operator:__rmatmul__",))
row("mixed_dtype_int_const", lambda x: x * np.arange(3) + np.int32(2), shapes=(((3,),),))
row("mixed_f32_python_scalar", lambda x: x * 0.1 + 3, shapes=(((3,),),))
row("mixed_numpy_scalar_is_strong", lambda x: x * np.float64(0.5) + np.float32(1), shapes=(((3,),),))
row("mixed_where_numpy_scalar", lambda x: np.where(x > 0, x, np.float64(0.5)), shapes=(((3,),),))
row("mixed_int_python_scalar", lambda x: (x > 0) * 2 + 1.5 * x, shapes=(((3,),),),
    int_fn=lambda x: x * 2 + 3 // (x * x + 1))
_INF = lambda a: np.sign(a) * np.inf                        # +-inf, with zero gradient
row("logaddexp_infinities", lambda a: np.logaddexp(_INF(a), _INF(a)) + np.logaddexp2(
    _INF(a), _INF(a)), args=lambda rng: [np.array([1.0, -1.0])], diff=False)
row("logaddexp_ties", lambda a, b: np.logaddexp(a, b),     # d/da = e^a / (e^a + e^b) = 1/2
    args=lambda rng: [np.array([0.3, -1.0]), np.array([0.3, -1.0])],
    expect_grad=lambda ct, a, b: [ct / 2, ct / 2])

# ---- reductions ------------------------------------------------------------------------------
_prod_zeros = lambda rng: [np.array([[1.5, 0.0, -0.7, 2.0], [0.0, 1.1, 0.0, 0.8],
                                     [0.9, -1.2, 1.3, 0.6]])]
for _name, _fn in [("all", lambda x: np.sum(x)), ("axis0", lambda x: np.sum(x, axis=0)),
                   ("axis_neg_keep", lambda x: np.sum(x, axis=-1, keepdims=True)),
                   ("axes02", lambda x: np.sum(x, axis=(0, 2)))]:
    row(f"sum_{_name}", _fn, shapes=CUBE, covers=(np.sum,))
row("sum_0d", lambda x: np.sum(x), shapes=(((),),), covers=(np.sum,))
row("sum_dtype", lambda x: np.sum(x, dtype=np.float32), shapes=MATRIX, **F32_FD)
row("sum_int", lambda x: np.sum(x > 0) * x, shapes=MATRIX, covers=(np.sum,))
row("mean", lambda x: np.mean(x, axis=1), shapes=CUBE, covers=(np.mean,))
row("mean_all_keep", lambda x: np.mean(x, keepdims=True), shapes=MATRIX, covers=(np.mean,))
row("prod", lambda x: np.prod(x, axis=1), shapes=CUBE, domain=NONZERO, covers=(np.prod,))
row("prod_all", lambda x: np.prod(x), shapes=(((),), ((5,),), ((2, 3),)), domain=NONZERO,
    covers=(np.prod,))
row("prod_zeros_axis1", lambda x: np.prod(x, axis=1), args=_prod_zeros, covers=(np.prod,))
row("prod_zeros_axis0", lambda x: np.prod(x, axis=0), args=_prod_zeros)
row("prod_zeros_all", lambda x: np.prod(x), args=_prod_zeros)
row("prod_one_zero", lambda x: np.prod(x * np.array([1.0, 0.0, 1.0])),
    args=lambda rng: [np.array([1.3, 0.4, -0.8])])
for _f, _n in [(np.max, "max"), (np.amax, "amax"), (np.min, "min"), (np.amin, "amin")]:
    row(_n, lambda x, _f=_f: _f(x, axis=-1), shapes=CUBE, distinct=True, covers=(_f,),
        int_fn=lambda x, _f=_f: _f(x, axis=-1))
    row(f"{_n}_all", lambda x, _f=_f: _f(x), shapes=(((),), ((2, 3),)), distinct=True,
        covers=(_f,))
row("max_keepdims", lambda x: np.max(x, axis=(0, 2), keepdims=True), shapes=CUBE,
    distinct=True)
row("any", lambda x: np.any(x > 1, axis=0), shapes=MATRIX, diff=False, covers=(np.any,))
row("any_float", lambda x: np.any(np.round(x)), shapes=MATRIX, diff=False, covers=(np.any,))
row("all", lambda x: np.all(x > -1.5, axis=-1), shapes=MATRIX, diff=False, covers=(np.all,))
row("var", lambda x: np.var(x, axis=0), shapes=MATRIX, covers=(np.var,))
row("count_nonzero", lambda x: np.count_nonzero(x > 0, axis=0) * x + np.count_nonzero(x),
    shapes=MATRIX, covers=(np.count_nonzero,), int_fn=lambda x: np.count_nonzero(x, axis=1))
row("average", lambda x: np.average(x, axis=0), shapes=MATRIX, covers=(np.average,))
row("average_weights", lambda x, w: np.average(x, axis=1, weights=w),
    shapes=(((2, 3), (3,)),), domain=[REAL, POS], covers=(np.average,))
row("average_weights_full", lambda x, w: np.average(x, weights=w, keepdims=True),
    shapes=(((2, 3), (2, 3)),), domain=[REAL, POS], covers=(np.average,))
row("var_ddof", lambda x: np.var(x, ddof=1), shapes=MATRIX, covers=(np.var,))
row("std", lambda x: np.std(x, axis=1, keepdims=True), shapes=MATRIX, covers=(np.std,))
row("argmax", lambda x: np.argmax(x, axis=1), shapes=MATRIX, distinct=True, diff=False,
    covers=(np.argmax,), int_fn=lambda x: np.argmax(x, axis=1))
row("argmax_flat", lambda x: np.argmax(x), shapes=MATRIX, distinct=True, diff=False,
    covers=(np.argmax,))
row("argmin", lambda x: np.argmin(x, axis=0, keepdims=True), shapes=MATRIX, distinct=True,
    diff=False, covers=(np.argmin,))
row("cumsum", lambda x: np.cumsum(x, axis=1), shapes=MATRIX, covers=(np.cumsum,))
row("cumsum_flat", lambda x: np.cumsum(x), shapes=MATRIX, covers=(np.cumsum,))
row("cumsum_int", lambda x: np.cumsum(x > 0) * 1.0, shapes=(((5,),),), diff=False)
row("cumprod", lambda x: np.cumprod(x, axis=0), shapes=MATRIX, domain=NONZERO,
    covers=(np.cumprod,))
row("cumprod_zeros", lambda x: np.cumprod(x, axis=1), args=_prod_zeros, covers=(np.cumprod,))
row("cumprod_zeros_flat", lambda x: np.cumprod(x), args=_prod_zeros)
row("norm", lambda x: np.linalg.norm(x), shapes=MATRIX, covers=(np.linalg.norm,))
for _ord in (1, 2, np.inf, 3, "fro"):
    _shapes = MATRIX if _ord == "fro" else (((5,),), ((2, 3),))
    _axis = None if _ord == "fro" else -1
    row(f"norm_ord_{_ord}", lambda x, _o=_ord, _a=_axis: np.linalg.norm(x, ord=_o, axis=_a),
        shapes=_shapes, domain=NONZERO, distinct=_ord == np.inf, covers=(np.linalg.norm,))
row("norm_keepdims", lambda x: np.linalg.norm(x, axis=0, keepdims=True), shapes=MATRIX)

# primitives of reductions, called directly
row("prim_reduce_sum", lambda x: R.reduce_sum(x, axes=(0, 2)), shapes=CUBE, prim="reduce_sum",
    ref=lambda x: np.sum(x, axis=(0, 2)))
row("prim_reduce_max", lambda x: R.reduce_max(x, axes=(1,)), shapes=CUBE, distinct=True,
    prim="reduce_max", ref=lambda x: np.max(x, axis=1))
row("prim_reduce_min", lambda x: R.reduce_min(x, axes=(0, 1)), shapes=CUBE, distinct=True,
    prim="reduce_min", ref=lambda x: np.min(x, axis=(0, 1)))
row("prim_reduce_prod", lambda x: R.reduce_prod(x, axes=(0, 2)), shapes=CUBE, domain=NONZERO,
    prim="reduce_prod", ref=lambda x: np.prod(x, axis=(0, 2)))
row("prim_dim_size", lambda x: np.mean(x, axis=(0, 2)), shapes=CUBE, prim="dim_size",
    ref=lambda x: np.sum(x, axis=(0, 2)) / 8.0)
row("prim_argmax", lambda x: R.argmax(x, axis=0), shapes=MATRIX, distinct=True, diff=False,
    prim="argmax", ref=lambda x: np.argmax(x, axis=0))
row("prim_argmin", lambda x: R.argmin(x, axis=1), shapes=MATRIX, distinct=True, diff=False,
    prim="argmin", ref=lambda x: np.argmin(x, axis=1))
row("prim_cumsum_reverse", lambda x: R.cumsum(x, axis=1, reverse=True), shapes=MATRIX,
    prim="cumsum", ref=lambda x: np.flip(np.cumsum(np.flip(x, 1), axis=1), 1))
row("prim_cumprod_reverse", lambda x: R.cumprod(x, axis=0, reverse=True), shapes=MATRIX,
    domain=NONZERO, prim="cumprod", ref=lambda x: np.flip(np.cumprod(np.flip(x, 0), axis=0), 0))


# max/min ties: the documented rule splits the gradient evenly between tied elements
def _tie_split(ct, x, axis=None):
    x = np.asarray(x)
    top = np.max(x, axis=axis, keepdims=True)
    mask = (x == top).astype(x.dtype)
    ct = np.asarray(ct) if axis is None else np.expand_dims(ct, axis)
    return [mask / mask.sum(axis=axis, keepdims=True) * ct]


_TIES = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 0.5], [0.0, 1.0, -4.0, 1.0]])
row("max_ties", lambda x: np.max(x, axis=1), args=lambda rng: [_TIES],
    expect_grad=lambda ct, x: _tie_split(ct, x, 1))
row("max_ties_all", lambda x: np.max(x), args=lambda rng: [_TIES],
    expect_grad=lambda ct, x: _tie_split(ct, x))
row("min_ties", lambda x: -np.min(-x, axis=1), args=lambda rng: [_TIES],
    expect_grad=lambda ct, x: _tie_split(ct, x, 1))
row("maximum_ties", lambda a, b: np.maximum(a, b),
    args=lambda rng: [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])],
    expect_grad=lambda ct, a, b: [ct * np.array([0.5, 1, 0.5]), ct * np.array([0.5, 0, 0.5])])
row("minimum_ties", lambda a, b: np.minimum(a, b),
    args=lambda rng: [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])],
    expect_grad=lambda ct, a, b: [ct * np.array([0.5, 0, 0.5]), ct * np.array([0.5, 1, 0.5])])

# ---- layout ------------------------------------------------------------------------------------
row("reshape", lambda x: np.reshape(x, (4, -1)), shapes=CUBE, covers=(np.reshape,))
row("reshape_shape_kw", lambda x: np.reshape(x, shape=(6, 4)), shapes=CUBE, covers=(np.reshape,))
row("reshape_fortran", lambda x: (np.reshape(x, (x.shape[-1], -1), order="F"),
                                  np.ravel(x, order="F"),
                                  np.reshape(x, shape=x.shape[::-1], order="F")),
    shapes=CUBE + (((3, 3),), ((1, 0, 2),)), covers=(np.reshape, np.ravel))
row("ravel", lambda x: np.ravel(x), shapes=MATRIX, covers=(np.ravel,))
row("transpose", lambda x: np.transpose(x, (2, 0, 1)), shapes=CUBE, covers=(np.transpose,))
row("transpose_default", lambda x: np.transpose(x), shapes=CUBE, covers=(np.transpose,))
row("swapaxes", lambda x: np.swapaxes(x, 0, -1), shapes=CUBE, covers=(np.swapaxes,))
row("moveaxis", lambda x: np.moveaxis(x, 0, -1), shapes=CUBE, covers=(np.moveaxis,))
row("moveaxis_multi", lambda x: np.moveaxis(x, [0, 1], [-1, 0]), shapes=CUBE,
    covers=(np.moveaxis,))
row("expand_dims", lambda x: np.expand_dims(x, (0, -1)), shapes=MATRIX,
    covers=(np.expand_dims,))
row("squeeze", lambda x: np.squeeze(x), shapes=(((1, 3, 1),),), covers=(np.squeeze,))
row("squeeze_axis", lambda x: np.squeeze(x, axis=2), shapes=(((1, 3, 1),),),
    covers=(np.squeeze,))
row("broadcast_to", lambda x: np.broadcast_to(x, (2, 3, 4)), shapes=(((4,),), ((3, 1),), ((),)),
    covers=(np.broadcast_to,))
row("broadcast_arrays", lambda a, b: np.broadcast_arrays(a, b),
    shapes=(((2, 1), (3,)), ((), (2,))), covers=(np.broadcast_arrays,))
row("atleast_1d", lambda x: np.atleast_1d(x) * 2, shapes=(((),), ((3,),)),
    covers=(np.atleast_1d,))
row("atleast_2d", lambda x: np.atleast_2d(x) * 2, shapes=(((),), ((3,),), ((2, 3),)),
    covers=(np.atleast_2d,))
row("concatenate", lambda a, b: np.concatenate([a, b], axis=1),
    shapes=(((2, 3), (2, 1)),), covers=(np.concatenate,))
row("concatenate_none", lambda a, b: np.concatenate([a, b], axis=None),
    shapes=(((2, 3), (4,)),), covers=(np.concatenate,))
row("concatenate_const", lambda a: np.concatenate([a, np.ones((1, 3))]),
    shapes=(((2, 3),),), covers=(np.concatenate,))
row("stack", lambda a, b: np.stack([a, b], axis=-1), shapes=(((2, 3), (2, 3)), ((), ())),
    covers=(np.stack,))
row("hstack", lambda a, b: np.hstack([a, b]), shapes=(((2,), (3,)), ((2, 3), (2, 1))),
    covers=(np.hstack,))
row("vstack", lambda a, b: np.vstack([a, b]), shapes=(((3,), (3,)), ((2, 3), (1, 3))),
    covers=(np.vstack,))
row("column_stack", lambda a, b: np.column_stack([a, b]), shapes=(((3,), (3, 2)),),
    covers=(np.column_stack,))
row("split", lambda x: np.split(x, 3, axis=1), shapes=(((2, 6),),), covers=(np.split,))
row("split_indices", lambda x: np.split(x, [1, -2]), shapes=(((6,),), ((5, 2),)),
    covers=(np.split,))
row("array_split", lambda x: np.array_split(x, 3), shapes=(((7,),),),
    covers=(np.array_split,))
row("array_split_empty_parts", lambda x: np.array_split(x, 4, axis=1), shapes=(((2, 3),),),
    covers=(np.array_split,))
row("tile", lambda x: np.tile(x, (2, 1, 3)), shapes=(((3,),), ((2, 3),)), covers=(np.tile,))
row("repeat", lambda x: np.repeat(x, 2, axis=0), shapes=MATRIX, covers=(np.repeat,))
row("repeat_flat", lambda x: np.repeat(x, 3), shapes=(((),), ((2, 2),)), covers=(np.repeat,))
row("repeat_array", lambda x: np.repeat(x, [1, 0, 3], axis=1), shapes=(((2, 3),),),
    covers=(np.repeat,))
row("flip", lambda x: np.flip(x, axis=(0, 2)), shapes=CUBE, covers=(np.flip,))
row("flip_all", lambda x: np.flip(x), shapes=MATRIX, covers=(np.flip,))
row("fliplr", lambda x: np.fliplr(x), shapes=MATRIX, covers=(np.fliplr,))
row("flipud", lambda x: np.flipud(x), shapes=MATRIX, covers=(np.flipud,))
row("roll", lambda x: np.roll(x, 2, axis=1), shapes=MATRIX, covers=(np.roll,))
row("roll_flat", lambda x: np.roll(x, -5), shapes=MATRIX, covers=(np.roll,))
row("roll_multi", lambda x: np.roll(x, (1, -1), axis=(0, 1)), shapes=MATRIX, covers=(np.roll,))
row("rot90", lambda x: (np.rot90(x), np.rot90(x, 2), np.rot90(x, -1), np.rot90(x, 4),
                        np.rot90(x, 3, axes=(1, 0))),
    shapes=MATRIX + (((3, 3),), ((1, 0),)), covers=(np.rot90,))
row("rot90_axes", lambda x: (np.rot90(x, 1, axes=(0, 2)), np.rot90(x, 1, axes=(-1, 1))),
    shapes=CUBE + (((3, 3, 3),),), covers=(np.rot90,))
row("pad_constant", lambda x: np.pad(x, ((1, 2), (0, 3)), constant_values=1.5),
    shapes=MATRIX, covers=(np.pad,))
row("pad_int_width", lambda x: np.pad(x, 2), shapes=(((3,),), ((2, 3),)), covers=(np.pad,))
for _mode in ("edge", "wrap", "reflect", "symmetric"):
    row(f"pad_{_mode}", lambda x, _m=_mode: np.pad(x, ((1, 2), (2, 1)), mode=_m),
        shapes=MATRIX, covers=(np.pad,))
row("where", lambda c, a, b: np.where(c > 0, a, b),
    shapes=(((2, 3), (2, 3), (2, 3)), ((3,), (2, 1), ()), ((), (3,), (2, 3))),
    domain=[NONZERO, REAL, REAL], grad2=True, covers=(np.where,))
row("where_scalar", lambda a: np.where(a > 0, a, 0.0), domain=NONZERO, grad2=True,
    covers=(np.where,))
row("where_const_cond", lambda a, b: np.where(np.array([True, False, True]), a, b),
    shapes=(((3,), ()),), covers=(np.where,))
row("where_int_branch", lambda a: np.where(a > 0, a, 1), domain=NONZERO, covers=(np.where,))
row("clip", lambda x: np.clip(x, -1.0, 1.0), domain=Domain(-2, 2), covers=(np.clip,))
row("clip_at_bounds", lambda x: np.clip(x, -1.0, 1.0),     # a bound is a max/min tie: 1/2
    args=lambda rng: [np.array([-1.0, 1.0, 0.3, 2.0])],
    expect_grad=lambda ct, x: [ct * np.array([0.5, 0.5, 1.0, 0.0])])
row("clip_none_lo", lambda x: np.clip(x, None, 0.5), covers=(np.clip,))
row("clip_none_hi", lambda x: np.clip(x, -0.5, None), covers=(np.clip,))
row("clip_arrays", lambda x, lo, hi: np.clip(x, lo, hi - 3),
    shapes=(((3,), (3,), (3,)), ((2, 3), (3,), ())), distinct=True, covers=(np.clip,))
row("diff", lambda x: np.diff(x), shapes=(((5,),), ((3, 4),)), covers=(np.diff,))
row("diff_n2_axis0", lambda x: np.diff(x, n=2, axis=0), shapes=(((4, 3),),), covers=(np.diff,))
row("diff_prepend", lambda x: np.diff(x, prepend=0.0, append=x[-1:]), shapes=(((5,),),),
    covers=(np.diff,))
row("zeros_like", lambda x: np.zeros_like(x) + x * 2, shapes=MATRIX, covers=(np.zeros_like,))
row("ones_like", lambda x: np.ones_like(x, shape=(2,)) * np.sum(x), shapes=MATRIX,
    covers=(np.ones_like,))
row("empty_like", lambda x: np.empty_like(x).shape[0] * x, shapes=MATRIX,
    covers=(np.empty_like,))
row("full_like", lambda x: np.full_like(x, 2.5) * x, shapes=MATRIX, covers=(np.full_like,))
row("full_like_traced", lambda x, v: np.full_like(x, v) * x, shapes=(((2, 3), ()),),
    covers=(np.full_like,))
row("copy", lambda x: np.copy(x) * 2, shapes=MATRIX, covers=(np.copy,))
row("shape_ndim_size", lambda x: x * np.shape(x)[0] + np.ndim(x) + np.size(x)
    + np.size(x, 1), shapes=MATRIX, covers=(np.shape, np.ndim, np.size))
row("round", lambda x: np.round(x), diff=False, covers=(np.round,))
row("round_decimals", lambda x: np.round(x, 1) + x, covers=(np.round,))
row("around", lambda x: np.around(x, 2) * 0 + x, covers=(np.around,))

# primitives of layout, called directly
row("prim_broadcast_in_dim", lambda x: L.broadcast_in_dim(x, shape=(2, 3, 4), dims=(1,)),
    shapes=(((3,),),), prim="broadcast_in_dim",
    ref=lambda x: np.broadcast_to(x[None, :, None], (2, 3, 4)))
row("prim_broadcast_in_dim_ones", lambda x: L.broadcast_in_dim(x, shape=(4, 3), dims=(0, 1)),
    shapes=(((1, 3),),), prim="broadcast_in_dim", ref=lambda x: np.broadcast_to(x, (4, 3)))
row("prim_reshape", lambda x: L.reshape(x, shape=(3, 8)), shapes=CUBE, prim="reshape",
    ref=lambda x: x.reshape(3, 8))
row("prim_transpose", lambda x: L.transpose(x, perm=(1, 2, 0)), shapes=CUBE, prim="transpose",
    ref=lambda x: x.transpose(1, 2, 0))
row("prim_rev", lambda x: L.rev(x, axes=(0, 2)), shapes=CUBE, prim="rev",
    ref=lambda x: x[::-1, :, ::-1])
row("prim_slice", lambda x: L.slice_(x, start=(0, 1, 1), limit=(2, 3, 4), step=(1, 2, 2)),
    shapes=CUBE, prim="slice", ref=lambda x: x[0:2, 1:3:2, 1:4:2])
row("prim_slice_empty", lambda x: L.slice_(x, start=(1, 0), limit=(1, 4), step=(1, 1)),
    shapes=MATRIX, prim="slice", ref=lambda x: x[1:1, :])


def _pad_ref(x, v, lo, hi, interior):
    out = np.full(tuple(l + n + max(n - 1, 0) * i + h
                        for n, l, h, i in zip(x.shape, lo, hi, interior)), v, x.dtype)
    out[tuple(slice(l, l + (n - 1) * (i + 1) + 1, i + 1)
              for l, n, i in zip(lo, x.shape, interior))] = x
    return out


row("prim_pad", lambda x, v: L.pad(x, v, lo=(1, 0), hi=(0, 2), interior=(1, 2)),
    shapes=(((3, 4), ()),), prim="pad",
    ref=lambda x, v: _pad_ref(x, v, (1, 0), (0, 2), (1, 2)))
row("prim_concatenate", lambda a, b, c: L.concatenate(a, b, c, axis=1),
    shapes=(((2, 1), (2, 3), (2, 2)),), prim="concatenate",
    ref=lambda a, b, c: np.concatenate([a, b, c], axis=1))

# ---- contractions ----------------------------------------------------------------------------
row("prim_dot_general", lambda a, b: LA.dot_general(a, b, contract=((2,), (1,)),
                                                    batch=((0,), (2,))),
    shapes=(((2, 3, 4), (5, 4, 2)),), prim="dot_general",
    ref=lambda a, b: np.einsum("bik,jkb->bij", a, b))
row("prim_dot_general_multi", lambda a, b: LA.dot_general(a, b, contract=((0, 2), (2, 0)),
                                                          batch=((), ())),
    shapes=(((2, 3, 4), (4, 5, 2)),), prim="dot_general",
    ref=lambda a, b: np.einsum("ijk,kli->jl", a, b))
MATMUL_SHAPES = (((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)),
                 ((3,), (5, 3, 2)), ((5, 2, 3), (3,)))
row("matmul", np.matmul, shapes=MATMUL_SHAPES, covers=(np.matmul,))
row("dot", np.dot, shapes=(((2, 3), (3, 4)), ((3,), (3,)), ((), (3,)), ((2, 3), (3,)),
                           ((2, 3, 4), (5, 4, 2)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3))),
    covers=(np.dot,))
row("tensordot_int", lambda a, b: np.tensordot(a, b, axes=2), shapes=(((2, 3, 4), (3, 4, 5)),),
    covers=(np.tensordot,))
row("tensordot_int0", lambda a, b: np.tensordot(a, b, axes=0), shapes=(((2,), (3,)),),
    covers=(np.tensordot,))
row("tensordot_pairs", lambda a, b: np.tensordot(a, b, axes=([0, 2], [2, 0])),
    shapes=(((2, 3, 4), (4, 5, 2)),), covers=(np.tensordot,))
row("tensordot_pair_ints", lambda a, b: np.tensordot(a, b, axes=(1, 0)),
    shapes=(((2, 3), (3, 4)),), covers=(np.tensordot,))
row("inner", np.inner, shapes=(((3,), (3,)), ((2, 3), (4, 3)), ((), (3,))), covers=(np.inner,))
row("vdot", np.vdot, shapes=(((2, 3), (6,)),), covers=(np.vdot,))
row("outer", np.outer, shapes=(((3,), (4,)), ((2, 2), (3,))), covers=(np.outer,))
for _spec, _shapes in [("ij,jk->ik", ((2, 3), (3, 4))), ("bij,bjk->bik", ((5, 2, 3), (5, 3, 4))),
                       ("ii->", ((3, 3),)), ("ii->i", ((3, 3),)), ("i,j->ij", ((3,), (4,))),
                       ("ij->ji", ((2, 3),)), ("ij,jk,kl->il", ((2, 3), (3, 4), (4, 2))),
                       ("ij,ij->", ((2, 3), (2, 3))), ("ij,j", ((2, 3), (3,))),
                       ("ijk->j", ((2, 3, 4),)), ("i,i,i->i", ((3,), (3,), (3,))),
                       ("bi,bj->bij", ((2, 3), (2, 4))),
                       # size-1 axes broadcast against their letter's other sizes (numpy's rule)
                       ("mnd,mdo->mno", ((1, 5, 3), (4, 3, 2))), ("ik,kj->ij", ((3, 1), (4, 2)))]:
    row(f"einsum[{_spec}]", lambda *xs, _s=_spec: np.einsum(_s, *xs), shapes=(_shapes,),
        covers=(np.einsum,))
for _spec, _shapes in [("...ij,...jk->...ik", ((5, 2, 3), (5, 3, 4))),
                       ("...ij,...jk", ((5, 2, 3), (1, 3, 4))), ("ij...,j->i...", ((2, 3, 4), (3,))),
                       ("...i,...i->...", ((2, 3), (3,))), ("...ii->...i", ((2, 3, 3),))]:
    row(f"einsum[{_spec}]", lambda *xs, _s=_spec: np.einsum(_s, *xs), shapes=(_shapes,),
        covers=(np.einsum,))
row("diagonal", lambda x: np.diagonal(x), shapes=MATRIX, covers=(np.diagonal,))
row("diagonal_offset_axes", lambda x: np.diagonal(x, 1, 2, 0), shapes=CUBE,
    covers=(np.diagonal,))
row("trace", lambda x: np.trace(x), shapes=MATRIX, covers=(np.trace,))
row("trace_offset", lambda x: np.trace(x, -1), shapes=CUBE, covers=(np.trace,))
row("diag_extract", lambda x: np.diag(x, 1), shapes=MATRIX, covers=(np.diag,))
row("diag_build", lambda x: np.diag(x), shapes=(((3,),),), covers=(np.diag,))
row("diag_build_k", lambda x: np.diag(x, -2), shapes=(((3,),),), covers=(np.diag,))
row("tril", lambda x: np.tril(x), shapes=MATRIX, covers=(np.tril,))
row("tril_k_batch", lambda x: np.tril(x, -1), shapes=CUBE, covers=(np.tril,))
row("triu", lambda x: np.triu(x, 1), shapes=MATRIX, covers=(np.triu,))
row("triu_batch", lambda x: np.triu(x), shapes=CUBE, covers=(np.triu,))
row("cross", np.cross, shapes=(((3,), (3,)), ((4, 3), (3,)), ((2, 1, 3), (4, 3))),
    covers=(np.cross,))
row("cross_axis", lambda a, b: np.cross(a, b, axis=0), shapes=(((3, 2), (3, 2)),),
    covers=(np.cross,))

# ---- indexing ----------------------------------------------------------------------------------
_IDX = [
    ("int", lambda x: x[1]), ("neg_int", lambda x: x[-1, 2]),
    ("slice", lambda x: x[1:3, ::2]), ("neg_step", lambda x: x[::-1, 3:0:-2]),
    ("neg_step_all", lambda x: x[::-2]), ("none_ellipsis", lambda x: x[None, ..., 1, None]),
    ("ellipsis_slice", lambda x: x[..., 1:]),
    ("int_array", lambda x: x[np.array([1, 0, 1, -1])]),
    ("list", lambda x: x[[0, 1, 0]]),
    ("adjacent_arrays", lambda x: x[:, np.array([0, 2, 1]), np.array([1, 0, 3])]),
    ("nonadjacent_arrays", lambda x: x[np.array([[0], [1]]), :, np.array([1, 3, 0])]),
    ("array_and_int", lambda x: x[1, :, np.array([0, 3])]),
    ("array_int_adjacent", lambda x: x[:, 1, np.array([0, 3, 3])]),
    ("array_with_none", lambda x: x[None, np.array([1, 0]), 1:3]),
    ("array_slice_neg", lambda x: x[np.array([1, 0]), ::-1, np.array([0, -1])]),
    ("bool_mask", lambda x: x[np.array([True, False])]),
    ("bool_mask_full", lambda x: x[np.arange(24).reshape(2, 3, 4) % 3 == 0]),
    ("bool_mask_axis1", lambda x: x[:, np.array([True, False, True])]),
    ("empty", lambda x: x[:, 2:2]),
]
for _name, _fn in _IDX:
    row(f"getitem_{_name}", _fn, shapes=CUBE, covers=("operator:__getitem__",))
row("getitem_cross_entropy", lambda x: -np.mean(np.log(x[np.arange(3), np.array([2, 0, 2])])),
    shapes=(((3, 4),),), domain=POS)
row("getitem_0d_none", lambda x: x[None] * x[...], shapes=(((),),))


def _assigning(assign: Callable[..., None]) -> Callable[..., Any]:
    def fn(x, v):
        y = x.copy()
        assign(y, v)
        return y
    return fn


_SET = [
    ("int", lambda y, v: y.__setitem__(1, v), (3,)),
    ("slice_broadcast", lambda y, v: y.__setitem__((slice(0, 2), slice(None)), v), (3,)),
    ("neg_step", lambda y, v: y.__setitem__((slice(None, None, -2), 1), v), (2,)),
    ("scalar", lambda y, v: y.__setitem__((2, 0), v), ()),
    ("list", lambda y, v: y.__setitem__([0, 2], v), (2, 3)),
    ("list_repeated", lambda y, v: y.__setitem__(np.array([0, 2, 0]), v), (3, 3)),
    ("array_pair", lambda y, v: y.__setitem__((np.array([0, 1]), np.array([2, 2])), v), (2,)),
    ("mask", lambda y, v: y.__setitem__(np.array([[True, False, True]] * 3), v), ()),
    ("iadd_slice", lambda y, v: y.__setitem__(slice(1, 3), y[1:3] + v), (3,)),
    ("add_at", lambda y, v: np.add.at(y, [0, 2, 0], v), (3, 3)),
    ("subtract_at", lambda y, v: np.subtract.at(y, [0, 2, 0], v), (3, 3)),
    ("add_at_pair", lambda y, v: np.add.at(y, (np.array([0, 0, 1]), np.array([1, 1, 2])), v),
     (3,)),
]
for _name, _assign, _vshape in _SET:
    row(f"setitem_{_name}", _assigning(_assign), shapes=(((3, 3), _vshape),),
        covers=("operator:__setitem__",) + (("method:at",) if _name.endswith("_at") else ()))
row("setitem_traced_mask", _assigning(lambda y, v: y.__setitem__(y > 0, v)),
    shapes=(((3, 3), ()), ((3, 3), (1,))), covers=("operator:__setitem__",))
row("setitem_traced_mask_rows", _assigning(lambda y, v: y.__setitem__(y[:, 0] > 0, v)),
    shapes=(((3, 3), (3,)), ((3, 1), ())), covers=("operator:__setitem__",))


def _into_buffers(x, v):
    """ufuncs with out= and np.add.at into arrays np.zeros made, x.flat, np.fill_diagonal"""
    out = np.zeros(x.shape)
    out += x
    np.multiply(out, v, out=out)
    acc = np.zeros(x.shape)
    np.add.at(acc, (np.array([0, 0, 2]), np.array([1, 1, 0])), v)
    flat = x * 1.0
    flat.flat[::2] = v
    np.fill_diagonal(flat, -v)
    return out, acc, flat


row("writes_into_buffers", _into_buffers, shapes=(((3, 3), ()), ((3, 3), (1,))),
    covers=("method:__call__", "method:at", np.fill_diagonal))


def _iadd(x, v):
    y = x.copy()
    y[1:3] += v
    return y


row("setitem_iadd_operator", _iadd, shapes=(((4, 2), (2,)),),
    covers=("operator:__setitem__",))
row("take_modes", lambda x: (np.take(x, np.array([7, -8, 2, -1]), mode="wrap"),
                             np.take(x, np.array([7, -8, 2]), axis=-1, mode="clip")),
    shapes=(((5,),), ((3, 4),), ((1, 1),)), covers=(np.take,))
row("take", lambda x: np.take(x, np.array([[2, 0], [-1, 2]]), axis=1), shapes=CUBE,
    covers=(np.take,))
row("take_flat", lambda x: np.take(x, [5, 1, 1]), shapes=MATRIX, covers=(np.take,))
row("take_along_axis", lambda x: np.take_along_axis(x, np.array([[0, 2], [1, 1], [3, 0]]), 1),
    shapes=MATRIX, covers=(np.take_along_axis,))
row("take_along_axis_argmax",
    lambda x: np.take_along_axis(x, np.argmax(x, axis=0)[None], axis=0), shapes=MATRIX,
    distinct=True, covers=(np.take_along_axis,))
row("getitem_traced_index", lambda x: x[np.argmax(x, axis=1)], shapes=(((3, 3),),),
    distinct=True)
row("getitem_traced_two_axes", lambda x: x[np.argmax(x, axis=0) - 4, np.argmin(x, axis=1)],
    shapes=(((4, 4),),), distinct=True)
row("take_traced_negative", lambda x: np.take(x, np.argmax(x, axis=0) - 4, axis=1),
    shapes=(((4, 4),),), distinct=True)


def _set_traced_index(x, v):
    y = x.copy()
    y[np.argmax(x)] = v
    return y


def _shift_into_zeros(x):
    y = np.zeros_like(x)
    y[1:] = x[:-1]
    return y


def _add_at_traced(x, v):
    y = np.zeros_like(x[0])
    np.add.at(y, np.argmax(x, axis=0), v)
    return y


row("setitem_traced_index", _set_traced_index, shapes=(((5,), ()),), distinct=True)
row("setitem_into_zeros_like", _shift_into_zeros, shapes=(((5,),), ((3, 2),)))
row("add_at_traced_index", _add_at_traced, shapes=(((3, 3), (3,)),), distinct=True)
row("empty_arrays", lambda x: (np.sum(np.exp(x), axis=0) + np.prod(x, axis=0),
                               np.max(x, axis=1), np.mean(x, axis=1) * 0), shapes=(((0, 3),),))
row("empty_cumprod_getitem", lambda x: np.cumprod(x, axis=1)[np.array([], dtype=int)],
    shapes=(((3, 0),), ((3, 2),)))
row("prim_take", lambda x: I.take(x, np.array([[0, 2], [2, 2]]), axis=1), shapes=MATRIX,
    prim="take", ref=lambda x: np.take(x, np.array([[0, 2], [2, 2]]), axis=1))
row("prim_check_index", lambda x: I.take(x, I.check_index(np.argmax(x, axis=0) - 3, size=4,
                                                          axis=1), axis=1),
    shapes=MATRIX, distinct=True, prim="check_index",
    ref=lambda x: np.take(x, np.argmax(x, axis=0) - 3, axis=1))


def _scatter_ref(x, u):
    out = x.copy()
    np.add.at(out, (slice(None), np.array([0, 2, 0])), u)
    return out


row("prim_scatter_add", lambda x, u: I.scatter_add(x, np.array([0, 2, 0]), u, axis=1),
    shapes=(((2, 4), (2, 3)),), prim="scatter_add", ref=_scatter_ref)

# ---- numerical routines and array creation (numpy_api/numeric.py, creation.py) ---------------
# Shapes that collide (square, size 1, size 0) and both operand orders of the two-signal ones.
def _quiet_cross(a, b, **kw):
    """np.cross on 2-vectors: deprecated by numpy 2 (a DeprecationWarning), still supported."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.cross(a, b, **kw)


row("cross_2_vectors", _quiet_cross, shapes=(((2,), (2,)), ((4, 2), (2,)), ((2,), (3,)),
                                             ((3,), (2, 2)), ((1, 2), (1, 3))),
    covers=(np.cross,))
row("cross_2_axes", lambda a, b: _quiet_cross(a, b, axisa=0, axisb=1, axisc=0),
    shapes=(((2, 3), (3, 3)), ((3, 4), (4, 2))), covers=(np.cross,))
_SIGNALS = (((5,), (3,)), ((3,), (5,)), ((4,), (4,)), ((1,), (3,)), ((3,), (1,)), ((2,), (5,)))
for _mode in ("full", "same", "valid"):
    row(f"convolve_{_mode}", lambda a, v, _m=_mode: np.convolve(a, v, _m), shapes=_SIGNALS,
        grad2=True, covers=(np.convolve,), int_fn=lambda a, v, _m=_mode: np.convolve(a, v, _m))
    row(f"correlate_{_mode}", lambda a, v, _m=_mode: np.correlate(a, v, _m), shapes=_SIGNALS,
        grad2=True, covers=(np.correlate,))
row("convolve_constant", lambda v: np.convolve(np.array([1, -2, 0.5, 3], v.dtype), v, "same"),
    shapes=(((2,),), ((6,),)), covers=(np.convolve,))
row("polyval", np.polyval, shapes=(((4,), (2, 3)), ((1,), (3,)), ((3,), ()), ((0,), (2,)),
                                   ((3,), (0, 2))), grad2=True, covers=(np.polyval,))
row("polyval_constant_p", lambda x: np.polyval([2.0, -1.0, 0.5], x), grad2=True,
    covers=(np.polyval,))
row("kron", np.kron, shapes=(((2,), (3,)), ((2, 3), (3, 3)), ((1, 3), (3, 1)), ((), (2,)),
                             ((0, 2), (2,)), ((2, 1, 2), (3, 2))),
    grad2=True, covers=(np.kron,), int_fn=np.kron)
row("trapezoid", lambda y: np.trapezoid(y), shapes=(((5,),), ((3, 3),), ((3, 1),), ((2, 0),)),
    covers=(np.trapezoid,))
row("trapezoid_x", lambda y, dx: np.trapezoid(y, np.cumsum(dx)),
    shapes=(((2, 5), (5,)), ((3,), (3,)), ((1,), (1,))), domain=[REAL, POS], grad2=True,
    covers=(np.trapezoid,))
row("trapezoid_x_2d", lambda y, x: np.trapezoid(y, x, axis=0), shapes=(((4, 3), (4, 3)),),
    grad2=True, covers=(np.trapezoid,))
row("trapezoid_dx", lambda y, dx: np.trapezoid(y, dx=dx, axis=0), shapes=(((4, 3), ()),),
    grad2=True, covers=(np.trapezoid,))
row("gradient", lambda f: np.gradient(f), shapes=(((5,),), ((3, 3),), ((2, 3, 4),)),
    covers=(np.gradient,))
row("gradient_spacing", lambda f: (np.gradient(f, 0.5, axis=-1, edge_order=2),
                                   *np.gradient(f, 2.0, np.arange(f.shape[1]) ** 1.5)),
    shapes=(((3, 3),), ((4, 5),)), covers=(np.gradient,))
row("gradient_traced", lambda f, steps, h: sum(np.gradient(f, np.cumsum(steps), h,
                                                          edge_order=2)),
    shapes=(((3, 3), (3,), ()), ((5, 4), (5,), ())), domain=[REAL, POS, POS], grad2=True,
    covers=(np.gradient,))
if hasattr(np, "cumulative_sum"):          # numpy >= 2.1
    row("cumulative_sum", lambda x: (np.cumulative_sum(x, axis=1),
                                     np.cumulative_sum(x, axis=0, include_initial=True)),
        shapes=(((3, 4),), ((3, 3),), ((1, 0),)), covers=(np.cumulative_sum,))
    row("cumulative_sum_1d", lambda x: np.cumulative_sum(x, include_initial=True),
        shapes=(((5,),), ((),), ((0,),)), covers=(np.cumulative_sum,))
    row("cumulative_prod", lambda x: np.cumulative_prod(x, axis=-1, include_initial=True),
        shapes=(((3, 4),), ((1,),)), domain=NONZERO, covers=(np.cumulative_prod,))
# xp increasing: cumulative sums of positive steps (so xp is differentiated too, as in JAX);
# x in (0, 5) falls below, between and above the knots
row("interp", lambda x, steps, fp: np.interp(x, np.cumsum(steps), fp),
    shapes=(((5,), (4,), (4,)), ((2, 3), (3,), (3,)), ((), (4,), (4,)), ((4,), (1,), (1,)),
            ((0,), (2,), (2,))),
    domain=[Domain(0.0, 5.0), POS, REAL], covers=(np.interp,))
row("interp_left_right", lambda x, fp, lr: np.interp(x, [0.5, 1.0, 2.5, 3.0], fp, lr, lr * 2),
    shapes=(((6,), (4,), ()),), domain=[Domain(0.0, 4.0), REAL, REAL], covers=(np.interp,))
row("interp_period", lambda x, fp: np.interp(x, [350.0, 10.0, 90.0, 180.0], fp, period=360),
    shapes=(((5,), (4,)),), domain=[Domain(-400.0, 400.0), REAL], covers=(np.interp,))
row("interp_at_knots", lambda x, fp: np.interp(x, [0.0, 1.0, 1.0, 2.0], fp),  # value jumps at 1
    args=lambda rng: [np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0, 8.0])],
    expect_grad=lambda ct, x, fp: [ct * [0, 0, 1, 0, 0, 0],
                                   np.array([ct[0] + ct[1] + ct[2] / 2, ct[2] / 2, ct[3],
                                             ct[4] + ct[5]])])
row("linspace", lambda a, b: np.linspace(a, b, 5), shapes=(((), ()), ((3,), (3,)), ((2, 1), (3,))),
    grad2=True, covers=(np.linspace,))
row("linspace_options", lambda a, b: (*np.linspace(a, 2.0, 4, endpoint=False, retstep=True),
                                      np.linspace(a, b, 3, axis=-1), np.linspace(a, b, 1),
                                      np.linspace(a, b, 0)),
    shapes=(((), ()), ((2,), (2,))), covers=(np.linspace,))
row("logspace", lambda a, b: (np.logspace(a, b, 4), np.logspace(a, b, 3, base=2.0, axis=-1)),
    shapes=(((), ()), ((3,), (3,))), covers=(np.logspace,))
row("meshgrid", lambda x, y: np.meshgrid(x, y), shapes=(((3,), (2,)), ((3,), (3,)), ((0,), (2,))),
    covers=(np.meshgrid,))
row("meshgrid_ij_sparse", lambda x, y, z: (*np.meshgrid(x, y, z, indexing="ij"),
                                           *np.meshgrid(x, y, sparse=True)),
    shapes=(((2,), (1,), (3,)), ((2, 2), (), (2,))), covers=(np.meshgrid,))
row("array_of_traced", lambda a, b: np.array([a, b * 2, 1.0]), shapes=(((), ()),),
    covers=("constructor:array",))
row("array_nested", lambda a, b: np.array([[a, b], [b, a + 1]]),
    shapes=(((3,), (3,)), ((), ()), ((0,), (0,))), covers=("constructor:array",))
row("asarray_traced", lambda x: (np.asarray(x) * 2, np.asarray([x[0], 2.0], dtype=x.dtype),
                                 np.asanyarray([[x[-1]]]), np.array(x[0], ndmin=2)),
    shapes=(((3,),), ((1,),)), covers=("constructor:asarray", "constructor:asanyarray",
                                         "constructor:array"))
row("full_traced", lambda v: (np.full((2, 3), v), np.full(3, v, dtype=v.dtype)),
    shapes=(((),), ((3,),), ((1,),)), covers=("constructor:full",))
row("one_hot", lambda x: np.eye(4)[np.argmax(x, axis=1)] * x, shapes=(((3, 4),), ((4, 4),)),
    distinct=True)
row("constant_by_traced_index", lambda x: (np.arange(8.0).reshape(4, 2) * 0.5)[
    np.argmin(x, axis=0), 1] * x, shapes=(((4, 4),),), distinct=True)

row("einsum_sublists", lambda a, b: (np.einsum(a, [0, 1, 2], b, [2, 3], [0, 3, 1]),
                                     np.einsum(a, [0, 1, 26], b, [26, 3]),
                                     np.einsum(a, [Ellipsis, 2], b, [2, 3], [Ellipsis, 3])),
    shapes=(((2, 3, 4), (4, 5)), ((3, 3, 3), (3, 3)), ((1, 0, 2), (2, 1))), covers=(np.einsum,))
row("einsum_sublist_trace", lambda a: np.einsum(a, [0, 0]), shapes=(((3, 3),), ((1, 1),)),
    covers=(np.einsum,))
row("real_imag", lambda x: (np.real(x), np.imag(x) + x, x.imag * 2, x.conj()),
    covers=(np.real, np.imag))
row("rollaxis", lambda x: (np.rollaxis(x, 2), np.rollaxis(x, 0, 2), np.rollaxis(x, -1, -2),
                           np.rollaxis(x, 1, 3), np.rollaxis(x, 1, 1)),
    shapes=CUBE + (((3, 3, 3),), ((1, 0, 2),)), covers=(np.rollaxis,))
row("atleast_3d", lambda x: np.atleast_3d(x) * 2,
    shapes=(((),), ((3,),), ((2, 3),), ((2, 3, 4),), ((0,),)), covers=(np.atleast_3d,))
row("atleast_3d_several", lambda a, b: np.atleast_3d(a, b), shapes=(((3,), (2, 2)),),
    covers=(np.atleast_3d,))
row("hsplit", lambda x: (*np.hsplit(x, [1, 3]), *np.hsplit(x, 2)),
    shapes=(((3, 4),), ((4,),), ((0, 4),)), covers=(np.hsplit,))
row("vsplit", lambda x: np.vsplit(x, [1]), shapes=(((3, 4),), ((1, 1),)), covers=(np.vsplit,))
row("dsplit", lambda x: np.dsplit(x, 2), shapes=(((2, 3, 4),), ((1, 1, 2),)),
    covers=(np.dsplit,))

row("dstack", lambda a, b, c: np.dstack([a, b, c]),
    shapes=(((3,), (1, 3), (1, 3, 2)), ((2, 2), (2, 2), (2, 2, 1))), covers=(np.dstack,))
row("polyint", lambda p: (np.polyint(p), np.polyint(p, 2, k=[1.0, -2.0]), np.polyint(p, 3, 0.5)),
    shapes=(((4,),), ((1,),)), covers=(np.polyint,))
row("polyfit", lambda x, y: (np.polyfit(x, y, 2), np.polyfit(x, y, 1, w=np.abs(x) + 1)),
    shapes=(((6,), (6,)), ((6,), (6, 2)), ((3,), (3, 3))), covers=(np.polyfit,))
row("polyder", lambda p: (np.polyder(p), np.polyder(p, 2), np.polyder(p, 0)),
    shapes=(((4,),), ((1,),)), covers=(np.polyder,))
row("polyadd_polysub_polymul", lambda a, b: (np.polyadd(a, b), np.polysub(b, a),
                                             np.polymul(a, b)),
    shapes=(((2,), (4,)), ((3,), (3,)), ((4,), (1,)), ((), (2,))),
    covers=(np.polyadd, np.polysub, np.polymul))
row("vander", lambda x: (np.vander(x), np.vander(x, 2, increasing=True), np.vander(x, 0)),
    shapes=(((3,),), ((1,),), ((0,),)), covers=(np.vander,))
row("vander_grad2", lambda x: np.vander(x, 4), grad2=True, shapes=(((3,),),), covers=(np.vander,))
row("ediff1d", lambda x, b: (np.ediff1d(x), np.ediff1d(x, to_end=b, to_begin=[1.0, 2.0])),
    shapes=(((2, 3), (2,)), ((1,), ()), ((0,), (1,))), covers=(np.ediff1d,))
row("ptp", lambda x: (np.ptp(x), np.ptp(x, axis=1, keepdims=True), np.ptp(x, axis=0)),
    shapes=(((3, 4),), ((3, 3),), ((1, 1),)), distinct=True, covers=(np.ptp,))
row("isclose", lambda x, y: (np.isclose(x, y, atol=0.5), np.isclose(x, x + 1e-9),
                             np.isclose(np.log(x), y, equal_nan=True), np.isclose(1 / (x * 0), np.inf),
                             np.allclose(x, x * 1.1, rtol=0.2), np.allclose(x, y)),
    shapes=BINARY_SHAPES, domain=Domain(-1.0, 2.0), diff=False, covers=(np.isclose, np.allclose))
row("cov", lambda x, y: (np.cov(x), np.cov(x, rowvar=False), np.cov(x, y, bias=True),
                         np.cov(y, ddof=0)),
    shapes=(((3, 4), (4,)), ((4, 4), (4,)), ((2, 3), (3,))), covers=(np.cov,))
row("cov_one_variable", lambda x: (np.cov(x), np.cov(x, x ** 2),
                                  np.corrcoef(x[..., 1:], x[..., :-1])),
    shapes=(((1, 4),), ((4,),)), covers=(np.cov, np.corrcoef))
row("corrcoef", lambda x, y: (np.corrcoef(x), np.corrcoef(x, rowvar=False), np.corrcoef(y, y ** 2)),
    shapes=(((3, 4), (4,)), ((4, 4), (4,)), ((2, 3), (3,))), covers=(np.corrcoef,))
row("bincount", lambda w: (np.bincount(np.array([0, 2, 2, 1, 4, 0])[:w.shape[0]], weights=w),
                           np.bincount(np.array([3, 0, 3, 1, 0, 2])[:w.shape[0]], w, 7)),
    shapes=(((6,),), ((3,),), ((1,),)), covers=(np.bincount,))
row("digitize", lambda x: (np.digitize(x, np.array([-1.0, 0.0, 0.5])),
                           np.digitize(x, np.array([0.5, 0.0, -1.0]), right=True),
                           np.digitize(x, np.array([-1.0, 0.0, 0.5]), right=True),
                           np.digitize(x, np.zeros(3)), np.digitize(x, np.zeros(0))),
    shapes=(((5,),), ((3, 3),), ((),)), diff=False, covers=(np.digitize,))
row("copysign", lambda a, b: np.copysign(a, b), shapes=BINARY_SHAPES, domain=[NONZERO, NONZERO],
    grad2=True, prim="copysign", covers=(np.copysign,), int_fn=np.copysign)
row("signbit", lambda x: np.signbit(x) * x, domain=NONZERO, prim="signbit", covers=(np.signbit,),
    int_fn=np.signbit)
row("modf", lambda x: np.modf(x * 3)[0] * 2 + np.modf(x * 3)[1], domain=NONZERO, grad2=True,
    covers=(np.modf,), int_fn=np.modf)
row("divmod", lambda a, b: np.divmod(a * 3, b), shapes=BINARY_SHAPES, domain=[REAL, NONZERO],
    covers=(np.divmod,))
row("piecewise", lambda x: np.piecewise(x, [x < -0.5, x > 0.5], [lambda v: v ** 2, np.sin,
                                                                  lambda v: -v]),
    grad2=True, covers=(np.piecewise,))
row("piecewise_nan_outside", lambda x: np.piecewise(x, [x > 0], [np.log, 2.0]),  # log's NaN
    domain=NONZERO, grad2=True, covers=(np.piecewise,))                  # not in the gradient
row("block", lambda a, b: np.block([[a, b], [b, a]]),
    shapes=(((2, 2), (2, 2)), ((3, 3), (3, 3)), ((1, 0), (1, 0))), covers=(np.block,))
row("block_flat", lambda a, b: np.block([a, b, 2.0]), shapes=(((2,), (3,)), ((0,), (1,))),
    covers=(np.block,))
row("select", lambda x, y: np.select([x > 0.5, x < -0.5], [x * 2, y], default=-1.0),
    shapes=(((2, 3), (3,)), ((3, 3), (3, 1)), ((), ())), domain=NONZERO, covers=(np.select,))
row("select_default_int", lambda x: np.select([x > 0], [x]), domain=NONZERO,
    covers=(np.select,))

# ---- random bits (ops/random.py): tj.random's distributions are tested in test_random.py -------
def _counters(x):
    """Float inputs as uint32 counters."""
    return (np.abs(x) * 1000).astype(np.uint32)


def _fraction(bits, like):
    """Random bits as floats in [0, 1) of `like`'s dtype: any wrong bit shows."""
    return bits.astype(like.dtype) * like.dtype.type(2.0 ** (-8 * bits.dtype.itemsize))


def _iota(x):
    """0, 1, 2, ... in x's shape, recorded while tracing (with no operand it would not be)."""
    return tj.trace.bind_recorded(RB.iota, (), {"shape": x.shape, "dtype": "u32"})


row("prim_threefry2x32", lambda x: _fraction(RB.threefry2x32(
    np.uint32(0x13198A2E), np.uint32(0x03707344), np.uint32(0), _counters(x), bits=32), x),
    prim="threefry2x32", diff=False)
row("prim_threefry2x32_64", lambda x: _fraction(RB.threefry2x32(
    _counters(x), np.uint32(7), _counters(x + 1), np.uint32(0xFFFFFFFF), bits=64), x),
    prim="threefry2x32", diff=False)
row("prim_iota", lambda x: x * _iota(x).astype(x.dtype), prim="iota")

# ---- sorting and order statistics (ops/sort.py, numpy_api/sorting.py) -------------------------
# distinct inputs: finite differences never cross a tie. Shapes: a square, a size-1 and a size-0
# axis; each sort is stable, so argsort is compared with numpy's kind="stable".
SORT_SHAPES = (((3, 4),), ((3, 3),), ((4, 1),), ((1, 4),), ((0, 3),), ((2, 0),))
_SORT = {"distinct": True, "grad2": True}
_ALONG = np.array([[3, 0, 0, 2, 1], [1, 1, 3, 3, 0], [2, 0, 1, 3, 2]])   # indices along axis 1


def _along_grid(idx, axis):
    return tuple(idx if d == axis else np.arange(n).reshape([-1 if e == d else 1
                                                             for e in range(idx.ndim)])
                 for d, n in enumerate(idx.shape))


def _scatter_along_ref(u):
    out = np.zeros((3, 4), u.dtype)
    np.add.at(out, _along_grid(_ALONG, 1), u)
    return out


def _unique_ref(x, size, **kw):
    """jax.numpy.unique(x, size=size, ...): numpy's results padded (values with the minimum)."""
    parts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    k = min(size, len(parts[0]))
    pad = lambda a, fill: np.concatenate([a[:k], np.full(size - k, fill, a.dtype)])
    return pad(parts[0], parts[0][0]), pad(parts[1], 0), parts[2], pad(parts[3], 0)


def _sorted_in_place(x, **kw):
    y = x * 1.0
    y.sort(**kw)
    return y


def _partitioned_in_place(x):
    y = x * 1.0
    y.partition(1)
    return y


row("prim_sort", lambda x: ST.sort(x, axis=1), shapes=SORT_SHAPES, prim="sort", distinct=True,
    ref=lambda x: (np.sort(x, axis=1), np.argsort(x, axis=1, kind="stable")))
row("prim_take_along", lambda x: ST.take_along(x, _ALONG, axis=1), shapes=(((3, 4),),),
    grad2=True, prim="take_along", ref=lambda x: np.take_along_axis(x, _ALONG, 1))
row("prim_scatter_add_along", lambda u: ST.scatter_add_along(_ALONG, u, axis=1, size=4),
    shapes=(((3, 5),),), grad2=True, prim="scatter_add_along", ref=_scatter_along_ref)
row("prim_searchsorted", lambda a, v: (ST.searchsorted(np.sort(a), v, right=False) * 1.0,
                                       ST.searchsorted(np.sort(a), np.round(v), right=True)),
    shapes=(((5,), (2, 3)), ((4,), ())), prim="searchsorted", diff=False,
    ref=lambda a, v: (np.searchsorted(np.sort(a), v) * 1.0,
                      np.searchsorted(np.sort(a), np.round(v), side="right")))
row("sort", lambda x: np.sort(x), shapes=SORT_SHAPES, covers=(np.sort,), **_SORT,
    int_fn=np.sort)
row("sort_axis0_stable", lambda x: np.sort(x, axis=0, kind="stable"), shapes=SORT_SHAPES,
    covers=(np.sort,), **_SORT)
row("sort_flat", lambda x: np.sort(x, axis=None, stable=True), shapes=CUBE, covers=(np.sort,),
    **_SORT)
row("sort_int", lambda x: np.sort((x * 3).astype(int), axis=0) * x, shapes=MATRIX)
row("argsort", lambda x: np.argsort(x, axis=0), shapes=SORT_SHAPES, distinct=True, diff=False,
    covers=(np.argsort,), int_fn=lambda x: np.argsort(x, axis=0, kind="stable"))
row("argsort_flat_gather", lambda x: x.ravel()[np.argsort(x, axis=None)], shapes=MATRIX,
    covers=(np.argsort,), **_SORT)
row("argsort_take_along_axis", lambda x: np.take_along_axis(x, np.argsort(x, axis=1), axis=1),
    shapes=SORT_SHAPES, covers=(np.argsort, np.take_along_axis), **_SORT)
row("partition", lambda x: np.partition(x, 1, axis=-1), shapes=MATRIX, covers=(np.partition,),
    **_SORT, ref=lambda x: np.sort(x, axis=-1))
row("partition_kth", lambda x: np.partition(x, (0, -1), axis=0)[-1], shapes=MATRIX, **_SORT,
    covers=(np.partition,))
row("argpartition", lambda x: np.argpartition(x, 2, axis=None), shapes=MATRIX, distinct=True,
    diff=False, covers=(np.argpartition,), ref=lambda x: np.argsort(x, axis=None))
row("median", lambda x: np.median(x), shapes=(((5,),), ((2, 3),), ((3, 1, 2),)), **_SORT,
    covers=(np.median,), int_fn=np.median)
row("median_axis", lambda x: np.median(x, axis=1), shapes=SORT_SHAPES[:4] + CUBE, **_SORT,
    covers=(np.median,), int_fn=lambda x: np.median(x, axis=1))
row("median_axes_keepdims", lambda x: np.median(x, axis=(0, 2), keepdims=True), shapes=CUBE,
    **_SORT, covers=(np.median,))
row("quantile", lambda x: np.quantile(x, 0.3, axis=-1), shapes=SORT_SHAPES[:4], **_SORT,
    covers=(np.quantile,), int_fn=lambda x: np.quantile(x, 0.3, axis=-1))
row("quantile_array_q", lambda x: np.quantile(x, np.array([0.0, 0.25, 0.5, 0.9, 1.0]),
                                              axis=(0, 2), keepdims=True),
    shapes=CUBE, **_SORT, covers=(np.quantile,))
row("quantile_int_q", lambda x: np.quantile(x, [0, 1], axis=0), shapes=MATRIX, **_SORT,
    covers=(np.quantile,))
for _method in ("lower", "higher", "nearest", "midpoint", "median_unbiased", "weibull"):
    row(f"quantile_{_method}", lambda x, _m=_method: np.quantile(x, [0.1, 0.4, 0.75], axis=1,
                                                                 method=_m),
        shapes=MATRIX, **_SORT, covers=(np.quantile,))
row("quantile_traced_q", lambda x, q: np.quantile(x, q, axis=-1), shapes=(((3, 4), (2,)),),
    domain=[REAL, Domain(0.05, 0.3)], grad2=True, covers=(np.quantile,))
row("percentile", lambda x: np.percentile(x, [10.0, 50.0, 95.0]), shapes=(((7,),), ((2, 3),)),
    **_SORT, covers=(np.percentile,), int_fn=lambda x: np.percentile(x, 40))
row("percentile_axis", lambda x: np.percentile(x, 37, axis=0, keepdims=True), shapes=CUBE,
    **_SORT, covers=(np.percentile,))
row("searchsorted", lambda x: np.searchsorted(np.array([-1.0, 0.0, 0.5, 1.5]), x) * 1.0,
    shapes=MATRIX, diff=False, covers=(np.searchsorted,),
    int_fn=lambda x: np.searchsorted(np.array([-1, 0, 2]), x, side="right"))
row("searchsorted_traced", lambda a, v: np.searchsorted(a, v, side="right", sorter=np.argsort(
    a)) * v, shapes=(((5,), (2, 3)),), distinct=True, covers=(np.searchsorted,),
    ref=lambda a, v: np.searchsorted(a, v, side="right", sorter=np.argsort(a)) * v)
row("unique_size", lambda x: tj.unique(x, size=x.size), shapes=(((5,),), ((2, 3),)), **_SORT,
    covers=(np.unique,), ref=np.unique)
row("unique_size_parts", lambda x: tj.unique(np.round(x), size=4, return_index=True,
                                             return_inverse=True, return_counts=True),
    shapes=(((3, 4),), ((2, 1),)), diff=False, covers=(np.unique,),
    ref=lambda x: _unique_ref(np.round(x), 4))
row("unique_size_grad", lambda x: tj.unique(np.concatenate([x, x[:2]]), size=3) * 1.0,
    shapes=(((4,),),), distinct=True, covers=(np.unique,),
    ref=lambda x: np.unique(np.concatenate([x, x[:2]]))[:3])
row("sort_ties", lambda x: np.sort(x), args=lambda rng: [np.array([2.0, 1.0, 2.0, 1.0])],
    expect_grad=lambda ct, x: [ct[[2, 0, 3, 1]]])    # stable: each element gets its place's
row("median_ties", lambda x: np.median(x), args=lambda rng: [np.array([1.0, 3.0, 3.0, 0.0])],
    expect_grad=lambda ct, x: [np.array([0.5, 0.5, 0.0, 0.0]) * ct])
row("method_sort", lambda x: _sorted_in_place(x, axis=0), shapes=MATRIX, **_SORT,
    covers=("method:sort",), ref=lambda x: np.sort(x, axis=0))
row("method_argsort", lambda x: x.argsort(), shapes=MATRIX, distinct=True, diff=False,
    covers=("method:argsort",))
row("method_partition", _partitioned_in_place, shapes=MATRIX, **_SORT,
    covers=("method:partition",), ref=lambda x: np.sort(x))
row("method_argpartition", lambda x: x.argpartition(1, axis=0), shapes=MATRIX, distinct=True,
    diff=False, covers=("method:argpartition",), ref=lambda x: np.argsort(x, axis=0))
row("method_searchsorted", lambda x: np.sort(x[0]).searchsorted(x[1:]) * 1.0, shapes=MATRIX,
    diff=False, covers=("method:searchsorted",))

# ---- ufunc methods ---------------------------------------------------------------------------
row("sliding_window_view", lambda x: (np.lib.stride_tricks.sliding_window_view(x, (2, 3)),
                                       np.lib.stride_tricks.sliding_window_view(x, 2, axis=-1),
                                       np.lib.stride_tricks.sliding_window_view(x, (2, 2),
                                                                                (1, 1))),
    shapes=(((3, 4),), ((3, 3),), ((2, 5),)), covers=(np.lib.stride_tricks.sliding_window_view,))
row("running_max_min", lambda x: (np.maximum.accumulate(x, axis=1), np.minimum.accumulate(x),
                                   np.maximum.accumulate(x, axis=-1)),
    shapes=(((3, 5),), ((1, 0),), ((4, 1),)), distinct=True, covers=("method:accumulate",))
row("add_reduce", lambda x: np.add.reduce(x, axis=1), shapes=MATRIX, covers=("method:reduce",))
row("multiply_reduce", lambda x: np.multiply.reduce(x), shapes=MATRIX, domain=NONZERO,
    covers=("method:reduce",))
row("maximum_reduce", lambda x: np.maximum.reduce(x, axis=(0, 1)), shapes=MATRIX,
    distinct=True, covers=("method:reduce",))
row("add_accumulate", lambda x: np.add.accumulate(x, axis=1), shapes=MATRIX,
    covers=("method:accumulate",))
row("multiply_accumulate", lambda x: np.multiply.accumulate(x), shapes=MATRIX, domain=NONZERO,
    covers=("method:accumulate",))

# ---- Tracer methods -----------------------------------------------------------------------------
_METHODS = [
    ("sum", lambda x: x.sum(axis=0), {}), ("sum_all", lambda x: x.sum(), {}),
    ("mean", lambda x: x.mean(axis=(1, 2), keepdims=True), {}),
    ("max", lambda x: x.max(axis=1), {"distinct": True}),
    ("min", lambda x: x.min(), {"distinct": True}),
    ("prod", lambda x: x.prod(axis=2), {"domain": NONZERO}),
    ("var", lambda x: x.var(axis=1), {}), ("std", lambda x: x.std(), {}),
    ("reshape", lambda x: x.reshape(6, 4), {}), ("reshape_tuple", lambda x: x.reshape((-1,)), {}),
    ("reshape_fortran", lambda x: x.reshape(4, 6, order="F").ravel("F")[::5], {}),
    ("flatten_fortran", lambda x: x.flatten("F"), {}),
    ("transpose", lambda x: x.transpose(1, 0, 2), {}),
    ("transpose_tuple", lambda x: x.transpose((2, 0, 1)), {}),
    ("transpose_none", lambda x: x.transpose(), {}),
    ("T", lambda x: x.T, {}), ("astype", lambda x: x.astype(np.float32) * 2, F32_FD),
    ("astype_int", lambda x: (x * 3).astype(int), {"diff": False}),
    ("dot", lambda x: x.dot(np.ones((4, 2))), {}), ("ravel", lambda x: x.ravel(), {}),
    ("flatten", lambda x: x.flatten(), {}), ("squeeze", lambda x: x[:1].squeeze(), {}),
    ("clip", lambda x: x.clip(-1, 1), {}), ("cumsum", lambda x: x.cumsum(axis=2), {}),
    ("cumprod", lambda x: x.cumprod(axis=1), {"domain": NONZERO}),
    ("argmax", lambda x: x.argmax(axis=2), {"distinct": True, "diff": False}),
    ("argmin", lambda x: x.argmin(), {"distinct": True, "diff": False}),
    ("any", lambda x: (x > 1).any(axis=0), {"diff": False}),
    ("all", lambda x: (x > -1).all(), {"diff": False}),
    ("copy", lambda x: x.copy() * 2, {}), ("swapaxes", lambda x: x.swapaxes(0, 2), {}),
    ("repeat", lambda x: x.repeat(2, axis=1), {}), ("round", lambda x: x.round(), {"diff": False}),
    ("round_decimals", lambda x: x.round(1) * 0 + x, {}),
    ("diagonal", lambda x: x.diagonal(0, 1, 2), {}), ("trace", lambda x: x.trace(), {}),
    ("mT", lambda x: x.mT, {}), ("real", lambda x: x.real * 2, {}),
]
for _name, _fn, _kw in _METHODS:
    row(f"method_{_name}", _fn, shapes=CUBE, covers=(f"method:{_name.split('_')[0]}",), **_kw)

REQUIRED_METHODS = ("sum mean max min prod var std reshape transpose T astype dot ravel flatten "
                    "squeeze clip cumsum cumprod argmax argmin any all copy swapaxes repeat "
                    "round diagonal trace mT real sort argsort partition argpartition "
                    "searchsorted").split()
REQUIRED_UFUNC_METHODS = ("reduce", "accumulate", "at")


# ---- user-defined rules (tapejit/custom.py): stop_gradient, custom_vjp, Numba kernels --------
@tj.custom_vjp
def _custom_sin(x):
    return np.sin(x)


_custom_sin.defvjp(lambda x: (_custom_sin(x), x), lambda x, ct: (ct * np.cos(x),))


@numba.njit
def _cube_kernel(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out.flat[i] = x.flat[i] ** 3
    return out


_cube = tj.njit_primitive(_cube_kernel, vjp=lambda ct, out, x: (ct * 3 * x * x,))

row("prim_stop_gradient", lambda x: tj.stop_gradient(x) * 2, diff=False, prim="stop_gradient",
    ref=lambda x: x * 2)
row("prim_custom_vjp_call", _custom_sin, grad2=True, prim="custom_vjp_call", ref=np.sin)
row("prim_njit_call", _cube, grad2=True, prim="njit_call", ref=lambda x: x ** 3)


# ---- control flow (tapejit/control/): scan, while, cond, checkpoint and loop_grad -------------
def _scan_row(c, xs, checkpoints=None):
    carry, ys = tj.scan(lambda c, x: (np.sin(c * x) + c, c * x), c, xs, checkpoints=checkpoints)
    return carry + np.sum(ys, axis=0)


def _scan_ref(c, xs):
    ys = []
    for x in xs:
        ys.append(c * x)
        c = np.sin(c * x) + c
    return c + np.sum(np.stack(ys), axis=0)


def _while_row(x):
    return tj.while_loop(lambda c: c[1] < 3, lambda c: (np.cos(c[0]) * x, c[1] + 1), (x, 0))[0]


def _while_ref(x):
    c = x
    for _ in range(3):
        c = np.cos(c) * x
    return c


row("prim_scan", _scan_row, shapes=(((3,), (4, 3)), ((), (5,))), grad2=True, prim="scan",
    ref=_scan_ref)
row("prim_while", _while_row, prim="while", ref=_while_ref)  # (no 2nd order: run-time trips)
row("prim_cond", lambda x: tj.cond(np.sum(x) > 0, np.sin, lambda x: x * x, x), grad2=True,
    prim="cond", ref=lambda x: np.sin(x) if np.sum(x) > 0 else x * x)
row("prim_checkpoint", tj.checkpoint(lambda x: np.sin(np.exp(x)) * x), grad2=True,
    prim="checkpoint", ref=lambda x: np.sin(np.exp(x)) * x)
# (a scan's reverse sweep is a loop_grad with checkpoints or a run-time length)
row("prim_loop_grad", lambda c, xs: tj.grad(lambda c: np.sum(_scan_row(c, xs, 2)))(c),
    shapes=(((3,), (4, 3)),), prim="loop_grad", rtol=1e-4,
    ref=lambda c, xs: tj.grad(lambda c: np.sum(_scan_ref(c, xs)))(c))


# ---- linear algebra: np.linalg; a primitive's row (ops/decompositions.py) is a function's ------
# Inputs are made well conditioned inside `fn`, so finite differences perturb the raw input:
# a + 3 I for solves and determinants, a a^T + 3 I for cholesky, a symmetric matrix with its
# eigenvalues far apart for eigh, singular values spread apart for svd, qr and pinv. Eigen- and
# singular vectors are unique up to sign: the rows multiply each by its first element.
SQUARE = (((3, 3),), ((3, 3, 3),), ((1, 1),))    # a matrix, a batch as long as the width, 1x1
RECTANGULAR = (((3, 4, 3),), ((2, 5),), ((1, 1),))


def _shifted(a):
    return a + 3 * np.eye(a.shape[-1], dtype=a.dtype)


def _spd(a):
    return a @ np.swapaxes(a, -1, -2) + 3 * np.eye(a.shape[-1], dtype=a.dtype)


def _spread_eig(a):
    return a + np.swapaxes(a, -1, -2) + np.diag(8 * np.arange(a.shape[-1], dtype=a.dtype))


def _spread(a):
    m, n = a.shape[-2:]
    return a + np.eye(m, n, dtype=a.dtype) * 4 * np.arange(1, n + 1, dtype=a.dtype)


def _signed(v):
    return v * v[..., :1, :]


def _eigh_signed(wv):
    return wv[0], _signed(wv[1])


def _svd_signed(usv):
    return _signed(usv[0]), usv[1], _signed(np.swapaxes(usv[2], -1, -2))


def _lstsq(a, b):
    x, residuals, _, _ = np.linalg.lstsq(_spread(a), b)
    return x, residuals


_LA = dict(domain=UNIT)
row("linalg_inv", lambda a: np.linalg.inv(_shifted(a)), shapes=SQUARE, **_LA, grad2=True,
    covers=(np.linalg.inv,))
row("linalg_solve", lambda a, b: np.linalg.solve(_shifted(a), b), **_LA, grad2=True,
    shapes=(((3, 3), (3,)), ((3, 3, 3), (3, 3, 2)), ((3, 3, 3), (3, 1)), ((1, 3, 3), (3, 3, 3))),
    prim="solve", covers=(np.linalg.solve,))
row("linalg_det", lambda a: np.linalg.det(_shifted(a)), shapes=SQUARE, **_LA, grad2=True,
    covers=(np.linalg.det,))
row("linalg_det_negative", lambda a: np.linalg.det(-_shifted(a)), shapes=(((3, 3),),), **_LA,
    covers=(np.linalg.det,))
row("linalg_slogdet", lambda a: tuple(np.linalg.slogdet(_shifted(a))), shapes=SQUARE, **_LA,
    prim="slogdet", covers=(np.linalg.slogdet,))
row("linalg_cholesky", lambda a: np.linalg.cholesky(_spd(a)), shapes=SQUARE, **_LA,
    grad2=True, prim="cholesky", covers=(np.linalg.cholesky,))
row("linalg_cholesky_upper", lambda a: np.linalg.cholesky(_spd(a), upper=True),
    shapes=(((3, 3),),), **_LA, covers=(np.linalg.cholesky,))
row("linalg_cholesky_lower_triangle", lambda a: np.linalg.cholesky(_shifted(a)),  # not symmetric
    shapes=(((3, 3),),), **_LA, covers=(np.linalg.cholesky,))
row("linalg_eigh", lambda a: _eigh_signed(np.linalg.eigh(_spread_eig(a))), shapes=SQUARE,
    **_LA, prim="eigh", covers=(np.linalg.eigh,))
row("linalg_eigh_upper", lambda a: _eigh_signed(np.linalg.eigh(
    a + np.diag(8 * np.arange(3, dtype=a.dtype)), UPLO="U")), shapes=(((3, 3),),), **_LA,
    covers=(np.linalg.eigh,))
row("linalg_eigvalsh", lambda a: np.linalg.eigvalsh(_spread_eig(a)), shapes=SQUARE, **_LA,
    grad2=True, covers=(np.linalg.eigvalsh,))
row("linalg_svd", lambda a: _svd_signed(np.linalg.svd(_spread(a), full_matrices=False)),
    shapes=RECTANGULAR, **_LA, prim="svd", covers=(np.linalg.svd,))
row("linalg_svd_values", lambda a: np.linalg.svd(_spread(a), compute_uv=False),
    shapes=RECTANGULAR, **_LA, covers=(np.linalg.svd,))
row("linalg_qr", lambda a: tuple(np.linalg.qr(_spread(a))), **_LA,
    shapes=(((3, 4, 3),), ((3, 3),), ((2, 4),)), prim="qr", covers=(np.linalg.qr,))
row("linalg_qr_r", lambda a: np.linalg.qr(_spread(a), mode="r"), shapes=(((4, 3),),), **_LA,
    covers=(np.linalg.qr,))
row("linalg_pinv", lambda a: np.linalg.pinv(_spread(a)), shapes=RECTANGULAR, **_LA,
    grad2=True, prim="pinv", covers=(np.linalg.pinv,))
row("linalg_lstsq", _lstsq, shapes=(((5, 3), (5, 2)), ((5, 3), (5,)), ((3, 5), (3,))), **_LA,
    covers=(np.linalg.lstsq,))
row("linalg_lstsq_rank", lambda a, b: np.linalg.lstsq(a, b)[2] * 1.0, shapes=(((5, 3), (5,)),),
    diff=False, covers=(np.linalg.lstsq,))
row("linalg_matrix_power", lambda a: np.linalg.matrix_power(a, 5), **_LA,
    shapes=(((3, 3),), ((3, 3, 3),)), covers=(np.linalg.matrix_power,))
row("linalg_matrix_power_small", lambda a: tuple(np.linalg.matrix_power(a, k)
                                                 for k in (0, 1, 2, 3)),
    shapes=(((3, 3),),), covers=(np.linalg.matrix_power,))
row("linalg_matrix_power_negative", lambda a: np.linalg.matrix_power(_shifted(a), -3),
    shapes=(((3, 3),),), **_LA, covers=(np.linalg.matrix_power,))
row("linalg_cond", lambda a: (np.linalg.cond(_shifted(a)), np.linalg.cond(_shifted(a), 1)),
    shapes=(((3, 3),),), **_LA, covers=(np.linalg.cond,))
row("linalg_matrix_rank", lambda a: (np.linalg.matrix_rank(a) + np.linalg.matrix_rank(
    a[..., :1] * a[..., :1, :]) + np.linalg.matrix_rank(_spd(a), hermitian=True)) * 1.0,
    shapes=(((3, 3, 3),),), diff=False, covers=(np.linalg.matrix_rank,))
row("linalg_multi_dot", lambda a, b, c, d: np.linalg.multi_dot([a, b, c, d]),
    shapes=(((3,), (3, 4), (4, 2), (2,)), ((2, 3), (3, 4), (4, 5), (5, 1))),
    covers=(np.linalg.multi_dot,))


def _triangular_solves(a, b):
    """Each triangle of a + 3 I, as is, transposed and with a unit diagonal (scipy.linalg's
    solve_triangular, cho_solve and lu_solve are these), side by side."""
    return np.concatenate([TR.triangular_solve(_shifted(a), b, lower=lower, transpose=transpose,
                                               unit_diagonal=unit)
                           for lower, transpose, unit in ((True, False, False),
                                                          (False, True, False),
                                                          (True, True, True),
                                                          (False, False, True))], axis=-1)


def _triangular_solves_ref(a, b):
    t = _shifted(a)
    outs = []
    for lower, transpose, unit in ((True, False, False), (False, True, False),
                                   (True, True, True), (False, False, True)):
        m = np.tril(t) if lower else np.triu(t)
        if unit:
            eye = np.eye(t.shape[-1], dtype=t.dtype)
            m = m * (1 - eye) + eye
        outs.append(np.linalg.solve(np.swapaxes(m, -1, -2) if transpose else m, b))
    return np.concatenate(outs, axis=-1)


def _pivoted(a):
    """a + 3 I with its rows reversed: LU swaps rows."""
    return _shifted(a)[..., ::-1, :]


row("prim_triangular_solve", _triangular_solves, ref=_triangular_solves_ref, **_LA,
    shapes=(((3, 3), (3, 2)), ((3, 3, 3), (3, 3, 1)), ((1, 1), (1, 1))), grad2=True,
    prim="triangular_solve")
row("prim_lu", lambda a: TR.lu(_pivoted(a))[0], shapes=SQUARE, **_LA, grad2=True, prim="lu")
row("prim_lu_pivots_to_permutation",
    lambda a: TR.lu_pivots_to_permutation(TR.lu(_pivoted(a))[1]) * 1.0, shapes=SQUARE,
    diff=False, prim="lu_pivots_to_permutation")


if hasattr(np.linalg, "vector_norm"):      # numpy 2's array-API names
    row("linalg_vector_norm", lambda x: (np.linalg.vector_norm(x),
                                         np.linalg.vector_norm(x, axis=(0, 2), ord=3,
                                                               keepdims=True)),
        shapes=(((2, 3, 4),),), domain=NONZERO, covers=(np.linalg.vector_norm,))
    row("linalg_matrix_norm", lambda x: np.linalg.matrix_norm(x, ord="nuc", keepdims=True),
        shapes=(((2, 3, 4),),), covers=(np.linalg.matrix_norm,))
    row("linalg_svdvals", lambda x: np.linalg.svdvals(_spread(x)), shapes=(((2, 4, 3),),),
        **_LA, covers=(np.linalg.svdvals,))
    row("linalg_array_api", lambda x, y: (
        np.linalg.matmul(x, y), np.linalg.tensordot(x, y, axes=((1, 2), (2, 1))),
        np.linalg.outer(x[0, 0], y[1, 1]), np.linalg.vecdot(x, y, axis=1),
        np.linalg.matrix_transpose(x), np.linalg.diagonal(x, offset=1),
        np.linalg.trace(x, offset=-1), np.linalg.cross(x, y, axis=-2)),
        shapes=(((2, 3, 3), (2, 3, 3)),),
        covers=(np.linalg.matmul, np.linalg.tensordot, np.linalg.outer, np.linalg.vecdot,
                np.linalg.matrix_transpose, np.linalg.diagonal, np.linalg.trace,
                np.linalg.cross))
for _ord in (-np.inf, -2, -1, 0, 0.5):
    row(f"norm_vector_ord_{_ord}", lambda x, _o=_ord: np.linalg.norm(x, ord=_o, axis=-1),
        shapes=(((5,),), ((2, 3),)), domain=NONZERO, distinct=_ord == -np.inf, diff=_ord != 0,
        covers=(np.linalg.norm,))
for _ord in ("nuc", 2, -2, 1, -1, np.inf, -np.inf):
    row(f"norm_matrix_ord_{_ord}", lambda x, _o=_ord: np.linalg.norm(x, ord=_o),
        shapes=(((3, 4),),), domain=NONZERO, distinct=True, covers=(np.linalg.norm,))
row("norm_matrix_axes", lambda x: tuple(np.linalg.norm(x, ord=o, axis=(2, 0), keepdims=True)
                                        for o in ("nuc", -np.inf)),
    shapes=(((3, 2, 4),),), domain=NONZERO, distinct=True, covers=(np.linalg.norm,))

# ---- scipy.special (ops/special.py, numpy_api/special.py), where scipy is importable ----------
try:
    import scipy.special as sc
except ImportError:        # (no scipy: no special functions, and no rows for them)
    sc = None
if sc is not None:
    from tapejit.ops import special as SP
    _PROB = Domain(0.05, 0.95)
    SPECIAL_UNARY = [(sc.erf, SP.erf, REAL), (sc.erfc, SP.erfc, REAL),
                     (sc.erfinv, SP.erfinv, UNIT), (sc.gammaln, SP.lgamma, POS),
                     (sc.gamma, SP.gamma, POS),
                     (sc.expit, SP.expit, REAL), (sc.ndtr, SP.ndtr, REAL),
                     (sc.log_ndtr, SP.log_ndtr, Domain(-6.0, 3.0)), (sc.digamma, None, POS),
                     (sc.logit, None, _PROB)]
    for _uf, _prim, _dom in SPECIAL_UNARY:
        row(f"scipy_{_uf.__name__}", _uf, domain=_dom, grad2=True, covers=(_uf,),
            int_fn=None if _uf in (sc.erfinv, sc.logit) else _uf)
        if _prim is not None:
            row(f"prim_{_prim.name}", _prim, domain=_dom, grad2=True, prim=_prim.name, ref=_uf)
    row("prim_polygamma", lambda x: SP.polygamma(x, n=0) + SP.polygamma(x, n=2), domain=POS,
        grad2=True, prim="polygamma",
        ref=lambda x: (sc.digamma(x) + sc.polygamma(2, x)).astype(x.dtype))
    row("scipy_polygamma", lambda x: sc.polygamma(1, x) * sc.polygamma(0, x), domain=POS,
        grad2=True, covers=(sc.polygamma,),       # (scipy's is float64 for float32 x)
        ref=lambda x: (sc.polygamma(1, x) * sc.polygamma(0, x)).astype(x.dtype))
    row("scipy_gammaln_negative", sc.gammaln, domain=Domain(-2.9, -2.1), grad2=True)
    row("scipy_gamma_negative", sc.gamma, domain=Domain(-2.9, -2.1), grad2=True)
    for _uf, _prim, _dom in [(sc.xlogy, SP.xlogy, [REAL, POS]),
                             (sc.xlog1py, SP.xlog1py, [REAL, Domain(-0.5, 2.0)])]:
        row(f"scipy_{_uf.__name__}", _uf, shapes=BINARY_SHAPES, domain=_dom, grad2=True,
            covers=(_uf,))
        row(f"prim_{_prim.name}", _prim, shapes=BINARY_SHAPES, domain=_dom, grad2=True,
            prim=_prim.name, ref=_uf)
    # x = 0: the value is 0 whatever y; d/dx = log y (JAX's), d/dy = 0 (the function is 0)
    row("scipy_xlogy_x_zero", lambda x, y: sc.xlogy(x, y) + sc.xlog1py(x, y),
        args=lambda rng: [np.array([0.0, 0.0, 1.5]), np.array([0.5, 2.0, 0.5])],
        expect_grad=lambda ct, x, y: [ct * (np.log(y) + np.log1p(y)),
                                      ct * x * (1 / y + 1 / (1 + y))])
    # compositions of scipy's formulas: the entropies (POS pairs: ratios on both sides of
    # rel_entr's log1p range) and the Huber losses on both sides of their kink
    row("scipy_entr", sc.entr, domain=POS, grad2=True, covers=(sc.entr,), int_fn=sc.entr)
    for _uf in (sc.rel_entr, sc.kl_div):
        row(f"scipy_{_uf.__name__}", _uf, shapes=BINARY_SHAPES, domain=[POS, POS], grad2=True,
            covers=(_uf,))
    for _uf in (sc.huber, sc.pseudo_huber):
        row(f"scipy_{_uf.__name__}", _uf, shapes=BINARY_SHAPES, domain=[POS, REAL],
            grad2=True, covers=(_uf,))
    row("scipy_betaln", sc.betaln, shapes=BINARY_SHAPES, domain=[POS, Domain(0.5, 40.0)],
        grad2=True, covers=(sc.betaln,))
    row("scipy_logsumexp", lambda x: sc.logsumexp(x), shapes=(((),), ((5,),), ((2, 3),)),
        grad2=True, covers=(sc.logsumexp,))
    row("scipy_logsumexp_axis", lambda x: sc.logsumexp(x, axis=(0, 2), keepdims=True),
        shapes=CUBE, grad2=True, covers=(sc.logsumexp,))
    row("scipy_logsumexp_b", lambda x, b: sc.logsumexp(x, axis=-1, b=b),
        shapes=(((2, 3), (2, 3)), ((2, 3), (3,)), ((4,), ())), domain=[REAL, POS], grad2=True,
        covers=(sc.logsumexp,))
    row("scipy_softmax", lambda x: sc.softmax(x, axis=1), shapes=MATRIX, grad2=True,
        covers=(sc.softmax,))
    row("scipy_softmax_all", lambda x: sc.softmax(x), shapes=MATRIX, covers=(sc.softmax,))
    row("scipy_log_softmax", lambda x: sc.log_softmax(x, axis=-1), shapes=CUBE, grad2=True,
        covers=(sc.log_softmax,))
    # scipy.stats' module functions (its distributions: tests/test_scipy_stats.py)
    import scipy.stats as st
    from tapejit.numpy_api import stats as _stats
    _stats.install()                    # (a trace opening does it too)
    row("scipy_stats_entropy", lambda p, q: st.entropy(p) + st.entropy(p, q, base=2.0),
        shapes=(((3,), (3,)), ((3, 3), (3, 3)), ((2, 4), (4,))), domain=POS, grad2=True,
        covers=(st.entropy,))
    # incomplete gamma and beta functions: differentiable in x only (their a, b, df are
    # constants here; a derivative in them raises: tests/test_special_incomplete.py)
    from tapejit.ops import special_incomplete as SI
    _INCOMPLETE = [(sc.gammainc, SI.gammainc, (2.5,), POS),
                   (sc.gammaincc, SI.gammaincc, (0.7,), POS),
                   (sc.betainc, SI.betainc, (2.0, 3.5), _PROB), (sc.stdtr, SI.stdtr, (3.0,), REAL)]
    for _uf, _prim, _shapes, _dom in _INCOMPLETE:
        row(f"scipy_{_uf.__name__}", lambda x, _uf=_uf, _s=_shapes: _uf(*_s, x), domain=_dom,
            grad2=True, covers=(_uf,))
        row(f"prim_{_prim.name}", lambda x, _p=_prim, _s=_shapes: _p(*_s, x), domain=_dom,
            grad2=True, prim=_prim.name,
            ref=lambda x, _uf=_uf, _s=_shapes: _uf(*_s, x).astype(x.dtype))

# ---- nan-reductions, nan_to_num, reductions with where= and initial= --------------------------
_NAN_AT = np.array([[False, True, False, False], [True, False, False, True],
                    [False, False, True, False]])            # no all-NaN line (test_special.py)
_KEEP = ~_NAN_AT


def _nanify(x):
    """x (3, 4) with NaN at fixed places: those elements get zero gradient."""
    return np.where(_NAN_AT, np.nan, x)


def _infify(x):
    return np.where(_NAN_AT, np.array([[np.inf], [-np.inf], [np.nan]]), x)


row("nansum", lambda x: (np.nansum(_nanify(x), axis=1), np.nansum(_nanify(x), axis=0,
                                                                   keepdims=True)),
    shapes=MATRIX, covers=(np.nansum,))
row("nansum_all_where", lambda x: np.nansum(_nanify(x), where=x > 0, initial=1.5),
    shapes=MATRIX, covers=(np.nansum,))
row("nanmean", lambda x: (np.nanmean(_nanify(x), axis=1), np.nanmean(_nanify(x))),
    shapes=MATRIX, covers=(np.nanmean,))
row("nanmax", lambda x: np.nanmax(_nanify(x), axis=-1), shapes=MATRIX, distinct=True,
    covers=(np.nanmax,))
row("nanmin", lambda x: np.nanmin(_nanify(x), axis=0, keepdims=True), shapes=MATRIX,
    distinct=True, covers=(np.nanmin,))
row("nanmax_initial", lambda x: np.nanmax(_nanify(x), initial=0.0), shapes=MATRIX,
    distinct=True, covers=(np.nanmax,))
row("nan_to_num", lambda x: np.nan_to_num(_infify(x)) * 1e-300, shapes=MATRIX,
    covers=(np.nan_to_num,))
row("nan_to_num_values", lambda x: np.nan_to_num(_infify(x), nan=-1.0, posinf=5.0,
                                                 neginf=-5.0), shapes=MATRIX,
    covers=(np.nan_to_num,), int_fn=lambda x: np.nan_to_num(x))
row("sum_where", lambda x: (np.sum(x, axis=1, where=_KEEP), np.sum(x, where=x > 0.5),
                            np.sum(x, axis=0, initial=2.0, keepdims=True)), shapes=MATRIX,
    covers=(np.sum,))
row("prod_where", lambda x: np.prod(x, axis=1, where=_KEEP, initial=0.5), shapes=MATRIX,
    domain=NONZERO, covers=(np.prod,))
row("mean_where", lambda x: (np.mean(x, axis=1, where=_KEEP), np.mean(x, where=_KEEP[0])),
    shapes=MATRIX, covers=(np.mean,))
row("max_where", lambda x: (np.max(x, axis=1, where=_KEEP, initial=-5.0),
                            np.max(x, axis=0, initial=0.0)), shapes=MATRIX, distinct=True,
    covers=(np.max,))
row("min_where", lambda x: np.min(x, axis=(0, 1), where=_KEEP, initial=5.0, keepdims=True),
    shapes=MATRIX, distinct=True, covers=(np.min,))


def combined(rows: Sequence["Row"], dtype: str = F64,
             picks: tuple[int, ...] = (0,)) -> tuple[Callable[..., Any], list]:
    """One scalar function of all the rows' inputs and those inputs (the samples of `dtype`
    at positions `picks`; the last sample of a broadcasting row has axes of equal length):
    one program exercising a chunk of rows, for the compiled backends whose programs cost
    seconds each to compile. Each output is weighted by a fixed random array of its shape, so
    an element computed at the wrong position changes the result (a plain sum would not see a
    transposed or repeated element)."""
    rng = np.random.default_rng(0)
    args, spans = [], []
    for r in rows:
        samples = r.samples(dtype) if dtype in r.dtypes else []
        for sample in [samples[k] for k in sorted({k % len(samples) for k in picks})]:
            with np.errstate(all="ignore"):
                out = (r.ref or r.fn)(*[a.copy() for a in sample])
            weights = [rng.uniform(0.5, 1.5, np.shape(leaf)).astype(dtype)
                       for leaf in _output_leaves(out)]
            spans.append((r, len(args), len(args) + len(sample), weights))
            args.extend(sample)

    def total(*xs):
        acc = 0.0
        for r, a, b, weights in spans:
            for leaf, weight in zip(_output_leaves(r.fn(*xs[a:b])), weights):
                acc = acc + np.sum(leaf * weight)
        return acc

    return total, args


def _output_leaves(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]
