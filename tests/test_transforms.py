"""jacobian, hessian and jvp: against central differences and analytic results, composed with
grad and jit, and compiled as one program."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from op_db import F64, ROWS


def numeric_jacobian(f, x, h=1e-6):
    """Central differences, one column per input element: shape out.shape + x.shape."""
    x = np.asarray(x, np.float64)
    cols = []
    for e in np.eye(x.size):
        e = e.reshape(x.shape)
        cols.append((np.asarray(f(x + h * e)) - np.asarray(f(x - h * e))) / (2 * h))
    return np.moveaxis(np.array(cols), 0, -1).reshape(np.shape(f(x)) + x.shape)


def layer(x, w, b):
    return np.tanh(w @ x + b)


@pytest.fixture(scope="module")
def mlp_args():
    rng = np.random.default_rng(0)
    return rng.standard_normal(5), rng.standard_normal((4, 5)) * 0.5, rng.standard_normal(4)


def test_jacobian_matches_finite_differences(mlp_args):
    x, w, b = mlp_args
    jac = tj.jacobian(layer)(x, w, b)
    assert jac.shape == (4, 5)
    np.testing.assert_allclose(jac, numeric_jacobian(lambda v: layer(v, w, b), x), rtol=1e-6,
                               atol=1e-9)


def test_jacobian_argnums_tuple_and_matrix_argument(mlp_args):
    x, w, b = mlp_args
    jx, jw = tj.jacobian(layer, argnums=(0, 1))(x, w, b)
    assert jw.shape == (4, 4, 5)
    np.testing.assert_allclose(jw, numeric_jacobian(lambda v: layer(x, v, b), w), rtol=1e-6,
                               atol=1e-9)
    np.testing.assert_allclose(jx, tj.jacobian(layer)(x, w, b))


def test_jacobian_of_pytree_output():
    f = lambda x: {"s": np.sum(x ** 2), "v": np.sin(x)}   # noqa: E731
    x = np.array([0.1, 0.4, -0.3])
    jac = tj.jacobian(f)(x)
    np.testing.assert_allclose(jac["s"], 2 * x)
    np.testing.assert_allclose(jac["v"], np.diag(np.cos(x)))


def test_jacobian_is_one_program_and_cached(mlp_args):
    x, w, b = mlp_args
    jac = tj.jacobian(layer)
    jac(x, w, b)
    jac(x + 1, w, b)
    info = jac.cache_info()
    assert (info["traces"], info["hits"]) == (1, 1)


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosenbrock_hessian(x):
    n = x.size
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i, i + 1] = h[i + 1, i] = -400 * x[i]
        h[i + 1, i + 1] += 200
    return h


def test_hessian_of_rosenbrock_is_analytic():
    x = np.array([1.2, 0.8, -0.5, 0.3])
    np.testing.assert_allclose(tj.hessian(rosenbrock)(x), rosenbrock_hessian(x), rtol=1e-12)


def test_hessian_matches_finite_differences_of_grad():
    f = lambda x: np.sum(np.exp(np.sin(x) * x[::-1]))   # noqa: E731
    x = np.array([0.3, -0.2, 0.7])
    np.testing.assert_allclose(tj.hessian(f)(x), numeric_jacobian(tj.grad(f), x), rtol=1e-6,
                               atol=1e-8)


def test_third_derivative_of_scalar_function():
    f = lambda x: np.sin(x) * x ** 2            # noqa: E731
    d3 = tj.grad(tj.grad(tj.grad(f)))
    x = 0.7
    want = -np.cos(x) * x ** 2 - 6 * x * np.sin(x) + 6 * np.cos(x)
    assert np.isclose(d3(x), want, rtol=1e-12)
    fd = (tj.grad(tj.grad(f))(x + 1e-5) - tj.grad(tj.grad(f))(x - 1e-5)) / 2e-5
    assert np.isclose(d3(x), fd, rtol=1e-6)


def test_jvp_matches_finite_differences(mlp_args):
    x, w, b = mlp_args
    t = np.random.default_rng(1).standard_normal(5)
    out, tangent = tj.jvp(lambda v: layer(v, w, b), (x,), (t,))
    np.testing.assert_allclose(out, layer(x, w, b))
    fd = (layer(x + 1e-6 * t, w, b) - layer(x - 1e-6 * t, w, b)) / 2e-6
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-9)


def test_jvp_with_pytree_primals_and_several_arguments():
    f = lambda p, s: p["a"] * np.cos(p["b"]) * s              # noqa: E731
    p, s = {"a": np.array([1.0, 2.0]), "b": np.array([0.3, 0.1])}, 1.5
    tp, ts = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}, 0.5
    _, tangent = tj.jvp(f, (p, s), (tp, ts))
    h = 1e-6
    plus = f({k: p[k] + h * tp[k] for k in p}, s + h * ts)
    minus = f({k: p[k] - h * tp[k] for k in p}, s - h * ts)
    np.testing.assert_allclose(tangent, (plus - minus) / (2 * h), rtol=1e-6)


def test_jvp_structure_mismatch_is_an_error():
    with pytest.raises(tj.ArgumentError, match="structure"):
        tj.jvp(np.sin, (np.ones(2),), ([np.ones(2)],))


def test_jacobian_of_integer_output_is_an_error():
    with pytest.raises(tj.ArgumentError, match="float outputs"):
        tj.jacobian(lambda x: np.argmax(x))(np.ones(3))


def test_stop_gradient():
    f = lambda x: np.sum(tj.stop_gradient(x ** 2) * x)      # noqa: E731
    x = np.array([0.5, -1.5])
    np.testing.assert_allclose(tj.grad(f)(x), x ** 2)
    assert tj.stop_gradient(3.0) == 3.0


def _one_program(transform) -> bool:
    """Traced once, compiled at most once (or loaded from the disk cache; not at all when
    another test compiled the same program in this process)."""
    info = transform.cache_info()
    return info["traces"] == 1 and info["compiles"] + info["disk_loads"] <= 1


@pytest.fixture(scope="module")
def compiled():
    """One set of numba programs shared by the compiled checks."""
    return {"hessian": tj.jit(tj.hessian(rosenbrock), backend="numba"),
            "grad3": tj.grad(tj.grad(tj.grad(lambda x: np.sin(x) * x ** 2)), backend="numba"),
            "jacobian": tj.jacobian(layer, backend="numba")}


def test_compiled_compositions(compiled, mlp_args):
    x = np.array([1.2, 0.8, -0.5])
    np.testing.assert_allclose(compiled["hessian"](x), rosenbrock_hessian(x), rtol=1e-12)
    assert _one_program(compiled["hessian"])
    assert np.isclose(compiled["grad3"](0.7), tj.grad(tj.grad(tj.grad(
        lambda x: np.sin(x) * x ** 2)), backend="interpret")(0.7))
    np.testing.assert_allclose(compiled["jacobian"](*mlp_args),
                               tj.jacobian(layer, backend="interpret")(*mlp_args))
    assert _one_program(compiled["jacobian"])


def _row_id(row):
    return row.name


@pytest.mark.parametrize("row", [r for r in ROWS if r.prim and r.diff], ids=_row_id)
def test_batched_jacobian_of_every_primitive_matches_vjp_rows(row):
    """jacobian batches the reverse sweep over one-hot cotangents (batching.py): every
    primitive's batching rule (or its unrolled fallback) must give the rows vjp gives."""
    args = row.samples(F64)[-1]
    n = len(args)
    outs = tj.vjp(row.fn, *args)[0]
    picks = [None] if not isinstance(outs, tuple) else range(len(outs))
    floats = [j for j in picks if np.asarray(outs if j is None else outs[j]).dtype.kind == "f"]
    if not floats:
        pytest.skip("integer output")
    for j in floats:     # a tuple's float outputs one at a time
        fn = row.fn if j is None else (lambda *a, j=j: row.fn(*a)[j])
        out, vjp_fn = tj.vjp(fn, *args)
        out = np.asarray(out)
        jac = tj.jacobian(fn, argnums=tuple(range(n)))(*args)
        eye = np.eye(out.size)
        rows = [vjp_fn(eye[i].reshape(out.shape)) for i in range(out.size)]
        for k in range(n):
            want = np.array([r[k] for r in rows]).reshape(out.shape + np.shape(args[k]))
            np.testing.assert_allclose(jac[k], want, rtol=1e-12, atol=1e-12)


def test_jvp_inside_jit_is_one_program():
    step = tj.jit(lambda x, t: tj.jvp(np.sin, (x,), (t,)))
    x = np.array([0.0, 1.0])
    for scale in (1.0, 2.0):
        _, tangent = step(x, np.ones(2) * scale)
        np.testing.assert_allclose(tangent, np.cos(x) * scale)
    assert step.cache_info()["traces"] == 1
