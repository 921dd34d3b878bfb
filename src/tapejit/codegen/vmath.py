"""Branch-free math kernels (exp, expm1, log, log1p, sin, cos, tanh, pow; float64, and float32
as exp_f32, ...) that LLVM's loop vectoriser turns into SIMD code.

numba lowers `math.exp` & co. to libm calls or `llvm.exp`-style intrinsics that the backend
splits back into one libm call per element, so a generated loop calling them runs one element
at a time. The kernels here are plain arithmetic, integer bit operations and selects, inlined
into the generated loop, whose whole body then vectorises. Each follows the fdlibm scheme: an
exact range reduction (Cody-Waite; Payne-Hanek for sin/cos of |x| > 2^20 pi/2), a polynomial
on the reduced argument, a rescale (pow: exp of y log|x|, the log in double-double); special
values (inf, NaN, signed zeros, overflow, gradual underflow) come out as numpy's. Errors in ulp
(tests/test_vmath.py sweeps them against a long-double reference and numpy; bench/vmath_ulp.py
prints them) are in docs/performance.md.

The float32 kernels compute in float64 with short polynomials (about 2^-42 relative) and round
once, so their results are float32's correctly rounded ones but in rare near-ties; sin/cos
reduce every float32, up to 3.4e38, without a table (see _sin_cos_f32).

scalar.py writes the calls (generated modules read this module as the global `tj_vmath`).
"""
from __future__ import annotations

import math
import sys
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..disk import store

# A generated loop that also accumulates a sum (a forward value, a gradient) holds a strict,
# in-order float reduction, and LLVM's vectoriser leaves such loops scalar unless told it may
# vectorise the body and add up the lanes in the original order: the sums stay bit-identical.
# (A process-wide LLVM option: numba's own functions compiled after this import get it too.)
llvm.set_option("tapejit", "-force-ordered-reductions=true")

# ---- bit-level helpers ----------------------------------------------------------------------


@intrinsic
def _bits(typingctx, x):
    """The int64 with the bits of float64 `x`."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, n):
    """The float64 with the bits of int64 `n`."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


def _llvm_ternary(name: str, doc: str) -> Any:
    """An intrinsic calling the LLVM float64 intrinsic `name` on three float64s."""
    def typer(typingctx, a, b, c):
        def codegen(context, builder, sig, args):
            f64 = ir.DoubleType()
            fn = cgutils.get_or_insert_function(builder.module,
                                                ir.FunctionType(f64, [f64] * 3), name)
            return builder.call(fn, args)
        return types.float64(types.float64, types.float64, types.float64), codegen
    typer.__doc__ = doc
    return intrinsic(typer)


_fma = _llvm_ternary("llvm.fmuladd.f64",
                     "a*b + c, fused where the CPU has FMA (llvm.fmuladd): Horner steps.")
_fma_exact = _llvm_ternary("llvm.fma.f64", "a*b + c rounded once (llvm.fma: an instruction "
                           "where the CPU has FMA, else libm).")


# every function here is compiled once (cached) and marked alwaysinline for LLVM: a loop with a
# call left in it does not vectorise, and LLVM's inliner leaves bodies this size out of line
_jit = numba.njit(cache=True, error_model="numpy", forceinline=True)
SHIFT = 6755399441055744.0  # 1.5 * 2^52: x + SHIFT rounds x to an integer, held in low bits
SHIFT_BITS = 0x4338000000000000


@_jit
def _pow2(k):
    """2.0**k for int64 k in [-1022, 1023]."""
    return _float((k + 1023) << 52)


@_jit
def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@_jit
def _two_prod(a, b):
    """(p, e) with p = fl(a b) and p + e = a b exactly."""
    p = a * b
    return p, _fma_exact(a, b, -p)


# ---- exp, expm1 -----------------------------------------------------------------------------
LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # 32 significant bits: k * LN2_HI is exact
LN2_LO = 1.90821492927058770002e-10
# 1/n!, n = 13..2: the Taylor series of exp(r) - 1 - r on |r| <= ln2/2 (truncation < 2^-60)
_INV_FACT = tuple(1.0 / math.factorial(n) for n in range(13, 1, -1))
E13, E12, E11, E10, E9, E8, E7, E6, E5, E4, E3, E2 = _INV_FACT


