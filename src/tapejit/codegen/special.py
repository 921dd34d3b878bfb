"""Scalar special functions for compiled code: digamma, polygamma (Hurwitz zeta), erfinv, ndtr
and log_ndtr on float64 (float32 operands are computed in float64 and rounded once); numpy's
float floor division and remainder, in the operands' own dtype; numpy's integer floor
division, remainder (numba's trap on the most negative int over -1) and fmod.

ops/special.py's scalar templates call them as `tj_special.digamma(x)`, ...: generated CPU
modules read this module as the global `tj_special`; CUDA kernels reach them through
cuda_math.py. The interpreter runs scipy.special's ufuncs, whose algorithms these follow:

- digamma: Cephes' psi (reflection for x < 0, the harmonic sum for small integers, recurrence
  into [1, 2] and Boost's rational approximation there, the asymptotic series above 10), and
  around the negative root -0.504... the Taylor series in Hurwitz zeta values, as scipy does;
- polygamma(n, x) = (-1)^(n+1) n! zeta(n+1, x), zeta by Cephes' Euler-Maclaurin summation;
- erfinv: Giles' single-precision approximation refined by two Newton steps on erf (|y| <=
  1/2) or on erfc against the exact 1 - |y|, so the result is as accurate as libm's erf;
- ndtr and log_ndtr: Cephes' and scipy's formulas (erf/erfc; the asymptotic series of log
  ndtr below -20);
- floor_divide and remainder: numpy's divmod of floats (fmod, then the quotient of the exact
  difference, rounded), which numba's np.floor_divide does not follow at infinities (-1 // inf
  is -1.0, inf // 3 is nan) nor remainder at signed zeros (0.0 % -3.0 is -0.0);
- fmod of integers, which numba's np.fmod gets wrong for negative operands (-7 fmod 2 is -1;
  numba's gives 1).
Errors against scipy, in ulp, are measured by tests/test_special.py and listed in docs/api.md.
"""
from __future__ import annotations

import math

import numba
import numpy as np

_jit = numba.njit(cache=True, error_model="numpy")

EULER = 0.5772156649015328606
# psi's asymptotic series: the Bernoulli terms B_2k / (2k) in 1/x^2, highest first
_PSI_ASY = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
            -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
            8.33333333333333333333E-2)
# Boost's rational approximation of psi on [1, 2] (highest powers of x - 1 first)
_PSI_P = (-0.0020713321167745952, -0.045251321448739056, -0.28919126444774784,
          -0.65031853770896507, -0.32555031186804491, 0.25479851061131551)
_PSI_Q = (-0.55789841321675513e-6, 0.0021284987017821144, 0.054151797245674225,
          0.43593529692665969, 1.4606242909763515, 2.0767117023730469, 1.0)
_ROOT1 = 1569415565.0 / 1073741824.0               # psi's positive root, in three parts
_ROOT2 = (381566830.0 / 1073741824.0) / 1073741824.0
_ROOT3 = 0.9016312093258695918615325266959189453125e-19
_PSI_Y = 0.99558162689208984
# Euler-Maclaurin coefficients of Cephes' zeta: (2k)! / B_2k
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
MACHEP = 1.11022302462515654042e-16
NEG_ROOT, NEG_ROOT_VALUE = -0.504083008264455409, 7.2897639029768949e-17
SQRT1_2 = 0.7071067811865476              # 1/sqrt(2) rounded, and what rounding left off
SQRT1_2_LO = -4.833646656726457e-17
_S_HI = 134217729.0 * SQRT1_2 - (134217729.0 * SQRT1_2 - SQRT1_2)   # its Veltkamp split
_S_LO = SQRT1_2 - _S_HI


@_jit
def _polevl(x, coefs):
    p = 0.0
    for c in coefs:
        p = p * x + c
    return p


@_jit
def _frac(x):
    """x's fractional part with x's sign (C's modf; numba's math.trunc is an int)."""
    return 0.0 if abs(x) >= 4503599627370496.0 else x - float(int(x))


