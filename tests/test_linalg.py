"""np.linalg on traced arrays (numpy_api/decompositions.py, ops/decompositions.py): what the op
table's rows cannot say. Compiled code against numpy and the interpreter on stacks with two
batch axes, first and later calls and a new batch size; gradients on such stacks; numpy's
errors and NaNs; forward mode, Hessians and Jacobians (the batching rules); the gradient
conventions at repeated eigenvalues and singular values; what is not supported."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import tapejit as tj
from tapejit.errors import UnsupportedOperationError

from gradcheck import numerical_directional

# a program numba cannot compile would run on the interpreter with a warning: here, a failure
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]
LinAlgError = np.linalg.LinAlgError


def _inputs(batch: tuple[int, ...], dtype=np.float64, seed: int = 0):
    """A well-conditioned square stack, a symmetric positive-definite one with eigenvalues
    apart, a tall one with singular values apart, and right-hand sides."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-0.9, 0.9, batch + (4, 4)) + 3 * np.eye(4)
    g = rng.uniform(-0.25, 0.25, batch + (4, 4))
    s = g + np.swapaxes(g, -1, -2) + np.diag([3.0, 8.0, 13.0, 18.0])
    t = rng.uniform(-0.9, 0.9, batch + (5, 3)) + np.eye(5, 3) * [3.0, 6.0, 9.0]
    b = rng.standard_normal(batch + (4, 2))
    return [x.astype(dtype) for x in (a, s, t, b)]


def _signed(v):
    return v * v[..., :1, :]


def _everything(a, s, t, b):
    """Each supported function on stacks (outputs free of the sign of eigen/singular
    vectors)."""
    w, v = np.linalg.eigh(s)
    u, sv, vt = np.linalg.svd(t, full_matrices=False)
    q, r = np.linalg.qr(t)
    sign, logdet = np.linalg.slogdet(a)
    return {"inv": np.linalg.inv(a), "solve": np.linalg.solve(a, b), "det": np.linalg.det(a),
            "sign": sign, "logdet": logdet, "cholesky": np.linalg.cholesky(s),
            "upper": np.linalg.cholesky(s, upper=True), "w": w, "v": _signed(v),
            "eigvalsh": np.linalg.eigvalsh(s, UPLO="U"), "u": _signed(u), "s": sv,
            "vt": _signed(np.swapaxes(vt, -1, -2)), "q": q, "r": r,
            "r_wide": np.linalg.qr(np.swapaxes(t, -1, -2), mode="r"),
            "pinv": np.linalg.pinv(t), "power": np.linalg.matrix_power(a, 3),
            "power_inv": np.linalg.matrix_power(a, -2),
            "nuc": np.linalg.norm(t, "nuc", axis=(-2, -1)),
            "two": np.linalg.norm(t, 2, axis=(-1, -2)), "one": np.linalg.norm(a, 1, (-2, -1)),
            "vector": np.linalg.norm(b, -np.inf, axis=-2)}


# the outputs of each primitive (the rest are built from them; each costs seconds to compile)
PRIMITIVES = ("solve", "logdet", "cholesky", "w", "v", "u", "s", "vt", "q", "r", "pinv")


def _weighted(a, s, t, b):
    """A scalar of the primitives' outputs, each weighted by a fixed array of its shape."""
    out = _everything(a, s, t, b)
    rng = np.random.default_rng(1)
    return sum(np.sum(out[k] * rng.uniform(0.5, 1.5, np.shape(out[k])).astype(a.dtype))
               for k in PRIMITIVES)


def _fd_agrees(grads, fn, args, argnums, rtol=1e-6):
    """Gradients `grads` of numpy function `fn` agree with a central difference along a random
    direction."""
    rng = np.random.default_rng(4)
    direction = [rng.standard_normal(args[i].shape) for i in argnums]
    analytic = sum(np.sum(g * d) for g, d in zip(grads, direction))
    numeric = numerical_directional(fn, args, direction, argnums)
    assert np.isclose(analytic, numeric, rtol=rtol), (analytic, numeric)


def _agree(got, want, rtol):
    got, want = tj.pytree.flatten(got)[0], tj.pytree.flatten(want)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stacks_compiled_match_numpy(dtype):
    """Every function on stacks with two batch axes, compiled: numpy's values, dtypes and
    shapes on the first and a later call; a new batch size traces again but reuses the
    compiled program (its sizes are read at run time)."""
    rtol = 1e-9 if dtype == np.float64 else 2e-4
    compiled = tj.jit(_everything, backend="numba")
    args = _inputs((2, 3), dtype)
    for _ in range(2):
        _agree(compiled(*args), _everything(*args), rtol)
    other = _inputs((5, 3), dtype, seed=1)       # a new length of the first axis
    _agree(compiled(*other), _everything(*other), rtol)
    info = compiled.cache_info()
    assert (info["traces"], info["compiles"]) == (2, 1), info