@_jit
def _reduce_exp(x):
    """(k, r, rr) with x = k ln2 + r + rr, k an int64, |r| <= ln2/2 exact (|x| < 2^50)."""
    t = x * LOG2E + SHIFT
    k = t - SHIFT
    return _bits(t) - SHIFT_BITS, x - k * LN2_HI, -(k * LN2_LO)


@_jit
def _expm1_tail(r):
    """exp(r) - 1 - r for |r| <= ln2/2, to within 2^-60 of exp(r), before rounding."""
    p = _fma(E13, r, E12)
    p = _fma(p, r, E11)
    p = _fma(p, r, E10)
    p = _fma(p, r, E9)
    p = _fma(p, r, E8)
    p = _fma(p, r, E7)
    p = _fma(p, r, E6)
    p = _fma(p, r, E5)
    p = _fma(p, r, E4)
    p = _fma(p, r, E3)
    p = _fma(p, r, E2)
    return p * (r * r)


EXP_HI = 709.782712893384  # exp overflows above this
EXP_LO = -745.2            # exp rounds to 0 below this


@_jit
def exp(x):
    """e**x for float64 x."""
    xc = x if x < 710.0 else 710.0
    xc = xc if xc > EXP_LO else EXP_LO
    k, rh, rl = _reduce_exp(xc)
    r = rh + rl
    p = 1.0 + (r + _expm1_tail(r))
    k1 = k >> 1  # two factors: 2^k may overflow or underflow, each half does not
    y = (p * _pow2(k1)) * _pow2(k - k1)
    return y if x == x else x


@_jit
def expm1(x):
    """e**x - 1 for float64 x, accurate near 0."""
    xc = x if x < EXP_HI else EXP_HI
    xc = xc if xc > -45.0 else -45.0  # e^-45 - 1 rounds to -1
    k, rh, rl = _reduce_exp(xc)
    # e^x - 1 = 2^k (1 - 2^-k + r + tail); 1 - 2^-k is exact for |k| <= 53, and 1 past 60;
    # summed exactly up to the last step, which rounds once at the result's scale
    s, e = _two_sum(1.0 - _pow2(-min(k, 60)), rh)
    t = s + ((e + rl) + _expm1_tail(rh + rl))
    ka = min(k, 1023)
    y = (t * _pow2(ka)) * _pow2(k - ka)
    y = math.inf if x > EXP_HI else y
    return x if (x == 0.0 or x != x) else y  # keeps -0.0


# ---- log, log1p -----------------------------------------------------------------------------
SQRT1_2_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2)
MANT = 0x000FFFFFFFFFFFFF
LG1, LG2, LG3 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01
LG4, LG5 = 2.222219843214978396e-01, 1.818357216161805012e-01
LG6, LG7 = 1.531383769920937332e-01, 1.479819860511658591e-01
TWO54 = 18014398509481984.0


@_jit
def _log_core(u, c, k0):
    """log(u 2^-k0) + c for u a positive normal float64, c a tiny correction (log1p's)."""
    hx = _bits(u) + (0x3FF0000000000000 - SQRT1_2_BITS)
    k = float((hx >> 52) - 1023 - k0)
    f = _float((hx & MANT) + SQRT1_2_BITS) - 1.0  # u = 2^k (1 + f), sqrt(1/2) <= 1 + f < sqrt 2
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * _fma(w, _fma(w, LG6, LG4), LG2)
    t2 = z * _fma(w, _fma(w, _fma(w, LG7, LG5), LG3), LG1)
    hfsq = 0.5 * f * f
    r = t2 + t1
    return k * LN2_HI - ((hfsq - (s * (hfsq + r) + (k * LN2_LO + c))) - f)


@_jit
def log(x):
    """Natural log of float64 x."""
    sub = x < 2.2250738585072014e-308  # subnormal: scaled up by 2^54 first
    y = _log_core(x * TWO54 if sub else x, 0.0, 54 if sub else 0)
    y = -math.inf if x == 0.0 else y
    y = math.nan if x < 0.0 else y
    return x if (x == math.inf or x != x) else y


