"""scipy.linalg on traced arrays (numpy_api/scipy_linalg.py, ops/triangular.py): every supported
function against scipy's own on plain arrays, compiled from the first call (checked against the
interpreter by conftest) on first and later calls, with lower/upper/trans/unit-diagonal
variants, stacks whose batch equals the matrix size (a (3, 3) b against (3, 3, 3) matrices is
a matrix, as scipy reads it), 1x1 and 0x0 matrices; gradients of every function in every
argument against central differences of scipy's functions; forward mode and vmap; a Gaussian
process's negative log-likelihood written with cho_factor/cho_solve, with solve_triangular and
with np.linalg, which agree; scipy's errors at the user's line; and the routing of the names
(plain arrays still reach scipy, names taken after import tapejit work). Few programs compile:
one computes every function."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tapejit as tj
from tapejit.errors import ArgumentError, ShapeError, UnsupportedOperationError

from gradcheck import check_grads
from hang import HANG_S

sl = pytest.importorskip("scipy.linalg")
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]
LinAlgError = np.linalg.LinAlgError


def _inputs(seed: int, n: int = 3):
    """spd (n, n), a triangle-friendly square (n, n) (its diagonal away from 0), a stack of
    n such (n, n, n), b (n,), bm (n, 2), and a symmetric positive-definite stack."""
    rng = np.random.default_rng(seed)
    g = rng.uniform(-1, 1, (n, n))
    spd = g @ g.T + n * np.eye(n)
    sq = rng.uniform(-1, 1, (n, n)) + 3 * np.eye(n)
    stack = rng.uniform(-1, 1, (n, n, n)) + 3 * np.eye(n)
    h = rng.uniform(-1, 1, (n, n, n))
    spds = h @ np.swapaxes(h, -1, -2) + n * np.eye(n)
    return spd, sq, stack, rng.standard_normal(n), rng.standard_normal((n, 2)), spds


def _signed(v):
    """Eigenvectors with the sign that makes their first entry positive."""
    return v * np.sign(v[..., :1, :])


def everything(spd, sq, stack, b, bm, spds):
    """Each function with its options; the stack's b of shape (3, 3) is a matrix shared by
    the batch (n == batch)."""
    c_up, c_low = sl.cho_factor(spd), sl.cho_factor(spd, lower=True)
    lu = sl.lu_factor(sq)
    w, v = sl.eigh(spd)
    gw, gv = sl.eigh(spd, spds[0])
    return {
        "tri_lower": sl.solve_triangular(sq, b, lower=True),
        "tri_upper_T": sl.solve_triangular(sq, bm, trans="T"),
        "tri_unit_C": sl.solve_triangular(sq, bm, trans=2, lower=True, unit_diagonal=True),
        "tri_stack": sl.solve_triangular(stack, bm[:, :1] * stack[0], trans=1),
        "tri_stack_vec": sl.solve_triangular(stack, b, lower=True),
        "cholesky": sl.cholesky(spd), "cholesky_lower": sl.cholesky(spds, lower=True),
        "cho_factor_lower": np.tril(c_low[0]), "cho_factor_upper": np.triu(c_up[0]),
        "cho_solve": sl.cho_solve(c_up, b), "cho_solve_lower": sl.cho_solve(c_low, bm),
        "cho_solve_stack": sl.cho_solve(sl.cho_factor(spds), spd),
        "lu": lu[0], "piv": lu[1] * 1.0,
        "lu_solve": sl.lu_solve(lu, bm), "lu_solve_T": sl.lu_solve(lu, b, trans=1),
        "lu_solve_stack": sl.lu_solve(sl.lu_factor(stack), b),
        "solve": sl.solve(sq, bm), "solve_T": sl.solve(sq, b, transposed=True),
        "solve_sym": sl.solve(sq, b, assume_a="sym"),
        "solve_pos": sl.solve(spd, bm, assume_a="pos", lower=True),
        "solve_pos_stack": sl.solve(spds, b, assume_a="positive definite"),
        "solve_diag": sl.solve(sq, b, assume_a="diagonal"),
        "solve_tridiag": sl.solve(sq, bm, assume_a="tridiagonal"),
        "solve_upper": sl.solve(sq, b, assume_a="upper triangular"),
        "solve_stack": sl.solve(stack, spd),
        "inv": sl.inv(sq), "inv_pos": sl.inv(spds, assume_a="pos"), "det": sl.det(sq),
        "det_stack": sl.det(stack),
        "expm": sl.expm(sq), "expm_small": sl.expm(sq * 1e-3), "expm_big": sl.expm(30 * sq),
        "expm_stack": sl.expm(stack / 4),
        "block_diag": sl.block_diag(sq, b, 2.0, bm[:1]),
        "w": w, "v": _signed(v), "w_upper": sl.eigh(sq, lower=False, eigvals_only=True),
        "gw": gw, "gv": _signed(gv),
        "gw2": sl.eigh(spd, spds[1], type=2)[0], "gv3": _signed(sl.eigh(spd, spds[1], type=3)[1]),
        "w_subset": sl.eigh(spds, subset_by_index=[1, 2], eigvals_only=True),
    }


def _agree(got, want, rtol=1e-9):
    assert got.keys() == want.keys()
    for k in want:
        g, w = np.asarray(got[k]), np.asarray(want[k])
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape, g.dtype, w.dtype)
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=k)


def test_every_function_against_scipy_first_and_later_calls():
    compiled = tj.jit(everything)
    for seed in (0, 1):
        args = _inputs(seed)
        _agree(compiled(*args), everything(*args))
    assert compiled.cache_info()["traces"] == 1


def test_one_by_one_and_empty_matrices():
    def small(a, b):
        return {"tri": sl.solve_triangular(a, b), "chol": sl.cholesky(a),
                "cho": sl.cho_solve(sl.cho_factor(a), b), "lu": sl.lu_solve(sl.lu_factor(a), b),
                "solve": sl.solve(a, b, assume_a="pos"), "inv": sl.inv(a), "det": sl.det(a),
                "expm": sl.expm(a), "w": sl.eigh(a)[0], "bd": sl.block_diag(a, b)}
    for n in (1, 0):
        a, b = np.eye(n) * 2.5, np.arange(n) + 1.0
        _agree(tj.jit(small)(a, b), small(a, b))


def test_float32_stays_float32_and_integers_become_float64():
    """As scipy's, but det: float32 (scipy's det of float32 is float64; np.linalg's is not)."""
    a, b = np.array([[2.0, 0.0], [1.0, 4.0]]), np.array([1.0, 2.0])

    def f(a, b):
        return (sl.solve_triangular(a, b, lower=True), sl.expm(a / 4), sl.cho_solve(
            sl.cho_factor(a @ a.T), b), sl.lu_solve(sl.lu_factor(a), b), sl.det(a))
    for dtype in (np.float32, np.int64):
        got = tj.jit(f)(a.astype(dtype), b.astype(dtype))
        want = f(a.astype(dtype), b.astype(dtype))
        for g, w in zip(got, want):
            assert g.dtype == (np.float32 if dtype == np.float32 else w.dtype), g.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5)