def test_stack_gradients():
    """Reverse mode on stacks: the interpreter agrees with finite differences, compiled code
    with the interpreter (first and later call)."""
    args, argnums = _inputs((2, 1)), (0, 1, 2, 3)
    want = tj.value_and_grad(_weighted, argnums=argnums, backend="interpret")(*args)
    _fd_agrees(want[1], _weighted, args, argnums)
    compiled = tj.value_and_grad(_weighted, argnums=argnums, backend="numba")
    for _ in range(2):
        _agree(compiled(*args), want, 1e-9)


# ---- numpy's errors and NaNs -------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_singular_and_not_positive_definite(backend):
    """solve and inv of a singular matrix and cholesky of one that is not positive definite
    raise LinAlgError; det and slogdet of a singular matrix are 0 and (0, -inf)."""
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(LinAlgError):
        tj.jit(lambda a: np.linalg.inv(a), backend=backend)(singular)
    with pytest.raises(LinAlgError):
        tj.jit(lambda a: np.linalg.cholesky(a), backend=backend)(-np.eye(3))
    det = tj.jit(lambda a: (np.linalg.det(a), np.linalg.slogdet(a)), backend=backend)
    value, (sign, logdet) = det(singular)
    assert value == 0.0 and sign == 0.0 and logdet == -np.inf


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_nan_input(backend):
    """A matrix holding NaN: solve and det give NaN (as numpy), svd raises LinAlgError (as
    numpy's 'did not converge')."""
    a = np.eye(3)
    a[2, 1] = np.nan
    x, d = tj.jit(lambda a: (np.linalg.solve(a, np.ones(3)), np.linalg.det(a)),
                  backend=backend)(a)
    assert np.isnan(x).all() and np.isnan(d)
    with pytest.raises(LinAlgError):
        tj.jit(lambda a: np.linalg.svd(a)[1], backend=backend)(a)


def test_gradient_of_det_at_a_singular_matrix_raises():
    """det's gradient solves with the matrix (documented: numpy's LinAlgError, where JAX
    gives the adjugate)."""
    with pytest.raises(LinAlgError):
        tj.grad(lambda a: np.linalg.det(a), backend="interpret")(np.ones((2, 2)))


def test_the_error_names_the_op_and_line_everywhere():
    """tj.LinAlgError (a TapejitError and numpy's LinAlgError) has numpy's message, the op and
    the user's line: the same from the interpreter, compiled code (first and later calls, a
    gradient) and GradientTape's eager recording; it pickles."""
    def loss(a):
        return np.sum(np.linalg.inv(a) * 2.0)           # the line named
    line = loss.__code__.co_firstlineno + 1
    want = f"Singular matrix (solve at {__file__}:{line}). Check the matrix"
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    texts, compiled = [], tj.jit(loss)
    for run in (tj.jit(loss, backend="interpret"), compiled, compiled, tj.grad(loss)):
        with pytest.raises(tj.LinAlgError) as caught:
            run(singular)
        texts.append(str(caught.value))
    with pytest.raises(tj.LinAlgError) as caught, tj.GradientTape():
        loss(tj.Variable(singular))
    texts.append(str(caught.value))
    assert all(text.startswith(want) for text in texts), texts
    err = caught.value
    assert isinstance(err, tj.TapejitError) and isinstance(err, LinAlgError)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


# ---- forward mode, Hessians, Jacobians --------------------------------------------------------
def _logdet(s):
    return 2 * np.sum(np.log(np.diagonal(np.linalg.cholesky(s))))


def _spectral(s):
    w, v = np.linalg.eigh(s)
    return np.sum(w * w) + np.sum(_signed(v) ** 2 * np.arange(4.0))


def _singular(t):
    u, sv, vt = np.linalg.svd(t, full_matrices=False)
    return np.sum(sv ** 3) + np.sum(_signed(u)) + np.sum(np.linalg.qr(t)[1] ** 2)


@pytest.mark.parametrize("fn, which, compiled", [(_logdet, 1, False), (_spectral, 1, True),
                                                 (_singular, 2, False)],
                         ids=["cholesky", "eigh", "svd_qr"])
