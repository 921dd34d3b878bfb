"""Sorting and order statistics (numpy_api/sorting.py, ops/sort.py): what the op table's rows
cannot say. Compiled code against numpy and the interpreter (float64, float32, integers; first
and later calls, a new batch size); gradients against finite differences and JAX; ties (max and
min split evenly as JAX does, a stable sort gives each element its own place's); NaN ordering;
quantiles with several q, methods and axes; gathers through argsort; np.unique under tracing and
tj.unique's static size; forward mode, Hessians and Jacobians (the batching rules); errors."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit.errors import ShapeError, UnsupportedOperationError

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


def _everything(x, a):
    """Each function on a (4, 5, 6) batch x and a 1-D a (numpy's results where numpy's
    kind="stable" is what tapejit's sorts always are)."""
    return {"sort": np.sort(x, axis=1), "sort_last": np.sort(x), "flat": np.sort(x, axis=None),
            "argsort": np.argsort(x, axis=0, kind="stable"),
            "gather": np.take_along_axis(x, np.argsort(x, axis=2), axis=2),
            "median": np.median(x, axis=(0, 2)), "median_keep": np.median(x, -1, keepdims=True),
            "quantiles": np.quantile(x, [0.1, 0.5, 0.75], axis=1),
            "percentile": np.percentile(x, 12.5, axis=(1, 2), keepdims=True),
            "nearest": np.quantile(x, 0.4, axis=2, method="nearest"),
            "search": np.searchsorted(np.sort(a), x, side="right"),
            "partition": np.partition(a, 2)[2]}


def _weighted(x, a):
    out = _everything(x, a)
    rng = np.random.default_rng(1)
    return sum(np.sum(v * rng.uniform(0.5, 1.5, np.shape(v)).astype(x.dtype))
               for k, v in out.items() if k not in ("argsort", "search"))


def _inputs(batch: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, 5, 6)).astype(dtype), rng.standard_normal(7).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_match_numpy(dtype):
    """Every function compiled: numpy's values, dtypes and shapes on the first and a later
    call; a new batch size traces again and reuses the compiled program."""
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    compiled = tj.jit(_everything, backend="numba")
    args = _inputs(4, dtype)
    for _ in range(2):
        _agree(compiled(*args), _everything(*args), rtol)
    other = _inputs(3, dtype, seed=1)
    _agree(compiled(*other), _everything(*other), rtol)
    info = compiled.cache_info()
    assert (info["traces"], info["compiles"]) == (2, 1), info


def test_gradients_compiled_and_finite_differences():
    """Reverse mode: the interpreter agrees with finite differences, compiled code with the
    interpreter (first and later call)."""
    args = _inputs(2, np.float64)
    check_vjp(_weighted, args, rtol=1e-6)
    want = tj.value_and_grad(_weighted, argnums=(0, 1), backend="interpret")(*args)
    compiled = tj.value_and_grad(_weighted, argnums=(0, 1), backend="numba")
    for _ in range(2):
        _agree(compiled(*args), want, 1e-12)


def test_integers_compiled():
    """Integer input, forward only: sort and argsort keep the dtype, median and quantile are
    float64, lower/higher quantiles keep ints, searchsorted of ints."""
    def fn(x):
        return (np.sort(x, axis=0), np.argsort(x, kind="stable"), np.median(x, axis=1),
                np.quantile(x, [0.25, 0.5]), np.quantile(x, 0.3, axis=0, method="lower"),
                np.searchsorted(np.array([-2, 0, 3]), x), np.sort(x > 0, axis=1))
    x = np.random.default_rng(2).integers(-5, 6, size=(4, 7))
    for backend in ("interpret", "numba"):
        _agree(tj.jit(fn, backend=backend)(x), fn(x), 1e-12)