# ---- gradients ---------------------------------------------------------------------------------
def _weighted(fn):
    """sum(w * fn(...)) with fixed random weights: a scalar whose gradient sees every output."""
    def loss(*args):
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(np.sum(np.cos(np.arange(np.size(o)).reshape(np.shape(o))) * o) for o in outs)
    return loss


SPD = _inputs(5)[0]
GRADIENTS = {   # name: (function, arguments): every function, every float argument
    "solve_triangular": (lambda a, b: sl.solve_triangular(a, b, lower=True), (1, 4)),
    "solve_triangular_upper_T": (lambda a, b: sl.solve_triangular(a, b, trans=1), (1, 4)),
    "solve_triangular_unit": (lambda a, b: sl.solve_triangular(
        a, b, trans="T", lower=True, unit_diagonal=True), (2, 3)),
    "cholesky": (lambda s: sl.cholesky(s), (0,)),
    "cholesky_lower": (lambda s: sl.cholesky(s, lower=True), (5,)),
    "cho_factor_solve": (lambda s, b: sl.cho_solve(sl.cho_factor(s), b), (0, 4)),
    "cho_solve_lower": (lambda s, b: sl.cho_solve((np.linalg.cholesky(s), True), b), (5, 3)),
    "lu_factor": (lambda a: sl.lu_factor(a[::-1])[0], (1,)),
    "lu_solve": (lambda a, b: sl.lu_solve(sl.lu_factor(a[::-1]), b), (1, 4)),
    "lu_solve_T": (lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=1), (2, 3)),
    "solve": (lambda a, b: sl.solve(a, b), (2, 4)),
    "solve_sym": (lambda a, b: sl.solve(a, b, assume_a="sym", lower=True), (1, 3)),
    "solve_pos": (lambda s, b: sl.solve(s, b, assume_a="pos"), (0, 4)),
    "inv": (lambda a: sl.inv(a), (2,)),
    "det": (lambda a: sl.det(a), (2,)),
    "expm": (lambda a: sl.expm(a), (1,)),
    "expm_squared": (lambda a: sl.expm(8 * a), (2,)),
    "block_diag": (lambda a, b: sl.block_diag(a, b, 3.0), (1, 3)),
    "eigh": (lambda s: (lambda w, v: (w, _signed(v)))(*sl.eigh(s)), (0,)),
    "eigh_generalized": (lambda s, t: (lambda w, v: (w, _signed(v)))(*sl.eigh(s, t)), (0, 5)),
    "eigh_type3_upper": (lambda s, t: sl.eigh(s, t, type=3, lower=False)[0], (0, 5)),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradients_against_central_differences(name, interpreter):
    fn, picks = GRADIENTS[name]
    inputs = list(_inputs(5))
    inputs[5] = inputs[5][0]            # (one spd matrix of the stack)
    args = [inputs[i] for i in picks]
    check_grads(_weighted(fn), args, argnums=tuple(range(len(args))), rtol=1e-5, atol=1e-7)


