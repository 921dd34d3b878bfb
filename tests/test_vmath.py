"""Accuracy of the vectorisable math kernels (codegen/vmath.py), in ulp, over each function's
domain: random points across the whole range, subnormals, huge arguments, the edges of
overflow and underflow, and the special values, whose results must be numpy's exactly.

The reference is the long-double function (64-bit mantissa) for float64 where numpy has one,
numpy's float64 function for float32. float32 runs the float32 kernels (`exp_f32`, ...) on
float32 arrays, as generated code calls them. bench/vmath_ulp.py prints the table
(`ulp_table()`).
"""
import math

import numba
import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.codegen import vmath

# the most ulp each kernel may be off (measured: docs/performance.md). The float32 kernels
# compute in float64 to about 2^-42 and round once: half an ulp and a hair (measured over all
# 2^32 float32 for the one-argument functions, 0.50000 to 5 places)
F64_MAX_ULP = {"exp": 1.0, "expm1": 1.2, "log": 1.0, "log1p": 1.0, "sin": 1.0, "cos": 1.0,
               "tanh": 1.5, "pow": 1.25}
F32_MAX_ULP = {"exp": 0.5001, "expm1": 0.5001, "log": 0.5001, "log1p": 0.5001, "sin": 0.5001,
               "cos": 0.5001, "tanh": 0.5001, "pow": 0.5001}
NAMES = tuple(F64_MAX_ULP)   # pow's second operand: see _pow_exponents
TINY, HUGE = 2.2250738585072014e-308, 1.7976931348623157e308
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, TINY, -TINY,
                    HUGE, -HUGE, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-300, -1e-300])
EDGES = {  # overflow, underflow, poles and the last points before them
    "exp": [709.782712893384, 709.7827128933841, -708.39641853226408, -745.13321910194110,
            -745.1332191019412, -1e4, 1e4],
    "expm1": [709.782712893384, 709.7827128933841, -37.5, -40.0, 1e-17, -1e-17],
    "log": [np.nextafter(1.0, 0), np.nextafter(1.0, 2), 4.9e-324, 1e-310],
    "log1p": [-1.0, np.nextafter(-1.0, 0), -1.5, -1e-17, 1e-17, HUGE],
    "sin": [1647099.3291652855, 1647099.3291652857, math.ldexp(6381956970095103, 797),
            1e22, np.pi, np.pi / 2, 2 ** 1023],
    "cos": [1647099.3291652855, 1647099.3291652857, math.ldexp(6381956970095103, 797),
            1e22, np.pi, np.pi / 2, 2 ** 1023],
    "tanh": [0.55, np.nextafter(0.55, 0), 19.0, 20.0, 21.0, 1e-8],
    "pow": [],
}
F32_SPECIAL = [1e-45, -1e-45, 1.1754944e-38, -1.1754944e-38, 3.4028235e38, -3.4028235e38]
F32_EDGES = {  # float32 overflow, underflow and rounding to +-1; sin/cos: the edges of the
    # reductions (2^25, 2^76) and, from a scan of all float32s, some of those closest to a
    # multiple of pi/2 (|x 2/pi - n| from 1.03e-9, at 7.729179e28)
    "exp": [88.72283, 88.72284, -87.33654, -87.33655, -103.27893, -103.972, -103.97209],
    "expm1": [88.72283, 88.72284, -17.32868, -17.328682, 1e-8, -1e-8],
    "log": [np.nextafter(np.float32(1), np.float32(0)), np.nextafter(np.float32(1), np.float32(2))],
    "log1p": [-0.99999994, -0.29289323, -0.2928932, 0.41421354, 0.41421357, 1e-8, -1e-8],
    "sin": [7.729179e28, 2.1999385e10, 252.89821, 4.6381834e25, 1.522789e12, 8.117627e22,
            4.386558e33, 4.2781604e7, 33554430.0, 33554432.0, 7.555786e22, 7.5557864e22,
            7.555787e22],
    "tanh": [9.0, 9.010913, 9.011, 10.0, 1e-8],
    "pow": [],
}
F32_EDGES["cos"] = F32_EDGES["sin"]


def _logspace(rng, lo, hi, n):
    """n points spread over the binades 10^lo .. 10^hi, both signs."""
    mag = 10.0 ** rng.uniform(lo, hi, n)
    return np.concatenate([mag, -mag])