# ---- ties and NaN --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_nan_and_tie_ordering(backend):
    """NaN sorts last, -0.0 and 0.0 and other ties keep their order (numpy's stable sort); a
    median or quantile of a line holding NaN is NaN, as numpy's; searchsorted places NaN last."""
    x = np.array([[3.0, np.nan, 1.0, -np.inf, 1.0, 0.0, -0.0, np.nan, np.inf],
                  [2.0, 2.0, -1.0, 5.0, 0.5, 0.5, 2.0, 1.0, -3.0]])

    def fn(x):
        return (np.sort(x), np.argsort(x, axis=-1), np.median(x, axis=1),
                np.quantile(x, [0.3, 1.0], axis=1), np.searchsorted(np.sort(x[0]), x[1]),
                np.searchsorted(np.sort(x[0]), np.array([np.nan, np.inf]), side="left"))
    got = tj.jit(fn, backend=backend)(x)
    with np.errstate(invalid="ignore"):
        want = fn(x)
    np.testing.assert_array_equal(got[1], np.argsort(x, kind="stable"))
    _agree(got, (want[0], np.argsort(x, kind="stable")) + want[2:], 1e-12)
    assert np.signbit(got[0][0, 2]) and not np.signbit(got[0][0, 3])   # 0.0 came first


def test_max_min_ties_split_evenly():
    """np.max/np.min (and np.maximum) share the gradient evenly among tied extrema, as JAX's
    reduce_max does; compiled and interpreted alike."""
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    for backend in ("interpret", "numba"):
        g = tj.grad(lambda x: np.sum(np.max(x, axis=1) * [1.0, 3.0]) + np.min(x),
                    backend=backend)(x)
        np.testing.assert_allclose(g, [[1.0, 0.5, 0.5], [1.0, 1.0, 1.0]], rtol=1e-12)


@pytest.mark.usefixtures("interpreter")
def test_sort_and_median_ties():
    """Tied values: a stable sort gives each element the gradient of the place it is sorted
    to; an even median splits between the two middle elements (the first of equal ones)."""
    x = np.array([2.0, 1.0, 2.0, 1.0])
    w = np.array([1.0, 10.0, 100.0, 1000.0])
    g = tj.grad(lambda x: np.sum(np.sort(x) * w))(x)
    np.testing.assert_array_equal(g, [100.0, 1.0, 1000.0, 10.0])
    g = tj.grad(np.median)(np.array([1.0, 3.0, 3.0, 0.0]))
    np.testing.assert_array_equal(g, [0.5, 0.5, 0.0, 0.0])


# ---- quantiles -----------------------------------------------------------------------------------
METHODS = ["linear", "lower", "higher", "nearest", "midpoint", "median_unbiased",
           "normal_unbiased", "weibull", "hazen", "interpolated_inverted_cdf"]


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("method", METHODS)
def test_quantile_methods_axes_and_q(method):
    """Every method, with scalar and array q (Python, float32 and float64), int/tuple/None
    axes and keepdims, against numpy: values and dtypes (a float32 array with a float64 q
    array gives float64, as numpy)."""
    rng = np.random.default_rng(3)
    x32 = rng.standard_normal((3, 4, 5)).astype(np.float32)
    for x in (x32.astype(np.float64), x32):
        for q, axis, keep in [(0.3, None, False), ([0.0, 0.2, 1.0], 1, False),
                              (np.array([0.9, 0.05]), (0, 2), True),
                              (np.float32(0.5), -1, True), (1, 0, False)]:
            got = tj.jit(lambda x: (np.quantile(x, q, axis=axis, method=method,
                                                keepdims=keep),
                                    np.percentile(x, np.multiply(q, 100), axis=axis,
                                                  method=method, keepdims=keep)),
                         backend="interpret")(x)
            want = (np.quantile(x, q, axis=axis, method=method, keepdims=keep),
                    np.percentile(x, np.multiply(q, 100), axis=axis, method=method,
                                  keepdims=keep))
            _agree(got, want, 1e-12 if x.dtype == np.float64 else 1e-6)