@_jit
def log1p(x):
    """log(1 + x) for float64 x, accurate near 0."""
    u = 1.0 + x
    k = (_bits(u) >> 52) - 1023
    # the rounding error of 1 + x, relative to u (0 once it is below an ulp of the result)
    c = (1.0 - (u - x) if k > 0 else x - (u - 1.0)) / u
    c = 0.0 if k > 53 else c
    y = _log_core(u if u < math.inf else 1.0, c, 0)
    y = -math.inf if x == -1.0 else y
    y = math.nan if x < -1.0 else y
    return x if (x == math.inf or x == 0.0 or x != x) else y  # keeps -0.0


# ---- sin, cos -------------------------------------------------------------------------------
INV_PIO2 = 6.36619772367581382433e-01
PIO2_1, PIO2_2 = 1.57079632673412561417e+00, 6.07710050630396597660e-11
PIO2_3, PIO2_3T = 2.02226624871116645580e-21, 8.47842766036889956997e-32
REDUCE_MAX = 1647099.3291652855  # 2^20 pi/2: above it, k * PIO2_1 is no longer exact
S1, S2, S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
S4, S5, S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
C1, C2, C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
C4, C5, C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11


@_jit
def _sin_kernel(x, y):
    """sin(x + y) for |x| <= pi/4, |y| tiny (fdlibm's __kernel_sin)."""
    z = x * x
    v = z * x
    r = _fma(z, _fma(z, _fma(z, _fma(z, S6, S5), S4), S3), S2)
    return x - ((z * (0.5 * y - v * r) - y) - v * S1)


@_jit
def _cos_kernel(x, y):
    """cos(x + y) for |x| <= pi/4, |y| tiny (fdlibm's __kernel_cos)."""
    z = x * x
    r = z * _fma(z, _fma(z, _fma(z, _fma(z, _fma(z, C6, C5), C4), C3), C2), C1)
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + (z * r - x * y))


@_jit
def _reduce_pio2(x):
    """(quadrant, r, rr): x = quadrant pi/2 + r + rr, |r| <= pi/4, for |x| <= REDUCE_MAX.

    pi/2 = PIO2_1 + PIO2_2 + PIO2_3 + PIO2_3T, the first three of 33 bits: k * PIO2_i is exact,
    and the differences are summed with their rounding errors (about 118 good bits)."""
    t = x * INV_PIO2 + SHIFT
    k = t - SHIFT
    r, e2 = _two_sum(x - k * PIO2_1, -(k * PIO2_2))
    r, e3 = _two_sum(r, -(k * PIO2_3))
    tail = (e2 + e3) - k * PIO2_3T
    y0 = r + tail
    return _bits(t) & 3, y0, (r - y0) + tail


def _two_over_pi(bits: int) -> tuple[int, int]:
    """(2/pi 2^bits as an integer, bits), by Machin's formula in integers."""
    def arctan_inv(n: int) -> int:   # arctan(1/n) 2^bits
        total, term, k = 0, (1 << bits) // n, 1
        while term:
            total += term // k if k % 4 == 1 else -(term // k)
            term //= n * n
            k += 2
        return total
    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    return (2 << (2 * bits)) // pi, bits


def _two_over_pi_table() -> np.ndarray:
    """Rows e = -32 .. 971: (2^e 2/pi) mod 4 as four doubles holding its bits 2^1 .. 2^-210 in
    53-bit chunks (from 2/pi to 1400 bits)."""
    two_over_pi, bits = _two_over_pi(1400)
    rows = []
    for e in range(-32, 972):
        w = ((two_over_pi << (e + 210)) >> bits) & ((1 << 212) - 1)  # (2^e 2/pi) mod 4, 2^-210
        rows.append([math.ldexp((w >> (159 - 53 * i)) & ((1 << 53) - 1), -51 - 53 * i)
                     for i in range(4)])
    return np.array(rows, dtype=np.float64).ravel()


TWO_OVER_PI = _two_over_pi_table()
PIO2_HI, PIO2_LO = 1.5707963267948966, 6.123233995736766e-17