def _domain(name: str, seed: int, dtype) -> np.ndarray:
    """The sample points of `name` in `dtype` (float32: out-of-range points become inf)."""
    rng, n = np.random.default_rng(seed), 20_000
    parts = {
        "exp": [rng.uniform(-746, 710, n), _logspace(rng, -323, 0, n)],
        "expm1": [rng.uniform(-50, 710, n), rng.uniform(-1, 1, n), _logspace(rng, -323, 0, n)],
        "log": [np.abs(_logspace(rng, -323.5, 308, n)), rng.uniform(0.5, 2, n),
                1 + _logspace(rng, -16, -1, n // 2)],
        "log1p": [rng.uniform(-1, 3, n), _logspace(rng, -323, 308, n),
                  -1 + 10.0 ** rng.uniform(-16, -1, n // 2)],
        "sin": [rng.uniform(-10, 10, n), rng.uniform(-2e6, 2e6, n), _logspace(rng, -323, 308, n),
                np.pi / 2 * rng.integers(-10**6, 10**6, n)],
        "tanh": [rng.uniform(-25, 25, n), rng.uniform(-1, 1, n), _logspace(rng, -323, 3, n)],
        "pow": [np.abs(_logspace(rng, -323, 308, n)), rng.uniform(0, 4, n),
                1 + rng.uniform(-1e-6, 1e-6, n), -rng.uniform(0, 10, n),
                rng.uniform(0.3, 0.7, n)],
    }
    if dtype == np.float32:
        # sin, cos: every binade to 2^128, and near multiples of pi/2 up to 2^25 (Cody-Waite's
        # range); exp: float32's range
        k = rng.integers(1, 2**24, n)
        near = np.pi / 2 * k * (1 + rng.uniform(-1e-7, 1e-7, n))
        parts["sin"] += [_logspace(rng, -45, 38.5, n), near]
        parts["exp"].append(rng.uniform(-110, 95, n))
    parts["cos"] = parts["sin"]
    edges = EDGES[name] + (F32_EDGES[name] + F32_SPECIAL if dtype == np.float32 else [])
    x = np.concatenate(parts[name] + [SPECIAL, np.array(edges, dtype=np.float64)])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _pow_exponents(x: np.ndarray, seed: int, dtype) -> np.ndarray:
    """An exponent for each point of pow's domain: y log|x| across the whole range of exp
    (overflow and subnormal results included), huge y near x = 1, integers for x < 0, and
    every pair of special values."""
    rng, parts, start = np.random.default_rng(seed), [], 0
    top, sub = (720, (700, 750)) if dtype == np.float64 else (95, (85, 105))
    with np.errstate(all="ignore"):
        for size, make in ((40_000, lambda a: rng.uniform(-1, 1, a.size) * top / np.abs(np.log(a))),
                           (20_000, lambda a: rng.uniform(-30, 30, a.size)),
                           (20_000, lambda a: rng.uniform(-1e8, 1e8, a.size)),
                           (20_000, lambda a: rng.integers(-50, 50, a.size).astype(float)),
                           (20_000, lambda a: -rng.uniform(*sub, a.size) / np.log(a))):
            parts.append(make(np.abs(x[start:start + size])))
            start += size
    rest = x.size - start
    parts.append(rng.choice(SPECIAL, rest))
    y = np.concatenate(parts)
    return np.where(np.isfinite(y), y, rng.choice(SPECIAL, y.size))


def _pow_domain(seed: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    x = _domain("pow", seed, np.float64)[:-SPECIAL.size]
    y = _pow_exponents(x, seed, dtype)
    grid = np.array([(a, b) for a in SPECIAL for b in SPECIAL]).T
    x, y = np.concatenate([x, grid[0]]), np.concatenate([y, grid[1]])
    with np.errstate(over="ignore"):
        return x.astype(dtype), y.astype(dtype)


SUFFIX = {np.dtype(np.float64): "", np.dtype(np.float32): "_f32"}  # as scalar.py names them


# Each kernel has a vectorised and a scalar path (a vectorised branch runs both sides, a
# scalar one runs one side): the vector loops vectorise, the scalar loop (it may exit early) not.
def _vector_loop(name: str, dtype):
    fn = getattr(vmath, name + SUFFIX[np.dtype(dtype)])

    def loop(x, y, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i], y[i]) if name == "pow" else fn(x[i])
    return numba.njit(error_model="numpy")(loop)


def _scalar_loop(dtype):
    exp, expm1, log, log1p, sin, cos, tanh, pow_ = (
        getattr(vmath, name + SUFFIX[np.dtype(dtype)]) for name in NAMES)

    @numba.njit(error_model="numpy", forceinline=True)
    def one(which, v, w):
        """vmath function number `which` (NAMES) of v (pow: of v, w)."""
        if which == 0:
            return exp(v)
        if which == 1:
            return expm1(v)
        if which == 2:
            return log(v)
        if which == 3:
            return log1p(v)
        if which == 4:
            return sin(v)
        if which == 5:
            return cos(v)
        if which == 6:
            return tanh(v)
        return pow_(v, w)

    def loop(which, x, y, out, stop):
        for i in range(x.shape[0]):
            out[i] = one(which, x[i], y[i])
            if i == stop:
                break
    return numba.njit(error_model="numpy")(loop)


VECTOR_LOOPS = {(name, np.dtype(dt)): _vector_loop(name, dt)
                for name in NAMES for dt in (np.float64, np.float32)}
SCALAR_LOOPS = {np.dtype(dt): _scalar_loop(dt) for dt in (np.float64, np.float32)}


def kernel(name: str, x: np.ndarray, y: np.ndarray | None = None, scalar: bool = False):
    """vmath's `name` for x's dtype over x (and y) as a generated loop calls it, in a
    vectorised loop or (scalar=True) a scalar one."""
    out = np.empty_like(x)
    y = x if y is None else y
    if scalar:
        SCALAR_LOOPS[x.dtype](NAMES.index(name), x, y, out, -1)
    else:
        VECTOR_LOOPS[name, x.dtype](x, y, out)
    return out


def _numpy(name: str, *args: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return getattr(np, "power" if name == "pow" else name)(*args)


def ulp_errors(name: str, args: tuple, got: np.ndarray) -> np.ndarray:
    """|got - exact| in ulp of the exact value rounded to the dtype of `args` (the arguments;
    finite results only)."""
    x = args[0]
    wide = np.longdouble if x.dtype == np.float64 else np.float64
    ref = _numpy(name, *(a.astype(wide) for a in args))
    with np.errstate(over="ignore"):   # spacing of the largest double overflows: fine
        ref_t = ref.astype(x.dtype)
        ok = np.isfinite(ref_t) & np.isfinite(got)
        ulp = np.spacing(np.abs(ref_t[ok])).astype(ref.dtype)
    return np.abs((got[ok].astype(ref.dtype) - ref[ok]) / ulp)


def _special_mismatches(name: str, args: tuple, got: np.ndarray) -> np.ndarray:
    """Points where numpy's result or an argument is inf, NaN or zero (or pow's base is +-1)
    and `got` is not bit-for-bit numpy's value (NaN matching NaN)."""
    want = _numpy(name, *args)
    special = ~np.isfinite(want) | (want == 0)
    for a in args:
        special |= ~np.isfinite(a) | (a == 0)
    if name == "pow":
        special |= np.abs(args[0]) == 1
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got)
                                                                      & np.isnan(want))
    return np.stack(args)[:, special & ~same].T


def _sample(name: str, seed: int, dtype) -> tuple:
    return _pow_domain(seed, dtype) if name == "pow" else (_domain(name, seed, dtype),)


def ulp_table() -> list[tuple[str, str, float, float, int]]:
    """(function, dtype, max ulp of vmath, max ulp of numpy, points) over each domain."""
    rows = []
    for dtype in (np.float64, np.float32):
        for name in NAMES:
            args = _sample(name, 0, dtype)
            with np.errstate(all="ignore"):
                mine = ulp_errors(name, args, kernel(name, *args)).max()
                theirs = ulp_errors(name, args, _numpy(name, *args)).max()
            rows.append((name, np.dtype(dtype).name, float(mine), float(theirs), args[0].size))
    return rows


LONG_DOUBLE = np.finfo(np.longdouble).nmant >= 63


@pytest.mark.parametrize("scalar", [False, True], ids=["vector", "scalar"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", NAMES)
def test_ulp_error_and_special_values(name, dtype, scalar):
    args = _sample(name, 1, dtype)
    got = kernel(name, *args, scalar=scalar)
    bad = _special_mismatches(name, args, got)
    assert bad.size == 0, bad[:10]
    if dtype == np.float64 and not LONG_DOUBLE:
        pytest.skip("no long double to measure float64 ulp against")
    bound = (F64_MAX_ULP if dtype == np.float64 else F32_MAX_ULP)[name]
    worst = ulp_errors(name, args, got).max()
    assert worst <= bound, f"{name} {np.dtype(dtype).name}: {worst:.3f} ulp > {bound}"


def test_generated_code_uses_vmath_unless_fast_math_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))

    def f(x):
        return np.sum(np.exp(x) + np.log1p(x) + np.tanh(x))

    x = np.linspace(0.1, 2, 8)
    for flag, want, unwanted in (("1", "tj_vmath.exp(", " math.exp("),
                                 ("0", " math.exp(", "tj_vmath.")):
        monkeypatch.setenv("TAPEJIT_FAST_MATH", flag)
        config.reload()
        source = tj.explain(tj.grad(f, backend="numba"))(x).source
        assert want in source and unwanted not in source
    config.reload()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_program_matches_interpreter_on_special_values(monkeypatch, tmp_path, dtype):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TAPEJIT_FAST_MATH", raising=False)
    config.reload()

    def f(x):
        return (np.exp(x), np.expm1(x), np.log(x), np.log1p(x), np.sin(x), np.cos(x),
                np.tanh(x), x ** x[::-1])

    with np.errstate(all="ignore"):
        x = np.concatenate([SPECIAL, [-2.0, 3.0, 1e6, 100.0]]).astype(dtype)
        got = tj.jit(f, backend="numba")(x)
        want = tj.jit(f, backend="interpret")(x)
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == dtype
        np.testing.assert_array_max_ulp(g, w, maxulp=2, dtype=dtype)
        signed = ~np.isnan(w)   # a NaN's sign bit means nothing
        assert np.array_equal(np.signbit(g[signed]), np.signbit(w[signed])), name
