"""Branch-free float64 math kernels (exp, expm1, log, log1p, sin, cos, tanh, pow) that LLVM's
loop vectoriser turns into SIMD code.

numba lowers `math.exp` & co. to libm calls or `llvm.exp`-style intrinsics that the backend
splits back into one libm call per element, so a generated loop calling them runs one element
at a time. The kernels here are plain arithmetic, integer bit operations and selects, inlined
into the generated loop, whose whole body then vectorises. Each follows the fdlibm scheme: an
exact range reduction (Cody-Waite; Payne-Hanek for sin/cos of |x| > 2^20 pi/2), a polynomial
on the reduced argument, a rescale (pow: exp of y log|x|, the log in double-double); special
values (inf, NaN, signed zeros, overflow, gradual underflow) come out as numpy's. Errors in ulp (tests/test_vmath.py sweeps them against a
long-double reference and numpy; bench/vmath_ulp.py prints them) are in docs/performance.md.

scalar.py writes the calls (generated modules read this module as the global `tj_vmath`);
float32 operands go through the float64 kernel and round once.
"""
from __future__ import annotations

import math
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

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


def _two_over_pi_table() -> np.ndarray:
    """Rows e = -32 .. 971: (2^e 2/pi) mod 4 as four doubles holding its bits 2^1 .. 2^-210 in
    53-bit chunks (from 2/pi to 1400 bits, by Machin's formula in integers)."""
    bits = 1400

    def arctan_inv(n: int) -> int:   # arctan(1/n) 2^bits
        total, term, k = 0, (1 << bits) // n, 1
        while term:
            total += term // k if k % 4 == 1 else -(term // k)
            term //= n * n
            k += 2
        return total
    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    two_over_pi = (2 << (2 * bits)) // pi   # 2/pi 2^bits
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
    # the special cases, each a select
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