def test_compiled_gradients():
    """The gradient of every function in one program, compiled (conftest checks it against
    the interpreter), against central differences of scipy's."""
    def loss(spd, sq, stack, b, bm, spds):
        out = everything(spd, sq, stack, b, bm, spds)
        return sum(_weighted(lambda: out[k])() for k in sorted(out)
                   if k not in ("piv", "expm_big"))       # (expm_big: entries near e^90)
    args = _inputs(2)
    check_grads(loss, args, argnums=tuple(range(6)), rtol=1e-5)


def test_forward_mode_and_vmap():
    spd, sq, stack, b, bm, spds = _inputs(3)

    def f(a, b):
        return sl.solve_triangular(a, b, lower=True) + sl.expm(a / 3) @ b + sl.cho_solve(
            sl.cho_factor(a @ a.T + np.eye(3)), b) + sl.lu_solve(sl.lu_factor(a), b)
    tangent = (np.cos(sq), np.sin(b))
    out, jvp_out = tj.jvp(f, (sq, b), tangent)
    h = 1e-6
    fd = (f(sq + h * tangent[0], b + h * tangent[1]) - f(sq - h * tangent[0],
                                                         b - h * tangent[1])) / (2 * h)
    np.testing.assert_allclose(out, f(sq, b), rtol=1e-10)
    np.testing.assert_allclose(jvp_out, fd, rtol=1e-6, atol=1e-8)
    batched = tj.vmap(f, in_axes=(0, None))(stack, b)
    np.testing.assert_allclose(batched, np.stack([f(m, b) for m in stack]), rtol=1e-10)


# ---- a Gaussian process, three ways ------------------------------------------------------------
def _kernel(params, x):
    log_amp, log_len, log_noise = params
    d = x[:, None] - x[None, :]
    return np.exp(log_amp - 0.5 * d ** 2 / np.exp(2 * log_len)) + (
        np.exp(log_noise) + 1e-6) * np.eye(len(x))


def gp_nll_cho(params, x, y):
    c, lower = sl.cho_factor(_kernel(params, x), lower=True)
    alpha = sl.cho_solve((c, lower), y)
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(c))) + 0.5 * len(x) * np.log(2 * np.pi)


def gp_nll_triangular(params, x, y):
    l = sl.cholesky(_kernel(params, x), lower=True)
    z = sl.solve_triangular(l, y, lower=True)
    return 0.5 * z @ z + np.sum(np.log(np.diag(l))) + 0.5 * len(x) * np.log(2 * np.pi)


def gp_nll_numpy(params, x, y):
    k = _kernel(params, x)
    return 0.5 * y @ np.linalg.solve(k, y) + 0.5 * np.linalg.slogdet(k)[1] + \
        0.5 * len(x) * np.log(2 * np.pi)


def test_gp_negative_log_likelihood_three_ways():
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-3, 3, 40))
    y = np.sin(x) + 0.1 * rng.standard_normal(40)
    params = np.array([0.2, -0.3, -2.0])
    results = [tj.jit(tj.value_and_grad(f))(params, x, y)
               for f in (gp_nll_cho, gp_nll_triangular, gp_nll_numpy)]
    for value, grad in results:
        np.testing.assert_allclose(value, gp_nll_numpy(params, x, y), rtol=1e-10)
        np.testing.assert_allclose(grad, results[2][1], rtol=1e-8)
    check_grads(gp_nll_cho, (params, x, y), rtol=1e-6)


