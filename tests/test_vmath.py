"""Accuracy of the vectorisable math kernels (codegen/vmath.py), in ulp, over each function's
domain: random points across the whole range, subnormals, huge arguments, the edges of
overflow and underflow, and the special values, whose results must be numpy's exactly.

The reference is the long-double function (64-bit mantissa) where numpy has one, else numpy's
float64 function. bench/vmath_ulp.py prints the table (`ulp_table()`).
"""
import math

import numba
import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.codegen import vmath

# float64: the most ulp each kernel may be off (measured: docs/performance.md); float32 goes
# through the float64 kernel and rounds once, so it is within half an ulp and a hair
F64_MAX_ULP = {"exp": 1.0, "expm1": 1.2, "log": 1.0, "log1p": 1.0, "sin": 1.0, "cos": 1.0,
               "tanh": 1.5}
F32_MAX_ULP = 0.501
NAMES = tuple(F64_MAX_ULP)
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
}


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
    }
    parts["cos"] = parts["sin"]
    x = np.concatenate(parts[name] + [SPECIAL, np.array(EDGES[name], dtype=np.float64)])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@numba.njit(error_model="numpy")
def _apply64(which, x, out):
    for i in range(x.shape[0]):
        v = x[i]
        if which == 0:
            out[i] = vmath.exp(v)
        elif which == 1:
            out[i] = vmath.expm1(v)
        elif which == 2:
            out[i] = vmath.log(v)
        elif which == 3:
            out[i] = vmath.log1p(v)
        elif which == 4:
            out[i] = vmath.sin(v)
        elif which == 5:
            out[i] = vmath.cos(v)
        else:
            out[i] = vmath.tanh(v)


def kernel(name: str, x: np.ndarray) -> np.ndarray:
    """vmath's `name` over x, as a generated loop calls it (float32: through float64)."""
    out = np.empty(x.shape, np.float64)
    _apply64(NAMES.index(name), x.astype(np.float64), out)
    with np.errstate(over="ignore"):
        return out.astype(x.dtype)


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    wide = np.longdouble if x.dtype == np.float64 else np.float64
    with np.errstate(all="ignore"):
        return getattr(np, name)(x.astype(wide))


def ulp_errors(name: str, x: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|got - exact| in ulp of the exact value rounded to x's dtype (finite results only)."""
    ref = _reference(name, x)
    ok = np.isfinite(ref) & np.isfinite(got)
    ref_t = ref[ok].astype(x.dtype)
    ulp = np.spacing(np.abs(ref_t)).astype(ref.dtype)
    return np.abs((got[ok].astype(ref.dtype) - ref[ok]) / ulp)


def _special_mismatches(name: str, x: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Points where numpy's result or the argument is inf, NaN or zero and `got` is not
    bit-for-bit numpy's value (NaN matching NaN)."""
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
    special = ~np.isfinite(want) | (want == 0) | ~np.isfinite(x) | (x == 0)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got)
                                                                      & np.isnan(want))
    return x[special & ~same]


def ulp_table() -> list[tuple[str, str, float, float, int]]:
    """(function, dtype, max ulp of vmath, max ulp of numpy, points) over each domain."""
    rows = []
    for dtype in (np.float64, np.float32):
        for name in NAMES:
            x = _domain(name, 0, dtype)
            with np.errstate(all="ignore"):
                mine = ulp_errors(name, x, kernel(name, x)).max()
                theirs = ulp_errors(name, x, getattr(np, name)(x)).max()
            rows.append((name, np.dtype(dtype).name, float(mine), float(theirs), x.size))
    return rows


LONG_DOUBLE = np.finfo(np.longdouble).nmant >= 63


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", NAMES)
def test_ulp_error_and_special_values(name, dtype):
    x = _domain(name, 1, dtype)
    got = kernel(name, x)
    assert _special_mismatches(name, x, got).size == 0, _special_mismatches(name, x, got)[:10]
    if dtype == np.float64 and not LONG_DOUBLE:
        pytest.skip("no long double to measure float64 ulp against")
    bound = F64_MAX_ULP[name] if dtype == np.float64 else F32_MAX_ULP
    worst = ulp_errors(name, x, got).max()
    assert worst <= bound, f"{name} {np.dtype(dtype).name}: {worst:.3f} ulp > {bound}"


def test_generated_code_uses_vmath_unless_fast_math_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))

    def f(x):
        return np.sum(np.exp(x) + np.log1p(x) + np.tanh(x))

    x = np.linspace(0.1, 2, 8)
    for flag, want, unwanted in (("1", "tj_vmath.exp(", " math.exp("),
                                 ("0", " math.exp(", "tj_vmath")):
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
                np.tanh(x))

    with np.errstate(all="ignore"):
        x = np.concatenate([SPECIAL, [-2.0, 3.0, 1e6, 100.0]]).astype(dtype)
        got = tj.jit(f, backend="numba")(x)
        want = tj.jit(f, backend="interpret")(x)
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == dtype
        np.testing.assert_array_max_ulp(g, w, maxulp=2, dtype=dtype)
        signed = ~np.isnan(w)   # a NaN's sign bit means nothing
        assert np.array_equal(np.signbit(g[signed]), np.signbit(w[signed])), name