@_jit
def _reduce_big(ax):
    """(quadrant, r, rr) as _reduce_pio2's, for ax = |x| > REDUCE_MAX (Payne-Hanek):
    ax = m 2^e with m an integer below 2^53, so ax 2/pi = m ((2^e 2/pi) mod 4) mod 4: table row
    e times m, summed exactly to about 2^-116 (no double comes closer than about 2^-61 to a
    multiple of pi/2)."""
    eb = _bits(ax) >> 52
    eb = min(max(eb, 1043), 2046)  # row 0 is e = 1043 - 1075 = -32; others are unused lanes
    m = ax * _pow2(1075 - eb)
    row = 4 * (eb - 1043)
    h0, l0 = _two_prod(m, TWO_OVER_PI[row])
    h1, l1 = _two_prod(m, TWO_OVER_PI[row + 1])
    h2, l2 = _two_prod(m, TWO_OVER_PI[row + 2])
    h3 = m * TWO_OVER_PI[row + 3]
    s, e1 = _two_sum(h0 - 4.0 * np.floor(h0 * 0.25), l0)
    s, e2 = _two_sum(s, h1)
    t = s + SHIFT
    n = t - SHIFT                    # the nearest integer: s - n is exact, in [-1/2, 1/2]
    u, c1 = _two_sum(e1, e2)
    u, c2 = _two_sum(u, l1)
    u, c3 = _two_sum(u, h2)
    f, c4 = _two_sum(s - n, u)
    fl = c4 + (((c1 + c2) + c3) + (l2 + h3))
    r, rl = _two_prod(f, PIO2_HI)
    rl = rl + (f * PIO2_LO + fl * PIO2_HI)
    y0 = r + rl
    return _bits(t) & 3, y0, (r - y0) + rl


@_jit
def _reduce(x):
    """(quadrant, r, rr) with x = quadrant pi/2 + r + rr (mod 2 pi), |r| <= pi/4 (about).
    A branch, not a select: scalar code runs one side, vectorised code both."""
    if abs(x) > REDUCE_MAX:
        q, r, rr = _reduce_big(abs(x))
        if x < 0.0:
            return (-q) & 3, -r, -rr
        return q, r, rr
    return _reduce_pio2(x)


@_jit
def sin(x):
    """sin of float64 x."""
    q, r, rr = _reduce(x)
    s, c = _sin_kernel(r, rr), _cos_kernel(r, rr)
    y = s if (q & 1) == 0 else c
    y = -y if q >= 2 else y
    y = x if x == 0.0 else y  # keeps -0.0
    return y if abs(x) < math.inf else math.nan


@_jit
def cos(x):
    """cos of float64 x."""
    q, r, rr = _reduce(x)
    s, c = _sin_kernel(r, rr), _cos_kernel(r, rr)
    y = c if (q & 1) == 0 else s
    y = -y if (q == 1 or q == 2) else y
    return y if abs(x) < math.inf else math.nan


# ---- tanh -----------------------------------------------------------------------------------
# (tanh(x) - x) / x^3 as a polynomial in z = x^2 on [0, 0.55^2]: Chebyshev interpolation of the
# Taylor series (exact Bernoulli-number coefficients, summed in long double), in powers of z;
# its error is under 0.06 ulp of tanh
TH = (-0.3333333333333333, 0.1333333333333271, -0.05396825396742843, 0.021869488493487646,
      -0.008863234394709539, 0.0035921103465895513, -0.0014556616240126768,
      0.0005889352285014389, -0.00023463276389123873, 8.511055077206622e-05,
      -2.0601367715784286e-05)
TH0, TH1, TH2, TH3, TH4, TH5, TH6, TH7, TH8, TH9, TH10 = TH
TANH_SMALL = 0.55  # about log(3)/2: above it 1 - 2/(e^2x + 1) >= 1/2 loses no bits


@_jit
def _tanh_small(a):
    """tanh(a) for 0 <= a < TANH_SMALL."""
    z = a * a
    g = _fma(z, TH10, TH9)
    g = _fma(g, z, TH8)
    g = _fma(g, z, TH7)
    g = _fma(g, z, TH6)
    g = _fma(g, z, TH5)
    g = _fma(g, z, TH4)
    g = _fma(g, z, TH3)
    g = _fma(g, z, TH2)
    g = _fma(g, z, TH1)
    g = _fma(g, z, TH0)
    return a + a * (z * g)