@_jit
def zeta(s, q):
    """Hurwitz's zeta(s, q) = sum over k >= 0 of (q + k)^-s, for s > 1 (Cephes)."""
    if s == 1.0:
        return math.inf
    if q <= 0.0:
        if _frac(q) == 0.0:
            return math.inf
        if _frac(s) != 0.0:
            return math.nan
    if q > 1e8:                                    # asymptotic: DLMF 25.11.43
        return (1.0 / (s - 1.0) + 0.5 / q) * q ** (1.0 - s)
    total = q ** -s
    a, b, i = q, 0.0, 0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1.0
        b = a ** -s
        total += b
        if abs(b / total) < MACHEP:
            return total
    w = a
    total += b * w / (s - 1.0)
    total -= 0.5 * b
    a, k = 1.0, 0.0
    for j in range(12):
        a *= s + k
        b /= w
        t = a * b / _ZETA_A[j]
        total += t
        if abs(t / total) < MACHEP:
            return total
        k += 1.0
        a *= s + k
        b /= w
        k += 1.0
    return total


@_jit
def _psi_cephes(x):
    y = 0.0
    if x != x or x == math.inf:
        return x
    if x == -math.inf:
        return math.nan
    if x == 0.0:
        return -math.copysign(math.inf, x)
    if x < 0.0:
        r = _frac(x)
        if r == 0.0:
            return math.nan
        y = -math.pi / math.tan(math.pi * r)
        x = 1.0 - x
    if x <= 10.0 and _frac(x) == 0.0:
        for i in range(1, int(x)):
            y += 1.0 / i
        return y - EULER
    if x < 1.0:
        y -= 1.0 / x
        x += 1.0
    elif x < 10.0:
        while x > 2.0:
            x -= 1.0
            y += 1.0 / x
    if 1.0 <= x <= 2.0:
        g = x - _ROOT1 - _ROOT2 - _ROOT3
        r = _polevl(x - 1.0, _PSI_P) / _polevl(x - 1.0, _PSI_Q)
        return y + g * _PSI_Y + g * r
    asy = 0.0
    if x < 1.0e17:
        z = 1.0 / (x * x)
        asy = z * _polevl(z, _PSI_ASY)
    return y + math.log(x) - 0.5 / x - asy


@_jit
def digamma(x):
    """psi(x) = d log Gamma(x) / dx (scipy's: Cephes' psi, a series about its negative root)."""
    if abs(x - NEG_ROOT) < 0.3:
        res, coeff, z = NEG_ROOT_VALUE, -1.0, x - NEG_ROOT
        for n in range(1, 100):
            coeff *= -z
            term = coeff * zeta(n + 1.0, NEG_ROOT)
            res += term
            if abs(term) < 2.220446049250313e-16 * abs(res):
                break
        return res
    return _psi_cephes(x)


@_jit
def polygamma(n, x):
    """The n-th derivative of digamma: (-1)^(n+1) n! zeta(n+1, x) for n >= 1."""
    if n == 0:
        return digamma(x)
    sign = 1.0 if n % 2 == 1 else -1.0
    return sign * math.gamma(n + 1.0) * zeta(n + 1.0, x)


@_jit
def _erfinv_guess(y):
    """Giles' single-precision erfinv ("Approximating the erfinv function", GPU Gems 2010)."""
    w = -math.log((1.0 - y) * (1.0 + y))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                  -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    return p * y


@_jit
def erfinv(y):
    """The x with erf(x) = y, for -1 <= y <= 1."""
    if not -1.0 < y < 1.0:
        return math.copysign(math.inf, y) if abs(y) == 1.0 else math.nan
    a = abs(y)
    if a <= 0.5:                      # Newton on erf(x) = y, quadratic from ~1e-7
        x = _erfinv_guess(y)
        for _ in range(2):
            x -= (math.erf(x) - y) / (1.1283791670955126 * math.exp(-x * x))
        return x
    t = 1.0 - a                       # exact; Newton on log erfc(x) = log t
    x = _erfinv_guess(a) if t > 1e-7 else math.sqrt(-math.log(t))
    for _ in range(4 if t > 1e-7 else 6):
        c = math.erfc(x)
        x += math.log(c / t) * c / (1.1283791670955126 * math.exp(-x * x))
    return math.copysign(x, y)