@pytest.mark.usefixtures("interpreter")
def test_quantile_gradients():
    """Quantile gradients against finite differences, also with respect to a traced q (the
    slope between the two values taken)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6))
    check_vjp(lambda x: np.quantile(x, [0.1, 0.5, 0.93], axis=(0, 1)), [x])
    check_vjp(lambda x: np.percentile(x, 70, axis=0, method="midpoint"), [x])
    check_vjp(lambda x, q: np.quantile(x, q, axis=1), [x, np.array([0.15, 0.62])])


# ---- gathers through argsort; jvp, hessian, jacobian ---------------------------------------------
def test_argsort_gathers():
    """x[argsort(x)], take_along_axis and indexing a second array by the permutation, with
    gradients (compiled against interpreted)."""
    def fn(x, y):
        order = np.argsort(x, axis=1)
        first = x[0][np.argsort(x[0])]
        return np.sum(first * np.arange(6)) + np.sum(np.take_along_axis(y, order, 1) ** 2)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((3, 6)), rng.standard_normal((3, 6))]
    check_vjp(fn, args)
    want = tj.value_and_grad(fn, argnums=(0, 1), backend="interpret")(*args)
    _agree(tj.value_and_grad(fn, argnums=(0, 1), backend="numba")(*args), want, 1e-12)


@pytest.mark.usefixtures("interpreter")
def test_forward_mode_hessian_jacobian():
    """jvp (the transposed VJP), the Hessian and the Jacobian (batching sort, take_along and
    scatter_add_along) agree with finite differences of the gradient."""
    def fn(x):
        return np.sum(np.sort(x, axis=0)[1] ** 3) + np.median(x) ** 2
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4))
    v = rng.standard_normal((3, 4))
    grad = tj.grad(fn, backend="interpret")
    h = 1e-6
    diff = (grad(x + h * v) - grad(x - h * v)) / (2 * h)
    hess = tj.hessian(fn, backend="interpret")(x)
    np.testing.assert_allclose(np.tensordot(hess, v, 2), diff, rtol=1e-6, atol=1e-8)
    _, tangent = tj.jvp(fn, (x,), (v,))
    np.testing.assert_allclose(tangent, np.sum(grad(x) * v), rtol=1e-10)
    jac = tj.jacobian(lambda x: np.sort(x, axis=1))(x)
    order = np.argsort(x, axis=1)
    expected = np.zeros((3, 4, 3, 4))
    for i in range(3):
        for j in range(4):
            expected[i, j, i, order[i, j]] = 1.0
    np.testing.assert_array_equal(jac, expected)


def test_sort_method_sorts_in_place():
    def fn(x):
        y = x * 2.0
        y.sort(axis=0)
        return y, x.argsort(axis=None), np.sort(x[0]).searchsorted(x[1], side="right")
    x = np.random.default_rng(7).standard_normal((3, 4))
    got = tj.jit(fn)(x)
    _agree(got, (np.sort(2 * x, axis=0), np.argsort(x, axis=None),
                 np.sort(x[0]).searchsorted(x[1], side="right")), 1e-12)


# ---- unique --------------------------------------------------------------------------------------
@pytest.mark.usefixtures("interpreter")
def test_unique_of_a_traced_array_asks_for_size():
    with pytest.raises(UnsupportedOperationError, match=r"(?s)numpy.unique.*f64\[5\].*size=n"):
        tj.jit(np.unique)(np.arange(5.0))


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_unique_with_size(backend):
    """tj.unique(x, size=n) as jax.numpy.unique(x, size=n): sorted distinct values (NaNs as
    one), padded with the minimum or fill_value, first indices, inverse, counts; truncated."""
    x = np.array([[1.0, 3.0, np.nan], [3.0, np.nan, -2.0]])
    fn = tj.jit(lambda x: (tj.unique(x, size=6, return_index=True, return_inverse=True,
                                     return_counts=True),
                           tj.unique(x, size=2, fill_value=7.0, return_counts=True),
                           tj.unique(x, size=6, fill_value=7.0)), backend=backend)
    (values, index, inverse, counts), (short, short_counts), filled = fn(x)
    np.testing.assert_array_equal(values, [-2.0, 1.0, 3.0, np.nan, -2.0, -2.0])
    np.testing.assert_array_equal(index, [5, 0, 1, 2, 0, 0])
    np.testing.assert_array_equal(inverse, [[1, 2, 3], [2, 3, 0]])
    np.testing.assert_array_equal(counts, [1, 1, 2, 2, 0, 0])
    np.testing.assert_array_equal(short, [-2.0, 1.0])
    np.testing.assert_array_equal(short_counts, [1, 1])
    np.testing.assert_array_equal(filled, [-2.0, 1.0, 3.0, np.nan, 7.0, 7.0])


@pytest.mark.usefixtures("interpreter")
def test_unique_gradient_and_gradient_tape():
    """The values are differentiable through the first occurrence of each; in a GradientTape
    np.unique takes its size from the recorded value, as numpy computes it."""
    x = np.array([0.3, -1.2, 0.5, 1.7, 0.5])
    g = tj.grad(lambda x: np.sum(tj.unique(x, size=6) * np.arange(1.0, 7.0)))(x)
    np.testing.assert_array_equal(g, [2.0, 1.0 + 5 + 6, 3.0, 4.0, 0.0])   # the fills: min
    v = tj.Variable(x)
    with tj.GradientTape() as tape:
        values, counts = np.unique(v * 2.0, return_counts=True)
        y = np.sum(values * counts)
    np.testing.assert_array_equal(np.asarray(values), np.unique(2 * x))
    np.testing.assert_allclose(tape.gradient(y, v), [2.0, 2.0, 4.0, 2.0, 0.0])


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("fn, error, message", [
    (lambda x: np.partition(x, 4), ShapeError,
     r"partition: kth 4 is out of bounds for an axis of length 4 \(f64\[3,4\]"),
    (lambda x: np.quantile(x, 1.5), ValueError, r"quantiles must be in the range \[0, 1\]"),
    (lambda x: np.percentile(x, -1), ValueError, r"range \[0, 100\]"),
    (lambda x: np.quantile(x[:, :0], 0.5, axis=1), ShapeError,
     r"empty axis \(f64\[3,0\], axis 1\)"),
    (lambda x: np.quantile(x, 0.5, method="inverted_cdf"), UnsupportedOperationError,
     "method='inverted_cdf' is not supported.*linear"),
    (lambda x: np.sort(x, order="a"), UnsupportedOperationError, "order="),
    (lambda x: np.sort(x, kind="bogo"), ValueError, "sort kind"),
    (lambda x: np.sort(x[0, 0]), ShapeError, "numpy.sort: axis -1 is out of bounds"),
    (lambda x: np.searchsorted(x, 0.5), ShapeError, r"1-D sorted array.*\(3, 4\)"),
    (lambda x: np.searchsorted(x[0], 0.5, side="middle"), ValueError, "'left' or 'right'"),
])
def test_errors(fn, error, message):
    """Bad input raises numpy's kind of error, naming the function, the shapes and the fix."""
    with pytest.raises(error, match=message):
        tj.jit(fn, backend="interpret")(np.ones((3, 4)))