@_jit
def tanh(x):
    """tanh of float64 x: an odd polynomial for |x| < 0.55, else 1 - 2/(expm1(2|x|) + 2)."""
    a = abs(x)
    if a < TANH_SMALL:   # a branch: scalar code runs one side, vectorised code both
        y = _tanh_small(a)
    else:
        y = 1.0 - 2.0 / (expm1(2.0 * min(a, 20.0)) + 2.0)  # tanh(20) rounds to 1
    y = math.copysign(y, x)
    return y if x == x else x


# ---- pow ------------------------------------------------------------------------------------
# log(1 + f) = 2 atanh(s), s = f / (2 + f), |s| < 0.1716: 2 s + (2/3) s^3 + s^5 (2/5 + ...),
# the first two terms in double-double, the rest (at most 6e-5) in double, up to s^25 (the
# next term is below 2^-67)
TWO_THIRDS_HI, TWO_THIRDS_LO = 0.6666666666666666, 3.700743415417188e-17
P1, P2, P3 = 2 / 5, 2 / 7, 2 / 9
P4, P5, P6, P7, P8, P9, P10, P11 = 2 / 11, 2 / 13, 2 / 15, 2 / 17, 2 / 19, 2 / 21, 2 / 23, 2 / 25
LN2_LO2 = 1.1612227229362532e-26  # ln 2 - LN2_HI - LN2_LO


@_jit
def _log_dd(x):
    """(hi, lo): log(x) to about 2^-66 of it, for finite x > 0."""
    sub = x < 2.2250738585072014e-308
    hx = _bits(x * TWO54 if sub else x) + (0x3FF0000000000000 - SQRT1_2_BITS)
    k = float((hx >> 52) - 1023 - (54 if sub else 0))
    f = _float((hx & MANT) + SQRT1_2_BITS) - 1.0   # exact
    dh, dl = _two_sum(2.0, f)
    sh = f / dh
    sl = (_fma_exact(-sh, dh, f) - sh * dl) / dh  # s = sh + sl
    s2h, s2l = _two_prod(sh, sh)
    s3h, s3l = _two_prod(s2h, sh)
    s3l = s3l + (s2l * sh + 3.0 * s2h * sl)
    th, tl = _two_prod(s3h, TWO_THIRDS_HI)        # (2/3) s^3
    tl = tl + (s3l * TWO_THIRDS_HI + s3h * TWO_THIRDS_LO)
    z = s2h
    q = _fma(z, P11, P10)
    q = _fma(q, z, P9)
    q = _fma(q, z, P8)
    q = _fma(q, z, P7)
    q = _fma(q, z, P6)
    q = _fma(q, z, P5)
    q = _fma(q, z, P4)
    q = _fma(q, z, P3)
    q = _fma(q, z, P2)
    q = _fma(q, z, P1)
    rest = s3h * z * q                             # s^5 (2/5 + ...)
    # k ln2 + 2 sh + th, summed exactly, then the small terms
    a, e1 = _two_sum(k * LN2_HI, 2.0 * sh)
    a, e2 = _two_sum(a, th)
    lo = (e1 + e2) + ((2.0 * sl + tl) + (rest + (k * LN2_LO + k * LN2_LO2)))
    hi = a + lo
    return hi, (a - hi) + lo


@_jit
def _is_odd_integer(y):
    """Whether float64 y is an odd integer."""
    return abs(y) < 9007199254740992.0 and y == np.floor(y) and 0.5 * y != np.floor(0.5 * y)


@_jit
def _pow_special(x, y, v):
    """v, or x**y by C99's (numpy's) special cases where x or y is 0, inf, NaN, a negative base
    or 1; each a select."""
    ax = abs(x)
    odd = _is_odd_integer(y)
    if ax == 0.0 or ax == math.inf:      # 0**y, inf**y: 0 or inf, odd y keeps x's sign
        v = math.inf if (y < 0.0) == (ax == 0.0) else 0.0
    if math.copysign(1.0, x) < 0.0:      # x < 0, -0.0 or -inf
        if ax > 0.0 and ax < math.inf and y != np.floor(y) and abs(y) < math.inf:
            v = math.nan                  # finite negative base, fractional exponent
        elif odd:
            v = -v
    if abs(y) == math.inf:
        v = 1.0 if ax == 1.0 else (math.inf if (ax > 1.0) == (y > 0.0) else 0.0)
    if x != x or y != y:
        v = math.nan
    if y == 0.0 or x == 1.0:
        v = 1.0
    return v


