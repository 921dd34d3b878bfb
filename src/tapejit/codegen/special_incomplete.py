"""Scalar regularized incomplete gamma and beta functions for compiled code, on float64:
gammainc P(a, x), gammaincc Q(a, x) = 1 - P(a, x), betainc I_x(a, b) and Student's t
distribution function stdtr(df, t), with scipy's values at the edges. ops/special_incomplete.py's
templates call them as `tj_incomplete.gammainc(...)`; CUDA kernels through cuda_math's `tjm`.

The split Numerical Recipes and Cephes describe: the smaller of P and Q is computed directly,
the other as its complement. P by its power series (x < a + 1), Q by Legendre's continued
fraction (modified Lentz), and for x <= 1.1 and small a, Q by the series of 1 - P whose
leading term is -expm1(a log x - lgamma(1 + a)) (the small-a case scipy also treats apart).
I_x(a, b): by its power series where b x <= 1 and x <= 0.95 (Cephes' pseries); for a >= 15,
b <= 5 and x >= 1/2, where the continued fraction's terms cancel (1e-9 lost at a = 5e7), by
Temme's expansion in incomplete gamma functions (DiDonato and Morris' BGRAT); else by NR's
continued fraction (betacf) for x < (a + 1) / (a + b + 2), and 1 - I_{1-x}(b, a) above. The
prefactors x^a e^-x / Gamma(a) and x^a (1-x)^b / B(a, b) are written for a, b >= 10 with
Stirling's series, as a log1p(d) - a d terms, and log x as log1p(-y) near 1 (no cancellation
of thousands-sized logarithms). Accuracy against scipy and mpmath: tests/test_special_incomplete.py
(1e-13 relative on wide grids, 1e-11 for betainc with b < 0.01, x > 0.95 and a < 15).
"""
from __future__ import annotations

import math

import numba

from .special import ndtr

_jit = numba.njit(cache=True, error_model="numpy")

EPS = 2.220446049250313e-16
TINY = 1e-300
MAX_ITER = 5000
LOG_2PI = math.log(2 * math.pi)
# lgamma(1 + a) = -EULER a + sum over k >= 2 of (-1)^k zeta(k) / k a^k: zeta(k) / k, k = 2...
_ZETA_OVER_K = tuple(z / k for k, z in enumerate((
    1.6449340668482264, 1.2020569031595942, 1.0823232337111381, 1.0369277551433699,
    1.0173430619844491, 1.0083492773819228, 1.0040773561979443, 1.0020083928260822,
    1.0009945751278181, 1.0004941886041195, 1.0002460865533080, 1.0001227133475785,
    1.0000612481350587, 1.0000305882363070, 1.0000152822594087, 1.0000076371976379,
    1.0000038172932650, 1.0000019082127166, 1.0000009539620339, 1.0000004769329868,
    1.0000002384505027, 1.0000001192199260, 1.0000000596081891, 1.0000000298035035,
    1.0000000149015548, 1.0000000074507118, 1.0000000037253340, 1.0000000018626597), 2))
EULER = 0.5772156649015329


def _temme_coefficients(count: int) -> tuple:
    """The coefficients p_n of Temme's expansion (_beta_large_a) as polynomials in b, highest
    power first, padded to `count` terms: p_0 = 1, p_n = (b - 1) / (2n+1)! + sum over
    0 < m < n of (m b - n) p_(n-m) / (n (2m+1)!) (no arrays in compiled kernels)."""
    polys = [[1.0]]                                  # lowest power first while building
    for n in range(1, count):
        poly = [0.0] * (n + 1)
        for m in range(1, n):
            scale = 1.0 / (n * math.factorial(2 * m + 1))
            for k, c in enumerate(polys[n - m]):
                poly[k] -= n * c * scale
                poly[k + 1] += m * c * scale
        poly[0] -= 1.0 / math.factorial(2 * n + 1)
        poly[1] += 1.0 / math.factorial(2 * n + 1)
        polys.append(poly)
    return tuple(tuple(reversed(p + [0.0] * (count - len(p)))) for p in polys)