def test_jvp_and_hessian(fn, which, compiled):
    """tj.jvp (the VJP transposed) and tj.hessian agree with central differences of the
    gradient (interpreter); a compiled Hessian with the interpreted one (one: each costs
    seconds to compile)."""
    x = _inputs(())[which]
    rng = np.random.default_rng(2)
    dx = rng.standard_normal(x.shape)
    h = 1e-5
    _, tangent = tj.jvp(fn, (x,), (dx,), backend="interpret")
    assert np.isclose(tangent, (fn(x + h * dx) - fn(x - h * dx)) / (2 * h), rtol=1e-6)
    grad = tj.grad(fn, backend="interpret")
    hess = tj.hessian(fn, backend="interpret")(x)
    numeric = (grad(x + h * dx) - grad(x - h * dx)) / (2 * h)
    np.testing.assert_allclose(np.tensordot(hess, dx, axes=2), numeric, rtol=1e-5, atol=1e-6)
    if compiled:
        np.testing.assert_allclose(tj.hessian(fn, backend="numba")(x), hess, rtol=1e-9,
                                   atol=1e-9)


def test_jacobian_batches_every_primitive():
    """tj.jacobian runs the reverse sweep on a batch of cotangents: each primitive's batching
    rule (operands with and without the batch axis), against central differences."""
    a, s, t, b = _inputs(())

    def fn(a, s, t, b):
        w, v = np.linalg.eigh(s)
        return np.concatenate([np.linalg.solve(a, b).ravel(), np.linalg.det(a)[None],
                               np.linalg.cholesky(s).ravel(), w, _signed(v).ravel(),
                               np.linalg.svd(t, compute_uv=False),
                               np.linalg.qr(t)[1].ravel(), np.linalg.pinv(t).ravel()])

    jac = tj.jacobian(fn, argnums=(0, 1, 2, 3), backend="interpret")(a, s, t, b)
    h, rng = 1e-6, np.random.default_rng(3)
    for k, x in enumerate((a, s, t, b)):
        dx = rng.standard_normal(x.shape)
        plus = [y + h * dx if j == k else y for j, y in enumerate((a, s, t, b))]
        minus = [y - h * dx if j == k else y for j, y in enumerate((a, s, t, b))]
        numeric = (fn(*plus) - fn(*minus)) / (2 * h)
        np.testing.assert_allclose(np.tensordot(jac[k], dx, axes=x.ndim), numeric,
                                   rtol=1e-5, atol=1e-6)


# ---- conventions: repeated eigenvalues, the lower triangle, JAX ---------------------------------
def test_repeated_eigenvalues():
    """At repeated eigenvalues the eigenvalues' gradient is finite; the eigenvectors' divides
    by zero (JAX's convention: inf/nan). svd leaves the terms of equal singular values out
    (JAX's convention), so its gradient stays finite."""
    eye, weights = np.eye(3), np.arange(9.0).reshape(3, 3)
    values = tj.grad(lambda a: np.sum(np.linalg.eigvalsh(a)), backend="interpret")
    np.testing.assert_allclose(values(eye), np.eye(3))
    vectors = tj.grad(lambda a: np.sum(np.linalg.eigh(a)[1] * weights), backend="interpret")
    assert not np.isfinite(vectors(eye)).all()
    svd = tj.grad(lambda a: np.sum(np.linalg.svd(a)[0] * weights), backend="interpret")
    assert np.isfinite(svd(2 * eye)).all()


def test_cholesky_and_eigh_read_the_lower_triangle():
    """The gradient is the derivative of the function numpy computes: zero above the diagonal
    (UPLO='L'), below it for UPLO='U' read from the upper triangle."""
    s = _inputs(())[1]
    for fn, zero in [(lambda a: np.sum(np.linalg.cholesky(a) ** 2), np.triu),
                     (lambda a: np.sum(np.linalg.eigvalsh(a) ** 3), np.triu),
                     (lambda a: np.sum(np.linalg.eigvalsh(a, UPLO="U") ** 3), np.tril)]:
        g = tj.grad(fn, backend="interpret")(s)
        np.testing.assert_array_equal(zero(g, 1 if zero is np.triu else -1), 0.0)
        _fd_agrees([g], fn, [s], (0,))