@_jit
def pow(x, y):
    """x**y for float64 x, y, with C99's (numpy's) special cases."""
    ax = abs(x)
    lh, ll = _log_dd(ax if (ax > 0.0 and ax < math.inf) else 1.0)
    ph, pl = _two_prod(y, lh)
    pl = pl + y * ll
    big = ph > EXP_HI
    tiny = ph < EXP_LO
    ph, pl = (0.0, 0.0) if (big or tiny or ph != ph) else (ph, pl)
    k, rh, rl = _reduce_exp(ph)
    rl = rl + pl
    s, e = _two_sum(1.0, rh)      # e^r = 1 + rh + rl + tail, rounded once at the end
    p = s + (e + (rl + _expm1_tail(rh + rl)))
    k1 = k >> 1
    v = (p * _pow2(k1)) * _pow2(k - k1)
    v = math.inf if big else (0.0 if tiny else v)
    return _pow_special(x, y, v)


# ---- float32 --------------------------------------------------------------------------------
# The float32 kernels compute in float64 and round once. Each float64 step is exact or good to
# about 2^-42 of the result, far below float32's half ulp (2^-24): the result is the correctly
# rounded one but in rare near-ties. Every float32, subnormals included, is a normal float64,
# and float32 overflow and underflow happen in that last rounding. So the reductions are short
# and the polynomials low-degree (mpmath.chebyfit on the interval; error noted). Native float32
# arithmetic would fill twice the lanes but could not keep half an ulp so simply (not tried).
# (e^r - 1 - r) / r^2 on |r| <= ln2/2 (error 4.7e-13)
EQ0, EQ1, EQ2 = 0.49999999999954975, 0.16666666666662575, 0.04166666678652787
EQ3, EQ4, EQ5 = 0.008333333344226802, 0.0013888839037847843, 0.0001984122453356812
EQ6, EQ7 = 2.4867918601290165e-05, 2.7617608788569917e-06
# (2 atanh(s) - 2 s) / s^3 in z = s^2 <= (3 - 2 sqrt 2)^2 (error 4.7e-14)
LT0, LT1, LT2 = 0.6666666666666208, 0.4000000001121182, 0.2857142413663627
LT3, LT4, LT5 = 0.22222862463799065, 0.18140185772958126, 0.16621938471804512
# sin(pi/2 f) / f and cos(pi/2 f) in u = f^2 <= 1/4 (errors 6.8e-15, 5.6e-14)
SP0, SP1, SP2 = 1.57079632679489, -0.6459640975043052, 0.07969262615560159
SP3, SP4, SP5 = -0.004681752589609857, 0.00016042925554202335, -3.556369371360422e-06
CP0, CP1, CP2 = 0.9999999999999443, -1.2337005501201272, 0.2536695071525108
CP3, CP4, CP5 = -0.0208634679869731, 0.0009191616584395563, -2.485082381773045e-05
LN2 = 0.6931471805599453
SQRT1_2_M1, SQRT2_M1 = -0.2928932188134525, 0.41421356237309503


@_jit
def _exp_parts(x):
    """(k, p) with e^x = 2^k (1 + p) for float64 |x| < 2^40: p = e^r - 1 to 2^-42 of it."""
    t = x * LOG2E + SHIFT
    k = t - SHIFT
    r = (x - k * LN2_HI) - k * LN2_LO
    q = _fma(EQ7, r, EQ6)
    q = _fma(q, r, EQ5)
    q = _fma(q, r, EQ4)
    q = _fma(q, r, EQ3)
    q = _fma(q, r, EQ2)
    q = _fma(q, r, EQ1)
    q = _fma(q, r, EQ0)
    return _bits(t) - SHIFT_BITS, _fma(r * r, q, r)


@_jit
def _expm1_f64(x):
    """e^x - 1 for float64 -40 < x < 200, to 2^-42 of it (no special values)."""
    k, p = _exp_parts(x)
    s = _pow2(k)
    return _fma(s, p, s - 1.0)  # s - 1 exact; for k != 0 the result is at least 0.29