_TEMME = _temme_coefficients(30)
# Stirling's series in 1/a^2, highest power first: B_2k / (2k (2k - 1))
_STIRLING = (-3617.0 / 122400.0, 1.0 / 156.0, -691.0 / 360360.0, 1.0 / 1188.0, -1.0 / 1680.0,
             1.0 / 1260.0, -1.0 / 360.0, 1.0 / 12.0)


@_jit
def _iterations(size):
    """The bound on a series' or continued fraction's terms for parameters of `size`: they
    converge after about 9 sqrt(size) terms where the argument is near the parameter."""
    return MAX_ITER + int(10.0 * math.sqrt(min(size, 1e15)))


@_jit
def _lgamma1p(a):
    """lgamma(1 + a), accurate also for small |a| (1 + a would round a's digits away)."""
    if abs(a) >= 0.2:
        return math.lgamma(1.0 + a)
    total, power, sign = -EULER * a, a, 1.0
    for c in _ZETA_OVER_K:
        power *= a
        total += sign * c * power
        sign = -sign
    return total


@_jit
def _log1pmx(ratio, d):
    """log(ratio) - d, d = ratio - 1 (computed by the caller from the exact operands), without
    the cancellation of its two terms for small |d|."""
    if abs(d) > 0.5:
        return math.log(ratio) - d
    s = d / (2.0 + d)          # log1p(d) = 2 atanh(s), and d - 2 s = s d
    s2, power, total = s * s, s, 0.0
    for k in range(3, 80, 2):
        power *= s2
        term = power / k
        total += term
        if abs(term) <= EPS * abs(total):
            break
    return 2.0 * total - s * d


@_jit
def _stirling(a):
    """log Gamma(a) - ((a - 1/2) log a - a + log(2 pi) / 2), for a >= 10: Stirling's series."""
    z = 1.0 / (a * a)
    series = 0.0
    for c in _STIRLING:
        series = series * z + c
    return series / a


@_jit
def _gamma_factor(a, x):
    """x^a e^-x / Gamma(a)."""
    if a < 10.0:
        return math.exp(a * math.log(x) - x - math.lgamma(a))
    log_power = a * _log1pmx(x / a, (x - a) / a)
    return math.exp(log_power + 0.5 * (math.log(a) - LOG_2PI) - _stirling(a))


@_jit
def _p_series(a, x):
    """P(a, x) by its power series: x^a e^-x / Gamma(a + 1) sum x^n / ((a + 1)...(a + n))."""
    term, total, r = 1.0, 1.0, a
    for _ in range(_iterations(a)):
        r += 1.0
        term *= x / r
        total += term
        if term <= EPS * total:
            break
    return _gamma_factor(a, x) / a * total


@_jit
def _q_fraction(a, x):
    """Q(a, x) by Legendre's continued fraction (modified Lentz), for x > a + 1 - ish."""
    b = x + 1.0 - a
    c, d = 1.0 / TINY, 1.0 / b
    h = d
    for i in range(1, _iterations(a)):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = TINY if abs(d) < TINY else d
        c = b + an / c
        c = TINY if abs(c) < TINY else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) <= EPS:
            break
    return _gamma_factor(a, x) * h


@_jit
def _q_small_a(a, x):
    """Q(a, x) for x <= 1.1 and small a: 1 - x^a / Gamma(a + 1) - x^a / Gamma(a)
    sum over n >= 1 of (-x)^n / (n! (a + n))."""
    lead = -math.expm1(a * math.log(x) - _lgamma1p(a))
    term, total = 1.0, 0.0
    for n in range(1, MAX_ITER):
        term *= -x / n
        part = term / (a + n)
        total += part
        if abs(part) <= EPS * abs(total):
            break
    return lead - math.exp(a * math.log(x) - math.lgamma(a)) * total


@_jit
def _q_directly(a, x):
    """Whether Q(a, x) is the smaller one, computed directly (else P is)."""
    if x > 1.1:
        return x >= a + 1.0
    if x <= 0.5:
        return a < -0.4 / math.log(x)
    return a < 1.1 * x