def test_factors_made_by_scipy_outside_the_function():
    """Factors computed once by scipy (constants: cho_factor's other triangle holds a's
    entries, which must not be read), applied to a traced right-hand side."""
    a = np.array([[1.0, 4.0, 2.0], [3.0, 1.0, 0.0], [2.0, 2.0, 5.0]])
    lu, cho = sl.lu_factor(a), sl.cho_factor(a @ a.T)

    def apply(b):
        return (sl.lu_solve(lu, b), sl.lu_solve(lu, b, trans=1), sl.cho_solve(cho, b),
                sl.solve_triangular(cho[0], b))
    b = np.arange(3.0)
    for got, want in zip(tj.jit(apply)(b), apply(b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


# ---- errors ------------------------------------------------------------------------------------
BAD = [   # (call on traced a (3, 3) and b (3,), error type, words of the message)
    (lambda a, b: sl.solve_triangular(a[:2], b[:2]), ShapeError, "square"),
    (lambda a, b: sl.solve_triangular(a, np.concatenate([b, b[:1]])), ShapeError, "needs 3 rows"),
    (lambda a, b: sl.solve_triangular(a, b, trans=3), ArgumentError, "trans must be"),
    (lambda a, b: sl.solve_triangular(a, b, trans="X"), ArgumentError, "trans must be"),
    (lambda a, b: sl.cho_solve((a[:, :2], False), b), ShapeError, "square"),
    (lambda a, b: sl.cho_solve(sl.cho_factor(a), b[:2]), ShapeError, "do not fit"),
    (lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans="T"), ArgumentError, "trans must be"),
    (lambda a, b: sl.lu_factor(a[:2]), UnsupportedOperationError, "rectangular"),
    (lambda a, b: sl.solve(a, b, assume_a="banana"), ArgumentError, "not a recognized"),
    (lambda a, b: sl.inv(a[:2]), ShapeError, "square"),
    (lambda a, b: sl.expm(b), ShapeError, "square"),
    (lambda a, b: sl.eigh(a, subset_by_value=[0, 1]), UnsupportedOperationError,
     "subset_by_value"),
    (lambda a, b: sl.block_diag(a[None]), UnsupportedOperationError, "two axes"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input_is_scipys_error_at_the_users_line(case, interpreter):
    call, error, words = BAD[case]
    with pytest.raises(error, match=words) as info:
        tj.jit(call)(np.eye(3), np.ones(3))
    assert isinstance(info.value, ValueError) or error is UnsupportedOperationError
    assert f"{os.path.basename(__file__)}:" in str(info.value), str(info.value)


def test_singular_and_not_positive_definite_raise_linalgerror():
    for backend in ("numba", "interpret"):
        with pytest.raises(LinAlgError, match="zero on the diagonal"):
            tj.jit(lambda a, b: sl.solve_triangular(a, b), backend=backend)(
                np.triu(np.ones((3, 3))) - np.eye(3), np.ones(3))
        with pytest.raises(LinAlgError):
            tj.jit(lambda a: sl.cho_factor(a)[0], backend=backend)(-np.eye(3))


def test_expm_beyond_the_squarings_is_nan():
    a = np.array([[0.0, 1.0], [-1.0, 0.0]])
    big = tj.jit(sl.expm)(a * 5.4 * 2 ** 15)             # 16 squarings: finite
    assert np.all(np.isfinite(big))
    np.testing.assert_allclose(big, sl.expm(a * 5.4 * 2 ** 15), atol=1e-6)
    assert np.all(np.isnan(tj.jit(sl.expm)(a * 5.4 * 2 ** 17)))


# ---- routing -----------------------------------------------------------------------------------
def test_plain_arrays_still_reach_scipy():
    a = np.array([[4.0, 2.0], [2.0, 3.0]])
    c, lower = sl.cho_factor(a)
    assert c[1, 0] == 2.0 and lower is False        # scipy's: a's entry left in the triangle
    assert sl.solve_triangular.__wrapped__.__module__.startswith("scipy.linalg")


ORDERS = {   # a fresh process: the names reach tapejit's rules whichever is imported first
    "tapejit first": "import tapejit as tj\nfrom scipy.linalg import cho_solve, cho_factor\n",
    "scipy first": "import scipy.linalg\nimport tapejit as tj\n"
                   "cho_solve, cho_factor = scipy.linalg.cho_solve, scipy.linalg.cho_factor\n",
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_names_taken_after_either_import(order, tmp_path):
    code = ORDERS[order] + (
        "import numpy as np\n"
        "f = tj.grad(lambda a, b: np.sum(cho_solve(cho_factor(a), b)))\n"
        "print(f(np.array([[4.0, 1.0], [1.0, 3.0]]), np.ones(2)).round(6).tolist())\n")
    env = {**os.environ, "TAPEJIT_BACKEND": "interpret", "TAPEJIT_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    a = np.array([[4.0, 1.0], [1.0, 3.0]])
    x = np.linalg.solve(a, np.ones(2))
    g = -np.outer(x, x)                      # d sum(a^-1 1) / da (a symmetric), ...
    want = np.triu(g + g.T) - np.diag(np.diag(g))       # ... of a function of a's upper triangle
    assert np.allclose(eval(done.stdout), want, atol=1e-6), (done.stdout, want)
