"""numpy's numerical routines and array creation (numpy_api/numeric.py, creation.py, guards.py's
constructor wrappers), and GradientTape's refusal to lose a gradient (eager.py): what the op
table's rows cannot say. Compiled code against numpy and the interpreter (float64 and float32,
first and later calls, a new size reusing the program); the one-hot idiom in a compiled loss;
np.array of traced values inside grad; interp at, between and outside its knots; convolve's
modes for every pair of lengths; errors that name the function, the shapes and the fix; and
GradientTape: an unsupported call on a value it differentiates raises at the user's line, a
target that does not depend on a source still gives None."""
from __future__ import annotations

import inspect
import types
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit.errors import ConcretizationError, ShapeError, UnsupportedOperationError

from gradcheck import check_vjp

# a program numba cannot compile would run on the interpreter with a warning: here, a failure
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]


def _agree(got, want, rtol):
    got, want = tj.pytree.flatten(got)[0], tj.pytree.flatten(want)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype, (np.asarray(g).dtype, w.dtype)
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True)


# ---- compiled against numpy and the interpreter ------------------------------------------------
def _everything(x, a, v):
    """Each new function on a (n, 4) batch x, a 5-vector a, a 3-vector v (numpy's results)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        cross2 = np.cross(x[:, :2], v[:2])                  # numpy 2 deprecates 2-vectors
    knots = np.cumsum(np.abs(a) + 0.5)
    return {
        "interp": np.interp(x, knots, a), "convolve": np.convolve(a, v),
        "same": np.convolve(v, a, mode="same"), "correlate": np.correlate(a, v),
        "polyval": np.polyval(v, x), "kron": np.kron(x[:2], v), "trapezoid": np.trapezoid(x),
        "trapezoid_x": np.trapezoid(x, knots[:4], axis=1), "cross2": cross2,
        "linspace": np.linspace(a[0], a[1], 7), "grid": np.meshgrid(a, v)[0],
        "array": np.array([[a[0], v[1]], [1.0, a[2] * v[0]]]),
        "full": np.full((2, 3), v[2]), "onehot": np.eye(5)[np.argmax(x, axis=1)],
        "einsum": np.einsum(x, [0, 1], a[:4], [1], [0]),
        "cumulative": np.cumulative_sum(x, axis=0, include_initial=True),
        "rolled": np.rollaxis(np.atleast_3d(x), 2), "split": np.hsplit(x, 2)[1],
    }


def _weighted(x, a, v):
    out = _everything(x, a, v)
    rng = np.random.default_rng(1)
    return sum(np.sum(out[k] * rng.uniform(0.5, 1.5, np.shape(out[k])).astype(x.dtype))
               for k in sorted(out))


def _inputs(batch: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.0, 6.0, (batch, 4)).astype(dtype), rng.standard_normal(5).astype(dtype),
            rng.standard_normal(3).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_match_numpy(dtype):
    """Every function compiled: numpy's values, dtypes and shapes on the first and a later
    call; a new batch size traces again and reuses the compiled program."""
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    compiled = tj.jit(_everything, backend="numba")
    for seed in (0, 1):
        args = _inputs(6, dtype, seed)
        _agree(compiled(*args), _everything(*args), rtol)
    _agree(compiled(*_inputs(3, dtype, 2)), _everything(*_inputs(3, dtype, 2)), rtol)
    info = compiled.cache_info()
    assert info["traces"] == 2 and info["compiles"] == 1, info


def test_gradients_compiled_match_interpreter_and_differences():
    args = _inputs(4, np.float64)
    argnums = (0, 1, 2)
    want = tj.grad(_weighted, argnums=argnums, backend="interpret")(*args)
    compiled = tj.grad(_weighted, argnums=argnums, backend="numba")
    for _ in range(2):
        _agree(compiled(*args), want, 1e-10)
    check_vjp(_weighted, list(args), rtol=1e-5, atol=1e-7)


def test_fmod_compiled_is_numpys_for_integers_and_edge_floats():
    """np.fmod compiled: integers of both signs, a zero divisor and the most negative int over
    -1 (numba's np.fmod of integers gave 1 for -7 fmod 2, 7 for 7 fmod -2), unsigned ints, and
    floats at zero divisors, infinities, signed zeros and huge quotients; first and later
    calls, against numpy."""
    a = np.array([7, -7, 7, -7, 5, -2 ** 63, 0, 9], np.int64)
    b = np.array([2, 2, -2, -2, 0, -1, 3, -3], np.int64)
    x = np.array([7.5, -7.5, 7.5, 1.0, np.inf, 3.0, -0.0, 1e300])
    y = np.array([2.0, 2.0, -2.0, 0.0, 2.0, np.inf, 1.0, 1e-300])
    u, v = np.array([7, 255, 0], np.uint8), np.array([2, 16, 0], np.uint8)
    fmod = tj.jit(np.fmod)
    for args in [(a, b), (x, y), (u, v), (a.astype(np.int32), b.astype(np.int32))]:
        with np.errstate(all="ignore"):
            want = np.fmod(*args)
        for _ in range(2):
            got = fmod(*args)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
            assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.fixture(params=["llvm", "numba"])
def codegen(request, monkeypatch):
    from tapejit import config
    monkeypatch.setenv("TAPEJIT_CODEGEN", request.param)
    config.reload()
    yield request.param
    monkeypatch.undo()
    config.reload()


def test_integer_division_at_its_edges_under_both_code_generators(codegen):
    """//, %, np.fmod and np.divmod of ints at a zero divisor and the most negative int over -1
    (numba's remainder trapped there, killing the process, and its floor_divide gave 0), and
    np.copysign, np.signbit, np.modf at signed zeros, infinities and NaN: numpy's results,
    bit for bit, with the LLVM lowering and with numba's code."""
    def division(a, b):
        return (a // b, a % b, np.fmod(a, b), *np.divmod(a, b))

    def signs(x, y):
        return (np.copysign(x, y), np.signbit(x), *np.modf(x))
    edge = np.array([-2 ** 63, -7, -1, 0, 1, 7, 2 ** 62], np.int64)
    a, b = (m.ravel() for m in np.meshgrid(edge, edge, indexing="ij"))
    v = np.array([0.0, -0.0, 1.5, -3.0, -1e-310, 1e300, np.inf, -np.inf, np.nan, -np.nan])
    x, y = (m.ravel() for m in np.meshgrid(v, v, indexing="ij"))
    for fn, args in [(division, (a, b)), (division, (a.astype(np.int32), b.astype(np.int32))),
                     (signs, (x, y)), (signs, (x.astype(np.float32), y.astype(np.float32)))]:
        with np.errstate(all="ignore"):
            want = fn(*args)
        jitted = tj.jit(fn)
        for _ in range(2):
            for got, expected in zip(jitted(*args), want, strict=True):
                assert got.dtype == expected.dtype
                np.testing.assert_array_equal(got, expected)
                assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_sign_of_unsigned_ints_hypot_and_logaddexp2_at_extreme_magnitudes():
    """np.sign of an unsigned int of the top bit set (numba's np.sign gave 255 for a uint8
    255); np.hypot where a square would overflow or underflow (it gave inf and 0 for 1e200
    and 1e-200, compiled and interpreted), of infinities beside NaN, of float16 from uint8
    (255, 255 gave inf on the interpreter); and hypot's gradient a/h, b/h."""
    u = np.array([255, 128, 127, 1, 0], np.uint8)
    for x in (u, u.astype(np.uint64) << np.uint64(56)):
        np.testing.assert_array_equal(tj.jit(np.sign)(x), np.sign(x))
    a = np.array([1e200, 1e-200, 3.0, 0.0, np.inf, np.nan, -np.inf, 5e-324, 1e308])
    b = np.array([1e200, 1e-200, -4.0, -0.0, np.nan, np.inf, 2.0, 5e-324, 1e308])
    for backend in ("numba", "interpret"):
        np.testing.assert_allclose(tj.jit(np.hypot, backend=backend)(a, b), np.hypot(a, b),
                                   rtol=4e-16)
    small = np.array([255, 3], np.uint8)     # float16, which numba does not compile
    np.testing.assert_array_equal(tj.jit(np.hypot, backend="interpret")(small, small),
                                  np.hypot(small, small))
    g = tj.grad(lambda a, b: np.sum(np.hypot(a, b)), argnums=(0, 1))(np.array([3.0, -1e200]),
                                                                      np.array([4.0, 1e200]))
    np.testing.assert_allclose(g, [[0.6, -0.5 ** 0.5], [0.8, 0.5 ** 0.5]], rtol=1e-15)
    # logaddexp2 far apart: 2**d, not exp(d ln 2) (150 ulp from numpy's at d = -750)
    far = np.array([-750.0, -1000.0, -40.0, 3.0])
    np.testing.assert_allclose(tj.jit(np.logaddexp2)(far, np.zeros(4)),
                               np.logaddexp2(far, np.zeros(4)), rtol=1e-15)


def test_empty_axes_and_too_few_degrees_of_freedom_as_numpy():
    """np.max/np.min of an empty axis is numpy's error at the user's line on every backend
    (compiled code gave -inf); with initial= it is initial (the interpreter raised); np.var
    and np.std with ddof >= n divide by zero as numpy does (they gave negative variances)."""
    empty = np.zeros((0, 3))
    for backend in ("numba", "interpret"):
        with pytest.raises(ShapeError, match="zero-size array to reduction operation maximum"
                           ) as err:
            tj.jit(lambda x: np.max(x, axis=0), backend=backend)(empty)
        assert "test_numpy_more.py" in str(err.value) and isinstance(err.value, ValueError)
        np.testing.assert_array_equal(
            tj.jit(lambda x: np.min(x, axis=0, initial=2.5), backend=backend)(empty),
            np.full(3, 2.5))
    x = np.array([[1.0, 2.0], [3.0, 5.0]])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for ddof in (1, 2, 3):
            for f in (lambda x: np.var(x, axis=0, ddof=ddof), lambda x: np.std(x, ddof=ddof)):
                np.testing.assert_array_equal(tj.jit(f)(x), f(x))


def test_out_arguments_write_as_numpy_writes():
    """out= of numpy functions (dot, outer, trace, take, sum, mean, cumsum, clip, round,
    median) writes the result into a traced array or one np.zeros made in the function, with
    numpy's casting (reductions cast anyhow, clip and round as ufuncs); into an array made
    outside it is an error (they ignored it, or refused it)."""
    def f(a):
        dot, outer, trace, taken = np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(()), a * 0
        np.dot(a, a, out=dot)
        np.outer(a[0], a[1], out=outer)
        np.trace(a, out=trace)
        np.take(a, [[1, 0], [0, 1]], out=taken)
        sums, means, sums_int = np.zeros(2), np.empty(()), np.zeros(2, int)
        np.sum(a, axis=0, out=sums)
        np.mean(a, out=means)
        np.sum(a, axis=1, out=sums_int)
        run, clipped, rounded = a * 0, a * 1, a * 1
        np.cumsum(a, axis=1, out=run)
        np.clip(a, 0.2, 1.5, out=clipped)
        np.round(a, 1, out=rounded)
        middle = np.zeros(2)
        np.median(a, axis=0, out=middle)
        return dot, outer, trace, taken, sums, means, sums_int, run, clipped, rounded, middle
    a = np.array([[0.25, 1.75], [2.5, -0.5]])
    for _ in range(2):
        for got, want in zip(tj.jit(f)(a), f(a), strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-15)
    check_vjp(lambda a: sum(np.sum(o * (k + 1.0)) for k, o in enumerate(f(a)[:6])), [a])

    outside = np.zeros((2, 2))
    with pytest.raises(tj.ConcretizationError):
        tj.jit(lambda a: np.dot(a, a, out=outside))(a)
    with pytest.raises(tj.DtypeError, match="numpy.clip: its float64 result cannot be written"):
        tj.jit(lambda a: np.clip(a, 0, 1, out=np.zeros((2, 2), int)))(a)
    with pytest.raises(tj.ShapeError, match="out= must be an array of the result's shape"):
        tj.jit(lambda a: np.sum(a, out=np.zeros(3)))(a)


def test_one_hot_cross_entropy_compiled():
    """np.eye(k)[labels] inside a compiled loss: labels are an argument (a new batch of labels
    reuses the program), the gradient is softmax minus the one-hot rows."""
    def loss(w, x, labels):
        logits = x @ w
        logits = logits - np.max(logits, axis=1, keepdims=True)
        log_p = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
        return -np.mean(np.sum(np.eye(3)[labels] * log_p, axis=1))

    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal((8, 4))
    step = tj.value_and_grad(loss, backend="numba")
    for seed in (1, 2):
        labels = np.random.default_rng(seed).integers(0, 3, 8)
        value, grad = step(w, x, labels)
        logits = x @ w
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        np.testing.assert_allclose(value, -np.mean(np.log(p[np.arange(8), labels])), rtol=1e-12)
        np.testing.assert_allclose(grad, x.T @ (p - np.eye(3)[labels]) / 8, rtol=1e-10,
                                   atol=1e-12)
    assert step.cache_info()["traces"] == 1


@pytest.mark.usefixtures("interpreter")
def test_array_of_traced_values_inside_grad():
    def f(x):
        rotation = np.array([[np.cos(x[0]), -np.sin(x[0])], [np.sin(x[0]), np.cos(x[0])]])
        point = np.asarray([x[1], 2.0])                      # a Python number among them
        return np.sum((rotation @ point) ** 2) + np.sum(np.full(2, x[1]) * np.array(x))

    x = np.array([0.3, -1.2])
    check_vjp(f, [x])
    # |R p|^2 = x1^2 + 4 (a rotation keeps lengths), plus x1 (x0 + x1)
    np.testing.assert_allclose(tj.grad(f)(x), [x[1], x[0] + 4 * x[1]], rtol=1e-12)
    tape = tj.make_tape(f)(x)
    assert all(type(c) is np.ndarray for c in tape.consts)     # no recording.Constant escapes
    assert tj.jit(lambda x: np.array([x[0], x[1]]))(x).dtype == np.float64


@pytest.mark.usefixtures("interpreter")
def test_constant_results_are_plain_arrays():
    out = tj.jit(lambda x: (x * 2, np.eye(2), np.zeros((3, 2))[np.argmax(x)]))(np.ones(2))
    assert [type(o) for o in out] == [np.ndarray] * 3


# ---- interp -----------------------------------------------------------------------------------
@pytest.mark.usefixtures("interpreter")
def test_interp_at_between_and_outside_the_knots():
    xp, fp = np.array([-1.0, 0.0, 0.0, 2.0, 3.5]), np.array([4.0, 1.0, -1.0, 2.0, 0.5])
    x = np.array([-5.0, -1.0, -0.5, 0.0, 1.0, 2.0, 3.0, 3.5, 9.0, np.nan])
    f = tj.jit(lambda x, fp: np.interp(x, xp, fp))
    np.testing.assert_array_equal(f(x, fp), np.interp(x, xp, fp))   # fp[0] and fp[-1] outside
    g = tj.jit(lambda x, fp, l, r: np.interp(x, xp, fp, left=l, right=r))
    np.testing.assert_array_equal(g(x, fp, -7.0, 8.0), np.interp(x, xp, fp, -7.0, 8.0))
    assert f(np.float32(0.5), fp.astype(np.float32)).dtype == np.float64   # as numpy
    # d/dx is the slope inside, 0 outside; d/dxp moves the interval (JAX's rule)
    grad_x = tj.grad(lambda x: np.sum(np.interp(x, xp, fp)))(np.array([-3.0, 1.0, 2.5, 5.0]))
    np.testing.assert_allclose(grad_x, [0.0, 1.5, -1.0, 0.0])
    check_vjp(lambda x, xp: np.interp(x, xp, fp), [np.array([0.5, 2.5, 3.0]),
                                                 np.array([-1.0, 0.1, 0.2, 2.0, 3.5])])


@pytest.mark.usefixtures("interpreter")
def test_interp_period_and_single_knot():
    x = np.array([-170.0, -5.0, 5.0, 355.0, 400.0])
    xp, fp = [350.0, 10.0, 90.0, 180.0], np.array([1.0, -1.0, 2.0, 0.5])
    np.testing.assert_allclose(tj.jit(lambda x, fp: np.interp(x, xp, fp, period=360))(x, fp),
                               np.interp(x, xp, fp, period=360), rtol=1e-12)
    one = tj.jit(lambda x: np.interp(x, [0.5], [2.0], left=-1.0))
    np.testing.assert_array_equal(one(np.array([0.0, 0.5, 1.0])), [-1.0, 2.0, 2.0])


# ---- convolve and correlate -------------------------------------------------------------------
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate_modes(mode):
    rng = np.random.default_rng(3)
    for n, m in [(5, 3), (3, 5), (4, 4), (1, 4), (6, 1), (2, 5), (4, 5), (6, 6)]:
        a, v = rng.standard_normal(n), rng.standard_normal(m)
        got = tj.jit(lambda a, v: (np.convolve(a, v, mode), np.correlate(a, v, mode)))(a, v)
        _agree(got, (np.convolve(a, v, mode), np.correlate(a, v, mode)), 1e-12)
    check_vjp(lambda a, v: np.correlate(a, v, mode), [rng.standard_normal(6),
                                                      rng.standard_normal(4)])
    ints = np.arange(5), np.array([1, -2, 3])
    _agree(tj.jit(lambda a, v: np.convolve(a, v, mode))(*ints), np.convolve(*ints, mode), 0)


# ---- errors ------------------------------------------------------------------------------------
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("fn, error, message", [
    (lambda x: np.convolve(x, x[0]), ShapeError,
     r"numpy.convolve: a must be 1-d, got shape \(2, 3\); for a batch, call it per row"),
    (lambda x: np.convolve(x[0], x[0, :0]), ValueError, "v cannot be empty"),
    (lambda x: np.convolve(x[0], x[1], mode="middle"), ValueError, "mode must be 'full'"),
    (lambda x: np.interp(x, x[0], x[1, :2]), ValueError, "fp and xp are not of the same length"),
    (lambda x: np.interp(x, x, x), ShapeError,
     r"numpy.interp: xp and fp must be 1-d, got shapes \(2, 3\) and \(2, 3\)"),
    (lambda x: np.interp(x, x[0], x[1], period=360), UnsupportedOperationError,
     "period= with a traced xp.*pass xp and period as constants"),
    (lambda x: np.cross(x, x[:, :1]), ShapeError,
     r"numpy.cross: incompatible dimensions for cross product \(2, 3\) x \(2, 1\)"),
    (lambda x: np.einsum(x, [0, "a"]), ValueError, "a sublist holds ints in"),
    (lambda x: np.arange(x[0, 0], 3.0), ConcretizationError,
     r"numpy.arange: a size is a traced value.*start \+ step \* np.arange\(n\)"),
    (lambda x: np.linspace(0.0, 1.0, np.argmax(x[0])), ConcretizationError,
     "numpy.linspace: a size is a traced value.*static_argnums"),
    (lambda x: np.full(np.argmax(x[0]), x[0, 0]), ConcretizationError,
     "numpy.full: a size is a traced value"),
    (lambda x: np.array([x[0], x[1, :2]]), ValueError, "inhomogeneous"),
    (lambda x: np.split(x, 2, axis=1), ValueError, "does not result in an equal division"),
    (lambda x: np.vsplit(x[0], 3), ValueError, "vsplit only works on arrays of 2 or more"),
    (lambda x: np.rollaxis(x, 0, 4), np.exceptions.AxisError, "'start' arg requires"),
])
def test_errors_name_function_shapes_and_fix(fn, error, message):
    with pytest.raises(error, match=message):
        tj.jit(fn)(np.arange(6.0).reshape(2, 3))


@pytest.mark.usefixtures("interpreter")
def test_indexing_an_outside_constant_gathers_or_points_to_a_copy():
    table = np.arange(6.0).reshape(3, 2)         # made outside: a plain ndarray
    x = np.array([0.0, 2.0, 1.0])
    # read by name (a closure cell here): a Constant while traced (guards.outside_arrays)
    np.testing.assert_array_equal(tj.jit(lambda x: table[np.argsort(x)])(x), table[[0, 2, 1]])
    held = types.SimpleNamespace(table=table)    # reached through an attribute: not swapped
    with pytest.raises(ConcretizationError, match=r"np.array\(table\)\[idx\]"):
        tj.jit(lambda x: held.table[np.argsort(x)])(np.ones(3))
    taken = tj.jit(lambda x: np.array(held.table)[np.argsort(x)])(x)
    np.testing.assert_array_equal(taken, table[[0, 2, 1]])


# ---- GradientTape: no silent None ---------------------------------------------------------------
X = np.array([0.3, 1.2, 2.5])


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("call", ["function", "ufunc", "library", "variable"])
def test_gradient_tape_unsupported_call_raises_where_it_happens(call):
    import scipy.linalg

    def record():
        w = tj.Variable(X)
        with tj.GradientTape() as tape:
            x = tape.watch(X)
            if call == "function":
                np.sum(np.fft.rfft(x).real)                   # raises: function
            elif call == "ufunc":
                np.sum(np.spacing(x))                         # raises: ufunc
            elif call == "library":
                np.sum(scipy.linalg.sqrtm(np.outer(x, x)))    # raises: library
            else:
                np.sum(np.asarray(w) * 2)                     # raises: variable
    with pytest.raises(UnsupportedOperationError) as err:
        record()
    message = str(err.value)
    lines, first = inspect.getsourcelines(record)
    line = first + next(i for i, text in enumerate(lines) if f"# raises: {call}" in text)
    assert message.endswith(f"at {__file__}:{line}"), message
    assert "GradientTape" in message and "gradient through it" in message


@pytest.mark.usefixtures("interpreter")
def test_gradient_tape_none_only_when_unconnected():
    with tj.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        constant = np.sum(np.fft.rfft(np.ones(4)).real)      # no watched operand: numpy's
        with tape.stop_recording():
            frozen = np.spacing(x)                            # a constant by request
        y = np.sum(np.array([x[0], x[1] * 2.0]) * constant) + np.sum(frozen * x)
        z = np.sum(np.linspace(x[0], x[2], 5))
    assert tape.gradient(constant + 1.0, x) is None
    np.testing.assert_array_equal(tape.gradient(constant, x, unconnected_gradients="zero"),
                                  np.zeros(3))
    np.testing.assert_allclose(tape.gradient(y, x), np.spacing(X) + [4.0, 8.0, 0.0])
    np.testing.assert_allclose(tape.gradient(z, x), [2.5, 0.0, 2.5])
    assert type(np.asarray(x)) is np.ndarray                   # after the block: a value


@pytest.mark.usefixtures("interpreter")
def test_gradient_tape_one_hot_and_copies():
    with tj.GradientTape() as tape:
        x = tape.watch(X)
        onehot = np.eye(3)[np.argmax(x)]
        y = np.sum(onehot * np.copy(x) * x.copy())
        assert float(y) == X[2] ** 2 and isinstance(np.copy(x), type(x))
    np.testing.assert_allclose(tape.gradient(y, x), [0.0, 0.0, 2 * X[2]])


# ---- against JAX ---------------------------------------------------------------------------------
@pytest.mark.usefixtures("interpreter")
def test_gradients_match_jax(jax_x64):
    """interp (in x, xp and fp), convolve/correlate modes, polyval, kron, trapezoid, linspace,
    cross, vander and the one-hot idiom: JAX's gradients."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(5)
    x, xp, fp = rng.uniform(-1, 5, 7), np.cumsum(rng.uniform(0.5, 1.5, 5)), rng.normal(size=5)
    a, v, w = rng.normal(size=6), rng.normal(size=3), rng.normal(size=(6, 3))
    cases = [
        (lambda np_: lambda x, xp, fp: np_.sum(np_.interp(x, xp, fp) * w[:, 0].sum())),
        (lambda np_: lambda a, v, _: sum(np_.sum(np_.convolve(a, v, m) ** 2)
                                         + np_.sum(np_.correlate(v, a, m) ** 2)
                                         for m in ("full", "same", "valid"))),
        (lambda np_: lambda a, v, _: np_.sum(np_.polyval(v, a) * np_.kron(a[:2], v)[0])),
        (lambda np_: lambda a, v, w: np_.trapezoid(w, a, axis=0).sum() + np_.sum(
            np_.linspace(v[0], v[1], 4) ** 2) + np_.sum(np_.vander(v) ** 2)),
        (lambda np_: lambda a, v, w: np_.sum(np_.cross(w[:2], v) * np_.eye(3)[
            np_.argmax(w[:2], axis=1)])),
    ]
    for k, case in enumerate(cases):
        args = (x, xp, fp) if k == 0 else (a, v, w)
        ours = tj.grad(case(np), argnums=(0, 1, 2))(*args)
        theirs = jax.grad(case(jnp), argnums=(0, 1, 2))(*args)
        for o, t in zip(ours, theirs):
            np.testing.assert_allclose(o, t, rtol=1e-10, atol=1e-12)


def test_reductions_of_lists_of_traced_values():
    """np.mean(losses) of a Python list of traced losses (numpy does not dispatch on a list's
    items: it asked each tracer for its value); max, sum of a tuple, std; compiled, and the
    gradient against finite differences; under GradientTape too."""
    def f(x):
        losses = [np.sum(x * k) for k in range(3)]
        return np.mean(losses) + np.max([x[0], x[1]]) + np.sum((x[0], 2.0)) + \
            np.std([x[1], x[2], 1.0])
    x = np.array([0.5, 1.5, -2.0])
    for _ in range(3):
        np.testing.assert_allclose(tj.jit(f)(x), f(x), rtol=1e-14)
    check_vjp(f, [x])
    with tj.GradientTape() as tape:
        w = tape.watch(x)
        loss = f(w)
    np.testing.assert_allclose(tape.gradient(loss, w), tj.grad(f)(x), rtol=1e-14)