@_jit
def _gamma_edge(a, x, upper):
    """P (Q where `upper`) where a or x is NaN, a <= 0, x <= 0 or infinite (scipy's), else
    -1."""
    if a != a or x != x or a < 0.0 or x < 0.0 or (a == math.inf and x == math.inf):
        return math.nan
    if a == 0.0:
        return math.nan if x == 0.0 else (0.0 if upper else 1.0)
    if x == 0.0 or a == math.inf:
        return 1.0 if upper else 0.0
    if x == math.inf:
        return 0.0 if upper else 1.0
    return -1.0


@_jit
def _incomplete_gamma(a, x, upper):
    edge = _gamma_edge(a, x, upper)
    if edge != -1.0:
        return edge
    if not _q_directly(a, x):
        p = _p_series(a, x)
        return 1.0 - p if upper else p
    q = _q_fraction(a, x) if x > 1.1 else _q_small_a(a, x)
    return q if upper else 1.0 - q


@_jit
def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    return _incomplete_gamma(a, x, False)


@_jit
def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    return _incomplete_gamma(a, x, True)


@_jit
def _minus_log_beta(a, b):
    """-log B(a, b) = lgamma(a + b) - lgamma(a) - lgamma(b), for min(a, b) < 10: where the
    other is >= 10, lgamma(a + b) - lgamma(a) by Stirling's series (no cancellation)."""
    big, small = max(a, b), min(a, b)
    if big < 10.0:
        return math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    c = big + small
    return ((big - 0.5) * math.log1p(small / big) + small * math.log(c) - small
            + _stirling(c) - _stirling(big) - math.lgamma(small))


@_jit
def _beta_factor(a, b, x, y):
    """x^a y^b / B(a, b), y = 1 - x."""
    if a < 10.0 or b < 10.0:
        log_x = math.log(x) if x < 0.5 else math.log1p(-y)     # (y to its own precision)
        log_y = math.log(y) if y < 0.5 else math.log1p(-x)
        return math.exp(a * log_x + b * log_y + _minus_log_beta(a, b))
    c = a + b
    dx, dy = (c * x - a) / a, (c * y - b) / b        # x = (a / c)(1 + dx), y = (b / c)(1 + dy)
    log_sum = a * _log1pmx(c * x / a, dx) + b * _log1pmx(c * y / b, dy)   # (a dx + b dy = 0)
    return math.exp(log_sum + 0.5 * (math.log(a * b / c) - LOG_2PI)
                    - _stirling(a) - _stirling(b) + _stirling(c))