@_jit
def ndtr(x):
    """The standard normal distribution function: erf/erfc of x/sqrt(2) as Cephes, that
    argument's rounding error corrected to first order (in the tails it costs Cephes 2 t^2
    ulp)."""
    if not abs(x) < 40.0:                          # (NaN, 0 or 1 to double precision)
        return x if x != x else (1.0 if x > 0.0 else 0.0)
    t, dt = _over_sqrt2(x)
    if abs(t) < SQRT1_2:
        return 0.5 + 0.5 * (math.erf(t) + 1.1283791670955126 * math.exp(-t * t) * dt)
    z, dz = (t, dt) if t < 0.0 else (-t, -dt)
    y = 0.5 * (math.erfc(-z) + 1.1283791670955126 * math.exp(-z * z) * dz)
    return 1.0 - y if t > 0.0 else y


@_jit
def _over_sqrt2(x):
    """(t, dt): x / sqrt(2) = t + dt, t = fl(x SQRT1_2), dt to double precision (Dekker's
    exact product of x and SQRT1_2, by Veltkamp's split; |x| < 1e300)."""
    t = x * SQRT1_2
    c = 134217729.0 * x
    xh = c - (c - x)
    xl = x - xh
    err = ((xh * _S_HI - t) + xh * _S_LO + xl * _S_HI) + xl * _S_LO
    return t, err + x * SQRT1_2_LO


@_jit
def log_ndtr(x):
    """log ndtr(x): log1p(-ndtr(-x)) above 0 (scipy: log ndtr(x) up to 6, which loses the
    tail's digits), below -20 the asymptotic series of log(ndtr(x) sqrt(2 pi) (-x) e^(x^2/2))
    as scipy."""
    if x > 0.0:
        return math.log1p(-ndtr(-x))
    if x > -20.0:
        return math.log(ndtr(x))
    lhs = -0.5 * x * x - math.log(-x) - 0.5 * math.log(2.0 * math.pi)
    last, rhs, numerator, denom, sign, i = 0.0, 1.0, 1.0, 1.0, 1.0, 0
    step = 1.0 / (x * x)
    while abs(last - rhs) > 2.220446049250313e-16:
        i += 1
        last = rhs
        sign = -sign
        denom *= step
        numerator *= 2 * i - 1
        rhs += sign * numerator * denom
    return lhs + math.log(rhs)


@_jit
def _divmod(a, b):
    """numpy's npy_divmod of floats `a`, `b` (b nonzero): (floor of a / b, a mod b)."""
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod:
        if (b < 0) != (mod < 0):
            mod += b
            div -= 1
    else:
        mod = np.copysign(mod - mod, b)
    if div:
        floor = np.floor(div)
        if div - floor > 0.5:
            floor += 1
        return floor, mod
    return np.copysign(div - div, a / b), mod


@_jit
def floor_divide(a, b):
    """numpy's floor_divide of floats."""
    return a / b if not b else _divmod(a, b)[0]


@_jit
def remainder(a, b):
    """numpy's remainder of floats."""
    return np.fmod(a, b) if not b else _divmod(a, b)[1]


@_jit
def int_floor_divide(a, b):
    """numpy's floor_divide of signed integers: 0 for a divisor 0, and -a (wrapping: the most
    negative int over -1 is itself) for -1, where the machine's division traps."""
    if b == 0:
        return a - a
    if b == -1:
        return (a - a) - a
    return np.floor_divide(a, b)


@_jit
def int_remainder(a, b):
    """numpy's remainder of signed integers: 0 for a divisor 0 or -1 (the machine's division
    traps on the most negative int over -1)."""
    if b == 0 or b == -1:
        return a - a
    return np.remainder(a, b)


@_jit
def fmod(a, b):
    """numpy's fmod of integers: the remainder of the division rounded toward 0, of a's sign;
    0 where b is 0 (numpy warns) or -1 (the most negative int over -1 overflows)."""
    if b == 0 or b == -1:
        return a - a
    r = a % b
    if r != 0 and (r < 0) != (a < 0):
        r -= b
    return r
