"""The numpy interpreter's scalar math: an eqn of 0-d values runs the Python operator on numpy
scalars (numpy's scalar math) in place of its ufunc. It must give the ufunc's value and type on
every operand, and scalar programs must agree with numpy and compiled code on every call."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.interpret import _SCALAR_MATH
from tapejit.transforms import first_call

EDGES = {
    "f": [0.0, -0.0, 0.5, -2.25, 3.0, 7.0, -7.0, 1e308, 5e-324, math.inf, -math.inf, math.nan],
    "i": [0, 1, -1, 2, -3, 7, 2**62, -2**63, 2**63 - 1],
    "u": [0, 1, 2, 7, 2**63, 2**64 - 1],
    "b": [True, False],
    "c": [0j, 1 + 2j, -3.5 + 0.5j, complex(math.inf, 0), complex(math.nan, 1)],
}
DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int8, np.uint64, np.uint8,
          np.bool_, np.complex128]
MIXED = [(np.float32, np.float64), (np.int64, np.float64), (np.bool_, np.float64),
         (np.int32, np.int64), (np.float16, np.float32), (np.uint8, np.int8)]


def _values(dtype) -> list:
    kind = np.dtype(dtype).kind
    if kind in "iu":
        info = np.iinfo(dtype)
        return [dtype(v) for v in EDGES[kind] if info.min <= v <= info.max]
    with np.errstate(all="ignore"):
        return [dtype(v) for v in EDGES[kind]]


def _outcome(fn, *args):
    with np.errstate(all="ignore"):
        try:
            out = fn(*args)
        except Exception as err:  # noqa: BLE001  (the error is the outcome compared)
            return type(err)
    return type(out), np.asarray(out).tobytes()     # bit for bit: -0.0, NaN payloads


@pytest.mark.parametrize("ufunc", list(_SCALAR_MATH), ids=lambda u: u.__name__)
def test_scalar_math_is_the_ufunc_on_every_operand(ufunc):
    """The operator on numpy scalars equals the ufunc on 0-d arrays: value bits, type, error."""
    scalar = _SCALAR_MATH[ufunc]
    pairs = [(d, d) for d in DTYPES] + MIXED + [(b, a) for a, b in MIXED]
    for left, right in pairs if ufunc.nin == 2 else [(d, None) for d in DTYPES]:
        for x, y in itertools.product(_values(left), _values(right) if right else [None]):
            args = (x,) if y is None else (x, y)
            assert _outcome(scalar, *args) == _outcome(ufunc, *map(np.asarray, args)), \
                (ufunc.__name__, args)


def taylor_sin(x):
    """Scalar code as HIPS autograd's sinusoid writes it (re-rolled into a scan)."""
    term, total = x, x
    for i in range(14):
        term = -term * x**2 / ((2 * i + 3) * (2 * i + 2))
        total = total + term
    return total + np.abs(x) % 0.75 - (x // 0.5) * (x > 0.1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scalar_programs_agree_with_numpy_interpreted_and_compiled(dtype, monkeypatch, tmp_path):
    """A scalar gradient's first two calls run on the interpreter, the later ones compiled:
    each equals numpy's value and the derivative by finite differences."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "interpret")
    monkeypatch.setattr(first_call, "MAX_INTERPRETED_CALLS", 2)
    config.reload()
    try:
        vg = tj.value_and_grad(taylor_sin)
        for k, x in enumerate([0.3, -1.7, 2.9, 0.3]):
            value, slope = vg(dtype(x))
            info = vg.cache_info()
            assert (info["interpreted"], info["compiles"]) == (min(k + 1, 2), k >= 2)
            with np.errstate(all="ignore"):
                expected = taylor_sin(np.asarray(x, dtype))
            assert value.dtype == dtype and slope.dtype == dtype
            np.testing.assert_allclose(value, expected, rtol=2e-6 if dtype == np.float32
                                       else 1e-14)
            h = 1e-6
            fd = (taylor_sin(np.float64(x) + h) - taylor_sin(np.float64(x) - h)) / (2 * h)
            np.testing.assert_allclose(slope, fd, rtol=1e-3 if dtype == np.float32 else 1e-7)
    finally:
        monkeypatch.undo()
        config.reload()