@_jit
def _beta_fraction(a, b, x):
    """The continued fraction of I_x(a, b) a B(a, b) / (x^a (1-x)^b) (NR's betacf, modified
    Lentz), fast for x < (a + 1) / (a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (TINY if abs(d) < TINY else d)
    h = d
    for m in range(1, _iterations(a + b)):
        m2 = 2.0 * m
        for an in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                   -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + an * d
            d = 1.0 / (TINY if abs(d) < TINY else d)
            c = 1.0 + an / c
            c = TINY if abs(c) < TINY else c
            h *= d * c
        if abs(d * c - 1.0) <= EPS:
            break
    return h


@_jit
def _beta_edge(a, b, x):
    """I_x(a, b) where an argument is NaN, a or b is 0 or infinite, or x is outside (0, 1)
    (scipy's), else -1."""
    if a != a or b != b or x != x or a < 0.0 or b < 0.0 or x < 0.0 or x > 1.0:
        return math.nan
    if (a == 0.0 and b == 0.0) or (a == math.inf and b == math.inf):
        return math.nan
    if x == 0.0 or x == 1.0:
        return x
    if a == 0.0 or b == math.inf:
        return 1.0
    if b == 0.0 or a == math.inf:
        return 0.0
    return -1.0


@_jit
def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    edge = _beta_edge(a, b, x)
    if edge != -1.0:
        return edge
    return _betainc_xy(a, b, x, 1.0 - x)


@_jit
def _betainc_xy(a, b, x, y):
    """I_x(a, b) for 0 <= x <= 1, y = 1 - x given to its own relative precision."""
    if x == 0.0 or y == 0.0:
        return 1.0 if y == 0.0 else 0.0
    if b * x <= 1.0 and x <= 0.95:
        return _beta_series(a, b, x, y)
    if a >= 15.0 and b <= 5.0 and x >= 0.5:
        return _beta_large_a(a, b, x, y)
    if x < (a + 1.0) / (a + b + 2.0):
        return _beta_direct(a, b, x, y)
    return 1.0 - _beta_direct(b, a, y, x)


@_jit
def _beta_direct(a, b, x, y):
    """I_x(a, b) where it is the smaller tail: the continued fraction, or for a >= 15, b <= 5
    and x >= 1/2 (where the fraction's terms cancel: 1e-9 lost at a = 5e7) Temme's
    expansion (also taken first, for the same a, b, x, in _betainc_xy)."""
    if a >= 15.0 and b <= 5.0 and x >= 0.5:
        return _beta_large_a(a, b, x, y)
    return _beta_factor(a, b, x, y) * _beta_fraction(a, b, x) / a


@_jit
def _beta_series(a, b, x, y):
    """I_x(a, b) by its power series, for b x <= 1 and x <= 0.95 (Cephes' pseries):
    x^a / B(a, b) (1/a + sum over j >= 1 of (1-b)(2-b)...(j-b) / j! x^j / (a + j))."""
    term, total = 1.0, 1.0 / a
    for j in range(1, 20 * MAX_ITER):
        term *= (j - b) * x / j
        part = term / (a + j)
        total += part
        if abs(part) <= 0.1 * EPS * abs(total):
            break
    log_x = math.log(x) if x < 0.5 else math.log1p(-y)
    if a < 10.0 or b < 10.0:
        return total * math.exp(a * log_x + _minus_log_beta(a, b))
    return total * _beta_factor(a, b, x, y) / math.exp(b * math.log1p(-x))


@_jit
def _beta_large_a(a, b, x, y):
    """I_x(a, b) for large a and small b (DiDonato and Morris' BGRAT, after Temme): with
    t = a + (b - 1)/2 and u = -t log x, Gamma(a + b) / (Gamma(a) t^b) times Q(b, u) plus
    u^b e^-u / Gamma(b) sum over n of p_n J_n, J_n by its recurrence in (log x / 2)^2."""
    t = a + 0.5 * (b - 1.0)
    log_x = math.log1p(-y) if y < 0.35 else math.log(x)
    u = -t * log_x
    h = _gamma_factor(b, u)
    if h == 0.0:                   # (u^b e^-u underflows: u is far from b)
        return 0.0 if u > b else 1.0
    prefix = h * math.exp(_minus_log_beta(a, b) + math.lgamma(b) - b * math.log(t))
    j = gammaincc(b, u) / h
    total = prefix * j
    half_log2, power, t4, b2n = (0.5 * log_x) ** 2, 1.0, 4.0 * t * t, b
    for n in range(1, len(_TEMME)):
        pn = 0.0
        for c in _TEMME[n]:
            pn = pn * b + c
        j = (b2n * (b2n + 1.0) * j + (u + b2n + 1.0) * power) / t4
        power *= half_log2
        b2n += 2.0
        term = prefix * pn * j
        total += term
        if abs(term) <= EPS * 0.05 * abs(total):
            break
    return total


@_jit
def stdtr(df, t):
    """Student's t distribution function (scipy.special.stdtr): the tail P(T > |t|) is
    I_q(df/2, 1/2) / 2, q = df / (df + t^2), 1 - q = t^2 / (df + t^2) each to full precision."""
    if df != df or t != t or df <= 0.0:
        return math.nan
    if df == math.inf:
        return ndtr(t)
    t2 = t * t
    if t2 == math.inf:
        return 1.0 if t > 0.0 else 0.0
    tail = 0.5 * _betainc_xy(0.5 * df, 0.5, df / (df + t2), t2 / (df + t2))
    return 1.0 - tail if t > 0.0 else tail