@_jit
def _log_f64(f, k):
    """k ln2 + log(1 + f) for float64 sqrt(1/2) - 1 <= f < sqrt 2 - 1, to 2^-51 of it."""
    s = f / (2.0 + f)
    z = s * s
    t = _fma(LT5, z, LT4)
    t = _fma(t, z, LT3)
    t = _fma(t, z, LT2)
    t = _fma(t, z, LT1)
    t = _fma(t, z, LT0)
    return k * LN2 + _fma(s * z, t, 2.0 * s)


@_jit
def _log_split(u):
    """(f, k) with u = 2^k (1 + f), sqrt(1/2) <= 1 + f < sqrt 2, for a positive normal u."""
    hx = _bits(u) + (0x3FF0000000000000 - SQRT1_2_BITS)
    return _float((hx & MANT) + SQRT1_2_BITS) - 1.0, float((hx >> 52) - 1023)


@_jit
def exp_f32(x):
    """e**x for float32 x."""
    xd = np.float64(x)
    xc = min(max(xd, -104.0), 89.0)  # beyond: rounds to 0 or inf
    k, p = _exp_parts(xc)
    y = (1.0 + p) * _pow2(k)
    return np.float32(y if xd == xd else xd)


@_jit
def expm1_f32(x):
    """e**x - 1 for float32 x."""
    xd = np.float64(x)
    y = _expm1_f64(min(max(xd, -30.0), 89.0))  # beyond: rounds to -1 or inf
    return np.float32(xd if (xd == 0.0 or xd != xd) else y)  # keeps -0.0


@_jit
def tanh_f32(x):
    """tanh of float32 x: expm1(2|x|) / (expm1(2|x|) + 2), relative-accurate near 0."""
    xd = np.float64(x)
    m = _expm1_f64(2.0 * min(abs(xd), 10.0))  # tanh(10) rounds to 1
    y = math.copysign(m / (m + 2.0), xd)
    return np.float32(y if xd == xd else xd)


@_jit
def log_f32(x):
    """Natural log of float32 x."""
    xd = np.float64(x)
    f, k = _log_split(xd if xd > 0.0 else 1.0)
    y = _log_f64(f, k)
    y = -math.inf if xd == 0.0 else y
    y = math.nan if xd < 0.0 else y
    return np.float32(xd if (xd == math.inf or xd != xd) else y)


@_jit
def log1p_f32(x):
    """log(1 + x) for float32 x: 1 + x is exact in float64 but for x > 2^53 (where it does
    not matter), and small x goes to the polynomial as it is."""
    xd = np.float64(x)
    u = 1.0 + xd
    f, k = _log_split(u if u > 0.0 else 1.0)
    small = xd >= SQRT1_2_M1 and xd < SQRT2_M1
    y = _log_f64(xd if small else f, 0.0 if small else k)
    y = -math.inf if xd == -1.0 else y
    y = math.nan if xd < -1.0 else y
    return np.float32(xd if (xd == math.inf or xd == 0.0 or xd != xd) else y)  # keeps -0.0


@_jit
def pow_f32(x, y):
    """x**y for float32 x, y: e^(y log|x|) in float64 (|y log|x|| < 104 matters, so the log's
    2^-51 costs at most 2^-44 of the result), then pow's special cases."""
    xd, yd = np.float64(x), np.float64(y)
    ax = abs(xd)
    f, k = _log_split(ax if (ax > 0.0 and ax < math.inf) else 1.0)
    t = min(max(yd * _log_f64(f, k), -110.0), 100.0)  # beyond: rounds to 0 or inf
    kt, p = _exp_parts(t)
    return np.float32(_pow_special(xd, yd, (1.0 + p) * _pow2(kt)))


def _two_over_pi_chunks(scale: int) -> tuple[float, ...]:
    """(2^scale 2/pi) mod 4 as six doubles holding its bits 2^1 .. 2^-128 in 26-bit chunks, then
    2^-129 .. 2^-181."""
    two_over_pi, bits = _two_over_pi(400)
    w = ((two_over_pi << (scale + 181)) >> bits) & ((1 << 183) - 1)  # 2^-181 units
    return tuple([math.ldexp((w >> (157 - 26 * i)) & ((1 << 26) - 1), -24 - 26 * i)
                  for i in range(5)] + [math.ldexp(w & ((1 << 53) - 1), -181)])


