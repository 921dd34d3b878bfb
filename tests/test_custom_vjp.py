"""custom_vjp and Numba kernels as primitives: the user's rule is used by grad, grad of grad,
jvp, hessian and jit, and compiled programs call the kernel directly."""
from __future__ import annotations

import numba
import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads


@tj.custom_vjp
def log1pexp(x):
    return np.log1p(np.exp(x))


def _log1pexp_fwd(x):
    return log1pexp(x), x


def _log1pexp_bwd(x, ct):
    return (ct / (1.0 + np.exp(-x)),)          # ct * sigmoid(x), finite for large x


log1pexp.defvjp(_log1pexp_fwd, _log1pexp_bwd)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_custom_rule_is_numerically_stable():
    x = np.array([-3.0, 0.5, 800.0])
    naive = tj.grad(lambda x: np.sum(np.log1p(np.exp(x))))(x)
    assert np.isnan(naive[2])                   # the rule the custom VJP replaces
    np.testing.assert_allclose(tj.grad(lambda x: np.sum(log1pexp(x)))(x), sigmoid(x))


def test_custom_vjp_matches_finite_differences():
    check_grads(lambda x: np.sum(log1pexp(x) * np.cos(x)), [np.array([-1.0, 0.3, 2.0])])


def test_custom_vjp_under_grad_of_grad_jvp_and_hessian():
    x = np.array([-1.0, 0.3, 2.0])
    d2 = tj.grad(tj.grad(lambda s: log1pexp(s)))
    assert np.isclose(d2(0.3), sigmoid(0.3) * (1 - sigmoid(0.3)))
    _, tangent = tj.jvp(log1pexp, (x,), (np.ones(3),))
    np.testing.assert_allclose(tangent, sigmoid(x))
    np.testing.assert_allclose(tj.hessian(lambda v: np.sum(log1pexp(v)))(x),
                               np.diag(sigmoid(x) * (1 - sigmoid(x))))


def test_plain_call_runs_the_function():
    assert np.isclose(log1pexp(0.0), np.log(2.0))


def test_custom_vjp_with_pytree_arguments_and_outputs():
    @tj.custom_vjp
    def scaled(p, k):
        return {"y": p["a"] * k, "z": np.sin(p["b"])}

    scaled.defvjp(lambda p, k: (scaled(p, k), (p, k)),
                  lambda res, ct: ({"a": ct["y"] * res[1], "b": ct["z"] * np.cos(res[0]["b"])},
                                   None))
    p = {"a": np.array([1.0, 2.0]), "b": np.array([0.5, -0.5])}
    f = lambda p: np.sum(scaled(p, 3.0)["y"]) + np.sum(scaled(p, 3.0)["z"] ** 2)  # noqa: E731
    g = tj.grad(f)(p)
    np.testing.assert_allclose(g["a"], [3.0, 3.0])
    np.testing.assert_allclose(g["b"], 2 * np.sin(p["b"]) * np.cos(p["b"]))


def test_bad_bwd_is_a_clear_error():
    @tj.custom_vjp
    def f(x):
        return x * 2

    f.defvjp(lambda x: (f(x), None), lambda res, ct: ct * 2)
    with pytest.raises(tj.ArgumentError, match="bwd must return a tuple"):
        tj.grad(lambda x: np.sum(f(x)))(np.ones(2))


def test_missing_rule_is_a_clear_error():
    @tj.custom_vjp
    def f(x):
        return x * 2

    with pytest.raises(tj.ArgumentError, match="defvjp"):
        tj.grad(lambda x: np.sum(f(x)))(np.ones(2))


@numba.njit
def _softplus_kernel(x):
    out = np.empty_like(x)
    for i in range(x.size):
        v = x.flat[i]
        out.flat[i] = v + np.log1p(np.exp(-v)) if v > 0 else np.log1p(np.exp(v))
    return out


softplus = tj.njit_primitive(_softplus_kernel, vjp=lambda ct, out, x: (ct * sigmoid(x),))


@numba.njit
def _dot_kernel(a, b):
    return np.sum(a * b)


dot = tj.njit_primitive(_dot_kernel, vjp=lambda ct, out, a, b: (ct * b, ct * a),
                        shape=lambda a, b: ((), a.dtype))


def test_njit_primitive_gradient_matches_finite_differences():
    x = np.array([-2.0, 0.1, 1.5, 40.0])
    np.testing.assert_allclose(softplus(x), np.logaddexp(0, x))
    check_grads(lambda x: np.sum(softplus(x) * x), [x[:3]])
    check_grads(lambda a, b: dot(a, np.tanh(b)) ** 2, [x[:3], x[1:]], argnums=(0, 1))


def test_njit_primitive_second_order():
    x = np.array([-1.0, 0.5])
    np.testing.assert_allclose(tj.hessian(lambda v: np.sum(softplus(v)))(x),
                               np.diag(sigmoid(x) * (1 - sigmoid(x))))


def test_not_an_njit_function_is_an_error():
    with pytest.raises(tj.ArgumentError, match="not a Numba @njit"):
        tj.njit_primitive(np.sin, vjp=lambda ct, out, x: (ct,))


def _one_program(transform) -> bool:
    """Traced once, compiled once (or loaded from the disk cache)."""
    info = transform.cache_info()
    return info["traces"] == 1 and info["compiles"] + info["disk_loads"] == 1


@pytest.fixture(scope="module")
def compiled():
    return {"softplus": tj.grad(lambda x: np.sum(softplus(x) ** 2), backend="numba"),
            "log1pexp": tj.jit(tj.grad(tj.grad(lambda s: np.sum(log1pexp(s)))),
                               backend="numba")}


def test_compiled_program_calls_the_kernel(compiled):
    x = np.array([-2.0, 0.1, 1.5])
    np.testing.assert_allclose(compiled["softplus"](x),
                               tj.grad(lambda x: np.sum(softplus(x) ** 2))(x))
    assert _one_program(compiled["softplus"])
    source = tj.explain(lambda x: np.sum(softplus(x) ** 2), backend="numba")(x).source
    assert f"= {softplus.name}(" in source


def test_compiled_custom_vjp_grad_of_grad(compiled):
    assert np.isclose(compiled["log1pexp"](0.3), sigmoid(0.3) * (1 - sigmoid(0.3)))
    assert _one_program(compiled["log1pexp"])