def test_gradients_match_jax():
    """For inputs built symmetric (b + b.T), the gradients of cholesky, eigh, svd, qr, pinv,
    slogdet and lstsq agree with JAX's."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def loss(xp, g, t, b):
        s = g + g.T + xp.diag(xp.arange(1.0, 5.0) * 3)
        w, v = xp.linalg.eigh(s)
        u, sv, vt = xp.linalg.svd(t, full_matrices=False)
        q, r = xp.linalg.qr(t)
        return (xp.sum(xp.linalg.cholesky(s) ** 2) + xp.sum(w ** 3)
                + xp.sum((v * v[:1]) * xp.arange(16.0).reshape(4, 4)) + xp.sum(sv ** 2 * sv)
                + xp.sum(u * u[:1]) + xp.sum(q * r[0]) + xp.sum(xp.linalg.pinv(t) ** 2)
                + xp.linalg.slogdet(s)[1] + xp.sum(xp.linalg.lstsq(t, b[:, 0] + 1.0)[0]))

    a, _, t, b = _inputs(())
    g = np.triu(a)
    b5 = np.concatenate([b, b[:1]])
    ours = tj.grad(lambda *xs: loss(np, *xs), argnums=(0, 1, 2), backend="interpret")(g, t, b5)
    with jax.enable_x64(True):
        theirs = jax.grad(lambda *xs: loss(jnp, *xs), argnums=(0, 1, 2))(g, t, b5)
    for o, th in zip(ours, theirs):
        np.testing.assert_allclose(o, np.asarray(th), rtol=1e-8, atol=1e-10)


def test_lstsq_residuals_of_a_rank_deficient_matrix():
    """numpy gives empty residuals when a tall matrix is rank deficient (its rank is known only
    when it runs); tapejit gives the sums of squares, and the rank."""
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    b = np.array([1.0, 0.0, 1.0])
    x, residuals, rank, s = tj.jit(lambda a, b: np.linalg.lstsq(a, b), backend="interpret")(a, b)
    want = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(x, want[0])
    np.testing.assert_allclose(residuals, [np.sum((b - a @ want[0]) ** 2)])
    assert rank == want[2] == 1 and want[1].shape == (0,)
    np.testing.assert_allclose(s, want[3], atol=1e-12)


# ---- what is not supported, and bad input --------------------------------------------------------
def _message(fn, *args) -> str:
    with pytest.raises(Exception) as info:
        tj.jit(fn, backend="interpret")(*args)
    return f"{type(info.value).__name__}: {info.value}"


def test_bad_input_names_the_function_the_shapes_and_the_fix():
    square, wide = np.eye(3), np.ones((3, 4))
    message = _message(lambda a: np.linalg.inv(a), wide)
    assert "ShapeError" in message and "numpy.linalg.inv" in message
    assert "(3, 4)" in message and "numpy.linalg.pinv" in message and "test_linalg.py" in message
    message = _message(lambda a: np.linalg.solve(a, np.ones(4)), square)
    assert "numpy.linalg.solve" in message and "(3, 3)" in message and "(4,)" in message
    assert "ShapeError" in _message(lambda a: np.linalg.det(a), np.ones(3))
    message = _message(lambda a: np.linalg.inv(a), square.astype(np.float16))
    assert "DtypeError" in message and "float32" in message
    message = _message(lambda a: np.linalg.lstsq(a, np.ones(3)), np.ones((2, 3, 3)))
    assert "numpy.linalg.lstsq" in message and "(2, 3, 3)" in message


def test_unsupported_arguments_say_what_to_use():
    tall = np.ones((4, 3)) + np.eye(4, 3)
    for fn, fix in [(lambda a: np.linalg.qr(a, mode="complete"), "mode='reduced'"),
                    (lambda a: np.linalg.svd(a, hermitian=True), "eigh"),
                    (lambda a: np.linalg.pinv(a, rcond=np.ones(1)), "rcond")]:
        message = _message(fn, tall)
        assert "UnsupportedOperationError" in message and fix in message, message
    with pytest.raises(UnsupportedOperationError, match="full_matrices=False"):
        tj.grad(lambda a: np.sum(np.linalg.svd(a)[0]), backend="interpret")(tall)
    with pytest.raises(UnsupportedOperationError, match="eig"):
        tj.jit(lambda a: np.linalg.eig(a), backend="interpret")(np.eye(2))


def test_full_matrices_forward_compiled():
    """svd's default full_matrices=True of a non-square matrix runs (compiled too) and its
    singular values are differentiable; only u and vh of it have no gradient."""
    tall = _inputs(())[2]
    u, s, vh = tj.jit(lambda t: np.linalg.svd(t), backend="numba")(tall)
    assert u.shape == (5, 5) and vh.shape == (3, 3)
    np.testing.assert_allclose(u @ u.T, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(s, np.linalg.svd(tall)[1])
    fn = lambda t: np.sum(np.linalg.svd(t)[1] ** 3)  # noqa: E731
    _fd_agrees([tj.grad(fn, backend="interpret")(tall)], fn, [tall], (0,))