@pytest.mark.usefixtures("interpreter")
def test_median_of_an_empty_axis_is_nan():
    got = tj.jit(lambda x: np.median(x, axis=1), backend="interpret")(np.ones((3, 0)))
    np.testing.assert_array_equal(got, np.full(3, np.nan))


@pytest.mark.usefixtures("interpreter")
# ---- against JAX ---------------------------------------------------------------------------------
def test_gradients_match_jax(jax_x64):
    """sort, median (even and odd), quantiles, max ties and unique with size: JAX's gradients."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(8)
    x = np.round(rng.standard_normal((4, 6)), 1)        # with ties
    w = rng.standard_normal((4, 6))
    cases = [
        (lambda np_: lambda x: np_.sum(np_.sort(x, axis=1) * w)),
        (lambda np_: lambda x: np_.sum(np_.median(x, axis=0) ** 2) + np_.median(x[:, :5])),
        (lambda np_: lambda x: np_.sum(np_.quantile(x, np_.array([0.1, 0.5, 0.8]), axis=1))),
        (lambda np_: lambda x: np_.percentile(x, 35.0)),
        (lambda np_: lambda x: np_.sum(np_.max(np_.round(x), axis=1) ** 2)),
        (lambda np_: lambda x: np_.sum(np_.take_along_axis(x, np_.argsort(x, axis=0), 0) * w)),
    ]
    for case in cases:
        np.testing.assert_allclose(tj.grad(case(np))(x), jax.grad(case(jnp))(x), rtol=1e-12,
                                   atol=1e-12)
    ours = tj.grad(lambda x: np.sum(tj.unique(x, size=30) * np.arange(30.0)))(x)
    theirs = jax.grad(lambda x: jnp.sum(jnp.unique(x, size=30) * jnp.arange(30.0)))(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