# float32 sin/cos: pi/2 in three parts, of 28, 28 and 53 bits (k PIO2F_1, k PIO2F_2 exact for
# k < 2^25); 2/pi and 2^52 2/pi mod 4 in chunks, for the arguments from 2^25
PIO2F_1, PIO2F_2, PIO2F_3 = 1.570796325802803, 9.920935739593517e-10, 5.721188726109832e-18
TWO_OVER_PI_0, TWO_OVER_PI_52 = _two_over_pi_chunks(0), _two_over_pi_chunks(52)
TWO_M52 = 2.0 ** -52


@_jit
def _mod4(a):
    """a mod 4, exact for a float64 a >= 0."""
    return a - 4.0 * np.floor(a * 0.25)


@_jit
def _sin_cos_f32(x):
    """(sin, cos) of |x| for float32 x, or garbage for inf and NaN (callers select).

    |x| 2/pi = n + f, n an integer, |f| <= 1/2, by two reductions, a select picking one: a table
    lookup would be a vector gather, which costs as much as the rest and halves the vector
    width. |x| < 2^25: Cody-Waite, |x| - k pi/2 to 2^-52 of it plus 2^-83. From 2^25: |x| =
    M 2^(52 j), j = 0 or 1 (from 2^76), M of 24 bits and below 2^76, so |x| 2/pi = M C_j
    (mod 4), C_j = (2^(52 j) 2/pi) mod 4; the products of M with C_j's chunks are exact and
    reduced mod 4, their sum exact but for the last steps: f to 2^-53 of it plus 2^-80. A scan
    of all float32s finds none with 0 < |f| < 1.03e-9 (2^-29.9, at x = 7.729179e28), so f is
    good to 2^-50 of itself, and sin(pi/2 f), cos(pi/2 f) are polynomials in f."""
    ax = abs(np.float64(x))
    tc = ax * INV_PIO2 + SHIFT
    k = tc - SHIFT
    fc = (((ax - k * PIO2F_1) - k * PIO2F_2) - k * PIO2F_3) * INV_PIO2  # ax - k PIO2F_1 exact
    hi = ax >= 2.0 ** 76
    chunks = TWO_OVER_PI_52 if hi else TWO_OVER_PI_0
    m = ax * TWO_M52 if hi else ax
    s01 = _mod4(m * chunks[0]) + _mod4(m * chunks[1])   # exact: below 8, multiples of 2^-50
    t2 = _mod4(m * chunks[2])
    t3 = m * chunks[3]    # below 1
    tb = ((s01 + t2) + t3) + SHIFT
    n = tb - SHIFT
    # each sum exact, or its rounding error below 2^-53 of f plus 2^-80 (what is left is tiny)
    fb = (((s01 - n) + t2) + t3) + (m * chunks[4] + m * chunks[5])
    big = ax >= 33554432.0   # 2^25
    f = fb if big else fc
    t = tb if big else tc
    u = f * f
    sp = _fma(SP5, u, SP4)
    sp = _fma(sp, u, SP3)
    sp = _fma(sp, u, SP2)
    sp = _fma(sp, u, SP1)
    sp = _fma(sp, u, SP0)
    cp = _fma(CP5, u, CP4)
    cp = _fma(cp, u, CP3)
    cp = _fma(cp, u, CP2)
    cp = _fma(cp, u, CP1)
    cp = _fma(cp, u, CP0)
    s, c = f * sp, cp
    q = _bits(t) & 3   # sin(pi/2 (q + f)) and cos(pi/2 (q + f))
    y_sin = s if (q & 1) == 0 else c
    y_cos = c if (q & 1) == 0 else s
    return (-y_sin if q >= 2 else y_sin), (-y_cos if (q == 1 or q == 2) else y_cos)


@_jit
def sin_f32(x):
    """sin of float32 x."""
    xd = np.float64(x)
    s, _ = _sin_cos_f32(x)
    s = -s if math.copysign(1.0, xd) < 0.0 else s  # odd: keeps -0.0
    return np.float32(s if abs(xd) < math.inf else math.nan)


@_jit
def cos_f32(x):
    """cos of float32 x."""
    _, c = _sin_cos_f32(x)
    return np.float32(c if abs(np.float64(x)) < math.inf else math.nan)


store.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
